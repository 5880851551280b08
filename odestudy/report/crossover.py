"""When splitting the batch pays (`make map`, `make crossover`): each mode's speedup over the
best 1-device step (`best.py`) against the **per-device work** (the best 1-device step's
time per solver iteration at the per-device batch: what one device does per iteration of
its loop), over the map's workloads and its per-device batch axis. The crossover is where
the speedup crosses 1: in the work, a line through the points in log-log, and in the
batch, the same along one workload's axis, each with a 95% bootstrap interval."""

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..measure.controllers import CONTROLLERS
from ..measure.modes import multi_device_modes
from ..study import records
from ..study.claim import Claim
from ..study.rec import Hardware, PredictedMode, Prediction, Rec
from ..study.studies import Grid, Table, Text
from ..study.workloads import (
    CROSSOVER_WORKLOADS,
    MAP_DEVICES,
    MAP_FOLDER,
    crossover_scenarios,
    map_scenarios,
    workload_of,
)
from . import intervals, sessions
from .best import Best, best_for, best_steps, over_best, step_of
from .claims import grouped
from .comparisons import BEST_STEP, ratio_claim
from .heldout import Checked, held_out_said, made_before, said
from .intervals import RESAMPLES, fmt_interval
from .loss import MARK, differs, trained
from .runs import merged
from .tables import escape
from .workloads import busiest, derived_once, folder_records, per_iteration_s, predictions

# A speedup's 95% interval as a log-normal spread: its half-width in log over this.
Z95 = 1.96


@dataclasses.dataclass(frozen=True)
class Point:
    """One multi-device row of the best step: its per-device work (None where unknown),
    its speedup over its strong `base` and `per_device` throughput against the weak one,
    each `(estimate, low, high)`, and whether it and `base` trained to different losses."""

    workload: str
    controller: str
    mode: str
    n_devices: int
    per_device_batch: int
    global_batch: int
    work_s: float | None
    speedup: tuple[float, float, float]
    per_device: tuple[float, float, float] | None
    base: Best
    record: Rec
    differs: bool


def study_records(results: str | Path, scale: str = "quick") -> list[Rec]:
    """The map's and the batch axis's records at `scale`, of the machine with the most ok
    rows of the batch axis (else of the map)."""
    axis = {s.key() for s in crossover_scenarios(scale)}
    keys = axis | {s.key() for s in map_scenarios(scale)}
    folder = Path(results) / MAP_FOLDER
    recs = folder_records([folder, *records.replaced_folders(folder)], scale, keys=keys)
    ok = [r for r in recs if r.ok]
    counted = [r.machine_id for r in ok if r.scenario_key in axis] or [r.machine_id for r in ok]
    if not counted:
        return []
    machine = busiest(counted)
    return sessions.reassigned([r for r in recs if r.machine_id == machine])


def points(recs: Sequence[Rec]) -> list[Point]:
    """The points of `recs`, each row set only against 1-device rows of its own session."""
    return [p for group in grouped(recs, recs).values() for p in session_points(merged(group))]


def by_session(pts: Sequence[Point]) -> list[tuple[sessions.Session, list[Point]]]:
    """`pts` grouped by the session of their rows, oldest first."""
    by = grouped(pts, [p.record for p in pts])
    return sorted(by.items(), key=lambda kv: kv[0].start.isoformat() if kv[0].start else "")


def session_points(recs: Sequence[Rec]) -> list[Point]:
    """Every ok, trained multi-device row of one session's `recs` on its best 1-device
    step, against that step (strong) and the best at its per-device batch (weak)."""
    bests = best_steps(recs)
    out = []
    for r in recs:
        w = workload_of(r.fields)
        if w is None or r.n_devices < 2 or not r.ok or not trained(r):
            continue
        base = best_for(r, bests, "strong")
        if base is None or step_of(r) != base.step:
            continue
        b = int(r.global_batch) // int(r.n_devices)
        weak = best_for(r, bests, "weak")
        work = per_iteration_s(weak.record) if weak is not None and trained(weak.record) else None
        strong = over_best(r, base, "strong")
        if strong is None:
            continue
        per_device = over_best(r, weak, "weak") if weak is not None else None
        out.append(
            Point(
                workload=w.name,
                controller=r.controller,
                mode=r.mode,
                n_devices=int(r.n_devices),
                per_device_batch=b,
                global_batch=int(r.global_batch),
                work_s=work,
                speedup=strong.speedup,
                per_device=per_device.efficiency if per_device else None,
                base=base,
                record=r,
                differs=differs(r, base.record),
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where a mode's speedup crosses 1 along one axis, said no further than its points
    go: `at` `(estimate, low, high)` within the `span` (`high` infinite where over 2.5 % of
    draws found none); else whether it `pays` over all of it (None: not separable)."""

    at: tuple[float, float, float] | None
    pays: bool | None
    span: tuple[float, float]
    n: int
    paying: int | None = None
    past_pays: bool = True
    no_crossing: float = 0.0

    def said(self, unit: str) -> str:
        """`pays from 0.41 ms [0.30, 0.55]`, that it pays (or not) over the span, or not."""
        lo, hi = self.span
        counted = f"{self.paying} of {self.n} points pay" if self.paying is not None else ""
        if self.at is not None:
            e, a, b = self.at
            low = f"<{_num(lo)}" if a < lo else _num(a)
            high = f">{_num(hi)}" if b > hi else _num(b)
            head = "pays from" if self.past_pays else "crosses 1 near"
            notes = [] if self.past_pays else [counted]
            if self.no_crossing > 0:
                notes.append(f"no crossing in {self.no_crossing:.0%} of draws")
            tail = f" ({'; '.join(notes)})" if notes else ""
            return f"{head} {_num(e)} {unit} [{low}, {high}]{tail}"
        if self.pays:
            return f"pays over all of {_num(lo)}–{_num(hi)} {unit}"
        if self.pays is False:
            return f"does not pay up to {_num(hi)} {unit}"
        return f"not separable over {_num(lo)}–{_num(hi)} {unit}" + (
            f" ({counted})" if counted else ""
        )


def _num(v: float) -> str:
    """A value of an axis as read: two significant digits, whole numbers from 10."""
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def _line_root(x: np.ndarray, y: np.ndarray) -> float | None:
    """Where the least-squares line of `y` on `x` rises through zero, or None."""
    if np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    return float(-intercept / slope) if slope > 0 else None


def _interp_root(x: np.ndarray, y: np.ndarray) -> float | None:
    """The first rise of `y` through zero along sorted `x`, linearly interpolated."""
    for i in range(len(x) - 1):
        if y[i] < 0 <= y[i + 1]:
            return float(x[i] + (x[i + 1] - x[i]) * (-y[i]) / (y[i + 1] - y[i]))
    return None


def _draw_roots(x: np.ndarray, est: np.ndarray, sd: np.ndarray, how: str, seed: int) -> np.ndarray:
    """`RESAMPLES` crossings of points drawn from their intervals (for a line, resampled too);
    a draw with no crossing within the span is infinite."""
    rng = np.random.default_rng(seed)
    root = _line_root if how == "line" else _interp_root
    roots = np.full(RESAMPLES, np.inf)
    for i in range(RESAMPLES):
        pick = rng.integers(0, len(x), len(x)) if how == "line" else np.arange(len(x))
        y = np.log(est[pick]) + rng.normal(0.0, sd[pick])
        o = np.argsort(x[pick])
        r = root(x[pick][o], y[o])
        if r is not None and x.min() <= r <= x.max():
            roots[i] = r
    return roots


def crossing(
    axis: Sequence[float], speedups: Sequence[tuple[float, float, float]], how: str, seed: int = 0
) -> Crossing:
    """Where speedups cross 1 along `axis` (log scale): `how` is `"line"` (a line through
    every point: the work) or `"path"` (the points in order: one workload's batches)."""
    x = np.log(np.asarray(axis, dtype=float))
    est = np.asarray([s[0] for s in speedups], dtype=float)
    span = (float(np.exp(x.min())), float(np.exp(x.max())))
    lows = np.asarray([s[1] for s in speedups])
    highs = np.asarray([s[2] for s in speedups])
    paying = int((lows > 1).sum())
    if paying == len(x):
        return Crossing(None, True, span, len(x), paying)
    if highs.max() < 1:
        return Crossing(None, False, span, len(x), paying)
    order = np.argsort(x)
    root = _line_root if how == "line" else _interp_root
    central = root(x[order], np.log(est[order]))
    if central is None or not x.min() <= central <= x.max():
        return Crossing(None, None, span, len(x), paying)
    # Each speedup's spread in log, from its 95% interval.
    sd = np.fmax(1e-6, (np.log(highs) - np.log(lows)) / (2 * Z95))
    roots = _draw_roots(x, est, sd, how, seed)
    beyond = x.max() + 50.0  # no crossing: past the span (infinite once read back)
    low, high = intervals.central(np.where(np.isinf(roots), beyond, roots))
    high = np.inf if high > x.max() + 1.0 else high
    at = (
        float(np.exp(central)),
        float(np.exp(min(low, central))),
        float(np.exp(max(high, central))),
    )
    past = lows[x > central]
    past_pays = bool(len(past) and (past > 1).all())
    return Crossing(at, None, span, len(x), paying, past_pays, float(np.isinf(roots).mean()))


def work_crossing(pts: Sequence[Point], controller: str, mode: str) -> Crossing | None:
    """`mode`'s crossover in the per-device work (ms per solver iteration), or None."""
    key = (controller, mode)
    mine = [p for p in pts if (p.controller, p.mode) == key and p.work_s and not p.differs]
    if len(mine) < 2:
        return None
    work = [p.work_s * 1e3 for p in mine]  # type: ignore[operator]
    return crossing(work, [p.speedup for p in mine], "line")


def batch_crossing(
    pts: Sequence[Point], workload: str, controller: str, mode: str
) -> Crossing | None:
    """`mode`'s crossover in the per-device batch along `workload`'s axis, or None."""
    key = (workload, controller, mode)
    mine = [p for p in pts if (p.workload, p.controller, p.mode) == key and not p.differs]
    mine.sort(key=lambda p: p.per_device_batch)
    if len({p.per_device_batch for p in mine}) < 2:
        return None
    return crossing([p.per_device_batch for p in mine], [p.speedup for p in mine], "path")


def crossover_table(pts: Sequence[Point]) -> Grid:
    """Per session, controller and mode: the crossover in the work and in each axis
    workload's batch, from that session's points alone (never fitted across sessions)."""
    body = []
    for session, mine in by_session(pts):
        for controller, mode in itertools.product(CONTROLLERS, multi_device_modes()):
            work = work_crossing(mine, controller, mode)
            if work is None:
                continue
            batches = [
                c.said("series") if (c := batch_crossing(mine, w, controller, mode)) else "–"
                for w in CROSSOVER_WORKLOADS
            ]
            body.append(
                [escape(session.when), escape(controller), escape(mode), work.said("ms"),
                 str(work.n), *batches]
            )  # fmt: skip
    at_work = "Where it pays: per-device work (ms per solver iteration) [95%]"
    at_batch = [f"Where it pays: series per device, {escape(w)}" for w in CROSSOVER_WORKLOADS]
    return Grid(("Session", "Controller", "Mode", at_work, "Points", *at_batch), tuple(body))


def points_table(pts: Sequence[Point]) -> Grid:
    """Every point."""
    body = [
        [
            escape(sessions.session_of(p.record).when),
            escape(p.workload),
            escape(p.controller),
            escape(p.mode),
            f"{p.per_device_batch} / {p.global_batch}",
            f"{p.work_s * 1e3:.3f}" if p.work_s else "–",
            fmt_interval(*p.speedup) + (f" {MARK}" if p.differs else ""),
            escape(p.base.said()),
            fmt_interval(*p.per_device or (None, None, None)),
            f"{p.record.step_time_s * 1e3:.3g}",  # type: ignore[operator]
        ]
        for _, mine in by_session(pts)
        for p in sorted(mine, key=lambda p: (p.workload, p.controller, p.per_device_batch, p.mode))
    ]
    header = ("Session", "Workload", "Controller", "Mode", "Batch per device / global",
              "Per-device work (ms per solver iteration)",
              "Speedup over the best 1-device step [95%]",
              "Best 1-device step at the global batch",
              "Throughput per device against 1 device at the per-device batch [95%]",
              "Step (ms)")  # fmt: skip
    return Grid(header, tuple(body))


# A marker per workload in the crossover figure, in the map's order.
MARKERS = "osD^vP<>*X"


def crossover_figure(pts: Sequence[Point], out: str | Path) -> list[Path]:
    """The lead modes' speedup against the per-device work, a panel per controller."""
    # matplotlib (and the plots module that imports it) load for a figure only.
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from .plots import MODE_STYLE, _save  # matplotlib at import

    workloads = sorted({p.workload for p in pts})
    marker = {w: MARKERS[i % len(MARKERS)] for i, w in enumerate(workloads)}
    fig, axes = plt.subplots(1, len(CONTROLLERS), figsize=(12, 4.8), sharey=True)
    for ax, controller in zip(np.atleast_1d(axes), CONTROLLERS, strict=True):
        for mode, w in itertools.product(("shard_map", "pmap"), workloads):
            key = (controller, mode, w)
            mine = [p for p in pts if (p.controller, p.mode, p.workload) == key and p.work_s]
            if not mine:
                continue
            x = np.array([p.work_s for p in mine]) * 1e3
            y = np.array([p.speedup[0] for p in mine])
            err = [y - [p.speedup[1] for p in mine], [p.speedup[2] for p in mine] - y]
            ax.errorbar(x, y, yerr=err, fmt=marker[w], ms=5, color=MODE_STYLE[mode],
                        capsize=2, alpha=0.8, linestyle="none")  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{controller}")
        ax.set_xlabel("per-device work (ms per solver iteration)")
    np.atleast_1d(axes)[0].set_ylabel("speedup over the best 1-device step")
    handles = [plt.Line2D([], [], color=MODE_STYLE[m], marker="o", linestyle="none", label=m)
               for m in ("shard_map", "pmap")]  # fmt: skip
    handles += [plt.Line2D([], [], color="black", marker=marker[w], linestyle="none", label=w)
                for w in workloads]  # fmt: skip
    np.atleast_1d(axes)[-1].legend(handles=handles, fontsize=8, loc="upper left",
                                   bbox_to_anchor=(1.02, 1.0))  # fmt: skip
    machine = pts[0].record.machine_id if pts else ""
    cores = pts[0].record.hardware.physical_cores if pts else ""
    fig.suptitle(
        f"When splitting the batch pays (above 1): {machine}, {MAP_DEVICES} virtual CPU "
        f"devices on {cores} cores; bars: 95% intervals within each point's session"
    )
    fig.tight_layout()
    return _save(fig, Path(out), "crossover")


def _prediction(found: Sequence[Prediction], workload: str, controller: str) -> Prediction | None:
    return next(
        (p for p in found if (p.workload, p.fields.controller) == (workload, controller)), None
    )


def _predicted(
    found: Sequence[Prediction], workload: str, controller: str, mode: str
) -> PredictedMode | None:
    p = _prediction(found, workload, controller)
    return None if p is None else (p.crossover or {}).get(mode)


def beside_table(pts: Sequence[Point], found: Sequence[Prediction]) -> Grid:
    """The measured crossover in the per-device batch beside the predicted one."""
    body = []
    modes = multi_device_modes()
    for w, controller, mode in itertools.product(CROSSOVER_WORKLOADS, CONTROLLERS, modes):
        measured = latest_batch_crossing(pts, w, controller, mode)
        pred = _predicted(found, w, controller, mode)
        if measured is None and pred is None:
            continue
        said = Crossing(**pred.batch).said("series") if pred else "not predicted"
        body.append([
            escape(w), escape(controller), escape(mode),
            measured.said("series") if measured else "not measured", said,
            _work_said(measured, pts, w, controller), _predicted_work(pred),
        ])  # fmt: skip
    return Grid(
        ("Workload", "Controller", "Mode", "Measured (newest session): where it pays, per device",
         "Predicted: where it pays, per device", "Measured: per-device work there (ms)",
         "Predicted: per-device work there (ms)"),
        tuple(body),
    )  # fmt: skip


def latest_batch_crossing(
    pts: Sequence[Point], workload: str, controller: str, mode: str
) -> Crossing | None:
    """`batch_crossing` in the newest session that measured `workload`'s axis."""
    found = None
    for _, mine in by_session(pts):
        found = batch_crossing(mine, workload, controller, mode) or found
    return found


def log_interp(at: Sequence[float], x: Sequence[float], y: Sequence[float]) -> list[float]:
    """`y` of `x` at each of `at`, interpolated linearly in log-log."""
    return [float(np.exp(np.interp(np.log(b), np.log(x), np.log(y)))) for b in at]


def _work_at(batches: Sequence[float], pts: Sequence[Point]) -> list[float] | None:
    """The per-device work (ms per solver iteration) at `batches`, interpolated in log."""
    known = sorted({(p.per_device_batch, p.work_s) for p in pts if p.work_s})
    if len(known) < 2:
        return None
    work = log_interp(batches, [b for b, _ in known], [w for _, w in known])
    return [w * 1e3 for w in work]


def _work_said(found: Crossing | None, pts: Sequence[Point], workload: str, controller: str) -> str:
    """The measured per-device work at a measured crossing, with its interval."""
    if found is None or found.at is None:
        return "–"
    mine = [p for p in pts if (p.workload, p.controller) == (workload, controller)]
    return _work(_work_at(found.at, mine))


def _predicted_work(pred: PredictedMode | None) -> str:
    """The predicted per-device work at the predicted crossing, with its interval."""
    work = pred.work_s if pred is not None else None
    return _work([w * 1e3 for w in work] if work else None)


def _work(work: Sequence[float] | None) -> str:
    """`0.412 [0.301, 0.55]`: a work (ms) with its interval, or `–`."""
    return "–" if work is None else f"{work[0]:.3g} [{work[1]:.3g}, {work[2]:.3g}]"


CheckedPoint = tuple[Point, tuple[float, float, float], Prediction, bool | None]


def _checked(pts: Sequence[Point], found: Sequence[Prediction]) -> list[CheckedPoint]:
    """Each measured point predicted: its predicted speedup, prediction and `made_before`."""
    out = []
    for p in pts:
        made = _prediction(found, p.workload, p.controller)
        mode = None if made is None else (made.crossover or {}).get(p.mode)
        at = [q for q in (mode.points if mode else []) if q.per_device_batch == p.per_device_batch]
        if made is not None and at:
            pred = (at[0].speedup, *at[0].speedup_interval)
            out.append((p, pred, made, made_before(made, [p.record, p.base.record])))
    return out  # type: ignore[return-value]


def prediction_errors(pts: Sequence[Point], found: Sequence[Prediction]) -> list[Checked]:
    """At every measured point predicted: predicted over measured speedup, minus 1."""
    return [
        Checked(error=pred[0] / p.speedup[0] - 1, model=made.made_from.model, before=before)
        for p, pred, made, before in _checked(pts, found)
    ]


def verdict_of(interval: Sequence[float]) -> str:
    """Whether a speedup `(estimate, low, high)` pays, does not, or is undecided."""
    return "pays" if interval[1] > 1 else "does not" if interval[2] < 1 else "undecided"


def verdict_counts(pairs: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """Of (predicted, measured) verdicts: how many agree, and how many are opposite."""
    same = sum(a == b for a, b in pairs)
    return same, sum({a, b} == {"pays", "does not"} for a, b in pairs)


def verdicts_said(pts: Sequence[Point], found: Sequence[Prediction]) -> str:
    """At the points predicted before their rows: how often the predicted verdict is the
    measured one, and how often the opposite; "" where there is none."""
    pairs = [
        (verdict_of(pred), verdict_of(p.speedup))
        for p, pred, _, before in _checked(pts, found)
        if before is True
    ]
    if not pairs:
        return ""
    same, opposite = verdict_counts(pairs)
    return (
        f" Its verdict (pays, does not, or undecided where the interval straddles 1) is the "
        f"measured one at {same} of those {len(pairs)} points, the opposite at {opposite}."
    )


INTRO = (
    "**Terms.** A *step* is one optimiser update of the whole global batch. A *solver "
    "iteration* is one pass of the ODE solver's loop. *wN*: a vector field of width N. "
    "The *best 1-device step* is the fastest measured 1-device step that trains a model "
    "not worse than the default step's (`loss.worse`): every speedup here is over it, "
    "at the same global batch, within one session. The *per-device work* is the best "
    "1-device step's time per solver iteration at the per-device batch: what one device "
    "does per iteration of its loop once the batch is split. Splitting pays where the "
    "speedup is above 1. A *session* is one block of measurements with no gap over an "
    "hour; each session's points are fitted alone. *Not separable*: the points' "
    "intervals straddle 1 and no crossing is found inside the span."
)


def crossover_body(
    recs: Sequence[Rec], pts: Sequence[Point], found: Sequence[Prediction]
) -> tuple[Text | Grid, ...]:
    """The page's blocks."""
    ok = [r for r in recs if r.ok]
    hardware = ok[0].hardware if ok else Hardware()
    errors = prediction_errors(pts, found)
    error_line = (
        f"Predicted against measured speedup at the {len(errors)} measured points it "
        f"predicts: median |error| {np.median([abs(e.error) for e in errors]) * 100:.0f} "
        f"% ({said(errors)})." + held_out_said(errors) + verdicts_said(pts, found)
        if errors
        else "No prediction along the axis yet (`odestudy predict --map`)."
    )
    machine = (
        f"Machine {escape(ok[0].machine_id if ok else '–')} "
        f"({escape(hardware.cpu_model)}, {escape(hardware.physical_cores)} "
        f"physical cores; {MAP_DEVICES} devices are virtual CPU devices, one per core); "
        + sessions.sessions_line(ok, list(recs))
    )
    return (
        Text(machine),
        Text(INTRO),
        Text("## Where each mode starts to pay"),
        crossover_table(pts),
        Text("## Measured beside predicted"),
        beside_table(pts, found),
        Text(error_line),
        Text("## Every point"),
        points_table(pts),
    )


def crossover_tables(results: str | Path, figures: str | Path, scale: str = "quick") -> list[Table]:
    """The crossover's table and figure; at another scale, only where the axis has rows."""
    recs, pts = points_of(results, scale)
    if not recs and scale != "quick":
        return []
    machine = (recs[0].machine_id or "") if recs else ""
    # the map's predictions made along the batch axis, from the probe
    found = [p for p in predictions(results, machine) if p.crossover is not None] if machine else []
    figs = crossover_figure(pts, figures)[:1] if any(p.work_s for p in pts) else []
    body = crossover_body(recs, pts, found)
    return [Table("crossover", "When splitting the batch pays", body, tuple(figs))]


def points_of(results: str | Path, scale: str) -> tuple[list[Rec], list[Point]]:
    """The axis's records at `scale` and their points, made once per report."""
    return derived_once(study_records, points, results, scale)


# Where the crossover states its claims (`Claim.where`).
CROSSOVER_WHERE = "when splitting pays (crossover.md)"


def crossover_claims(results: str | Path, scale: str) -> list[Claim]:
    """Every point's speedup over the best 1-device step, as a claim."""
    return [
        ratio_claim(p.record, p.base.record, BEST_STEP, p.speedup, CROSSOVER_WHERE, p.differs)
        for p in points_of(results, scale)[1]
    ]
