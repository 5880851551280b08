"""The measurement protocol: how a training step is timed, and what must match for a
record to be reused.

Every timed step goes through `time_call`: its inputs are waited for before the clock
starts and its outputs before it stops. A record is reused only where its scenario,
machine, package versions, measurement environment (`measurement_env`) and `PROTOCOL`
all match this checkout's. The number changes on purpose, never by accident: a test
(`tests/test_protocol.py`) fingerprints the code a measurement runs (its syntax tree
without comments and docstrings, `code_fingerprint`) and fails when it changes, asking
to bump `PROTOCOL` or to re-bless (`python -m odestudy.measure.timing --bless`).

Changelog:

1. One timing loop (`time_call`, `run_steps`) for scenario runs, repeats, step-cost
   sweeps and levers; records keyed by protocol and measurement environment; repeats
   run the cold run's own serialized step, multi-process ones from the trained state
   in their processes joined again; each stage's program named (`program_fingerprint`).
   With PID and one solve per sample, the length stages run one program compiled at
   the full length (shorter stages pad their series; the loss leaves repeated times
   out), so a PID step of a short stage now costs the full-length program's.
2. The machine's ceiling (`ceiling`) times three phases (one process alone, two
   together, one pinned to one core alone); multi-process repeats run each process's
   own serialized executable, as one-process repeats do.
3. The host probe around every timed block (`host.probe_ms`) does elementwise work on
   one core instead of a matrix product: OpenBLAS's threads spun on after it and slowed
   the first steps of blocks that use every core.
"""

import ast
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import host
from .devices import DEVICE_COUNT_FLAG
from .environment import notebook

PROTOCOL = 3

# Environment variables that change what a timed step does (compiler and runtime
# flags, equinox's error checks, precision, thread pools). Their values are recorded
# (`measurement_env`) and must match for a record to be reused.
MEASUREMENT_ENV = (
    "XLA_FLAGS",
    "EQX_ON_ERROR",
    "JAX_PLATFORMS",
    "JAX_ENABLE_X64",
    "JAX_DEFAULT_MATMUL_PRECISION",
    "JAX_DISABLE_JIT",
    "JAX_DEBUG_NANS",
    "JAX_DISABLE_MOST_OPTIMIZATIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "NVIDIA_TF32_OVERRIDE",
)

# Where `code_fingerprint` starts: the modules that run a measurement (a scenario, a
# repeat, the shipped problems beyond the oscillator); their imports are read from them.
ENTRY_MODULES = (
    "measure.training",
    "measure.resume",
    "study.distributed",
    "measure.timing",
    "problems.latent",
    "problems.controlled",
)
PACKAGE = Path(__file__).resolve().parents[1]
SCENARIO_NOTEBOOK = notebook("scenario.ipynb")
BLESSED = PACKAGE.parent / "tests" / "protocol_fingerprint.json"


def measurement_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `MEASUREMENT_ENV` set in `env` (default: this process's), XLA
    flags sorted and without the virtual device count (the scenario's
    `devices_per_process`, not the environment's)."""
    env = os.environ if env is None else env
    out = {k: env[k] for k in MEASUREMENT_ENV if env.get(k, "") != ""}
    if "XLA_FLAGS" in out:
        flags = sorted(f for f in out["XLA_FLAGS"].split() if not f.startswith(DEVICE_COUNT_FLAG))
        if flags:
            out["XLA_FLAGS"] = " ".join(flags)
        else:
            del out["XLA_FLAGS"]
    return out


def time_call(fn: Callable, *args: Any) -> tuple[Any, float]:
    """`(fn(*args), seconds)`, timed from its ready arguments to its ready results."""
    import jax

    jax.block_until_ready(args)
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def interleaved(
    calls: Sequence[Callable[[], Any]], rounds: int, warmup: int = 3
) -> list[list[float]]:
    """Per call of `calls`, its times over `rounds` rounds after `warmup`; the order is
    reversed every other round (a call timed right after another program read slower)."""
    import jax

    times: list[list[float]] = [[] for _ in calls]
    for i in range(warmup + rounds):
        order = range(len(calls)) if i % 2 == 0 else reversed(range(len(calls)))
        for j in order:
            t0 = time.perf_counter()
            jax.block_until_ready(calls[j]())
            if i >= warmup:
                times[j].append(time.perf_counter() - t0)
    return times


def copy_arrays(tree: Any) -> Any:
    """A copy of every JAX array of `tree`, where it is (same devices and sharding)."""
    import jax

    return jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, tree)


def pooled(runs: Sequence[Sequence[float]]) -> dict[str, Any]:
    """A record's step-time fields: each run's median, and all steps' pooled quantiles."""
    median, p25, p75 = quantiles(np.concatenate([np.asarray(run, float) for run in runs]))
    return {
        "step_time_runs_s": [float(np.median(run)) for run in runs],
        "step_time_s": median,
        "step_time_p25_s": p25,
        "step_time_p75_s": p75,
    }


def median_time(fn: Callable, *args: Any, repeats: int = 10) -> float:
    """Median seconds of `repeats` calls of `fn(*args)` after one untimed call."""
    time_call(fn, *args)
    return float(np.median([time_call(fn, *args)[1] for _ in range(repeats)]))


class StepRun(NamedTuple):
    """What `run_steps` measured: the end state, each timed step's seconds and solver
    steps, every step's loss, and the host around the block (`host.Watch`)."""

    params: Any
    opt_state: Any
    times: list[float]
    losses: list[float]
    num_steps: list[Any]
    host: dict[str, Any] | None = None


def run_steps(
    compiled: Callable,
    params: Any,
    opt_state: Any,
    batches: Iterator[Any] | Iterable[Any],
    steps: int,
    warmup: int = 0,
    carry: bool = True,
    where: str = "step",
    on_step: Callable[[int, Any, float, float], None] | None = None,
    read_loss: Callable[[Any], float] | None = None,
    copy_state: bool = False,
) -> StepRun:
    """Run `steps` training steps of an AOT-compiled step on placed `batches`, each on
    the clock; FloatingPointError ("diverged ...") at the first non-finite loss.

    - `warmup`: the first steps, run and waited for but not kept in `times`.
    - `carry`: feed each step's state to the next (training); `False` starts every step
      from the given one (timing a fixed model).
    - `where`: names the steps in the error; `on_step(i, params, loss, seconds)` is
      called after step `i`, off the clock; `read_loss`: the loss as a host float.
    - `copy_state`: each step gets a copy of the state, made off the clock (a donating
      step consumes it).
    """
    iterator = iter(batches)
    times, losses, num_steps = [], [], []
    p, o = params, opt_state
    watch = host.Watch()
    watch.start()
    for i in range(steps):
        placed = next(iterator)
        p_in, o_in = copy_arrays((p, o)) if copy_state else (p, o)
        (p_new, o_new, loss, ns), seconds = time_call(compiled, p_in, o_in, placed)
        value = read_loss(loss) if read_loss else float(np.asarray(loss).reshape(-1)[0])
        if not np.isfinite(value):
            raise FloatingPointError(
                f"diverged: the training loss became {value} at {where} {i + 1}"
            )
        if carry:
            p, o = p_new, o_new
        losses.append(value)
        if i >= warmup:
            times.append(seconds)
            num_steps.append(ns)
        if on_step is not None:
            on_step(i, p_new, value, seconds)
    return StepRun(p, o, times, losses, num_steps, watch.stop())


def quantiles(times: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """Median, 25th and 75th percentile of `times`."""
    arr = np.asarray(times, float)
    return (float(np.median(arr)), float(np.percentile(arr, 25)), float(np.percentile(arr, 75)))


def median_interval(times: list[float], draws: int = 2000) -> dict[str, Any]:
    """`times`, their median and a 95% bootstrap interval of the median."""
    boot = np.random.default_rng(0).choice(times, size=(draws, len(times)))
    low, high = np.percentile(np.median(boot, axis=1), [2.5, 97.5])
    return {"times_s": times, "median_s": float(np.median(times)),
            "interval_s": [float(low), float(high)]}  # fmt: skip


_LOCATION = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)|#loc\d*(?: = loc\(.*\))?")


def program_fingerprint(lowered: Any) -> str:
    """A short hash of a `jax.stages.Lowered` program's text without source locations:
    the same program traced from other lines of code gives the same fingerprint."""
    try:
        text = lowered.as_text(debug_info=False)
    except TypeError:  # older JAX: no debug_info argument
        text = lowered.as_text()
    text = "\n".join(
        _LOCATION.sub("", line) for line in text.splitlines() if not line.startswith("#loc")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _module_path(module: str, package: Path = PACKAGE) -> Path:
    """The file of dotted module `module` (relative to the package, `measure.timing`)."""
    return package / (module.replace(".", "/") + ".py")


def _imports(module: str, package: Path = PACKAGE) -> set[str]:
    """The `odestudy` modules (dotted, relative to the package) `module` imports anywhere."""
    tree = ast.parse(_module_path(module, package).read_text())
    here = module.split(".")[:-1]  # the subpackage the module lives in
    found = set()
    for node in ast.walk(tree):
        targets: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):
                    continue
                base = here[: len(here) - (node.level - 1)]
                base = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "odestudy":
                base = node.module.split(".")[1:]
            else:
                continue
            targets.append(base)
            targets += [base + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            targets += [
                a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "odestudy"
            ]
        found |= {".".join(t) for t in targets if t and _module_path(".".join(t), package).exists()}
    return found


def measuring_modules(package: Path = PACKAGE) -> list[str]:
    """The package modules a measurement runs: `ENTRY_MODULES` and their imports, transitively."""
    todo = set(ENTRY_MODULES)
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        seen.add(module)
        todo |= _imports(module, package) - seen
    return sorted(seen)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)  # type: ignore[attr-defined]
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def code_fingerprint(package: Path = PACKAGE, notebook: Path = SCENARIO_NOTEBOOK) -> dict[str, Any]:
    """`{"fingerprint": hash, "modules": [names]}`: a hash of the code a measurement
    runs, blind to comments and docstrings (the syntax trees of `measuring_modules()`
    and the scenario notebook's code cells)."""
    digest = hashlib.sha256()
    modules = measuring_modules(package)
    sources = [(f"odestudy/{m}", _module_path(m, package).read_text()) for m in modules]
    sources.append(("notebooks/scenario.ipynb", _notebook_code(notebook)))
    for name, source in sources:
        tree = _strip_docstrings(ast.parse(source))
        digest.update(name.encode())
        digest.update(ast.dump(tree, annotate_fields=False, include_attributes=False).encode())
    return {"fingerprint": digest.hexdigest()[:16], "modules": modules}


def bless(path: Path = BLESSED) -> dict[str, Any]:
    """Store the current `code_fingerprint()` with `PROTOCOL` as the blessed one."""
    data = {"protocol": PROTOCOL, **code_fingerprint()}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


if __name__ == "__main__":
    if sys.argv[1:] == ["--bless"]:
        print(json.dumps(bless(), indent=1))
    else:
        print(json.dumps({"protocol": PROTOCOL, **code_fingerprint()}, indent=1))
