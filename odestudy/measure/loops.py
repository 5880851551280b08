"""How many loop bodies and conditionals one call of a compiled program runs, counted in
a profile of one untimed call (the runtimes record an event per executed instruction)."""

import collections
import glob
import itertools
import re
import tempfile
from collections.abc import Callable
from typing import Any

from .audit import parse


def control_flow(hlo: str) -> list[dict[str, Any]]:
    """The `while` and `conditional` instructions of an optimised HLO module's text: their
    direction, `role` (from diffrax's names: `save`, `solver`, `stages`, `scan` or
    `other`), and a loop's body and the instructions directly in it."""
    computations = parse(hlo)
    found = []
    for kind, line, _, name in itertools.chain(*computations.values()):
        if kind not in ("while", "conditional"):
            continue
        op_name = re.search(r'op_name="([^"]*)"', line)
        body = re.search(r"body=%?([\w.\-]+)", line)
        path = op_name.group(1) if op_name else ""
        role = "other"
        if "inner-loop" in path:
            role = "save"
        elif "outer-loop" in path:
            # A loop in the solver loop's body: the Runge-Kutta stages of one step.
            nested = path.split("outer-loop", 1)[1].count("while") > 1
            role = "stages" if nested else "solver"
        elif "scan" in path:
            role = "scan"
        body_name = body.group(1) if body else None
        found.append(
            {
                "name": name,
                "kind": kind,
                "op_name": path,
                "direction": "backward" if "transpose(" in path else "forward",
                "role": role,
                "body": body_name,
                "body_instructions": [n for *_, n in computations.get(body_name or "", [])],
            }
        )
    return found


def event_counts(fn: Callable, *args: Any) -> collections.Counter:
    """How often each event name occurs in a profile of one call `fn(*args)`."""
    import jax
    from jax.profiler import ProfileData

    # Work still running from earlier calls would land in the profile, its instructions
    # named as this program's may be ("fusion.3"): wait for every live array first.
    for array in jax.live_arrays():
        array.block_until_ready()
    with tempfile.TemporaryDirectory(prefix="odestudy-loops-") as folder:
        with jax.profiler.trace(folder):
            jax.block_until_ready(fn(*args))
        files = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        if not files:
            raise RuntimeError("the profiler wrote no trace")
        starts: collections.Counter = collections.Counter()
        ends: collections.Counter = collections.Counter()
        for plane in ProfileData.from_file(files[0]).planes:
            for line in plane.lines:
                for event in line.events:
                    name = event.name
                    if name.startswith("end: "):
                        ends[name[5:]] += 1
                    else:
                        starts[name] += 1
    return collections.Counter({n: max(starts[n], ends[n]) for n in set(starts) | set(ends)})


def count_loops(compiled: Any, *args: Any) -> dict[str, Any]:
    """Loop bodies and conditionals that one call of AOT-compiled `compiled(*args)` runs
    (donated inputs are consumed). A loop's `bodies`: the most executions of any
    instruction directly in it; `instructions`: every executed instruction (kernel)."""
    hlo = compiled.as_text()
    found = control_flow(hlo)
    counts = event_counts(compiled, *args)
    names = {name for *_, name in itertools.chain(*parse(hlo).values())}
    loops, conditionals = [], []
    by: collections.Counter = collections.Counter()
    cond_by: collections.Counter = collections.Counter()
    for item in found:
        if item["kind"] == "while":
            bodies = max((counts.get(n, 0) for n in item["body_instructions"]), default=0)
            by[f"{item['direction']} {item['role']}"] += bodies
            loops.append(
                {
                    "name": item["name"],
                    "role": item["role"],
                    "direction": item["direction"],
                    "entries": counts.get(item["name"], 0),
                    "bodies": bodies,
                }
            )
        else:
            cond_by[item["direction"]] += counts.get(item["name"], 0)
            conditionals.append(
                {
                    "name": item["name"],
                    "direction": item["direction"],
                    "executions": counts.get(item["name"], 0),
                }
            )
    return {
        "instructions": sum(n for name, n in counts.items() if name in names),
        "static_loops": len(loops),
        "static_conditionals": len(conditionals),
        "bodies": sum(loop["bodies"] for loop in loops),
        "bodies_by": dict(sorted(by.items())),
        "conditional_executions": dict(sorted(cond_by.items())),
        "loops": loops,
        "conditionals": conditionals,
    }
