"""The workload map's page and figure (`make map`): each mode's 2-device speedup against
the 1-device time per solver iteration, where the ranking of modes changes, and the
prediction (`odestudy predict --map`) checked against the measured rows."""

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..measure.controllers import CONTROLLERS, PID
from ..measure.modes import MODES
from ..measure.recommended import recommended
from ..measure.scenario import Scenario
from ..study import records
from ..study.claim import Claim
from ..study.rec import LeverRecord, Prediction, Rec
from ..study.studies import Grid, Table, Text
from ..study.workloads import (
    MAP_DEVICES,
    MAP_FOLDER,
    MULTI_MODES,
    map_scenarios,
    workload_of,
)
from . import sessions
from .best import Best, best_for, best_steps, over_best
from .comparisons import BEST_STEP, ratio_claim
from .floor import (
    FUSED_VARIANTS,
    floor_ratio,
    fused_adjoints,
    fused_machines,
    fused_records,
    fused_section,
    older_step,
    recommended_made_of,
    variant_row,
)
from .frames import read_records
from .heldout import (
    Checked,
    checked,
    choice_records,
    held_out_said,
    made_before,
    recommended_again,
    said,
)
from .intervals import METHOD, fmt_interval, ratio_interval
from .loss import differs, pair_mark, trained
from .map_levers import (
    MAP_LEVERS,
    lever_section,
    lever_speedups,
    lever_summary,
    ratio_range,
    separated,
)
from .plots import MODE_STYLE, _save
from .runs import merged
from .tables import escape, loss_cell, markdown_table

T = TypeVar("T")

# The prediction passes where its median |error| over a mode's rows is at most this.
PREDICTION_LIMIT = 0.25


def step_of(rec: Mapping[str, Any]) -> str:
    """`"recommended"` where the scenario is its own recommended form, else `"default"`."""
    s = Scenario.from_dict(rec["scenario"])
    return "recommended" if recommended(s.default_step()) == s else "default"


def map_records(results: str | Path, scale: str = "quick") -> list[Rec]:
    """The current map's records at `scale` of the machine with the most ok rows; a
    scenario measured twice in one session counts once with all its runs (`runs.merged`)."""
    folder = Path(results) / MAP_FOLDER
    recs = folder_records([folder], scale)
    if not recs:
        return []
    machine = busiest([r.machine_id for r in recs if r.ok] or [recs[0].machine_id])
    mine = sessions.reassigned([r for r in recs if r.machine_id == machine])
    earlier = sessions.reassigned(folder_records(records.replaced_folders(folder), scale, machine))

    def same(r: Rec) -> list[Rec]:
        return [e for e in earlier if (e.scenario_key, e.session) == (r.scenario_key, r.session)]

    return [merged([*same(r), r])[0] for r in mine]


def folder_records(
    folders: Sequence[Path],
    scale: str,
    machine: str | None = None,
    keys: Collection[str] | None = None,
) -> list[Rec]:
    """The records at `scale` in `folders` of the scenarios `keys` (None: the map's), of
    `machine` if given."""
    if keys is None:
        keys = {s.key() for s in map_scenarios(scale)}
    found = [r for f in folders for r in read_records(f, scale, current=False)]
    mine = [r for r in found if machine is None or r.machine_id == machine]
    return [r for r in mine if r.scenario_key in keys]


def busiest(machines: list[Any]) -> Any:
    """The machine named most often in `machines` (the first by name on a tie)."""
    return max(sorted(set(machines)), key=machines.count)


def per_iteration_s(rec: Rec) -> float | None:
    """A 1-device record's step time over its executed solver iterations."""
    executed = rec.solver_steps.executed_per_device
    if not rec.ok or not executed:
        return None
    return float(rec.step_time_s) / float(executed)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class MapRow:
    """One record of the map: its 1-device default row (`base`) with that row's time per
    solver iteration (the workload's cost), and its speedups `(estimate, low, high)` over
    `base` and over the best 1-device step (`best`); None where failed or untrained."""

    workload: str
    controller: str
    step: str
    mode: str
    n_devices: int
    status: str
    record: Rec
    base: Rec | None
    per_iteration_s: float | None
    speedup: tuple[float, float, float] | None
    best: Best | None
    speedup_best: tuple[float, float, float] | None


def map_rows(recs: Sequence[Rec]) -> list[MapRow]:
    """One row per record of the map (`MapRow`)."""
    base = {}
    for r in recs:
        w = workload_of(r.fields)
        if w and r.n_devices == 1 and step_of(r) == "default":
            base[(w.name, r.controller)] = r
    bests = best_steps(recs)
    out = []
    for r in recs:
        w = workload_of(r.fields)
        if w is None or r.global_batch != w.scenario(scale=r.scale, controller=r.controller).batch:
            continue  # the 1-device rows at the per-device batch: the batch axis's page
        b = base.get((w.name, r.controller))
        best = best_for(r, bests, "strong")
        over = over_best(r, best, "strong") if best and r.n_devices > 1 else None
        speedup = None
        if b is not None and r is not b and _ok(r) and _ok(b):
            speedup = ratio_interval(b, r)
        out.append(
            MapRow(
                workload=w.name,
                controller=r.controller,
                step=step_of(r),
                mode=r.mode,
                n_devices=r.n_devices,
                status=r.status,  # type: ignore[arg-type]
                record=r,
                base=b,
                per_iteration_s=per_iteration_s(b) if b else None,
                speedup=speedup,
                best=best,
                speedup_best=over.speedup if over else None,
            )
        )
    order = {w: i for i, w in enumerate(_workload_order(out))}
    modes = ("single", *MULTI_MODES)

    def place(x: MapRow) -> tuple[int, str, bool, int]:
        return order[x.workload], x.controller, x.step != "default", modes.index(x.mode)

    return sorted(out, key=place)


def _ok(r: Rec) -> bool:
    return r.ok and trained(r)


def _workload_order(rows: Sequence[MapRow]) -> list[str]:
    """Workloads from the lightest to the heaviest (PID's time per solver iteration)."""
    cost: dict[str, float] = {}
    for r in rows:
        if r.per_iteration_s is not None and r.controller == PID.name:
            cost[r.workload] = r.per_iteration_s
    names = list(dict.fromkeys(r.workload for r in rows))
    return sorted(names, key=lambda n: cost.get(n, float("inf")))


def _ratio_cell(
    r: MapRow, speedup: tuple[float, float, float] | None, base: Rec | None, same: str
) -> str:
    """A row's speedup over `base`, flagged; `same` where the row is `base`."""
    if r.record is base:
        return same
    if speedup is None:
        return "untrained: no speedup"
    return pair_mark(fmt_interval(*speedup), r.record, base)


def _speedup_cell(r: MapRow) -> str:
    if r.status != "ok":
        return escape(r.status)
    return _ratio_cell(r, r.speedup, r.base, "1 (baseline)")


def _best_cell(r: MapRow) -> str:
    """A row's speedup over its best 1-device step (the best step itself says so)."""
    if r.best is None or r.status != "ok":
        return "–"
    return _ratio_cell(r, r.speedup_best, r.best.record, f"1 (the best: {escape(r.best.said())})")


def on_best(rows: Sequence[MapRow]) -> list[tuple[str, str, Best, list[MapRow | None]]]:
    """Per workload and controller: its best 1-device step and, per multi-device mode, its
    row on that step with a speedup over it (or None): the map's answer."""
    out = []
    for name in _workload_order(rows):
        for controller in CONTROLLERS:
            mine = [r for r in rows if r.workload == name and r.controller == controller]
            best = next((r.best for r in mine if r.best is not None), None)
            if best is None:
                continue
            step = step_of(best.record)
            found = [r for r in mine if r.speedup_best is not None and step_of(r.record) == step]
            by_mode = [next((r for r in found if r.mode == m), None) for m in MULTI_MODES]
            out.append((name, controller, best, by_mode))
    return out


def best_table(rows: Sequence[MapRow]) -> Grid:
    """The map's answer (`on_best`) as a table."""
    body = tuple(
        (escape(name), escape(controller), escape(best.said()),
         *(_best_cell(r) if r else "–" for r in by_mode))
        for name, controller, best, by_mode in on_best(rows)
    )  # fmt: skip
    return Grid(("Workload", "Controller", "Best 1-device step", *MULTI_MODES), body)


# Where the map states its claims (`Claim.where`).
MAP_WHERE = "the workload map (workloads.md)"


def map_claims(results: str | Path, scale: str) -> list[Claim]:
    """The cells of `best_table` as claims."""
    found = []
    for _, _, best, by_mode in on_best(rows_of(results, scale)[1]):
        b = best.record
        found += [
            ratio_claim(r.record, b, BEST_STEP, r.speedup_best, MAP_WHERE, differs(r.record, b))
            for r in by_mode
            if r is not None and r.speedup_best is not None and r.record is not b
        ]
    return found


def derived_once(
    read: Callable[[str | Path, str], list[Rec]],
    derive: Callable[[list[Rec]], list[T]],
    results: str | Path,
    scale: str,
) -> tuple[list[Rec], list[T]]:
    """`read(results, scale)`'s records and `derive` of them, made once per report."""

    def make() -> tuple[list[Rec], list[T]]:
        recs = read(results, scale)
        return recs, derive(recs)

    return records.made_once((read, derive, os.path.abspath(results), scale), make)


def rows_of(results: str | Path, scale: str) -> tuple[list[Rec], list[MapRow]]:
    """The map's records at `scale` and their rows, made once per report."""
    return derived_once(map_records, map_rows, results, scale)


def workloads_table(rows: Sequence[MapRow]) -> str:
    """The map's rows as markdown."""
    body = []
    for r in rows:
        rec = r.record
        ok = rec.ok
        body.append(
            [
                escape(r.workload),
                escape(r.controller),
                r.step,
                escape(r.mode),
                str(r.n_devices),
                f"{r.per_iteration_s * 1e3:.3f}" if r.per_iteration_s else "–",
                f"{rec.step_time_s * 1e3:.2f}" if ok else "–",  # type: ignore[operator]
                _speedup_cell(r),
                _best_cell(r),
                loss_cell(rec) if ok else "–",
                str(len(rec.step_time_runs_s or [])) if ok else "0",
            ]
        )
    return markdown_table(
        (
            "Workload",
            "Controller",
            "Step",
            "Mode",
            "Devices",
            "1-device ms per solver iteration",
            "Step time (ms)",
            "Speedup over the default 1-device step (the reference's) [95%]",
            "Speedup over the best 1-device step [95%]",
            "Final loss",
            "Runs",
        ),
        body,
    )


def _find(rows: Sequence[MapRow], *key: str | None) -> MapRow | None:
    """The row of `key`: workload, controller, step and mode."""
    return next((r for r in rows if (r.workload, r.controller, r.step, r.mode) == key), None)


# The modes `shard` is set against along the map: those with a solver loop per device
# (`AbstractMode.one_loop` False); one with one loop, as `explicit`, is only a row.
RIVALS = tuple(m for m in MULTI_MODES if not MODES[m].one_loop)


def _below(rows: Sequence[MapRow], workload: str, controller: str) -> list[str] | None:
    """The `RIVALS` whose speedup lies wholly above `shard`'s (None where a row is missing)."""
    found = [_find(rows, workload, controller, "default", m) for m in ("shard", *RIVALS)]
    speedups = [r.speedup for r in found if r is not None and r.speedup is not None]
    if len(speedups) < len(found):
        return None
    high = speedups[0][2]
    return [m for m, s in zip(RIVALS, speedups[1:], strict=True) if s[1] > high]


def _slowest(rows: Sequence[MapRow], workload: str, controller: str) -> bool | None:
    """Whether `shard`'s speedup lies below every rival's (None where a row is missing)."""
    below = _below(rows, workload, controller)
    return None if below is None else len(below) == len(RIVALS)


def _change(rows: Sequence[MapRow], a: str, b: str, slow_at_a: bool, controller: str) -> str:
    """Where `shard` stops (or starts) being the slow mode between workloads `a` and
    `b`, and where it is still below one of the other modes."""
    between = f"between {_label(rows, a, controller)} and {_label(rows, b, controller)}"
    still = _below(rows, b if slow_at_a else a, controller) or []
    verb = "stops" if slow_at_a else "starts"
    if not still:
        return f"{verb} being the slow mode {between}"
    modes = ", ".join(f"`{m}`" for m in still)
    return (
        f"{verb} being below both other modes {between} (still below {modes} "
        f"{'there' if slow_at_a else 'before'}: not separable from the other mode only)"
    )


def _cost(rows: Sequence[MapRow], name: str, controller: str) -> float | None:
    """A workload's cost: its 1-device default step's time per solver iteration."""
    r = _find(rows, name, controller, "default", "single")
    return r.per_iteration_s if r else None


def _label(rows: Sequence[MapRow], name: str, controller: str) -> str:
    """A workload's name with its cost (ms per solver iteration)."""
    cost = _cost(rows, name, controller)
    return escape(name) + (f" ({cost * 1e3:.2f} ms per solver iteration)" if cost else "")


def crossover(rows: Sequence[MapRow], controller: str) -> str:
    """Along the workloads, lightest first: where `shard` stops being the slow mode, and
    where the recommended step's worth at 1 device changes sign."""
    names = _workload_order(rows)
    known = [(n, s) for n in names if (s := _slowest(rows, n, controller)) is not None]
    if not known:
        return f"{controller}: no workload has all three modes measured and trained."
    if all(s for _, s in known):
        shard = "`shard` is the slow mode at every measured workload"
    elif not any(s for _, s in known):
        shard = "`shard` is not the slow mode at any measured workload"
    else:
        changes = [
            _change(rows, a, b, bool(sa), controller)
            for (a, sa), (b, sb) in zip(known, known[1:], strict=False)
            if sa != sb
        ]
        shard = "`shard` " + ", then ".join(changes)
    worth = []
    for n in names:
        r = _find(rows, n, controller, "recommended", "single")
        if r is None or r.speedup is None or r.base is None:
            continue
        est, low, high = r.speedup
        verdict = "faster" if low > 1 else "slower" if high < 1 else "level"
        ratio = pair_mark(f"{fmt_interval(est, low, high)}x", r.record, r.base)
        worth.append(f"{_label(rows, n, controller)} {verdict} ({ratio})")
    rec = "; the recommended step at 1 device: " + ", ".join(worth) if worth else ""
    return f"{controller}: {shard}{rec}."


def map_time_line(recs: Sequence[dict[str, Any]], found: Sequence[dict[str, Any]]) -> str:
    """How long the map took to measure, where its rows and predictions are one session."""
    timed = [(r, w) for r in [*recs, *found] if (w := sessions.window(r)) is not None]
    if not timed:
        return ""
    n = len(set(sessions.assign([r for r, _ in timed])))
    if n > 1:
        return f"The map's rows and predictions span {n} sessions: no one `make map` time to give."
    start, end = min(w[0] for _, w in timed), max(w[1] for _, w in timed)
    minutes = (end - start).total_seconds() / 60
    return (
        f"`make map` measured its {len(recs)} rows and {len(found)} predictions here in "
        f"{minutes:.0f} min ({start:%H:%M}–{end:%H:%M} UTC; the report after them not "
        "included)."
    )


def predictions(
    results: str | Path, machine: str, profile: str | None = None, earlier: bool = False
) -> list[Prediction]:
    """The map's predictions of `machine` from the session's probe (`profile` None) or a
    named profile; with `earlier`, those replaced too (`records.EARLIER`)."""
    found = read_predictions(Path(results) / MAP_FOLDER / machine, earlier)
    return [p for p in found if p.made_from.profile == profile]


def read_predictions(folder: str | Path, earlier: bool = True) -> list[Prediction]:
    """The predictions in a machine's `folder` (`predict`); with `earlier`, those each
    replaced too (`records.EARLIER`)."""
    studies = ("predict", f"predict/{records.EARLIER}") if earlier else ("predict",)
    paths = [p for study in studies for p in records.side_study_paths(folder, study)]
    return [Prediction(records.read_json(p), path=str(p)) for p in paths]


def prediction_errors(rows: Sequence[MapRow], found: Sequence[Prediction]) -> list[Checked]:
    """Each prediction's row against its measured 2-device row, where both trained."""
    out = []
    for p in found:
        controller = p.fields.controller
        step = step_of({"scenario": p.fields})
        for pr in p.rows:
            r = _find(rows, p.workload, controller, step, pr.mode)
            if r is None or r.speedup is None or r.n_devices != p.n_devices:
                continue  # a failed or untrained row, or another device count
            # A row measured again in its session is checked against its last runs alone,
            # which a prediction may precede where the earlier runs do not.
            out.append(checked(p, pr, r.record.newest or r.record))
    return out


# A session and its rows' errors against the predictions made before them.
SessionErrors = tuple[sessions.Session, list[Checked]]


def session_errors(
    results: str | Path, machine: str, scale: str, profile: str | None = None
) -> list[SessionErrors]:
    """Per session of the map's 2-device rows (those measured again included), oldest
    first: each trained row against the newest prediction of kind `profile` before it."""
    folder = Path(results) / MAP_FOLDER
    recs = folder_records([folder, *records.replaced_folders(folder)], scale, machine)
    found = sorted(predictions(results, machine, profile, True), key=lambda p: str(p.finished))
    steps = [step_of({"scenario": p.fields}) for p in found]
    by_session: dict[sessions.Session, list[Rec]] = {}
    for r in sessions.reassigned(recs):
        by_session.setdefault(r.session, []).append(r)
    out = []
    for session, group in by_session.items():
        unique = {(r.scenario_key, r.started): r for r in group}  # a copy kept twice
        rows = [r for r in map_rows(merged(list(unique.values()))) if r.n_devices > 1]
        checked = [_newest_before(r, found, steps) for r in rows if _ok(r.record)]
        errors = [e for e in checked if e is not None]
        if errors:
            out.append((session, errors))
    return sorted(out, key=lambda x: str(x[0].start))


def _newest_before(r: MapRow, found: Sequence[Prediction], steps: Sequence[str]) -> Checked | None:
    """Row `r` against the newest of `found` (oldest first; `steps` their steps) of its
    workload, controller, step and device count made before it; None without one."""
    rec = r.record.newest or r.record
    chosen = None
    for p, step in zip(found, steps, strict=True):
        same = (p.workload, p.fields.controller, step, p.n_devices)
        if same == (r.workload, r.controller, r.step, r.n_devices) and made_before(p, [rec]):
            chosen = p
    pr = next((x for x in chosen.rows if x.mode == r.mode), None) if chosen else None
    return None if chosen is None or pr is None else checked(chosen, pr, rec)


def session_lines(checked: Sequence[SessionErrors]) -> str:
    """Per session, each mode's median |error| (`session_errors`), as lines."""
    if not checked:
        return ""
    lines = [
        f"- {escape(session.label)}: {_per_mode(errors)} ({said(errors)})."
        for session, errors in checked
    ]
    return (
        "Session by session (each trained 2-device row against the newest prediction of "
        "this kind made before it, the ones made again since included):\n" + "\n".join(lines)
    )


def _wrong_term(errors: Sequence[Checked], mode: str) -> str:
    """Which term of the prediction would have to change, and by how much, to fit the
    rows of `mode`: the in-loop collectives of a one-loop mode, else the lock-step compute."""
    one_loop = (found := MODES.get(mode)) is not None and found.one_loop
    term = "in_loop_s" if one_loop else "compute_s"
    factors = []
    for e in errors:
        missing = e.measured_s - e.predicted_s
        if e[term] > 0:
            factors.append((e[term] + missing) / e[term])
    sign = "high" if np.median([e.error for e in errors]) > 0 else "low"
    what = (
        f"the collectives in `{escape(mode)}`'s solver loop (meetings per iteration x "
        "iterations x the cost the prediction's model charges a meeting)"
        if one_loop
        else "the lock-step compute (1-device cost per iteration at the per-device batch "
        "x the global batch's iterations)"
    )
    if not factors:
        return f"too {sign}; {what} is zero, so another term is wrong"
    return (
        f"too {sign}; to fit, {what} would have to be x{np.median(factors):.2f} "
        "(median over its rows, the other terms held)"
    )


def _predictions_line(found: Sequence[Prediction]) -> str:
    """When and from what the map's predictions were made."""
    if not found:
        return "No prediction of the map yet (`odestudy predict --map`)."
    times = sorted(str(p.finished) for p in found)
    models = sorted({str(p.made_from.get("model", 1)) for p in found})
    return (
        f"{len(found)} predictions (`odestudy predict --map`, {MAP_DEVICES} devices, "
        f"prediction model {', '.join(models)}), made {escape(times[0])} to "
        f"{escape(times[-1])} from the map's trained 1-device rows; each mode's rows "
        "are the measured 2-device default rows of the table above."
    )


# The profile the map's extrapolation is checked from: this machine's recorded probes.
EXTRAPOLATION_PROFILE = "cpu"
# The kinds of map prediction: from the session's probe (None) and from the profile.
PREDICTION_KINDS: tuple[str | None, ...] = (None, EXTRAPOLATION_PROFILE)


def extrapolation_section(
    rows: Sequence[MapRow], found: Sequence[Prediction], by_session: Sequence[SessionErrors]
) -> list[Text | Grid]:
    """The map's predictions from a profile (`--profile cpu`) against the same rows."""
    head = Text(f"## The prediction from the `{EXTRAPOLATION_PROFILE}` profile")
    if not found:
        return [head, Text("No such prediction of the map yet "
                f"(`odestudy predict --map --profile {EXTRAPOLATION_PROFILE}`).")]  # fmt: skip
    errors = prediction_errors(rows, found)
    times = sorted(str(p.finished) for p in found)
    said = (
        f"{len(found)} predictions made {escape(times[0])} to {escape(times[-1])} from the "
        "map's trained 1-device rows, each collective cost it does not time here taken from "
        "this machine's recorded probes (median over sessions, range their spread); on "
        f"these CPU devices it still times, on the {MAP_DEVICES} devices, a device's "
        "neighbours, the gradient all-reduce (model 10 on) and a loop meeting (model 12 "
        "on), as the probed prediction does; the rows are the "
        "measured 2-device default rows above. Where these times fall outside the rows' "
        "session, the predictions' 1-device sweeps are of another session than the rows, "
        "and their errors include the machine's drift between the two."
    )
    return [head, Text(said), *_checked(errors, by_session, "No measured row to check.")]


def _checked(
    errors: Sequence[Checked], by_session: Sequence[SessionErrors], none: str
) -> list[Text | Grid]:
    """Each mode's check (`validation_lines`), session by session, then the table of `errors`."""
    per_session = session_lines(by_session)
    return [
        Text("\n".join(validation_lines(errors))),
        *([Text(per_session)] if per_session else []),
        errors_table(errors) if errors else Text(none),
    ]


def _by_mode(errors: Sequence[Any]) -> dict[str, list[Any]]:
    """`errors` of each multi-device mode that has any."""
    found = {m: [e for e in errors if e.mode == m] for m in MULTI_MODES}
    return {m: mine for m, mine in found.items() if mine}


def _median_error(errors: Sequence[Any]) -> float:
    """The median |error| of `errors`."""
    return float(np.median([abs(e.error) for e in errors]))


def validation_lines(errors: Sequence[Checked]) -> list[str]:
    """Per mode, its median |error| and, past `PREDICTION_LIMIT`, which term is wrong."""
    lines = []
    found = _by_mode(errors)
    for mode in MULTI_MODES:
        mine = found.get(mode)
        if not mine:
            lines.append(f"- `{mode}`: no prediction checked (no prediction or no row).")
            continue
        median = _median_error(mine) * 100
        line = f"- `{mode}`: median |error| = {median:.0f} % over {len(mine)} rows ({said(mine)})"
        if median > PREDICTION_LIMIT * 100:
            line += f" (above {PREDICTION_LIMIT * 100:.0f} %: {_wrong_term(mine, mode)})"
        lines.append(line + ".")
    return lines


def errors_table(errors: Sequence[Checked]) -> Grid:
    """Predicted against measured, one row per workload, controller and mode."""
    body = [
        [
            escape(e.workload),
            escape(e.controller),
            escape(e.mode),
            f"{e.predicted_s * 1e3:.2f}",
            f"{e.measured_s * 1e3:.2f}",
            f"{e.error * 100:+.0f} %",
            f"{e.compute_s * 1e3:.2f} / {e.allreduce_s * 1e3:.3f} / {e.in_loop_s * 1e3:.2f}",
        ]
        for e in errors
    ]
    return Grid(
        ("Workload", "Controller", "Mode", "Predicted (ms)", "Measured (ms)", "Error",
         "Terms (ms): compute / all-reduce / in-loop"),
        tuple(body),
    )  # fmt: skip


def workloads_body(
    results: str | Path, scale: str = "quick"
) -> tuple[tuple[Text | Grid, ...], list[MapRow]]:
    """`workloads.md`'s blocks, and the rows (for the figure)."""
    recs, rows = rows_of(results, scale)
    if not recs:
        said = "No records of the workload map yet: run `make map` (records under results/map/)."
        return (Text(said),), []
    machine = str(recs[0].machine_id)
    predicted = {k: predictions(results, machine, k) for k in PREDICTION_KINDS}
    found = predicted[None]
    errors = prediction_errors(rows, found)
    hardware = recs[0].hardware
    intro = (
        f"Machine {escape(machine)} ({escape(hardware.cpu_model)}, "
        f"{escape(hardware.physical_cores)} physical cores); "
        + sessions.sessions_line([r for r in recs if r.ok], recs)
        + f" {MAP_DEVICES} devices are virtual CPU devices, one per physical core. "
        f"Strong scaling, global batch {escape(recs[0].global_batch)}. {METHOD}."
    )
    best = (
        f"Each mode's speedup on {MAP_DEVICES} devices over the best 1-device step of the "
        "same workload, controller and global batch (the fastest measured 1-device step "
        "that trains the default's model, `odestudy/report/best.py`), with its step and "
        "time; the step run on the devices is that step. Where along the work this changes: "
        "[when splitting pays](crossover.md)."
    )
    levers = [b for lever in MAP_LEVERS for b in lever_section(results, machine, lever)]
    by_session = {k: session_errors(results, machine, scale, k) for k in PREDICTION_KINDS}
    body = (
        Text(intro),
        Text(map_time_line(recs, found)),
        Text("## Summary"),
        Text("\n".join(summary_lines(results, machine, rows, predicted, by_session))),
        Text("## Against the best 1-device step"),
        Text(best),
        best_table(rows),
        Text("## Where the answer changes, over the default step"),
        Text("\n".join(f"- {crossover(rows, c)}" for c in CONTROLLERS)),
        Text("## Rows"),
        # The rows' table runs into the next heading, as the page has it.
        Text(
            workloads_table(rows)
            + "\n## The prediction (`odestudy predict`) against the measured rows"
        ),
        Text(_predictions_line(found)),
        *_checked(errors, by_session[None], "No prediction of the map yet."),
        *other_machines_section(results, machine, scale),
        *extrapolation_section(
            rows, predicted[EXTRAPOLATION_PROFILE], by_session[EXTRAPOLATION_PROFILE]
        ),
        *levers,
        *fused_section(results, machine),
        Text(""),  # the file ends with a blank line
    )
    return body, rows


def other_machines_section(results: str | Path, machine: str, scale: str) -> list[Text]:
    """The probed prediction's check, session by session, on each machine of the map's
    folder other than the page's `machine` (whose rows the page shows): a heading and
    its lines per machine with a checked row; none without one."""
    out = []
    for other in records.subfolders(Path(results) / MAP_FOLDER):
        if other.name == machine or other.name == records.REPLACED:
            continue  # the page's own check is above; replaced rows are read with theirs
        if checked := session_errors(results, other.name, scale, None):
            where = f"Its rows are not this page's: the results' `{MAP_FOLDER}/{other.name}/`."
            out += [Text(f"### On {escape(other.name)}"), Text(where), Text(session_lines(checked))]
    return out


def _workload_ticks(ax: Any, rows: Sequence[MapRow], controller: str) -> None:
    """Ticks at the workloads' costs, and where `shard` stops being the slow mode shaded."""
    cost = {n: c * 1e3 for n in _workload_order(rows) if (c := _cost(rows, n, controller))}
    labels = [f"{n}: {cost[n]:.2f}" for n in cost]
    ax.set_xticks([cost[n] for n in cost], labels, fontsize=7, rotation=25, ha="right")
    ax.minorticks_off()
    known = [(n, s) for n in cost if (s := _slowest(rows, n, controller)) is not None]
    for (a, sa), (b, sb) in zip(known, known[1:], strict=False):
        if sa != sb:
            label = f"shard {'stops' if sa else 'starts'} being the slow mode"
            ax.axvspan(cost[a], cost[b], color="tab:red", alpha=0.08, label=label)


def summary_lines(
    results: str | Path,
    machine: str,
    rows: Sequence[MapRow],
    predicted: Mapping[str | None, Sequence[Prediction]],
    by_session: Mapping[str | None, Sequence[SessionErrors]],
) -> list[str]:
    """The map page's summary bullets (the README links here), per kind of prediction
    (`PREDICTION_KINDS`) its predictions and its check session by session."""
    return [
        *_prediction_summary(rows, predicted, by_session),
        *filter(None, [recommended_again(rows, choice_records(results))]),
        *[
            line
            for lever in MAP_LEVERS
            for line in lever_summary(lever.records(results, machine), lever)
        ],
        *fused_summary(fused_records(results, machine)),
        *gpu_fused_summary(results),
    ]


def fused_summary(recs: list[LeverRecord]) -> list[str]:
    """The bullet on the recommended step and the fused solve along the map: its speedup
    over the recommended step where both trained, and each variant's ratio to its floor."""
    made = f"The recommended step (`--recommended`) is, {recommended_made_of()}."
    found = lever_speedups(recs, "recommended-diffrax", "recommended-fused")
    if not found:
        return [f"- {made}"]
    faster, slower = separated(found)
    rows = {label: [(rec, variant_row(rec, label)) for rec in recs] for label in FUSED_VARIANTS}
    ratios = {
        label: [x for rec, r in found_rows if r and (x := floor_ratio(rec, r)[0]) is not None]
        for label, found_rows in rows.items()
    }
    floors = ", ".join(
        f"{label} {float(np.median(v)):.1f}x ({min(v):.1f}x to {max(v):.1f}x over {len(v)})"
        for label, v in ratios.items()
        if v
    )
    session = sessions.sessions_line(recs, recs)
    return [
        f"- {made} The fused solve ({fused_adjoints(recs)}) against diffrax's loop on that "
        f"step, 1 device: {ratio_range(found)} its speed over {len(found)} workload and "
        f"controller pairs whose models trained; {faster} faster and {slower} slower with the "
        f"whole interval past 1 (faster: at equal loss). Ratio of a step to its compute "
        f"floor, median (range over the pairs): {floors} ({session.rstrip('.')}).",
    ]


def gpu_fused_summary(results: str | Path) -> list[str]:
    """A bullet per GPU with fused-solve map records."""
    lines = []
    for machine in fused_machines(results, "gpu"):
        recs = fused_records(results, machine)
        over_default = lever_speedups(recs, "default", "recommended-diffrax")
        fused = lever_speedups(recs, "recommended-diffrax", "recommended-fused")
        if not over_default or not fused:
            continue
        faster, slower = separated(fused)
        pairs = ", ".join(f"{escape(r.workload)} {escape(r.fields.controller)}" for r in recs)
        lines.append(
            f"- On one GPU ({sessions.sessions_line(recs, recs).rstrip('.')}; "
            f"{pairs}): the recommended step run by diffrax's loop {ratio_range(over_default)} "
            f"the default's speed, by the fused solve ({fused_adjoints(recs)}) "
            f"{ratio_range(fused)} diffrax's, {faster} of {len(fused)} faster with the whole "
            f"interval above 1 at equal loss, {slower} slower (`figures/tables/workloads.md`)."
            + older_step(recs)
        )
    return lines


def _prediction_summary(
    rows: Sequence[MapRow],
    predicted: Mapping[str | None, Sequence[Prediction]],
    by_session: Mapping[str | None, Sequence[SessionErrors]],
) -> list[str]:
    """Per kind of prediction (`PREDICTION_KINDS`), each mode's median |error| and, over
    sessions, the largest."""
    lines = []
    for kind in PREDICTION_KINDS:
        errors = prediction_errors(rows, predicted[kind])
        if not errors:
            continue
        what = (
            f"from the `{kind}` profile in place of the probe"
            if kind
            else "with the 2 devices probed"
        )
        held = [e for e in errors if e.get("before") is True]
        lines.append(
            f"- `odestudy predict` {what}, against these measured 2-device rows, median "
            f"|error| per mode: {_per_mode(errors)} ({said(errors)})."
            + held_out_said(errors, "rows")
            + (f" Per mode: {_per_mode(held)}." if held and len(held) < len(errors) else "")
            + _sessions_said(by_session.get(kind, ()))
        )
    return lines


def _sessions_said(checked: Sequence[SessionErrors]) -> str:
    """Over the sessions whose rows the newest prediction model's predictions were made
    before: how many, and the largest of their per-mode median |error|s; else ""."""
    model = max((e.model for _, errors in checked for e in errors if e.model), default=None)
    worst = []
    for session, errors in checked:
        held = [e for e in errors if e.before is True and e.model == model]
        worst += [(_median_error(mine), mode, session) for mode, mine in _by_mode(held).items()]
    if not worst:
        return ""
    n = len({session for _, _, session in worst})
    size, mode, session = max(worst, key=lambda w: w[0])
    return (
        f" Session by session, prediction model {model} made before the rows, in {n} "
        f"session{'s' if n > 1 else ''}: each mode's median |error| at most "
        f"{size * 100:.0f} % (`{mode}`, {session.when})."
    )


def _per_mode(errors: Sequence[Any]) -> str:
    """Each multi-device mode's median |error| over `errors`, with its count."""
    return ", ".join(
        f"`{m}` {_median_error(mine) * 100:.0f} % ({len(mine)} rows)"
        for m, mine in _by_mode(errors).items()
    )


def workloads_figure(rows: Sequence[MapRow], out: str | Path) -> list[Path]:
    """Each mode's speedup against the workload's cost, a panel per controller."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CONTROLLERS), figsize=(11, 4.2), sharey=True)
    series = [("default", m, MODE_STYLE[m], "-o") for m in MULTI_MODES]
    series += [
        ("recommended", "single", "k", ":^"),
        ("recommended", "shard_map", MODE_STYLE["shard_map"], ":^"),
    ]
    for ax, controller in zip(axes, CONTROLLERS, strict=True):
        for step, mode, color, style in series:
            pts = [
                (r.per_iteration_s * 1e3, *r.speedup)
                for r in rows
                if (r.controller, r.step, r.mode) == (controller, step, mode)
                and r.speedup is not None
                and r.per_iteration_s
            ]
            if not pts:
                continue
            x, y, low, high = (np.array(v) for v in zip(*sorted(pts), strict=True))
            label = mode if step == "default" else f"recommended, {mode}"
            ax.errorbar(
                x, y, yerr=[y - low, high - y], fmt=style, color=color, label=label, capsize=3
            )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        _workload_ticks(ax, rows, controller)
        ax.set_title(f"{controller}: speedup over 1 device, default step")
        ax.set_xlabel("1-device time per solver iteration (ms), default step")
    axes[0].set_ylabel(f"speedup ({MAP_DEVICES} devices, or the recommended step)")
    # Beside the panels, where it hides no point.
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("Workload map: untrained or failed rows left out; bars: 95% intervals")
    return _save(fig, Path(out), "workloads")


def workloads_tables(results: str | Path, figures: str | Path, scale: str = "quick") -> list[Table]:
    """The workload map's table and figure; at another scale, only where it has rows."""
    body, rows = workloads_body(results, scale)
    if not rows and scale != "quick":
        return []  # the map is measured at the quick scale: no table of another
    figs = workloads_figure(rows, figures)[:1] if any(r.speedup is not None for r in rows) else []
    return [Table("workloads", "Workload map", body, tuple(figs))]
