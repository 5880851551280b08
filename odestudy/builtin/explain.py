"""The explanation study (`make explain`): the studies that explain the scaling
(`grid.explain_scenarios`, CPU), and its page's sections, with their figures, from the
records."""

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..measure.controllers import PID
from ..measure.modes import mode_facts
from ..measure.scenario import SCALES, Scenario
from ..measure.timing import PROTOCOL
from ..report import loss, sessions
from ..report.floor import ratio_cell
from ..report.frames import BaselineError, is_default
from ..report.intervals import RESAMPLES
from ..report.plots import MODE_STYLE, _save, controller_dashes
from ..report.tables import escape, loss_cell, render_body
from ..report.tables import fmt as _fmt
from ..study.grid import explain_scenarios, for_problem
from ..study.rec import EvalPoint, Rec
from ..study.studies import Block, Grid, Page, ReportInputs, Study, Table, Text

# The evaluation loss the time-to-target runs race to (MSE on the evaluation set), per
# scale: a level a trained model has to work for, fixed before the runs, between the
# untrained field's loss and the reference's final losses (`data/reference_tables.csv`).
TARGET_LOSS = {"smoke": 0.2, "quick": 0.01, "seed": 0.001}


def _training(r: Rec) -> str:
    """How a row trained: stages x steps per stage, learning rate."""
    s = r.fields
    stages = len(s.length_fractions or ())
    return f"{stages} x {s.steps_per_stage}, lr {_fmt(s.learning_rate)}"


# The step's levers (`Scenario` fields of the solve's structure) a row may set.
STEP_LEVERS = (
    "solve",
    "saveat",
    "adjoint",
    "max_steps",
    "stages",
    "unroll",
    "donate",
    "fast_activations",
    "mlp_reverse",
    "vector_width",
)


def _levers(r: Rec) -> str:
    """The step levers a row sets (`STEP_LEVERS` away from their defaults), or "default"."""
    s = r.fields
    base = Scenario.__dataclass_fields__
    parts = [f"{k}={s[k]}" for k in STEP_LEVERS if k in s and s[k] != base[k].default]
    return ", ".join(parts) or "default"


def _table(header: tuple[str, ...], rows: list[list[Any]], recs: list[Rec]) -> list[Block]:
    """A table of `rows` whose last item is the pair of records a row's ratio joins
    (`(record, None)` for one record), and a line naming their sessions; a **Session**
    column where they span several."""
    pairs = [r[-1] for r in rows]
    cells = [r[:-1] for r in rows]
    shown = [x for pair in pairs for x in pair if x is not None]
    if len({sessions.session_of(x, recs) for x in shown}) > 1:
        header = (*header, "Session")
        cells = [[*c, sessions.joined(a, b, recs)] for c, (a, b) in zip(cells, pairs, strict=True)]
    return [Grid(header, tuple(cells)), Text(escape(sessions.sessions_line(shown, recs)))]


def _runs(r: Rec) -> str:
    return str(len(r.step_time_runs_s or [r.step_time_s]))


def _by_mode_spread(row: list[Any]) -> tuple[str, float]:
    """The order of a table whose rows start with mode, devices and spread."""
    return row[0], float(row[2])


def _pairs(recs: list[Rec], keep: Callable[[Rec], bool], **changes) -> list[tuple[Rec, Rec]]:
    """Each ok record `keep` selects, with its `twin` under `changes` where it has one."""
    found = [(r, twin(r, recs, **changes)) for r in recs if r.ok and keep(r)]
    return [(r, t) for r, t in found if t is not None]


def _section(
    said: str, header: tuple[str, ...], rows: list[list[Any]], recs: list[Rec], key: Callable
) -> list[Block]:
    """A section's text and its table of `rows` sorted by `key`; none without rows."""
    if not rows:
        return []
    return [Text(said), *_table(header, sorted(rows, key=key), recs)]


def twin(rec: Rec, recs: list[Rec], **changes) -> Rec | None:
    """The ok record whose scenario is `rec`'s with `changes` applied, on the same machine,
    versions, protocol and environment, or None; `frames.BaselineError` where ambiguous."""
    want = dict(rec.fields, **changes)

    def where(r: Rec) -> tuple:
        return r.machine_id, r.versions, r.protocol, r.measurement_env

    found = [r for r in recs if r.ok and r.fields == want and where(r) == where(rec)]
    if len(found) > 1:
        raise BaselineError(
            f"{len(found)} ambiguous records for {rec.name} with "
            f"{changes}: {', '.join(r.name for r in found)}"
        )
    return found[0] if found else None


HETEROGENEITY_HEADER = (
    "Mode",
    "Devices",
    "Spread",
    "Training",
    "Steps needed (mean)",
    "Steps executed per device",
    "Slowest sample",
    "Waste within device",
    "Waste across devices",
    "Waste total",
    "Step time (s)",
    "Speedup vs 1 device [95% CI]",
    "Runs",
    "Final loss",
)


def _plain(r: Rec) -> bool:
    """Whether `r` is an ok strong-scaling row of one process at its scale's batch."""
    at_scale = r.scale is not None and r.global_batch == SCALES[r.scale]["batch"]
    return r.ok and r.scaling == "strong" and r.processes in (None, 1) and at_scale


def _heterogeneity_rows(recs: list[Rec]) -> list[list[Any]]:
    """The heterogeneity study's PID rows on 1 and 2 devices at the scale's batch."""
    rows: list[list[Any]] = []
    for r in recs:
        if not (
            _plain(r)
            and is_default(r, "spread", "steps_per_stage", "learning_rate")
            and r.controller == PID.name
            and r.n_devices in (1, 2)
        ):
            continue
        st = r.solver_steps
        w = st.waste
        one = twin(r, recs, mode="single", devices_per_process=1) if r.n_devices > 1 else None
        rows.append(
            [
                r.mode,
                str(r.n_devices),
                _fmt(r.fields.spread),
                _training(r),
                _fmt(st.mean, 3),
                _fmt(st.executed_per_device, 3),
                _fmt(st.max, 3),
                _fmt(w.within_device, 2),
                _fmt(w.across_devices, 2),
                _fmt(w.total, 2),
                _fmt(r.step_time_s),
                ratio_cell(one, r) if one else "–",
                _runs(r),
                loss_cell(r),
                (r, one),
            ]
        )
    return rows


def _waste_figure(shown: list[Rec], figures: Path) -> list[Path]:
    """Lock-step waste and step time against the spread, a line per mode."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    points = pd.DataFrame(
        {
            "mode": [r.mode for r in shown],
            "spread": [r.fields.spread for r in shown],
            "waste": [r.solver_steps.waste.total or 0.0 for r in shown],
            "step_s": [r.step_time_s for r in shown],
        }
    )
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    palette = {m: MODE_STYLE[m] for m in set(points["mode"])}
    for ax, y in ((a, "waste"), (b, "step_s")):
        legend = "auto" if ax is a else False
        sns.lineplot(
            data=points,
            x="spread",
            y=y,
            hue="mode",
            palette=palette,
            marker="o",
            ax=ax,
            legend=legend,
        )
    a.set(
        xlabel="spread of per-sample time scales (0 = reference data)",
        ylabel="lock-step waste: 1 - needed / executed",
        ylim=(0, 1),
    )
    b.set(xlabel="spread", ylabel="step time (s), median", yscale="log")
    fig.suptitle("Heterogeneous samples: PID, global batch 32, 1 or 2 CPU devices")
    fig.tight_layout()
    return _save(fig, figures, "lockstep_waste")


def heterogeneity(recs: list[Rec], figures: Path) -> tuple[list[Block], list[Path]]:
    """Lock-step waste and step time against the complexity knob, per mode (PID)."""
    rows = _heterogeneity_rows(recs)
    if not rows:
        return [], []
    said = (
        "Steps needed: mean forward solver steps per sample. Executed: what each "
        "device's batched loop runs (its slowest sample); in `shard` mode the loop "
        "is global, so every device runs the slowest sample of the whole batch. "
        "Waste within device = 1 - needed / executed per device; across devices = "
        "the further share lost waiting for the slowest device (the most an "
        "asynchronous scheme could recover); total = 1 - needed / slowest. Speedup: "
        "the 1-device row's median step over this row's, at the same spread and "
        "training. Heterogeneous data (spread > 0) trains longer and slower than the "
        "scale's default (Training); a final loss above the trained level is marked."
    )
    table = _section(said, HETEROGENEITY_HEADER, rows, recs, _by_mode_spread)
    return table, _waste_figure([row[-1][0] for row in rows], figures)


def grouping(recs: list[Rec]) -> list[Block]:
    """Grouped against random batching at the same spread and mode."""
    rows = [
        [
            g.mode,
            str(g.n_devices),
            _fmt(g.fields.spread),
            _fmt(r.solver_steps.waste.total, 2),
            _fmt(g.solver_steps.waste.total, 2),
            _fmt(r.step_time_s),
            _fmt(g.step_time_s),
            ratio_cell(g, r),
            f"{_runs(r)} / {_runs(g)}",
            loss_cell(r),
            loss_cell(g),
            (g, r),
        ]
        for g, r in _pairs(recs, lambda g: g.fields.batching == "grouped", batching="random")
    ]
    header = (
        "Mode",
        "Devices",
        "Spread",
        "Waste random",
        "Waste grouped",
        "Step random (s)",
        "Step grouped (s)",
        "Grouped / random [95% CI]",
        "Runs random / grouped",
        "Final loss random",
        "Final loss grouped",
    )
    said = (
        "Grouped batching sorts each epoch's samples by their time horizon (known "
        "from the training data alone, no evaluation data), cuts batches of similar "
        "cost and shuffles their order: every sample is still seen once per epoch, "
        "at the same number of steps."
    )
    return _section(said, header, rows, recs, _by_mode_spread)


def within_ode(recs: list[Rec]) -> list[Block]:
    """Within-ODE batching (one step size per batch) against per-sample solves."""
    within = _pairs(
        recs, lambda w: w.fields.solve == "within_ode", solve="per_sample", batching="random"
    )
    rows = [
        [
            w.mode,
            str(w.n_devices),
            w.controller,
            _fmt(w.fields.spread),
            _fmt(p.solver_steps.max, 3),
            _fmt(w.solver_steps.max, 3),
            _fmt(p.step_time_s),
            _fmt(w.step_time_s),
            ratio_cell(p, w),
            f"{_runs(p)} / {_runs(w)}",
            loss_cell(p),
            loss_cell(w),
            f"{p.collectives_in_loops} / {w.collectives_in_loops}",
            (p, w),
        ]
        for w, p in within
    ]
    header = (
        "Mode",
        "Devices",
        "Controller",
        "Spread",
        "Steps executed, per-sample",
        "Steps, within-ODE",
        "Step per-sample (s)",
        "Step within-ODE (s)",
        "Speedup within-ODE [95% CI]",
        "Runs per-sample / within",
        "Final loss per-sample",
        "Final loss within-ODE",
        "In-loop collectives per-sample / within",
    )
    said = (
        "Within-ODE: the local batch is one ODE state with one step size (the "
        "error norm covers the whole batch); per-sample: vmap, one step size per "
        "sample, the batched loop running until the slowest sample ends. Speedup: "
        "the per-sample row's median step over the within-ODE row's; each row is its "
        "own training, timed in its own runs (the lever study instead times both on "
        "the same trained state and batches, interleaved). A ratio of rows measured in "
        "different sessions also holds the machine's drift between them, which its "
        "interval does not: such rows say so (**Sessions joined**)."
    )
    return _section(said, header, rows, recs, lambda x: (x[2], x[0], float(x[3])))


def collectives(recs: list[Rec]) -> list[Block]:
    """Collectives per training step, from the compiled HLO and the loop iterations."""
    rows: list[list[Any]] = []
    for r in recs:
        if not (_plain(r) and is_default(r) and r.n_devices > 1):
            continue
        c, iters = r.collectives, r.solver_steps.max
        if c.total is None or iters is None:
            continue  # a record without its compiled program's audit
        outside = c.total - c.in_loops
        facts = mode_facts(r.mode)
        against = facts.twin_mode if facts is not None else None
        sm = twin(r, recs, mode=against) if against is not None else None
        t, t_twin = r.step_time_s, sm.step_time_s if sm else None
        share = (1 - t_twin / t) if t_twin is not None and t is not None else None
        rows.append(
            [
                r.mode,
                str(r.n_devices),
                r.controller,
                str(outside),
                str(c.in_loops),
                _fmt(c.bytes_in_loops),
                _fmt(iters, 3),
                _fmt(outside + c.in_loops * iters, 4),
                _fmt(share, 2),
                (r, sm),
            ]
        )
    header = ("Mode", "Devices", "Controller", "Collectives outside loops", "In loops",
              "Bytes in loops (one pass)", "Forward loop iterations",
              "Executed per step (estimate)", "Share of step vs shard_map")  # fmt: skip
    said = (
        "Executed per step = outside + in-loop x forward loop iterations (the "
        "slowest sample's forward steps); a lower bound, since the backward pass's "
        "loops repeat in-loop collectives too. Share = 1 - t(shard_map) / t(shard) "
        "at the same devices, controller and batch: the time the compiler-partitioned "
        "step loses to collectives inside the solver loops and global lock-step, "
        "against a build with neither. Rows with more devices than physical cores "
        "measure overhead."
    )
    return _section(said, header, rows, recs, lambda x: (x[2], int(x[1]), x[0]))


def _rate(r: Rec) -> float | None:
    """A row's samples per second: its global batch over its median step."""
    return r.global_batch / r.step_time_s if r.step_time_s is not None else None


def batch_size(recs: list[Rec], figures: Path) -> tuple[list[Block], list[Path]]:
    """One-device step time and throughput against the batch size (PID, spread 0)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    wanted = ("single", PID.name, "strong")
    sel = [
        r for r in recs if r.ok and is_default(r) and (r.mode, r.controller, r.scaling) == wanted
    ]
    if len(sel) < 2:
        return [], []
    sel.sort(key=lambda r: r.global_batch)
    rows = [[str(r.global_batch), _fmt(r.step_time_s), _fmt(_rate(r), 4), (r, None)] for r in sel]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    points = pd.DataFrame({"batch": [r.global_batch for r in sel], "rate": list(map(_rate, sel))})
    sns.lineplot(data=points, x="batch", y="rate", marker="o", ax=ax)
    ax.set(
        xscale="log",
        xlabel="batch (1 device)",
        ylabel="samples / s",
        title="One-device throughput, PID",
    )
    fig.tight_layout()
    return (
        _table(("Batch", "Step time (s)", "Samples / s"), rows, recs),
        _save(fig, figures, "throughput_vs_batch"),
    )


def _hit(r: Rec, target: float) -> EvalPoint | None:
    return next((c for c in r.curve if c.eval_loss <= target), None)


# The time-to-target verdict's heading where the compared row's interval includes 1.
FIRST_NOT_SEPARABLE = "First to the target here, not separable from the row it is compared with"


def _time_resamples(r: Rec, hit_step: int, rng):
    """Bootstrap resamples of the time to reach `hit_step`: each stage's steps before
    the hit at the mean of that stage's step times resampled (within-run spread only)."""
    stages = r.stage_times
    per_stage = (r.steps or 0) // max(1, len(stages))
    total = np.zeros(RESAMPLES)
    for i, st in enumerate(stages):
        n = min(max(0, hit_step - i * per_stage), per_stage)
        times = np.asarray(st.step_times_s or [st.step_time_s])
        if n:
            idx = rng.integers(0, len(times), (RESAMPLES, len(times)))
            total += n * times[idx].mean(axis=1)
    return total


def _run_palette(curves: pd.DataFrame) -> dict[str, Any]:
    """Each run's colour: its mode's, lighter for later runs of the same mode."""
    import seaborn as sns

    out: dict[str, Any] = {}
    for mode, group in curves.groupby("mode"):
        runs = list(dict.fromkeys(group["run"]))
        shades = sns.light_palette(MODE_STYLE.get(mode, "grey"), len(runs) + 2)[2:]
        out.update(zip(runs, shades[::-1], strict=True))
    return out


TARGET_HEADER = (
    "Mode",
    "Controller",
    "Devices",
    "Global batch",
    "Learning rate",
    "Step levers",
    "Evaluated every",
    "Time to target (s)",
    "Steps to target",
    "Final eval loss",
)
# The heading where the rows compared were each timed in one run: their interval holds
# only the spread of steps within that run, so it backs no "fastest".
FIRST_ONE_RUN = "First to the target here (one run per row: its interval backs no verdict)"


def _target_rows(sel: list[Rec], target: float) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Rows: per record with an evaluation curve, its table row and its curve's points."""
    rows, points = [], []

    def order(r: Rec) -> tuple:
        return r.controller, r.n_devices, r.mode, r.global_batch, r.lr_scaling or ""

    for r in sorted(sel, key=order):
        curve = r.curve
        label = f"{r.mode} {r.controller} {r.n_devices} dev, batch {r.global_batch}, lr "
        label += f"{r.learning_rate:g}" + (", recommended step" if _levers(r) != "default" else "")
        run = {"run": label, "mode": r.mode, "controller": r.controller}
        points += [{**run, "time_s": c.train_time_s, "loss": c.eval_loss} for c in curve]
        hit = _hit(r, target)
        rows.append(
            [
                r.mode,
                r.controller,
                str(r.n_devices),
                str(r.global_batch),
                _fmt(r.learning_rate),
                _levers(r),
                str(r.fields.eval_every),
                _fmt(hit.train_time_s, 3) if hit else "not reached",
                str(hit.step) if hit else "–",
                _fmt(curve[-1].eval_loss),
                (r, None),
            ]
        )
    return rows, points


def _target_figure(points: list[dict[str, Any]], target: float) -> Any:
    """Evaluation loss against training wall clock, a line per run."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(8, 4.5))
    curves = pd.DataFrame(points)
    sns.lineplot(
        data=curves,
        x="time_s",
        y="loss",
        hue="run",
        style="controller",
        palette=_run_palette(curves),
        dashes=controller_dashes(curves["controller"].unique()),
        estimator=None,
        ax=ax,
    )
    ax.axhline(target, ls=":", color="grey", label=f"target {target}")
    ax.set(
        yscale="log",
        xlabel="training wall clock (s, evaluation excluded)",
        ylabel="evaluation loss",
        title="Time to target loss",
    )
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def _compared(hits: list[tuple[Rec, EvalPoint]], best: Rec) -> tuple[Rec, EvalPoint]:
    """The row the fastest (`best`) is compared with: one device with its controller,
    batch, learning rate and levers, else the next fastest."""
    same = (best.controller, best.global_batch, best.learning_rate)
    one = [
        (r, h)
        for r, h in hits
        if r.n_devices == 1
        and r is not best
        and _levers(r) == _levers(best)
        and (r.controller, r.global_batch, r.learning_rate) == same
    ]
    if one:
        return one[0]
    return min((x for x in hits if x[0] is not best), key=lambda x: x[1].train_time_s)


def _who(r: Rec) -> str:
    """A row as the sentence names it (record text: never markup)."""
    return f"{escape(r.mode)} {escape(r.controller)} on {escape(r.n_devices)} device(s)"


def _first_sentence(sel: list[Rec], recs: list[Rec], target: float) -> list[Block]:
    """Which row of one session reaches the target first, against `_compared`'s row:
    "fastest" only where the 95% interval says so and the rows ran more than once."""
    hits = [(r, h) for r in sel if (h := _hit(r, target)) is not None]
    if not hits:
        return []
    # One session per result: the fastest row against rows of its own session.
    best, hb = min(hits, key=lambda x: x[1].train_time_s)
    here = sessions.session_of(best, recs)
    hits = [x for x in hits if sessions.session_of(x[0], recs) == here]
    if len(hits) < 2:
        return []
    rng = np.random.default_rng(0)
    other, ho = _compared(hits, best)
    ratio = ho.train_time_s / hb.train_time_s
    boot = _time_resamples(other, ho.step, rng) / _time_resamples(best, hb.step, rng)
    lo, hi = np.percentile(boot * ratio / np.median(boot), [2.5, 97.5])
    shown = loss.pair_mark(f"{ratio:.2f}x as long [{lo:.2f}, {hi:.2f}]", other, best)
    single = any(len(r.step_time_runs_s or []) <= 1 for r in (best, other))
    # "Fastest" only where the interval says so; else the first there, not separable.
    head = (
        FIRST_ONE_RUN if single else "Fastest to the target here" if lo > 1 else FIRST_NOT_SEPARABLE
    )
    return [
        Text(
            f"**{head}** ({escape(here.label)}): {_who(best)}, "
            f"{_fmt(hb.train_time_s, 3)} s; {_who(other)} takes {shown} (95% bootstrap over "
            "each run's step times; one run per row, so run-to-run drift of the machine is not "
            "in the interval)."
        )
    ]


def time_to_target(recs: list[Rec], figures: Path) -> tuple[list[Block], list[Path]]:
    """Evaluation loss against wall clock, time to `TARGET_LOSS`, and which row is first."""
    sel = [r for r in recs if r.ok and r.eval_curve]
    if not sel:
        return [], []
    target = TARGET_LOSS.get(sel[0].scale or "", 0.01)
    rows, points = _target_rows(sel, target)
    fig = _target_figure(points, target)
    text = Text(
        f"Target: evaluation loss {target}, fixed before the runs. Time is the sum "
        "of the waited-for training steps; evaluations are excluded."
    )
    body = [text, *_table(TARGET_HEADER, rows, recs), *_first_sentence(sel, recs, target)]
    return body, _save(fig, figures, "time_to_target")


# What makes a section from one machine's records: its blocks and its figures.
Section = Callable[[list[Rec]], tuple[list[Block], list[Path]]]


def section(
    title: str,
    make: Section,
    by_machine: dict[str, list[Rec]],
    machine: str,
) -> tuple[list[Block], list[Path]]:
    """One section from `machine`'s records, else from the first other machine that
    holds records of it (said); none where no machine does."""
    for m in [machine, *sorted(m for m in by_machine if m != machine)]:
        body, figs = make(by_machine.get(m, []))
        if body:
            said = f"Measured on {escape(m)}: the page's machine ({escape(machine)}) holds no "
            elsewhere = [Text(said + "records of this section.")] if m != machine else []
            return [Text(f"## {title}"), *elsewhere, *body], figs
    return [], []


def explain_table(recs: list[Rec], figures: str | Path, machine: str | None = None) -> Table:
    """The explanation's table and its figures (drawn into `figures`) from all records of
    a scale: each section from `machine`'s records (default: the first record's)."""
    figures = Path(figures)
    # One protocol, the current one (`timing.PROTOCOL`), as in the scaling tables.
    older = [r for r in recs if r.ok and r.protocol != PROTOCOL]
    recs = [r for r in recs if r.protocol == PROTOCOL]
    machine = machine or (str(recs[0].machine_id) if recs else "")
    by_machine: dict[str, list[Rec]] = {}
    for r in recs:
        by_machine.setdefault(str(r.machine_id), []).append(r)
    body: list[Block] = [Text(f"{len(older)} record(s) of an older measurement protocol "
                              f"are not shown (now {PROTOCOL}).")] if older else []  # fmt: skip
    sections: list[tuple[str, Section]] = [
        ("Lock-step waste against heterogeneity", lambda r: heterogeneity(r, figures)),
        ("Complexity-aware batching", lambda r: (grouping(r), [])),
        ("Within-ODE batching against per-sample solves", lambda r: (within_ode(r), [])),
        ("Collectives per training step", lambda r: (collectives(r), [])),
        ("Batch size", lambda r: batch_size(r, figures)),
        ("Batch size and learning rate: time to target loss", lambda r: time_to_target(r, figures)),
    ]
    made = [section(title, make, by_machine, machine) for title, make in sections]
    said = [b for blocks, _ in made for b in blocks]
    figs = [f for _, paths in made for f in paths]
    body += said or [Text("No records of these studies yet (`make explain`).")]
    table = Table("explain", "Explaining the scaling", tuple(body), tuple(figs))
    notes = tuple(Text(n) for n in loss.notes(render_body(table)))
    return dataclasses.replace(table, body=table.body + notes)


class Explain(Study):
    """The studies that explain the scaling (`explain_scenarios`, CPU)."""

    name: ClassVar[str] = "explain"
    order: ClassVar[int] = 2
    title: ClassVar[str] = "Explanations"
    page: ClassVar[Page | None] = Page(
        "explain",
        "Explanations (`make explain`)",
        ("explain",),
        ("lockstep_waste", "throughput_vs_batch", "time_to_target"),
    )

    def scenarios(self, scale, device="auto", full=False):
        return explain_scenarios(scale), []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return for_problem(self.matrix(scale), problem)

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its sections from the CPU table's machine's records (`explain_table`)."""
        return [explain_table(list(inputs.records), inputs.figures, inputs.machines["cpu"])]
