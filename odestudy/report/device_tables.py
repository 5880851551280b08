"""The device tables (`cpu.md`, `gpu.md`): the reference's columns, then our diagnostics,
per row; the machine each names, the notes on how to read them, and what a device kind
without rows of the scale says instead."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.timing import PROTOCOL
from ..study.rec import Hardware, Rec
from ..study.studies import Block, Grid, Text
from . import loss, sessions
from .frames import read_records
from .intervals import METHOD, fmt_interval
from .tables import escape as _esc
from .tables import fmt as _fmt
from .tables import loss_cell

# The reference study's two published tables as data (its "epoch time" is one optimiser
# step), kept in the repo so that a clone anywhere can compare with them.
REFERENCE_CSV = environment.shipped("data", "reference_tables.csv")

REFERENCE_COLUMNS = (
    "Device",
    "Number of Devices",
    "Mode",
    "Controller",
    "Runtime (s)",
    "Epoch Time (s)",
    "Compile Time (s)",
    "Final Loss",
)


# The reference's table gets the row identity it leaves implicit: the first table of a
# device kind is `REFERENCE_COLUMNS + ADDED_COLUMNS`, the second (our diagnostics)
# `DIAGNOSTIC_COLUMNS`, which start with the same row identity so that the two read side
# by side (each fits a 1400 px page).
ADDED_COLUMNS = ("Scaling", "Global batch", "Problem")
DIAGNOSTIC_COLUMNS = ("Devices", "Mode", "Controller", "Scaling", "Global batch") + (
    "Step time median (s)",
    "Step time IQR (s)",
    "Runs",
    "Step",
    "Speedup over its step's 1 device [95% CI]",
    "Speedup over the best 1-device step [95% CI]",
    "Efficiency [95% CI]",
    "Efficiency vs machine ceiling [95% CI]",
    "Collectives total / in loops",
    "Solver steps max / mean",
    "Status",
)


def pick_machine(recs: list[Rec], device: str) -> str | None:
    """The machine whose `device` rows make the tables: this machine where it has ok
    records of that kind under the current protocol (a fresh run here), else of the
    machines with such records (else with ok ones, else with any) the one with the most
    (ties: the latest), so that every clone writes the same pages from the same records."""
    kind = [r for r in recs if r.device == device]
    ok = [r for r in kind if r.ok]
    current = [r for r in ok if r.protocol == PROTOCOL]
    here = environment.machine_id(environment.this_machine())
    if any(r.machine_id == here for r in current):
        return here
    ok = current or ok or kind
    if not ok:
        return None
    count: dict[str | None, tuple[int, str]] = {}
    for r in ok:
        n, last = count.get(r.machine_id, (0, ""))
        count[r.machine_id] = (n + 1, max(last, str(r.finished)))
    return max(count, key=lambda m: count[m])


def _devices_label(r: Rec, cores: int | None) -> str:
    label = str(r.n_devices)
    if (r.processes or 1) > 1:
        label += f" ({r.processes} proc × {r.devices_per_process})"
    if cores and r.device == "cpu" and r.n_devices > cores:
        label += " †"
    return label


def table_rows(rows: list[Rec], cores: int | None) -> list[list[str]]:
    """The first table's cells (`REFERENCE_COLUMNS + ADDED_COLUMNS`)."""
    return [
        [
            str(r.device),
            _devices_label(r, cores),
            r.mode,
            r.controller,
            _fmt(r.runtime_s, 3),
            _fmt(r.epoch_time_s),
            _fmt(r.compile_time_s, 3),
            loss_cell(r),
            r.scaling,
            str(r.global_batch),
            _esc(problem_name(r)),
        ]
        for r in rows
    ]


def problem_name(r: Rec) -> str:
    """What a row trained: its problem's name (records before problems: the oscillator)."""
    return str((r.problem_facts or {}).get("name") or r.problem or "oscillator")


def diagnostic_rows(rows: list[Rec], cores: int | None) -> list[list[str]]:
    """The second table's cells (`DIAGNOSTIC_COLUMNS`)."""
    out = []
    for r in rows:
        ok = r.ok
        steps = r.solver_steps
        iqr = f"{_fmt(r.step_time_p25_s)}–{_fmt(r.step_time_p75_s)}" if ok else "–"
        each = ", ".join(_fmt(x, 3) for x in r.step_time_runs_s or [])
        runs = (f"{len(r.step_time_runs_s)} ({each})" if r.step_time_runs_s else "1") if ok else "–"
        status = str(r.status) if ok else f"{r.status}: {r.error}"
        if ok and r.baseline_error:
            status += f" (no speedup: {r.baseline_error})"
        if ok and r.untrained:
            status += f" (no speedup: {r.untrained} did not train)"
        out.append(
            [
                _devices_label(r, cores),
                r.mode,
                r.controller,
                r.scaling,
                str(r.global_batch),
                _fmt(r.step_time_s),
                iqr,
                runs,
                _esc(r.step or ""),
                loss.speedup_cell(r),
                _best_cell(r),
                fmt_interval(r.efficiency, *(r.efficiency_ci or (None, None))),
                fmt_interval(*(r.efficiency_vs_ceiling or (None, None, None))),
                f"{_fmt(r.collectives_total)} / {_fmt(r.collectives_in_loops)}",
                f"{_fmt(steps.max, 3)} / {_fmt(steps.mean, 3)}" if ok else "–",
                status,
            ]
        )
    return out


def _best_cell(r: Rec) -> str:
    """A row's speedup over the best 1-device step of its model and batch
    (`best.attach_best`), flagged where their final losses differ; the best step's own
    1-device row says it is the best."""
    if r.speedup_best is None:
        one = r.n_devices == 1 and r.ok and r.best_step == r.step
        return "1 (the best)" if one else "–"
    text = fmt_interval(r.speedup_best, *(r.speedup_best_ci or (None, None)))
    return f"{text} {loss.MARK}" if r.best_differs else text


def _known(value: Any) -> Any:
    return "unknown" if value is None else value


def _protocol(rows: list[Rec]) -> str:
    """The measurement protocol(s) of `rows` ("none recorded" for records without one)."""
    found = sorted({str(r.protocol) for r in rows if r.protocol is not None})
    none = any(r.protocol is None for r in rows)
    return ", ".join(found + (["none recorded"] if none else [])) or "none recorded"


def machine_line(rows: list[Rec], device: str) -> str:
    """Hardware and versions of the records of one device kind."""
    ok = [r for r in rows if r.device == device and r.ok]
    if not ok:
        return ""
    first = ok[0]
    # Every value here comes from a record: escaped, never markup; none left as None.
    hw = Hardware(
        {k: "unknown" for k in ("cpu_model", "physical_cores", "logical_cpus")}
        | {k: _esc(_known(v)) for k, v in first.hardware.items()}
    )
    v = {k: _esc(_known(x)) for k, x in (first.versions or {}).items()}
    names = ("python", "jax", "jaxlib", "diffrax", "equinox", "optax")
    stack = ", ".join(f"{k} {v.get(k, 'unknown')}" for k in names)
    kind = _esc(repr(first.device_kind if "device_kind" in first else device))
    commits = ", ".join(sorted({_esc(str(r.git_commit or "unknown")[:12]) for r in ok}))
    return (
        f"Machine {_esc(first.machine_id)}: {hw.cpu_model} ({hw.physical_cores} physical "
        f"cores, {hw.logical_cpus} logical), device kind {kind}; {stack}; "
        f"pmap is {_esc(_known(first.pmap_implementation))}; measurement protocol "
        f"{_esc(_protocol(ok))}; records from git commit(s) {commits}."
    )


EPOCH_NOTE = (
    "**Epoch Time** here is one pass over the training set: the median step time times (data "
    "set size / global batch). The reference's column of that name is the mean time of one "
    "optimiser step; compare it with *Step time median*. **Runtime** is the whole scenario "
    "(data, compiles, training, evaluation) and **Compile Time** the AOT `lower().compile()` "
    "of the training step, summed over the programs its length stages compile (PID: one "
    "program for every stage; StepTo: one per stage). **Final Loss** is the MSE on a fixed "
    "evaluation set of full series, solved with the scenario's controller, the same in every "
    "mode. Speedup and efficiency are step-time ratios against the 1-device row of the same "
    "controller, scaling and batch, measured on the same machine, versions and code (an "
    "explicit join on every other scenario field), one scenario at a time; **Step** is the "
    "step a row runs (the default, the recommended, or its levers), and the speedup **over the "
    "best 1-device step** is against the fastest 1-device row of the same model and batch that "
    "trained to the default step's loss (`odestudy/report/best.py`). **Runs**: the number of "
    "runs and each run's median step time. The quick scaling matrix runs every scenario 3 "
    "times at different times, interleaved: the first a fresh kernel that trains both stages "
    "and compiles cold; each repeat times 40 more full-length steps from that run's trained "
    "state with that run's own compiled step (never its timings), in a plain process per "
    "device count and round. The step time is the median of all runs' steps pooled. "
    "**Efficiency vs machine ceiling** (weak scaling): the efficiency divided by this "
    "machine's ceiling, t(one 1-device training alone) / t(two side by side), measured in "
    "every repeat round (`odestudy/study/ceiling.py`): 1 is as good as two independent "
    "trainings. Seed-scale rows and the GPU rows run once: their intervals hold the spread of "
    "steps within that run only. Compile time and final loss are the first run's. "
    + METHOD
    + ". Solver steps: forward steps per sample of the last stage's timed steps: the steps a "
    "batched loop executes (the per-device maximum; in `shard` one loop spans all devices, so "
    "the global batch's maximum) and the mean."
)


READ_HEADING = "#### How to read these tables"


def _devices_note(sel: list[Rec], cores: int | None) -> list[Block]:
    """The CPU table's note on its device counts against the machine's cores."""
    counts = sorted({r.n_devices for r in sel if r.status != "not_run"})
    if not (cores and counts):
        return []
    text = f"Devices in this table: {', '.join(map(str, counts))}, on a machine of {cores} "
    if max(counts) > cores:
        text += (
            f"physical cores: the whole matrix (`make full`). † more virtual devices than the "
            f"{cores} physical cores: those rows measure overhead, not parallel speedup."
        )
    else:
        text += (
            "physical cores: the matrix sized to the machine (`make all`); `make full` adds "
            "the rows with more virtual devices than cores."
        )
    return [Text(text)]


def device_table(
    rows: list[Rec], device: str, extra: Sequence[Block] = (), guide: bool = True
) -> list[Block]:
    """The tables of one device kind with ok rows: the reference's columns, our
    diagnostics (a **Session** column where the rows span several sessions), their
    machine, `extra`, then how to read them (`guide`; else a pointer to it)."""
    sel = [r for r in rows if r.device == device]
    cores = next((r.hardware.physical_cores for r in sel if r.hardware), None)
    found = list(dict.fromkeys(sessions.session_of(r) for r in sel))
    header: tuple[str, ...] = DIAGNOSTIC_COLUMNS
    cells = diagnostic_rows(sel, cores)
    if len(found) > 1:
        header = (*header, "Session")
        cells = [[*c, sessions.session_of(r).label] for c, r in zip(cells, sel, strict=True)]
    out: list[Block] = [
        Text(_esc(sessions.sessions_line(sel, sel))),
        Text("**The reference's columns.**"),
        Grid(REFERENCE_COLUMNS + ADDED_COLUMNS, tuple(table_rows(sel, cores))),
        Text("**Our diagnostics.**"),
        Grid(header, tuple(cells)),
        *(Text(n) for n in loss.notes(" ".join(c for row in cells for c in row))),
    ]
    line = machine_line(rows, device)
    out += [Text(line)] if line else []
    out += _devices_note(sel, cores) if device == "cpu" else []
    if any(r.status == "not_run" for r in sel):
        out.append(
            Text(
                "Rows marked `not_run` need devices this machine does not have; they run "
                "where JAX sees enough GPUs (`make gpu`)."
            )
        )
    if guide:
        return [*out, *extra, Text(READ_HEADING), Text(EPOCH_NOTE)]
    pointer = "How to read these tables: as the CPU table above (`docs/method.md`)."
    return [*out, *extra, Text(pointer)]


def elsewhere(results: str | Path, device: str, scale: str) -> str:
    """Where the `device` rows that exist are, per machine, when none of this scale is
    current."""
    found = []
    for at in dict.fromkeys((scale, "seed")):
        recs = [r for r in read_records(results, at, current=True) if r.device == device and r.ok]
        for m in sorted({str(r.machine_id) for r in recs}):
            mine = [r for r in recs if r.machine_id == m]
            found.append(
                f"{len(mine)} at the {_esc(at)} scale on `{_esc(m)}` (`results/{_esc(m)}/"
                f"{_esc(at)}/`, measurement protocol {_esc(_protocol(mine))})"
            )
    name = device.upper()
    if not found:
        return (
            f"No {name} row of the current protocol at the {_esc(scale)} scale, and none elsewhere."
        )
    return (
        f"No {name} row of the current protocol (`timing.PROTOCOL` {PROTOCOL}) at the "
        f"{_esc(scale)} scale. The {name} rows that exist: " + "; ".join(found) + "."
    )


def no_rows(rows: list[Rec], results: str | Path, device: str, scale: str) -> str:
    """The one line of a device kind without ok rows: why its rows did not run, and
    where that kind's rows that exist are."""
    sel = [r for r in rows if r.device == device]
    why = sorted({f"{r.status}: {r.error or 'no error recorded'}" for r in sel})
    text = elsewhere(results, device, scale)
    if why:
        text += f" The matrix's {len(sel)} {device.upper()} rows here: {_esc('; '.join(why))}."
    return text
