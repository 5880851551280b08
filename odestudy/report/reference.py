"""Our seed-scale rows beside the reference study's published rows (`reference.md`)."""

import csv
from pathlib import Path
from typing import Any

from ..measure.timing import PROTOCOL
from ..study.rec import Published, Rec
from ..study.studies import Block, Grid, Text
from . import loss, sessions
from .device_tables import REFERENCE_CSV, _protocol, machine_line, pick_machine
from .frames import in_scaling_matrix, read_records, scaling_rows
from .tables import escape as _esc
from .tables import fmt as _fmt


def reference_rows(path: str | Path = REFERENCE_CSV) -> list[Published]:
    """The reference study's published rows (its epoch time is one optimiser step)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"reference tables not found at {path}")
    with open(path) as f:
        return [Published(row) for row in csv.DictReader(f)]


def _float(text: Any) -> float | None:
    """A number of the reference's table, None where it has none."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _reference_status(ours: Rec | None) -> str:
    """Our row's status beside the reference's, saying where its record is of an older
    measurement protocol (left out of every other table: `skipped.md`)."""
    if ours is None:
        return "no record"
    if ours.ok and ours.protocol != PROTOCOL:
        return (
            f"ok, older measurement protocol ({_protocol([ours])}; now {PROTOCOL}): left "
            "out of the other tables, magnitudes only"
        )
    return str(ours.status)


def _reference_row(ref: Published, rows: list[Rec]) -> list[str]:
    """One reference row beside our matching seed row (its mode on one device is our
    `single`), with the ratio of step times flagged where the losses differ."""
    n = int(ref.n_devices)
    mode = "single" if n == 1 else ref.mode
    match = [
        r
        for r in rows
        if r.device == ref.device
        and r.n_devices == n
        and r.mode == mode
        and r.controller == ref.controller
        and r.scaling == "strong"
        and r.processes in (None, 1)
    ]
    ours = match[0] if match else None
    ref_step = float(ref.epoch_time_s)
    step = ours.step_time_s if ours and ours.ok else None
    return [
        ref.device,
        str(n),
        f"{ref.mode} → {mode}",
        ref.controller,
        _fmt(ref_step),
        _fmt(step),
        loss.flag(_fmt(step / ref_step, 3), ours, _float(ref.final_loss)) if ours and step else "–",
        ref.final_loss,
        _fmt(ours.final_loss) if ours else "–",
        _reference_status(ours),
        f"{sessions.session_of(ours).label} (protocol {_protocol([ours])})" if ours else "–",
    ]


def comparison_table(rows: list[Rec], reference: list[Published]) -> list[Block]:
    """Our seed-scale strong-scaling rows (`seed_rows`) beside the reference's rows,
    with ratios."""
    header = (
        "Device",
        "Devices",
        "Mode",
        "Controller",
        "Reference step (s)",
        "Ours step median (s)",
        "Ours / reference",
        "Reference final loss",
        "Our final loss",
        "Our status",
        "Our session",
    )
    out = [_reference_row(ref, rows) for ref in reference]
    cpu = machine_line(rows, "cpu") or "no CPU records"
    gpu = machine_line(rows, "gpu") or "no GPU records"
    protocols = _protocol([r for r in rows if r.ok])
    note = (
        "Like for like: our rows here are the **seed** scale, the reference's own "
        "configuration (2048 series, global batch 32, 10 %, 50 % and 100 % of each series "
        "for 1000 steps each, learning rate 3e-3, a fresh optimiser state per stage), "
        "whatever scale the rest of this report holds; quick-scale rows are never set "
        "beside the reference's. What still differs: the reference's machine is not "
        "recorded (JAX version unknown; 1–2 GPUs and 8 CPU devices), our 8 CPU devices "
        "are virtual devices on a 2-core machine (overhead, not speedup), its step times "
        "are unsynchronised means (no wait on the device) where ours are waited-for "
        "medians, its `pmap` summed the gradients where ours average them, and its modes "
        "trained different losses: ratios compare magnitudes only. The reference's "
        "1-device rows are its `shard` mode on one device, our `single`. Our seed rows "
        f"run once each (measurement protocol {_esc(protocols)})."
    )
    marks = loss.notes(" ".join(str(c) for row in out for c in row))
    return [
        Text(note),
        Text(f"Our CPU machine: {cpu}"),
        Text(f"Our GPU machine: {gpu}"),
        Grid(header, tuple(out)),
        *(Text(n) for n in marks),
    ]


def seed_rows(results: str | Path) -> list[Rec]:
    """The seed-scale rows (the reference's configuration) of one machine per device
    kind (`pick_machine`), with their speedups: what the reference comparison shows."""
    seed = read_records(results, "seed", current=True)
    chosen = {d: pick_machine(seed, d) for d in ("cpu", "gpu")}
    return scaling_rows(
        [r for r in seed if chosen[str(r.device)] == r.machine_id and in_scaling_matrix(r)]
    )
