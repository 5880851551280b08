"""When splitting the batch pays (`make map`, `make crossover`): each mode's speedup over the
best 1-device step (`best.py`) against the per-device work per solver iteration, over
the map's workloads and its per-device batch axis; the fitted crossover, and for each
workload on the axis the per-device batch from which a mode pays.

A point is one multi-device row of the best step: its workload, controller, mode and
per-device batch `b`; its **per-device work** (the best 1-device step's time per solver
iteration at `b`: what one device does per iteration of its loop); its speedup over the
best 1-device step at the global batch (strong scaling), and its throughput per device
against that step at `b` (weak scaling). The crossover is where the speedup crosses 1:
in the work, a line through the points in log-log, and in the batch, the same along one
workload's axis, each with a 95% bootstrap interval (`DRAWS` draws: points resampled,
each speedup drawn from its own interval)."""

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..study.rec import Hardware, PredictedMode, Prediction, Rec
from ..study.studies import Table
from ..study.workloads import (
    CROSSOVER_WORKLOADS,
    MAP_DEVICES,
    MAP_FOLDER,
    crossover_scenarios,
    map_scenarios,
    workload_of,
)
from . import sessions
from .best import Best, best_for, best_steps, over_best, step_of
from .frames import read_records
from .heldout import made_before, said
from .loss import MARK, differs, trained
from .tables import escape, markdown_table, table_value
from .workloads import PredictionError, predictions

DRAWS = 2000
LEVEL = 0.95
# A speedup's 95% interval as a log-normal spread: its half-width in log over this.
Z95 = 1.96


@dataclasses.dataclass(frozen=True)
class Point:
    """One multi-device row of the best step against the best 1-device steps.

    - `work_s`: the best 1-device step's time per solver iteration at `per_device_batch`
      (None where that row was not measured or did not train).
    - `speedup`: over the best 1-device step at `global_batch`, `(estimate, low, high)`.
    - `per_device`: throughput per device against the best 1-device step at
      `per_device_batch` (weak scaling's efficiency), likewise; None where not measured.
    - `differs`: the row and its strong base trained to different losses (`loss.MARK`).
    """

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


def per_iteration_s(rec: Rec) -> float | None:
    """A 1-device record's time per executed solver iteration (its step over the
    iterations of the batch's slowest sample); None where it failed or did not train."""
    executed = rec.solver_steps.executed_per_device
    if not rec.ok or not executed or not trained(rec):
        return None
    return float(rec.step_time_s) / float(executed)  # type: ignore[arg-type]


def study_records(results: str | Path, scale: str = "quick") -> list[Rec]:
    """The map's and the batch axis's records at `scale` under `results/map`, of the
    machine with the most ok rows of the batch axis (else of the map)."""
    axis = {s.key() for s in crossover_scenarios(scale)}
    keys = axis | {s.key() for s in map_scenarios(scale)}
    folder = Path(results) / MAP_FOLDER
    recs = [r for r in read_records(folder, scale, current=False) if r.scenario_key in keys]
    ok = [r for r in recs if r.ok]
    counted = [r.machine_id for r in ok if r.scenario_key in axis] or [r.machine_id for r in ok]
    if not counted:
        return []
    machine = max(sorted(set(counted)), key=counted.count)  # type: ignore[type-var]
    return [r for r in recs if r.machine_id == machine]


def points(recs: Sequence[Rec]) -> list[Point]:
    """The points of `recs`: every ok, trained multi-device row whose step is its best
    1-device step's, against that step (strong) and the best at its per-device batch."""
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
                work_s=per_iteration_s(weak.record) if weak is not None else None,
                speedup=strong.speedup,
                per_device=per_device.efficiency if per_device else None,
                base=base,
                record=r,
                differs=differs(r, base.record),
            )
        )
    return out


def _log_sd(p: tuple[float, float, float]) -> float:
    """The spread of a ratio's estimate in log, from its 95% interval."""
    return max(1e-6, (np.log(p[2]) - np.log(p[1])) / (2 * Z95))


@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where a mode's speedup crosses 1 along one axis (the work, or a workload's
    per-device batch): `at` `(estimate, low, high)` where a crossing lies within the
    measured span, else None and `pays` says whether every point pays (True), none does
    (False); `span` the axis's measured range; `n` the points."""

    at: tuple[float, float, float] | None
    pays: bool | None
    span: tuple[float, float]
    n: int

    def said(self, unit: str) -> str:
        """`pays from 0.41 ms [0.30, 0.55]` (a bound of the interval outside the measured
        span as `<` or `>` that span's end), or that it pays (or not) over the whole span."""
        lo, hi = self.span
        if self.at is not None:
            e, a, b = self.at
            low = f"<{_num(lo)}" if a < lo else _num(a)
            high = f">{_num(hi)}" if b > hi else _num(b)
            return f"pays from {_num(e)} {unit} [{low}, {high}]"
        if self.pays:
            return f"pays over all of {_num(lo)}–{_num(hi)} {unit}"
        return f"does not pay up to {_num(hi)} {unit}"


def _num(v: float) -> str:
    """A value of an axis as read: two significant digits, whole numbers from 10."""
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def _line_root(x: np.ndarray, y: np.ndarray) -> float | None:
    """Where the least-squares line of `y` (log speedup) on `x` (log axis) is zero,
    where it rises (None otherwise)."""
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


def crossing(
    axis: Sequence[float], speedups: Sequence[tuple[float, float, float]], how: str, seed: int = 0
) -> Crossing:
    """Where speedups cross 1 along `axis` (positive values, log scale): `how` is
    `"line"` (a line through every point: the work) or `"path"` (the points in order:
    one workload's batches). Its interval: `DRAWS` draws, each speedup drawn
    log-normally from its interval (and for a line, the points resampled)."""
    x = np.log(np.asarray(axis, dtype=float))
    est = np.asarray([s[0] for s in speedups], dtype=float)
    span = (float(np.exp(x.min())), float(np.exp(x.max())))
    lows, highs = [s[1] for s in speedups], [s[2] for s in speedups]
    if min(lows) > 1:
        return Crossing(None, True, span, len(x))
    if max(highs) < 1:
        return Crossing(None, False, span, len(x))
    order = np.argsort(x)
    root = _line_root if how == "line" else _interp_root
    central = root(x[order], np.log(est[order]))
    if central is None or not x.min() <= central <= x.max():
        return Crossing(None, bool(np.median(est) > 1), span, len(x))
    rng = np.random.default_rng(seed)
    sd = np.asarray([_log_sd(s) for s in speedups])
    roots = []
    for _ in range(DRAWS):
        pick = rng.integers(0, len(x), len(x)) if how == "line" else np.arange(len(x))
        y = np.log(est[pick]) + rng.normal(0.0, sd[pick])
        xs = x[pick]
        o = np.argsort(xs)
        r = root(xs[o], y[o])
        if r is not None:
            roots.append(r)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(roots, [tail, 100 - tail]) if roots else (central, central)
    return Crossing(
        tuple(float(np.exp(v)) for v in (central, low, high)),  # type: ignore[arg-type]
        None,
        span,
        len(x),
    )


def work_crossing(pts: Sequence[Point], controller: str, mode: str) -> Crossing | None:
    """`mode`'s crossover in the per-device work (ms per solver iteration) under
    `controller`, over every workload and batch with a measured work; None without
    points."""
    mine = [
        p
        for p in pts
        if p.controller == controller and p.mode == mode and p.work_s and not p.differs
    ]
    if len(mine) < 2:
        return None
    return crossing([p.work_s * 1e3 for p in mine], [p.speedup for p in mine], "line")  # type: ignore[operator]


def batch_crossing(
    pts: Sequence[Point], workload: str, controller: str, mode: str
) -> Crossing | None:
    """`mode`'s crossover in the per-device batch along `workload`'s axis; None with
    fewer than two batches."""
    mine = sorted(
        (
            p
            for p in pts
            if (p.workload, p.controller, p.mode) == (workload, controller, mode) and not p.differs
        ),
        key=lambda p: p.per_device_batch,
    )
    if len({p.per_device_batch for p in mine}) < 2:
        return None
    return crossing([p.per_device_batch for p in mine], [p.speedup for p in mine], "path")


def multi_modes() -> tuple[str, ...]:
    """The multi-device modes, in the tables' order."""
    return tuple(name for name, m in MODES.items() if m.multi_device)


def _ci(p: tuple[float, float, float] | None) -> str:
    return "–" if p is None else f"{p[0]:.2f} [{p[1]:.2f}, {p[2]:.2f}]"


def crossover_table(pts: Sequence[Point]) -> str:
    """One row per controller and mode: the crossover in the work, and in the per-device
    batch along each workload of the axis."""
    body = []
    for controller in CONTROLLERS:
        for mode in multi_modes():
            work = work_crossing(pts, controller, mode)
            if work is None:
                continue
            batches = [
                c.said("series") if (c := batch_crossing(pts, w, controller, mode)) else "–"
                for w in CROSSOVER_WORKLOADS
            ]
            body.append([escape(controller), escape(mode), work.said("ms"), str(work.n), *batches])
    return markdown_table(
        (
            "Controller",
            "Mode",
            "Where it pays: per-device work (ms per solver iteration) [95%]",
            "Points",
            *(f"Where it pays: series per device, {escape(w)}" for w in CROSSOVER_WORKLOADS),
        ),
        body,
    )


def points_table(pts: Sequence[Point]) -> str:
    """Every point: workload, controller, mode, batches, work, speedup over the best
    1-device step (with that step and its time), throughput per device."""
    body = [
        [
            escape(p.workload),
            escape(p.controller),
            escape(p.mode),
            f"{p.per_device_batch} / {p.global_batch}",
            f"{p.work_s * 1e3:.3f}" if p.work_s else "–",
            _ci(p.speedup) + (f" {MARK}" if p.differs else ""),
            escape(p.base.said()),
            _ci(p.per_device),
            f"{p.record.step_time_s * 1e3:.3g}",  # type: ignore[operator]
        ]
        for p in sorted(pts, key=lambda p: (p.workload, p.controller, p.per_device_batch, p.mode))
    ]
    return markdown_table(
        (
            "Workload",
            "Controller",
            "Mode",
            "Batch per device / global",
            "Per-device work (ms per solver iteration)",
            "Speedup over the best 1-device step [95%]",
            "Best 1-device step at the global batch",
            "Throughput per device against 1 device at the per-device batch [95%]",
            "Step (ms)",
        ),
        body,
    )


def crossover_figure(pts: Sequence[Point], out: str | Path, stem: str = "crossover") -> list[Path]:
    """Each mode's speedup over the best 1-device step against the per-device work, one
    panel per controller, with intervals, the line of 1 and each mode's fitted line."""
    # matplotlib (and the plots module that imports it) load for a figure only.
    import matplotlib.pyplot as plt

    from .plots import MODE_STYLE, _save  # matplotlib at import

    fig, axes = plt.subplots(1, len(CONTROLLERS), figsize=(11, 4.2), sharey=True)
    for ax, controller in zip(np.atleast_1d(axes), CONTROLLERS, strict=True):
        for mode in multi_modes():
            mine = sorted(
                (p for p in pts if p.controller == controller and p.mode == mode and p.work_s),
                key=lambda p: p.work_s or 0.0,
            )
            if not mine:
                continue
            x = np.array([p.work_s for p in mine]) * 1e3
            y = np.array([p.speedup[0] for p in mine])
            err = [y - [p.speedup[1] for p in mine], [p.speedup[2] for p in mine] - y]
            colour = MODE_STYLE[mode]
            ax.errorbar(x, y, yerr=err, fmt="o", ms=4, color=colour, label=mode, capsize=2)
            if len(mine) > 1 and np.ptp(np.log(x)) > 0:
                slope, icpt = np.polyfit(np.log(x), np.log(y), 1)
                grid = np.geomspace(x.min(), x.max(), 50)
                ax.plot(grid, np.exp(icpt + slope * np.log(grid)), color=colour, lw=1, alpha=0.7)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{controller}: {MAP_DEVICES} devices against the best 1-device step")
        ax.set_xlabel("per-device work: the best 1-device step's ms per solver iteration")
    np.atleast_1d(axes)[0].set_ylabel("speedup over the best 1-device step")
    np.atleast_1d(axes)[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("When splitting the batch pays: above 1 it does; bars: 95% intervals")
    return _save(fig, Path(out), stem)


def axis_predictions(results: str | Path, machine: str) -> list[Prediction]:
    """The map's predictions of `machine` made along the batch axis (`odestudy predict
    --map`: `crossover` holds each mode's predicted points and crossing), made from the
    session's probe of the devices."""
    return [p for p in predictions(results, machine) if p.crossover is not None]


def _predicted(
    found: Sequence[Prediction], workload: str, controller: str, mode: str
) -> PredictedMode | None:
    for p in found:
        if p.workload == workload and p.fields.controller == controller:
            return (p.crossover or {}).get(mode)
    return None


def predicted_speedup(
    found: Sequence[Prediction], point: Point
) -> tuple[float, float, float] | None:
    """The prediction of a measured point (same workload, controller, mode and
    per-device batch), `(estimate, low, high)`; None where none was made."""
    mode = _predicted(found, point.workload, point.controller, point.mode)
    for p in mode.points if mode is not None else []:
        if p.per_device_batch == point.per_device_batch:
            return (p.speedup, *p.speedup_interval)  # type: ignore[return-value]
    return None


def beside_table(pts: Sequence[Point], found: Sequence[Prediction]) -> str:
    """Per workload of the axis, controller and mode: the measured crossover in the
    per-device batch beside the predicted one (`odestudy predict --map`)."""
    body = []
    for w in CROSSOVER_WORKLOADS:
        for controller in CONTROLLERS:
            for mode in multi_modes():
                measured = batch_crossing(pts, w, controller, mode)
                pred = _predicted(found, w, controller, mode)
                if measured is None and pred is None:
                    continue
                said = Crossing(**pred.batch).said("series") if pred else "not predicted"
                body.append([
                    escape(w), escape(controller), escape(mode),
                    measured.said("series") if measured else "not measured", said,
                    _work_said(measured, pts, w, controller), _predicted_work(pred),
                ])  # fmt: skip
    return markdown_table(
        ("Workload", "Controller", "Mode", "Measured: where it pays, per device",
         "Predicted: where it pays, per device", "Measured: per-device work there (ms)",
         "Predicted: per-device work there (ms)"),
        body,
    )  # fmt: skip


def _work_at(batches: Sequence[float], pts: Sequence[Point]) -> list[float] | None:
    """The per-device work (ms per solver iteration) at per-device `batches`, log-linearly
    interpolated between the measured points of one workload and controller."""
    known = sorted({(p.per_device_batch, p.work_s) for p in pts if p.work_s})
    if len(known) < 2:
        return None
    x, y = np.log([b for b, _ in known]), np.log([w for _, w in known])
    return [float(np.exp(np.interp(np.log(b), x, y))) * 1e3 for b in batches]


def _work_said(found: Crossing | None, pts: Sequence[Point], workload: str, controller: str) -> str:
    """The measured per-device work at a measured crossing, with its interval."""
    if found is None or found.at is None:
        return "–"
    mine = [p for p in pts if (p.workload, p.controller) == (workload, controller)]
    work = _work_at(found.at, mine)
    return "–" if work is None else f"{work[0]:.3g} [{work[1]:.3g}, {work[2]:.3g}]"


def _predicted_work(pred: PredictedMode | None) -> str:
    """The predicted per-device work at the predicted crossing, with its interval."""
    work = pred.work_s if pred is not None else None
    if not work:
        return "–"
    e, lo, hi = (w * 1e3 for w in work)
    return f"{e:.3g} [{lo:.3g}, {hi:.3g}]"


def prediction_errors(pts: Sequence[Point], found: Sequence[Prediction]) -> list[PredictionError]:
    """At every measured point predicted: predicted over measured speedup, minus 1
    (`error`), the prediction's model and whether it was made before the point's rows
    (`heldout.made_before`: the 2-device row and its 1-device bases)."""
    out = []
    for p in pts:
        pred = predicted_speedup(found, p)
        if pred is None:
            continue
        made = next(
            x for x in found if x.workload == p.workload and x.fields.controller == p.controller
        )
        out.append(
            PredictionError(
                error=pred[0] / p.speedup[0] - 1,
                model=made.made_from.model,
                before=made_before(made, [p.record, p.base.record]),
            )
        )
    return out


INTRO = (
    "**Terms.** A *step* is one optimiser update of the whole global batch. A *solver "
    "iteration* is one pass of the ODE solver's loop. The *best 1-device step* is the "
    "fastest measured 1-device step that trains the same model as the default step "
    "(final losses within the loss rule, `loss.differs`): every speedup here is over "
    "it, at the same global batch. The *per-device work* is the best 1-device step's "
    "time per solver iteration at the per-device batch: what one device does per "
    "iteration of its loop once the batch is split. Splitting pays where the speedup "
    "is above 1."
)


def crossover_markdown(
    recs: Sequence[Rec], pts: Sequence[Point], found: Sequence[Prediction]
) -> str:
    """The page's table file: terms, where each mode starts to pay (in the work, and in
    the batch per workload of the axis), the prediction beside it, and every point."""
    ok = [r for r in recs if r.ok]
    hardware = ok[0].hardware if ok else Hardware()
    errors = prediction_errors(pts, found)
    error_line = (
        f"Predicted against measured speedup at the {len(errors)} measured points it "
        f"predicts: median |error| {np.median([abs(e.error) for e in errors]) * 100:.0f} "
        f"% ({said(errors)})."
        if errors
        else "No prediction along the axis yet (`odestudy predict --map`)."
    )
    parts = [
        "# When splitting the batch pays",
        "",
        f"Machine {escape(ok[0].machine_id if ok else '–')} "
        f"({escape(hardware.cpu_model)}, {escape(hardware.physical_cores)} "
        f"physical cores; {MAP_DEVICES} devices are virtual CPU devices, one per core); "
        + sessions.sessions_line(ok, list(recs)),
        "",
        INTRO,
        "",
        "## Where each mode starts to pay",
        "",
        crossover_table(pts),
        "",
        "## Measured beside predicted",
        "",
        beside_table(pts, found),
        "",
        error_line,
        "",
        "## Every point",
        "",
        points_table(pts),
    ]
    return "\n".join(parts) + "\n"


def crossover_tables(results: str | Path, figures: str | Path, scale: str = "quick") -> list[Table]:
    """The crossover's table (`crossover`) and, with points, its figure
    (`figures/crossover.png`, drawn); at another scale than quick, only where the axis
    has rows there (else none)."""
    recs = study_records(results, scale)
    if not recs and scale != "quick":
        return []
    pts = points(recs)
    machine = (recs[0].machine_id or "") if recs else ""
    found = axis_predictions(results, machine) if machine else []
    figs = crossover_figure(pts, figures)[:1] if any(p.work_s for p in pts) else []
    return [table_value("crossover", crossover_markdown(recs, pts, found), figs)]
