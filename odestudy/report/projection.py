"""A projection model for N devices from 1-device measurements, its validation where
both sides are measured, and the projected 2-GPU rows of the reference.

Step time of N devices in data parallel at global batch B (per-device batch b = B/N):

    t(N) = t1(b0) * c(b) * I(B) / (c(b0) * I(b0)) + a(N) [+ k * I(B) * l(N) in `shard`]

- `t1(b0)`: the measured 1-device step time at its batch b0 (the row's baseline: b0 = B
  under strong scaling, b0 = b under weak scaling).
- `c(b)`, `I(b)`: one device's time per executed solver iteration and executed
  iterations (the batch's slowest sample) at batch b, from the 1-device step-cost sweep
  of that machine (`benchmarks/step_cost.py`, interpolated over its batches): every
  device's loop runs as long as the slowest sample of the global batch, `I(B)`.
- `a(N)`: one all-reduce of the gradient (measured: `benchmarks/collectives.py`).
- `shard` runs one solver loop over the global batch with `k` collectives in its loop
  bodies (counted in the compiled program of the record) executed every iteration at
  latency `l(N)` (an all-reduce of one float).
"""

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..measure.modes import MODES, multi_device_modes
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.profiles import Value, mode_time
from ..study.rec import AllReduce, Projected, Rec, Sweep
from ..study.studies import Grid, Table, Text
from . import sessions
from .frames import BaselineError, baseline
from .tables import escape
from .tables import fmt as _fmt

# The modes that run on several devices, in the order of the tables.
MULTI_DEVICE = multi_device_modes()


# Cited all-reduce latency of two NVLink-connected H100s, small messages (seconds):
# about 6 us with CUDA graphs (NVIDIA/nccl issue 1259, 2 x H100 80GB HBM3, NVLSTree),
# 3.5 us for 1 KB without CUDA graphs on NVLink H800s (NVIDIA/nccl issue 1984), and
# NCCL's own tuning model: base 6.6 us (Ring, LL) + 0.6 us NVLink (src/graph/tuning.cc,
# quoted in NVIDIA/nccl issue 1334).
GPU_ALLREDUCE_S = Value(
    7.2e-6,
    3.5e-6,
    25e-6,
    "NVIDIA/nccl issues 1259 (2 x H100, ~6 us), 1984 (3.5 us without "
    "CUDA graphs) and NCCL's tuning model (6.6 + 0.6 us, issue 1334)",
)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The model's step time (`predict`) and its terms, in seconds."""

    step_time_s: float
    compute_s: float
    allreduce_s: float
    in_loop_s: float


@dataclasses.dataclass(frozen=True)
class Validation:
    """One measured multi-device row beside its prediction (`validate_model`): the
    row's `measured_s`, the `predicted` step and its relative `error`."""

    mode: str
    n_devices: int
    controller: str
    scaling: str
    measured_s: float
    predicted: Prediction
    error: float
    machine: str = ""
    session: str | None = None
    protocol: int | None = None


def all_sweeps(folder: str | Path, device: str | None = None) -> list[Sweep]:
    """Every step-cost sweep of one machine (`<machine>/step_cost/*.json`, written by
    `benchmarks/step_cost.py`), of one device kind if `device` is given."""
    paths = records.side_study_paths(folder, "step_cost", f"{device or '*'}-*.json")
    return [Sweep(records.read_json(p), path=str(p)) for p in paths]


def load_sweeps(folder: str | Path) -> dict[tuple[str | None, str | None], Sweep]:
    """The default-flag sweeps of one machine, `(device, controller) -> record`."""
    return {
        (r.fields.device, r.fields.controller): r
        for r in all_sweeps(folder)
        if r.label == "default"
    }


def load_latencies(folder: str | Path) -> dict[tuple[int, int], float]:
    """Measured all-reduce latencies of one machine, `(devices, floats) -> seconds`."""
    out = {}
    for path in records.side_study_paths(folder, "collectives"):
        rec = AllReduce(records.read_json(path))
        out[(rec.n_devices, rec.size)] = rec.latency_s
    return out


def _interp(sweep: Sweep, batch: int, key: str) -> float:
    rows = sorted(sweep.rows, key=lambda r: r.batch)
    x = np.log2([r.batch for r in rows])
    return float(np.interp(np.log2(batch), x, [r[key] for r in rows]))


def predict(
    sweep: Sweep,
    base: Rec,
    mode: str,
    n: int,
    global_batch: int,
    allreduce_s: float,
    in_loop: int = 0,
    loop_latency_s: float = 0.0,
) -> Prediction:
    """The model's step time for `n` devices at `global_batch` (see the module doc), from
    the 1-device `sweep` anchored on the 1-device record `base`."""

    def c(b: int) -> float:
        return _interp(sweep, b, "step_time_s") / _interp(sweep, b, "iterations_executed")

    local, b0, t0 = global_batch // n, base.global_batch, base.step_time_s
    assert t0 is not None, "the anchor is a measured (ok) record"
    iters_global = _interp(sweep, global_batch, "iterations_executed")
    per_iteration = t0 * c(local) / (c(b0) * _interp(sweep, b0, "iterations_executed"))
    terms = {"per_iteration_s": per_iteration, "iterations_step": iters_global}
    t = mode_time(mode, terms, allreduce_s if n > 1 else 0.0, loop_latency_s, in_loop)
    return Prediction(**t)


def validate_model(rows: list[Rec], folder: str | Path) -> list[Validation]:
    """Predicted against measured for the machine of `folder`'s multi-device ok rows
    within its physical cores that have a sweep, a latency and a 1-device baseline."""
    sweeps, lat = load_sweeps(folder), load_latencies(folder)
    cores = next((r.hardware.physical_cores for r in rows if r.hardware), None)
    out = []
    for r in rows:
        n, measured = r.n_devices, r.step_time_s
        sweep = sweeps.get((r.device, r.controller))
        placed = n > 1 and (r.processes or 1) == 1 and not (cores and n > cores)
        if not (r.ok and placed and measured is not None and sweep is not None and (n, 1) in lat):
            continue
        try:
            base = baseline(r, rows, r.scaling)
        except BaselineError:
            continue
        grad = lat.get((n, max(s for d, s in lat if d == n)), lat[(n, 1)])
        in_loop = r.collectives_in_loops or 0
        p = predict(sweep, base, r.mode, n, r.global_batch, grad, in_loop, lat[(n, 1)])
        out.append(
            Validation(
                mode=r.mode,
                n_devices=n,
                controller=r.controller,
                scaling=r.scaling,
                measured_s=measured,
                predicted=p,
                error=p.step_time_s / measured - 1,
                machine=Path(folder).name,
                session=sessions.session_of(r).label,
                protocol=r.protocol,
            )
        )
    return out


def project_gpu(
    sweeps: dict[tuple[str | None, str | None], Sweep],
    gpu_rows: list[Rec],
    cpu_rows: list[Rec],
    n: int = 2,
) -> list[Projected]:
    """Projected `n`-GPU strong-scaling rows anchored on the measured 1-GPU rows, at the
    cited latency range; a loop's collectives from the CPU record of the same mode."""
    out = []
    for base in gpu_rows:
        t1, sweep = base.step_time_s, sweeps.get(("gpu", base.controller))
        one = base.ok and base.n_devices == 1 and base.scaling == "strong"
        if not one or t1 is None or sweep is None:
            continue
        strong = [c for c in cpu_rows if c.ok and c.scaling == "strong" and c.n_devices == n]
        for mode in MULTI_DEVICE:
            same = (c for c in strong if c.mode == mode and c.controller == base.controller)
            cpu = next(same, None)
            k = (cpu.collectives_in_loops or 0) if cpu is not None else 0
            low, central, high = (
                predict(sweep, base, mode, n, base.global_batch, lat, k, lat)
                for lat in (GPU_ALLREDUCE_S.low, GPU_ALLREDUCE_S.central, GPU_ALLREDUCE_S.high)
            )
            out.append(
                Projected(
                    scale=base.scale,
                    mode=mode,
                    n_devices=n,
                    controller=base.controller,
                    global_batch=base.global_batch,
                    step_time_s=central.step_time_s,
                    low_s=low.step_time_s,
                    high_s=high.step_time_s,
                    one_gpu_s=t1,
                    speedup=t1 / central.step_time_s,
                    in_loop=k,
                )
            )
    return out


def projected_grid(projected: list[Projected]) -> Grid:
    """The projected rows (`project_gpu`) as a table, labelled "projected"."""
    rows = [
        (
            p.scale,
            f"{p.n_devices} (projected)",
            p.mode,
            p.controller,
            str(p.global_batch),
            _fmt(p.one_gpu_s),
            f"{_fmt(p.step_time_s)} [{_fmt(p.low_s)}, {_fmt(p.high_s)}]",
            f"{p.speedup:.2f}",
        )
        for p in projected
    ]
    header = ("Scale", "GPUs", "Mode", "Controller", "Global batch", "1 GPU measured step (s)",
              "Projected step (s) [latency range]", "Projected speedup")  # fmt: skip
    return Grid(header, tuple(rows))


def _validation_table(validation: list[Validation]) -> Grid | Text:
    """The validation rows as a table (or one line without rows)."""
    if not validation:
        return Text("No multi-device rows with sweeps and latencies to validate.")
    rows = [
        (
            v.machine,
            v.mode,
            str(v.n_devices),
            v.controller,
            v.scaling,
            _fmt(v.measured_s),
            _fmt(v.predicted.step_time_s),
            _fmt(v.predicted.compute_s),
            _fmt(v.predicted.allreduce_s),
            _fmt(v.predicted.in_loop_s),
            f"{100 * v.error:+.0f}%",
            f"{v.session or '–'} (protocol {v.protocol})",
        )
        for v in validation
    ]
    header = ("Machine", "Mode", "Devices", "Controller", "Scaling", "Measured (s)",
              "Predicted (s)", "Compute", "All-reduce", "In-loop collectives", "Error",
              "Session (protocol)")  # fmt: skip
    return Grid(header, tuple(rows))


def projection_body(
    validation: list[Validation],
    machines: list[str],
    projected: list[Projected],
    none_projected: str = "No GPU sweep.",
) -> tuple[Text | Grid, ...]:
    """`projection.md`: the model, its validation, the projected GPU rows (or
    `none_projected`), and the closing line over the `pmap` and `shard_map` rows."""
    errors = []
    for mode in MULTI_DEVICE:
        if mine := [v for v in validation if v.mode == mode]:
            errors.append(
                f"- `{mode}`: median |error| {100 * np.median([abs(v.error) for v in mine]):.0f}% "
                f"over {len(mine)} rows{_joined(mine)}"
            )
    both = [v for v in validation if not MODES[v.mode].one_loop]
    median = f"{100 * np.median([abs(v.error) for v in both]):.0f}%" if both else "n/a"
    joined = _joined(both)
    return (
        Text(__doc__.split("\n\n", 1)[1].strip()),
        Text("## Validation: predicted from 1-device measurements against measured"),
        Text("Machines: " + (", ".join(f"`{m}`" for m in machines) or "none")),
        _validation_table(validation),
        *([Text("\n".join(errors))] if errors else []),
        Text("## Projected 2-GPU rows (not measured: no machine here has two GPUs)"),
        Text(
            f"All-reduce latency {GPU_ALLREDUCE_S.central * 1e6:.1f} us (range "
            f"{GPU_ALLREDUCE_S.low * 1e6:.1f}–{GPU_ALLREDUCE_S.high * 1e6:.0f} us), "
            f"cited: {GPU_ALLREDUCE_S.source}. Compute from the 1-GPU step-cost sweep."
        ),
        projected_grid(projected) if projected else Text(none_projected),
        Text(f"The closing line is over the `pmap` and `shard_map` rows{joined}."),
        Text(f"validation: median |error| = {median}"),
    )


def _joined(validation: Iterable[Validation]) -> str:
    """`` (one machine, one protocol) or ` of 2 machines (a, b) under protocols 1, 2`:
    what a median over `validation`'s rows joins, said where it joins several."""
    rows = list(validation)
    machines = sorted({str(v.machine) for v in rows})
    protocols = sorted({str(v.protocol) for v in rows})
    said = ""
    if len(machines) > 1:
        said += f" of {len(machines)} machines ({', '.join(machines)})"
    if len(protocols) > 1:
        said += f" under measurement protocols {', '.join(protocols)}"
    return said


def projection_table(
    results: str | Path,
    rows_by_machine: dict[str, list[Rec]],
    gpu_rows: list[Rec],
    gpu_machine: str | None,
    cpu_rows: list[Rec],
) -> tuple[Table, list[Projected]]:
    """Validate on every machine, project the 2-GPU rows: the table and the projected rows."""
    validation = [
        v
        for machine, rows in rows_by_machine.items()
        for v in validate_model(rows, Path(results) / machine)
    ]
    sweeps = load_sweeps(Path(results) / gpu_machine) if gpu_machine else {}
    projected = project_gpu(sweeps, gpu_rows, cpu_rows)
    machines = sorted({v.machine for v in validation})
    why = why_none_projected(sweeps, gpu_machine)
    body = projection_body(validation, machines, projected, why)
    return Table("projection", "Projection model", body), projected


def why_none_projected(sweeps: dict, gpu_machine: str | None) -> str:
    """Why no GPU row is projected: no GPU sweep of the GPU table's machine, or no
    measured 1-GPU row of the current protocol to anchor its sweeps on."""
    if not any(device == "gpu" for device, _ in sweeps):
        return "No GPU sweep."
    return (
        f"No projected rows: the GPU step-cost sweeps of `{escape(gpu_machine)}` have no "
        "measured 1-GPU row of the current measurement protocol (`timing.PROTOCOL` "
        f"{PROTOCOL}) to anchor on. The rows predicted from one GPU by `odestudy predict` "
        "are in the GPU table (`gpu.md`)."
    )
