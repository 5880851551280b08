"""A GPU step against its device's roofline (`measure/roofline.py`): the least time its
executed arithmetic and bytes take at the device's peak, plus the least launches a step
must make, from the roofline record of the machine that measured the step
(`benchmarks/gpu_session.sh roofline`)."""

import datetime
from pathlib import Path

from ..measure.floor import STAGES_PER_STEP
from ..measure.roofline import roofline_s
from ..study import records
from ..study.rec import FloorCounts, LeverRecord, LeverRow, Roofline
from ..study.studies import Interval
from .intervals import ratio_interval
from .sessions import parse_time
from .tables import escape

# Beside a machine's levers records: `<machine>/roofline/gpu-<time>.json`, one per reading.
FOLDER = "roofline"

ROOFLINE_TEXT = (
    "**Roofline**: the least time the step can take on its GPU (`measure/roofline.py`, "
    "read on the machine that measured the step; its session is named under the "
    "table): the longer of its executed arithmetic (the floor's FLOPs) at the device's "
    "float32 matmul peak (at JAX's default precision, the step's own) and its least "
    "bytes (its parameters read and written once, its batch read once) at the device's "
    "memory bandwidth, plus two kernel launches (the kernel solve runs its solve in one "
    "kernel and its reverse pass in another: no step needs fewer), each at the time one "
    "more kernel adds to a compiled program on that device. **x roofline**: the step's "
    "median over it, with the interval of the step's median (the roofline is one "
    "reading of each of the three)."
)


def roofline_said(rec: LeverRecord) -> str:
    """The line under a GPU levers table naming its machine's roofline reading: its
    three values and its session, the range over the machine's other readings, or that
    the machine has none."""
    probe = roofline_record(rec)
    if not probe:
        return "No roofline was read on this machine (`benchmarks/gpu_session.sh roofline`)."
    readings = roofline_readings(rec)
    peaks = [r.peak_flops_per_s / 1e12 for r in readings]
    spread = (
        f" Its {len(readings)} readings on this machine span {min(peaks):.3g}–"
        f"{max(peaks):.3g} TFLOP/s; each table uses the one read nearest its own session."
        if len(readings) > 1
        else ""
    )
    return (
        f"Roofline of {escape(probe.machine_id)} ({escape(probe.device_kind)}, "
        f"JAX {escape((probe.versions or {}).get('jax'))}), read {escape(probe.finished)}: "
        f"matmul peak {probe.peak_flops_per_s / 1e12:.3g} TFLOP/s, bandwidth "
        f"{probe.bandwidth_bytes_per_s / 1e12:.3g} TB/s, "
        + (
            "no time per kernel read"
            if probe.kernel_s is None
            else f"{probe.kernel_s * 1e6:.3g} us per kernel"
        )
        + "."
        + spread
    )


def roofline_readings(rec: LeverRecord) -> list[Roofline]:
    """Every roofline reading of the machine that made levers record `rec` (found by its
    `path`: `<machine>/roofline/gpu*.json`, one per session), oldest first."""
    path = rec.path
    if not path:
        return []
    paths = sorted((Path(path).parent.parent / FOLDER).glob("gpu*.json"))
    found = [Roofline(r) for _, r in records.readable(paths)]
    return sorted(found, key=lambda r: str(r.finished))


def roofline_record(rec: LeverRecord) -> Roofline | None:
    """The roofline reading of `rec`'s machine nearest in time to `rec` (its session's,
    where one was read in it), or None."""
    readings = roofline_readings(rec)
    made = parse_time(rec.finished)
    if not readings or made is None:
        return readings[-1] if readings else None
    far = datetime.timedelta.max

    def apart(r: Roofline) -> datetime.timedelta:
        at = parse_time(r.finished)
        return far if at is None else abs(at - made)

    return min(readings, key=apart)


def row_roofline_s(rec: LeverRecord, row: LeverRow, counts: FloorCounts | None) -> float | None:
    """The roofline of one variant's step: its executed solver steps' FLOPs (`counts`,
    the record's floor counts) and least bytes at its machine's roofline; None without
    either."""
    probe = roofline_record(rec)
    steps = row.solver_steps_max
    if not probe or not counts or steps is None:
        return None
    evaluations = STAGES_PER_STEP * float(steps) + 1
    flops = counts.rest + evaluations * counts.per_evaluation
    flops += counts.rest_transcendentals or 0.0  # at the matmul peak: a bound below
    flops += evaluations * (counts.per_evaluation_transcendentals or 0.0)
    return roofline_s(flops, float(counts.least_bytes or 0.0), probe)


def roofline_cells(
    rec: LeverRecord, row: LeverRow, counts: FloorCounts | None
) -> list[str | Interval]:
    """The roofline (microseconds) and the step's ratio to it with its interval."""
    roof = row_roofline_s(rec, row, counts)
    if roof is None:
        return ["–", "–"]
    ratio = ratio_interval(row, {"step_times_runs_s": [[roof]]})
    return [f"{roof * 1e6:.1f}", Interval(*ratio, decimals=0)]
