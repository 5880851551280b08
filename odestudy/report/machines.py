"""Other machines' rows beside the chosen machine's (`machines.md`), and the records
left out of the report (`skipped.md`)."""

from collections.abc import Mapping
from pathlib import Path

from ..measure import environment
from ..study.rec import Rec
from ..study.studies import Block, Grid, Text
from . import loss, sessions
from .device_tables import machine_line
from .frames import in_scaling_matrix, scaling_rows
from .tables import escape as _esc
from .tables import fmt as _fmt
from .tables import render_blocks
from .verdict import one_run


def machines_table(every: list[Rec], chosen: Mapping[str, str | None]) -> list[Block]:
    """Other machines' ok rows of the main tables beside the chosen machine's: step
    times and speedups (with intervals) per scenario, when another machine has any."""
    main = [r for r in every if in_scaling_matrix(r) and r.ok]
    body: list[Block] = []
    for device in ("cpu", "gpu"):
        here = chosen.get(device)
        others = sorted({str(r.machine_id) for r in main if r.device == device} - {here})
        mine = {
            r.name: r
            for r in scaling_rows([r for r in main if r.device == device and r.machine_id == here])
        }
        for other in others:
            theirs = scaling_rows([r for r in main if r.device == device and r.machine_id == other])
            out = []
            for r in theirs:
                m = mine.get(r.name)
                out.append(
                    (
                        r.name,
                        _fmt(m.step_time_s) if m else "–",
                        _fmt(r.step_time_s),
                        _speedup_cell(m) if m else "–",
                        _speedup_cell(r),
                    )
                )
            header = ("Scenario", f"Step (s) {here}", f"Step (s) {other}")
            body += [
                Text(f"## {device.upper()}: {_esc(here)} (the tables) beside {_esc(other)}"),
                Text(machine_line(theirs, device)),
                Text(_esc(sessions.sessions_line([*mine.values(), *theirs], []))),
                Grid((*header, f"Speedup {here}", f"Speedup {other}"), tuple(out)),
            ]
    if not body:
        return [Text("Only one machine has records of this scale.")]
    notes = loss.notes(render_blocks(body))
    return [*body, *(Text(n) for n in notes), Text("")]  # the file ends with a blank line


def _speedup_cell(row: Rec) -> str:
    """A row's speedup cell, marked where it or its baseline kept one run (this table
    has no column of runs; such an interval backs no verdict)."""
    return loss.speedup_cell(row) + (" (one run)" if one_run(row) else "")


def skipped_table(skipped: list[tuple[str, str]]) -> Block:
    """The records the report left out, with the reason."""
    rows = tuple(
        (
            str(Path(p).relative_to(environment.ROOT))
            if Path(p).is_relative_to(environment.ROOT)
            else p,
            why,
        )
        for p, why in skipped
    )
    return Grid(("Record", "Reason"), rows) if rows else Text("No record was left out.")
