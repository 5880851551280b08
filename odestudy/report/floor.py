"""A step's ratio to its compute floor (`measure.floor`), from a levers record: the floor
of each row from the record's FLOPs, the row's executed solver steps and the device's
matmul rate at the step's shapes; and the fused solve along the map."""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..measure import vectors
from ..measure.controllers import CONTROLLERS
from ..measure.floor import floor_time
from ..measure.levers import ByHand, FastActivations, WideVectors
from ..measure.recommended import diffrax_levers, measured_problems, study_controllers
from ..measure.scenario import Scenario
from ..study import records
from ..study.rec import FloorCounts, LeverRecord, LeverRow
from ..study.studies import Block, Grid, Text
from ..study.workloads import MAP_FOLDER, WORKLOADS
from . import sessions
from .intervals import fmt_interval, ratio_interval
from .loss import in_record, pair_mark
from .roofline import ROOFLINE_TEXT, roofline_cells, roofline_said
from .tables import escape

# Where a levers record made elsewhere keeps its floor: beside it, `<name>.floor.json`
# (`benchmarks/floor.py`), for records written before levers.py counted it.
SIDECAR = ".floor.json"


def record_floor(rec: LeverRecord) -> FloorCounts | None:
    """The record's floor counts, or its sidecar's (`SIDECAR`), or None."""
    if rec.floor:
        return rec.floor
    path = rec.path
    if not path:
        return None
    counts = records.read_or(Path(path).with_suffix(SIDECAR))
    return None if counts is None else FloorCounts(counts)


def row_counts(rec: LeverRecord, row: LeverRow) -> FloorCounts | None:
    """What variant `row` must compute, counted on its own program (`row.floor`); in an
    older record, which counted the default's program once (`record_floor`), the default's
    row alone; else None (another program's count would flatter or wrong it)."""
    if row.floor:
        return row.floor
    return record_floor(rec) if not _set_levers(row.levers) else None


def _set_levers(levers: dict[str, Any] | None) -> dict[str, Any]:
    """`levers` without those at their default (`solve=per_sample` on an irregular grid):
    what makes a variant's program other than the default's."""
    return {k: v for k, v in (levers or {}).items() if not _at_default(k, v)}


def _floor_s(counts: FloorCounts, row: LeverRow, rate: float) -> float:
    """The floor of `row` at matmul rate `rate` (`measure.floor.floor_time`)."""
    reverse = row.solver_steps_reversed_max
    return floor_time(
        counts,
        float(row.solver_steps_max),  # type: ignore[arg-type]
        rate,
        None if reverse is None else float(reverse),
        counts.transcendentals_per_s,
    )


def row_floor_s(rec: LeverRecord, row: LeverRow) -> float | None:
    """The floor of one variant's step at the record's median rate, or None."""
    counts = row_counts(rec, row)
    if not counts or row.solver_steps_max is None:
        return None
    return _floor_s(counts, row, counts.matmul_flops_per_s)


def floor_ratio(
    rec: LeverRecord, row: LeverRow
) -> tuple[float, float, float] | tuple[None, None, None]:
    """The variant's step time over its floor with a 95% bootstrap interval over the steps
    and, where the record measured the rate in every round of blocks, the rounds' floors."""
    counts = row_counts(rec, row)
    if not counts or row.solver_steps_max is None:
        return None, None, None
    rounds = counts.matmul_flops_per_s_rounds or [counts.matmul_flops_per_s]
    floors = [_floor_s(counts, row, rate) for rate in rounds]
    return ratio_interval(row, {"step_times_runs_s": [floors]})


def ratio_cell(a: dict[str, Any], b: dict[str, Any]) -> str:
    """t(a) / t(b) with its 95% bootstrap interval, marked by the loss rule (`loss.flag`)."""
    return pair_mark(fmt_interval(*ratio_interval(a, b)), a, b)


def floor_cells(rec: LeverRecord, row: LeverRow) -> list[str]:
    """The floor (ms) and the ratio to it with its interval, as table cells."""
    floor = row_floor_s(rec, row)
    ratio, low, high = floor_ratio(rec, row)
    return [
        "–" if floor is None else f"{floor * 1e3:.2f}",
        fmt_interval(ratio, low, high, decimals=1),
    ]


FLOOR_TEXT = (
    "**Floor**: the arithmetic the step's executed solver steps must do (`measure/floor.py`): "
    "XLA's count of one field evaluation over the batch, forward and backward, times "
    "`6 n + 1` evaluations for `n` executed solver steps (the batch's slowest sample "
    "under `vmap`, the shared count within-ODE), its reverse pass charged for the steps "
    "it runs back through (where the fused solve's own reverse loop replays only the "
    "accepted ones, their count, in records made since it was counted; else every step "
    "taken), plus the rest of the step, at the rate "
    "the device's probe sustains on a loop of matmul-and-tanh at the step's batch and "
    "width: in records that measured it in every round of timed blocks, the median over "
    "the rounds (else one probe's). Records made since the floor's counts were split "
    "count each variant on its own program and charge its transcendentals (`exp`, "
    "`log1p`, `tanh`, which XLA counts apart from FLOPs) at their own probed rate; older "
    "records counted the default's program once, so only their default row has a floor "
    "(no other variant is set against another program's count), transcendentals not "
    "charged. **x floor**: "
    "the step's median over its floor, with the interval of the step's median and of "
    "those rounds' floors (else of the step's median alone); what lies above 1 is time "
    "its arithmetic does not account for (loop machinery, memory traffic, launches). "
    "Where a record counts them, the step table gives the kernels one step dispatches and "
    "its time per kernel beside it."
)

# The map's fused-solve variants (`make map-fused`), baseline first.
FUSED_VARIANTS = ("default", "recommended-diffrax", "recommended-fused")
# A variant's label in records made before the recommended step could be run by the
# fused solve: `recommended-diffrax` was `recommended` (its levers name no integrator).
_FORMER_LABELS = {"recommended-diffrax": "recommended"}


def map_lever_records(results: str | Path, machine: str, folder: str) -> list[LeverRecord]:
    """This machine's records in `results/map/<machine>/<folder>/`, in the map's order."""
    where = Path(results) / MAP_FOLDER / machine / folder
    paths = [where / f"{w.slug()}-{c}.json" for w in WORKLOADS for c in CONTROLLERS]
    return [LeverRecord(r, path=str(p)) for p, r in records.readable(paths)]


def held_elsewhere(results: str | Path, machine: str, folder: str) -> tuple[str, list[LeverRecord]]:
    """`(machine, its CPU records)`, else those of the CPU machine that holds the most."""
    found = [r for r in map_lever_records(results, machine, folder) if _on(r, "cpu")]
    if found:
        return machine, found
    others = _machines_with(results, folder)
    held = {m: [r for r in map_lever_records(results, m, folder) if _on(r, "cpu")] for m in others}
    best = max(held, key=lambda m: len(held[m]), default=machine)
    return best, held.get(best, [])


def _machines_with(results: str | Path, folder: str) -> list[str]:
    """The machines whose map has a `folder` of records, by name."""
    return sorted(p.parent.name for p in (Path(results) / MAP_FOLDER).glob(f"*/{folder}"))


def _on(rec: LeverRecord, device: str) -> bool:
    return rec.fields.get("device", "cpu") == device


def elsewhere_said(page_machine: str, machine: str) -> list[Block]:
    """That a section's records come from another machine than its page's, or nothing."""
    if machine == page_machine:
        return []
    return [Text(f"Measured on {machine}: {page_machine} holds no such records.")]


def fused_records(results: str | Path, machine: str) -> list[LeverRecord]:
    """This machine's `make map-fused` records, in the map's order."""
    return map_lever_records(results, machine, "fused")


def variant_row(rec: LeverRecord, label: str) -> LeverRow | None:
    """The row of variant `label` (or of its former label, where it runs no fused solve),
    with the record's machine and scenario (`loss.in_record`), or None."""
    row = next((r for r in rec.rows if r.label == label), None)
    former = _FORMER_LABELS.get(label)
    if row is None and former is not None:
        row = next((r for r in rec.rows if r.label == former), None)
        if row is not None and (row.levers or {}).get("integrator") == "fused":
            return None
    return None if row is None else in_record(rec, row)


def fused_adjoints(recs: Sequence[LeverRecord]) -> str:
    """The reverse modes the fused variant of `recs` ran (`adjoint=all_steps` under pid)."""
    seen: dict[str, set[str]] = {}
    for rec in recs:
        row = variant_row(rec, "recommended-fused")
        if row is not None:
            adjoint = str((row.levers or {}).get("adjoint"))
            seen.setdefault(adjoint, set()).add(str(rec.fields.controller))
    return ", ".join(
        f"`adjoint={escape(a)}` under {escape(', '.join(sorted(cs)))}" for a, cs in seen.items()
    )


def _at_default(name: str, value: Any) -> bool:
    """Whether `value` is scenario field `name`'s default (a lever left as it is)."""
    field = Scenario.__dataclass_fields__.get(name)
    return field is not None and field.default is not None and field.default == value


def older_step(recs: Sequence[LeverRecord]) -> str:
    """A sentence naming the levers where the records' recommended step differs from
    today's on their problem, controller and device (`diffrax_levers`); else ''."""
    lacking: set[str] = set()
    extra: set[str] = set()
    for rec in recs:
        row = variant_row(rec, "recommended-diffrax")
        if row is None:
            continue
        keys = ("controller", "problem", "width", "device")
        fields = {k: rec.fields[k] for k in keys if k in rec.fields}
        try:
            now = diffrax_levers(Scenario(**fields))
        except ValueError:  # a problem this process cannot make: nothing to compare
            continue
        then, now = _set_levers(row.levers), _set_levers(now)
        lacking |= {f"`{k}={v}`" for k, v in now.items() if then.get(k) != v}
        extra |= {f"`{k}={v}`" for k, v in then.items() if k not in now}
    parts = []
    if lacking:
        parts.append(f"without {', '.join(sorted(lacking))}, which today's takes")
    if extra:
        parts.append(f"with {', '.join(sorted(extra))}, which today's does not take")
    if not parts:
        return ""
    return (
        " Their recommended step is the one of their commit: "
        + "; ".join(parts)
        + " on some of these workloads."
    )


def _fused_cells(rec: LeverRecord) -> list[str]:
    """A `make map-fused` record's cells (`_FUSED_HEADER`)."""
    rows = [variant_row(rec, label) for label in FUSED_VARIANTS]
    cells = []
    for r in rows:
        if r is None:
            cells += ["–", "–"]
            continue
        # On a GPU the probe's loop is launch-bound: its floor is the roofline's alone.
        ratio = "–" if rec.fields.device == "gpu" else floor_cells(rec, r)[1]
        cells += [f"{r.step_time_s * 1e3:.2f}", ratio]
    default, recommended, fused = rows
    for base in (default, recommended):
        cells.append("–" if base is None or fused is None else ratio_cell(base, fused))
    cells.append(" / ".join("–" if r is None else f"{r.final_loss:.2g}" for r in rows))
    return cells


_FUSED_HEADER = (
    "Default (ms)",
    "Default x floor",
    "Recommended (ms)",
    "Recommended x floor",
    "Fused (ms)",
    "Fused x floor",
    "Fused over default",
    "Fused over recommended",
    "Final loss (default / recommended / fused)",
)


def map_grid(
    recs: Sequence[LeverRecord], header: Sequence[str], cells: Callable[[LeverRecord], list[str]]
) -> Grid:
    """A row per map record: its workload and controller, then its `cells` under `header`."""
    body = tuple([rec.workload, rec.fields.controller, *cells(rec)] for rec in recs)
    return Grid(("Workload", "Controller", *header), tuple([escape(c) for c in r] for r in body))


def fused_machines(results: str | Path, device: str, first: str = "") -> list[str]:
    """The machines with `make map-fused` records made on `device`, by name, `first` first."""
    found = _machines_with(results, "fused")
    held = [m for m in found if any(_on(r, device) for r in fused_records(results, m))]
    return sorted(held, key=lambda m: m != first)


def _not_measured(recs: Sequence[LeverRecord]) -> str:
    """ " Not measured there: ..." naming the workloads and controllers `recs` lack."""
    done = {(r.workload, r.fields.controller) for r in recs}
    missing = [f"{w.name} {c}" for w in WORKLOADS for c in CONTROLLERS if (w.name, c) not in done]
    return f" Not measured there: {escape(', '.join(missing))}." if missing else ""


def fused_section(results: str | Path, machine: str) -> list[Block]:
    """`workloads.md`'s section on the fused solve along the map: per CPU machine, then GPU."""
    cpu: list[Block] = []
    for held in fused_machines(results, "cpu", machine):
        recs = [r for r in fused_records(results, held) if _on(r, "cpu")]
        said = escape(sessions.sessions_line(recs, recs)) + _not_measured(recs) + older_step(recs)
        table = map_grid(recs, _FUSED_HEADER, _fused_cells)
        cpu += [Text(f"### On {escape(held)}"), Text(said), table]
    about = Text(
        "Per workload and controller, 1 device, each variant trained from scratch and "
        "timed from the default's trained state in interleaved blocks (`make map-fused`, "
        "`benchmarks/levers.py`): the default step, the recommended step "
        "(`odestudy/measure/recommended.py`) and the recommended step run by the fused "
        "solve (`integrator=fused`, `odestudy/measure/fused.py`: Tsit5 and the "
        "controller as one loop carrying only what a step needs). Speedups with 95% "
        "bootstrap intervals over blocks and steps; a mark where the final losses differ "
        "by more than the loss spread. " + FLOOR_TEXT
    )
    return [
        Text("## The fused solve along the map, and each step's ratio to its floor"),
        about if cpu else Text("No records yet: run `make map-fused`."),
        *cpu,
        *gpu_fused_section(results),
    ]


def gpu_fused_section(results: str | Path) -> list[Block]:
    """The fused solve along the map, a table per GPU measured."""
    parts: list[Block] = []
    for machine in fused_machines(results, "gpu"):
        recs = fused_records(results, machine)
        kinds = {str(r.probe.device_kind) for r in recs}
        head = (
            f"### On one GPU: {escape(machine)} ({escape(', '.join(sorted(kinds)))}), JAX "
            f"{escape(recs[0].versions.get('jax'))}"
        )
        said = (
            "Measured as above (`benchmarks/gpu_session.sh mapfused`). "
            f"{escape(sessions.sessions_line(recs, recs))} On a GPU the probe's "
            "matmul-and-tanh loop at these small shapes is bound by kernel launches, so "
            "no step is set against it (x floor: –); a GPU's floor is its roofline, "
            "which the GPU tables of the quick page set each step against."
            + _not_measured(recs)
            + older_step(recs)
        )
        parts += [Text(head), Text(said), map_grid(recs, _FUSED_HEADER, _fused_cells)]
    return parts


def gpu_lever_records(results: str | Path) -> list[LeverRecord]:
    """Every machine's GPU levers records."""
    return [
        LeverRecord(records.read_json(p), path=str(p))
        for p in records.every_machines(results, "levers", "gpu-*.json")
        if not p.name.endswith(SIDECAR)
    ]


def gpu_lever_section(results: str | Path) -> list[Block]:
    """The step page's section on the GPU levers records."""
    recs = gpu_lever_records(results)
    head = Text("## On a GPU")
    if not recs:
        return [head, Text("No GPU levers records (`benchmarks/gpu_session.sh levers`).")]
    said = Text(
        "The PID step's levers on one GPU (`benchmarks/gpu_session.sh levers`), at the "
        "quick scale and at the reference's configuration (the seed scale: 3 length "
        "stages of 1000 steps), measured as on the CPU (each variant trained from "
        "scratch, timed from the default's trained state in interleaved blocks). "
        "`+cmdbuf`: XLA's command buffers with while loops. On a GPU the floor is the "
        "device's roofline: the probe's matmul-and-tanh loop at the step's small shapes "
        "is bound by kernel launches, so a floor from its rate would be that of launches, "
        "not of arithmetic, and is not shown. The step's FLOPs are counted as for the "
        "CPU's floor (above: each variant on its own program in records that count so; "
        "older records the default's alone, so their other rows have no roofline). " + ROOFLINE_TEXT
    )
    return [head, said, *(b for rec in recs for b in _gpu_lever_table(rec))]


_GPU_COLUMNS = (
    "Variant",
    "Step (ms)",
    "Speedup [95% CI]",
    "Roofline (us)",
    "x roofline [95% CI]",
    "Final loss",
)


def _gpu_lever_table(rec: LeverRecord) -> list[Block]:
    """One GPU levers record's heading and table."""
    base = rec.rows[0]
    body = tuple(
        [
            escape(r.label),
            f"{r.step_time_s * 1e3:.2f}",
            escape(pair_mark(fmt_interval(*ratio_interval(base, r)), in_record(rec, r), base)),
            *roofline_cells(rec, r, row_counts(rec, r)),
            f"{r.final_loss:.2g}",
        ]
        for r in rec.rows
    )
    commit = str(rec.git_commit or "")[:7]
    tree = (record_floor(rec) or FloorCounts()).tree_commit
    if tree:  # the device copy's git metadata named another commit
        commit = f"{str(tree)[:7]}; the record's git_commit reads {commit}"
    head = (
        f"### {escape(rec.fields.scale)} scale: {escape(rec.machine_id)}, "
        f"{escape(rec.probe.device_kind)}, JAX "
        f"{escape(rec.versions.get('jax'))}, session {escape(rec.started)} "
        f"(commit {escape(commit)})"
    )
    return [Text(head), Grid(_GPU_COLUMNS, body), Text(roofline_said(rec))]


def fused_run() -> str:
    """How the fused solve runs the recommended step, for the pages and the README."""
    adjoints = [
        f"`adjoint={c.fused_adjoint}` under {c.name}"
        for c in CONTROLLERS.values()
        if c.fused and c.fused_adjoint is not None
    ]
    return f"the fused solve (`integrator=fused`, {', '.join(adjoints)}; saving and stages its own)"


def recommended_made_of() -> str:
    """What the recommended step is made of, for the pages and the README."""
    made_of = "; ".join(
        f"{c}: " + (", ".join(f"`{k}={v}`" for k, v in levers.items()) or "the default")
        for c, levers in study_controllers().items()
    )

    def which(lever: str) -> str:
        return ", ".join(f"`{name}`" for name in measured_problems(lever)) or "none"

    def on(devices: tuple[str, ...] | None) -> str:
        return ", ".join(f"`{d}`" for d in sorted(devices or ("cpu", "gpu")))

    return (
        f"per controller, {made_of}; run by {fused_run()} on the problems where the study "
        f"measured it faster (`data/measured_steps.json`: {which('fused')}), with the "
        "model's activation functions by their faster equivalents (`fast_activations=True`, "
        "`measure/activations.py`) on the problems so measured "
        f"({which('fast_activations')}) and the devices where they were measured faster "
        f"({on(FastActivations.faster_on)}), and under PID each "
        "step of the fused solve's own reverse loop differentiated by hand for a field "
        "that is an MLP of the state (`mlp_reverse=True`, `measure/mlp_reverse.py`) on "
        f"the problems so measured ({which('mlp_reverse')}) and the devices where it was "
        f"measured faster ({on(ByHand.faster_on)}), that step compiled with "
        f"{vectors.RECOMMENDED_WIDTH}-bit "
        f"vectors (`vector_width={vectors.RECOMMENDED_WIDTH}`, `measure/vectors.py`) on "
        f"the devices where it was measured faster so ({on(WideVectors.faster_on)})"
    )
