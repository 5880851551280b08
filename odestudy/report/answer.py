"""The README's answer, short enough to read in two minutes: per device kind and
controller, each mode's speedup over the best 1-device step (`best.py`), that step and
its time; when splitting the batch pays (`crossover.py`), measured or predicted and
saying which; each figure over the reference's step labelled so. Every number comes
from the records, with its interval, machine and session."""

import dataclasses
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..measure.controllers import CONTROLLERS
from ..study import records
from ..study.claim import Agreement, Claim
from ..study.rec import Prediction, Rec, Sweep
from . import sessions
from .best import Best, best_for, best_steps, step_of
from .claims import groups
from .comparisons import BEST_STEP, REFERENCE_STEP, ratio_claim, render_x
from .crossover import CROSSOVER_WORKLOADS, batch_crossing, points, study_records, work_crossing
from .frames import scaling_rows
from .intervals import ratio_interval
from .loss import MARK, differs, trained
from .tables import escape
from .verdict import exceeds_cores, one_run

# The scale whose answer the README gives (`pages.update_readme`).
README_SCALE = "quick"

# The mode the answer states the crossover of: one solver loop per device, one
# collective per step (the mode that pays first on the map).
CROSSOVER_MODE = "shard_map"


def _x(p: tuple[float, float, float]) -> str:
    return f"{p[0]:.2f}x [{p[1]:.2f}, {p[2]:.2f}]"


def verdict(p: tuple[float, float, float]) -> str:
    """What an interval of a speedup says: pays, does not pay, or not separable."""
    if p[1] > 1:
        return "pays"
    if p[2] < 1:
        return "does not pay"
    return "not separable from 1"


def _devices(rows: Sequence[Rec]) -> int | None:
    """The largest device count of `rows` within the machine's physical cores."""
    inside = [r.n_devices for r in rows if r.n_devices > 1 and not exceeds_cores(r)]
    return max(inside, default=None)


def _on_best(rows: Sequence[Rec], best: Best, n: int) -> list[Rec]:
    """The one-process rows on `n` devices that run the best step, fastest first."""
    found = [
        r
        for r in rows
        if r.n_devices == n
        and (r.processes or 1) == 1
        and r.speedup_best_ci
        and step_of(r) == best.step
    ]
    return sorted(found, key=lambda r: -(r.speedup_best or 0.0))  # every one is set


def _over_best(r: Rec) -> tuple[float, float, float]:
    """`r`'s speedup over the best 1-device step, with its interval."""
    assert r.speedup_best is not None and r.speedup_best_ci is not None
    return (r.speedup_best, *r.speedup_best_ci)


# Where the README's answer states its claims (`Claim.where`).
README_WHERE = "the README's answer"


@dataclasses.dataclass(frozen=True)
class ControllerAnswer:
    """One controller's part of the README's answer: its best 1-device step (`best`),
    the device count `n` and per-device `batch`, each mode's claim over the best step
    (`modes`, fastest first) and the fastest's over the reference's 1-device step
    (`reference`, None where that was not measured or did not train)."""

    controller: str
    best: Best
    n: int
    batch: int
    modes: tuple[Claim, ...]
    reference: Claim | None
    one_run: bool


def controller_answer(rows: Sequence[Rec], controller: str) -> ControllerAnswer | None:
    """The claims of one controller's bullet: each mode's speedup over the best 1-device
    step on the most devices within the cores, and the fastest's over the reference's
    (default) 1-device step; None without such rows."""
    mine = [r for r in rows if r.controller == controller and r.scaling == "strong"]
    n = _devices(mine)
    ones = [r for r in mine if r.n_devices == 1 and r.ok]
    best = best_for(ones[0], best_steps(ones), "strong") if ones else None
    if n is None or best is None:
        return None
    found = _on_best(mine, best, n)
    if not found:
        return None
    modes = tuple(
        ratio_claim(r, best.record, BEST_STEP, _over_best(r), README_WHERE,
                    bool(r.best_differs))
        for r in found
    )  # fmt: skip
    top, default, reference = found[0], best.default, None
    if default is not None and default is not best.record and trained(default):
        over = ratio_interval(default, top)
        reference = ratio_claim(
            top, default, REFERENCE_STEP, over, README_WHERE, differs(top, default)
        )
    return ControllerAnswer(
        controller, best, n, top.global_batch // n, modes, reference, one_run(top)
    )


def render_controller(a: ControllerAnswer) -> str:
    """`a` as one bullet: the best 1-device step and its time, each mode's speedup over
    it, what the fastest's interval says, and the fastest over the reference's step."""
    modes = ", ".join(f"`{escape(c.comparison.mode)}` {render_x(c)}" for c in a.modes)
    top = a.modes[0]
    said = verdict((top.value, *top.interval))
    sessions_said = _sessions_said(top)
    text = (
        f"- **{escape(a.controller)}**: best 1-device step {escape(a.best.said())}. On {a.n} "
        f"devices ({a.batch} series each): {modes}; the fastest {said}"
        + (" (one run)" if a.one_run else sessions_said)
        + "."
    )
    if a.reference is not None and a.best.default is not None:
        text += (
            f" Over the reference's step ({a.best.default['step_time_s'] * 1e3:.3g} ms): "
            f"`{escape(a.reference.comparison.mode)}` {render_x(a.reference)}."
        )
    return text


def _sessions_said(claim: Claim) -> str:
    """`, as in 4 of 6 sessions (2 not separable: WHEN, WHEN)`: how the sessions holding
    its rows judged `claim` (`Claim.agreement`), short; "" where one session holds them."""
    found = claim.agreement
    if found is None or found.answered < 2:
        return ""
    others = "; ".join(f"{len(w)} {v.value}: {', '.join(w)}" for v, w in found.others)
    return f", as in {found.agree} of {found.answered} sessions" + (
        f" ({others})" if others else ""
    )


def controller_answers(
    rows: Sequence[Rec],
    device: str = "cpu",
    every: Sequence[Rec] = (),
) -> tuple[ControllerAnswer, ...]:
    """The README's answer for one device kind: each controller's (`controller_answer`)
    that has one, each mode's claim with how the sessions of `every` (ok records of the
    scale, any session) that hold its rows judged it (`best_agreement`)."""
    ok = [r for r in rows if r.device == device and r.ok]
    answers = tuple(a for c in CONTROLLERS if (a := controller_answer(ok, c)) is not None)
    if not every:
        return answers
    judged = session_answers(every, device)
    return tuple(
        dataclasses.replace(
            a, modes=tuple(best_agreement(c, a.controller, judged) for c in a.modes)
        )
        for a in answers
    )


def session_answers(every: Sequence[Rec], device: str) -> dict[str, dict[str, ControllerAnswer]]:
    """Per session (its `when`) of `every` with scaling rows of `device`: its README
    answer per controller (`controller_answer` of that session's rows alone)."""
    out = {}
    for session, recs in groups(every, device).items():
        rows = scaling_rows(recs)
        out[session.when] = {
            c: a for c in CONTROLLERS if (a := controller_answer(rows, c)) is not None
        }
    return out


def best_agreement(
    claim: Claim, controller: str, judged: dict[str, dict[str, ControllerAnswer]]
) -> Claim:
    """`claim` (a mode over the best 1-device step) with how the sessions judged the
    same mode on as many devices over their own best step: a session that holds no such
    rows does not count."""
    found: dict[Any, list[str]] = {}
    for when, answers in sorted(judged.items()):
        a = answers.get(controller)
        same = (
            next((c for c in a.modes if c.comparison.mode == claim.comparison.mode), None)
            if a is not None and a.n == claim.comparison.devices
            else None
        )
        if same is not None:
            found.setdefault(same.verdict, []).append(escape(when))
    others = tuple((v, tuple(w)) for v, w in found.items() if v != claim.verdict)
    agreed = Agreement(len(found.get(claim.verdict, [])), sum(map(len, found.values())), others)
    return dataclasses.replace(claim, agreement=agreed)


def readme_claims(answers: Sequence[ControllerAnswer]) -> list[Claim]:
    """Every claim of the README's answer (`controller_answers`)."""
    return [c for a in answers for c in (*a.modes, a.reference) if c is not None]


def quick_lines(
    rows: Sequence[Rec],
    device: str,
    answers: Sequence[ControllerAnswer] | None = None,
) -> list[str]:
    """The answer's bullets for one device kind from the quick scaling rows of one
    machine (`answers`, its `controller_answers` where already made), with where they
    were measured; or why there are none."""
    ok = [r for r in rows if r.device == device and r.ok]
    answers = controller_answers(rows, device) if answers is None else answers
    lines = [render_controller(a) for a in answers]
    name = device.upper()
    if not lines:
        return [f"**{name}**: no multi-device {name} row of the best step measured here yet.", ""]
    labels = sorted({sessions.session_of(r).label for r in ok})
    where = escape("; ".join(labels))
    return [f"**{name}**, one global batch (strong scaling), measured on {where}:", "", *lines, ""]


def crossover_lines(results: str | Path) -> list[str]:
    """When splitting pays, measured on the map and its batch axis: `CROSSOVER_MODE`'s
    crossover in the per-device work, and in series per device on the axis's workloads,
    per controller."""
    recs = study_records(results)
    pts = points(recs)
    bullets = []
    for controller in CONTROLLERS:
        work = work_crossing(pts, controller, CROSSOVER_MODE)
        if work is None:
            continue
        batches = [
            f"{escape(w)} {c.said('series')}"
            for w in CROSSOVER_WORKLOADS
            if (c := batch_crossing(pts, w, controller, CROSSOVER_MODE))
        ]
        bullets.append(
            f"- **{escape(controller)}**: `{CROSSOVER_MODE}` {work.said('ms')} of work; "
            + ("; ".join(batches) if batches else "not measured along the batch axis")
            + "."
        )
    if not bullets:
        return ["**When splitting pays**: not measured yet (`make map`, `make crossover`).", ""]
    ok = [r for r in recs if r.get("status") == "ok"]
    return [
        "**When splitting pays** (CPU, 2 devices, the map's workloads and a batch axis of "
        "4 to 128 series per device; *work*: the best 1-device step's time per solver "
        "iteration at the per-device batch; "
        + _lower_first(escape(sessions.sessions_line(ok, recs)).rstrip("."))
        + "):",
        "",
        *bullets,
        "",
    ]


def _lower_first(text: str) -> str:
    """`text` to follow a semicolon: its first letter lower case."""
    return text[:1].lower() + text[1:]


def gpu_predictions(results: str | Path) -> list[Prediction]:
    """The recorded predictions of several GPUs (`<machine>/predictions/gpu-*.json`, made
    on a GPU machine from a one-GPU sweep and a profile), fewest devices first."""
    found = []
    for path in sorted(Path(results).glob("*/predictions/gpu-*.json")):
        try:
            read = records.read_json(path)
        except (OSError, ValueError):
            continue
        p = Prediction(read, path=str(path), machine=path.parent.parent.name)
        if p.trained and p.rows:
            found.append(p)
    return sorted(found, key=lambda p: (p.fields.controller, p.n_devices))


def gpu_lines(results: str | Path) -> list[str]:
    """The GPU answer: no multi-GPU row is measured; the predictions that exist, said
    as predictions, with their step, profile, one-GPU source and intervals."""
    found = gpu_predictions(results)
    head = "**GPU**: no multi-GPU row is measured yet (`make gpu` runs 1 to 8 GPUs)."
    if not found:
        return [head, ""]
    p0 = found[0]
    parts = "; ".join(
        f"{p.n_devices} GPUs `{CROSSOVER_MODE}` "
        + _x(next((r.speedup, *r.speedup_interval) for r in p.rows
                  if r.mode == CROSSOVER_MODE))
        for p in found
        if any(r.mode == CROSSOVER_MODE for r in p.rows)
    )  # fmt: skip
    return [
        f"{head} **Predicted** by `odestudy predict` (profile "
        f"`{escape(p0.profile.name)}`) from a one-GPU sweep of "
        f"{escape(step_of(Rec(scenario=p0.scenario)))} on "
        f"{escape(p0.machine)}, global batch {escape(p0.fields.batch)}, over one "
        f"GPU's {p0.one_device_step_s * 1e3:.3g} ms: {parts}. A GPU step here is bound by "
        "kernel launches: the GPU crossover waits for a lent GPU's "
        "batch sweep of the best step.",
        "",
    ]


def gpu_sweeps(results: str | Path) -> list[Sweep]:
    """The one-GPU step-cost sweeps recorded under `results` (`<machine>/step_cost/gpu-*`,
    `benchmarks/step_cost.py` on a GPU machine), each with its `machine` and `path`."""
    found = []
    for path in sorted(Path(results).glob("*/step_cost/gpu-*.json")):
        try:
            read = records.read_json(path)
        except (OSError, ValueError):
            continue
        sweep = Sweep(read, path=str(path), machine=path.parent.parent.name)
        if sweep.rows and sweep.label in ("default", "recommended"):
            found.append(sweep)
    return found


def ideal_speedups(sweep: dict[str, Any], n: int) -> list[tuple[int, float]]:
    """What `n` devices could give at most at each per-device batch `b` the sweep holds
    with `n * b`: one device's step at `n * b` over its step at `b` (no communication,
    no lock-step waste: a bound, not a prediction)."""
    steps = {int(r.batch): float(r.step_time_s) for r in Sweep(sweep).rows}
    return [(b, steps[n * b] / steps[b]) for b in sorted(steps) if n * b in steps]


def gpu_bound_line(results: str | Path) -> list[str]:
    """The GPU sweep's bound on splitting: per sweep (its controller and step), the
    range of `ideal_speedups` on the device counts its batches allow, said as a bound."""
    parts, machines = [], set()
    for sweep in gpu_sweeps(results):
        for n in (2, 4, 8):
            found = ideal_speedups(sweep, n)
            if len(found) < 2:
                continue
            low, high = min(s for _, s in found), max(s for _, s in found)
            parts.append(
                f"{escape(sweep.fields.controller)}, {escape(sweep.label)} step: "
                f"{n} GPUs at most {low:.2f}x–{high:.2f}x at {found[0][0]}–{found[-1][0]} "
                "series per GPU"
            )
            machines.add(escape(sweep.machine))
    if not parts:
        return []
    return [
        "Splitting on GPUs is bounded by one GPU's own step at N times the batch over its "
        "step at the batch (a bound, not a measurement: no communication counted; one "
        "sweep each on "
        f"{', '.join(sorted(machines))}): " + "; ".join(parts) + ".",
        "",
    ]


def readme_answer(
    results: str | Path,
    rows: Sequence[Rec],
    figure: Path | None,
    base: Path,
    answers: Sequence[ControllerAnswer] | None = None,
) -> list[str]:
    """The README's answer as markdown lines: the quick CPU bullets (`answers`, the CPU
    `controller_answers` where already made) and the GPU's, when splitting pays, and
    `figure` (relative to `base`)."""
    lines = [
        "Every speedup is over the **best 1-device step**: the fastest measured 1-device "
        "optimiser step that trains the same model (for the study's problems, "
        "`--recommended`), its time in each bullet. Intervals are 95%; "
        f"{MARK} marks rows trained to different final losses.",
        "",
        *quick_lines(rows, "cpu", answers),
        *crossover_lines(results),
    ]
    if figure is not None and figure.exists():
        rel = Path(os.path.relpath(figure.resolve(), base.resolve())).as_posix()
        lines += [f"![Speedup over the best 1-device step against per-device work]({rel})", ""]
    found = lines + gpu_lines(results) + gpu_bound_line(results)
    return [w for line in found for w in wrapped(line)]


# Lines of the generated answer are wrapped to this width (a bullet's continuation
# indented), so that the README reads in a terminal and no line runs on.
WIDTH = 100


def wrapped(line: str) -> list[str]:
    """`line` wrapped to `WIDTH` (an image or a blank line kept whole)."""
    if not line or line.startswith("!["):
        return [line]
    indent = "  " if line.startswith("- ") else ""
    return textwrap.wrap(
        line, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )
