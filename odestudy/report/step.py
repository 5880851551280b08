"""What bounds a training step, and the levers on it: the verdict of a step-cost sweep
(`measure.cost.step_cost_sweep`) and the step page's table (`step_table`)."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..measure.recommended import recommended_levers, study_controllers
from ..measure.scenario import Scenario
from ..study.rec import LeverRecord, LeverRow, Loops, Sweep
from ..study.studies import Block, Grid, Text
from . import loss, sessions
from .floor import FLOOR_TEXT, floor_cells, recommended_made_of
from .intervals import fmt_interval
from .tables import escape
from .tables import fmt as _fmt


@dataclasses.dataclass(frozen=True)
class StepVerdict:
    """What bounds the step of a step-cost sweep (`verdict`)."""

    crossover_batch: float | None
    flops_per_s: float | None
    bytes_per_s: float | None
    forward_share: list[float | None]
    memory_fraction: float | None
    bound: str | None


def verdict(sweep: Sweep) -> StepVerdict:
    """What bounds the step of a step-cost sweep (`step_cost_sweep`'s record).

    The per-sample work's FLOP/s and bytes/s: the slopes of XLA's cost analysis against
    the batch over the fitted time per sample-iteration. `bound`: "compute" at half the
    measured matmul rate, "memory" at half the cache bandwidth (XLA's bytes are mostly
    cache hits for this model's small arrays), else "overhead"; none without the cache's.
    """
    fit, rows = sweep.fit, sweep.rows
    per_sample, fixed = fit.per_sample_iteration_s, fit.fixed_per_iteration_s
    batches = np.asarray([r.batch for r in rows], float)

    def slope(key: str) -> float | None:
        values = [r.get(key) for r in rows]
        if any(v is None for v in values):
            return None
        return float(np.polyfit(batches, np.asarray(values, float), 1)[0])

    flops, nbytes = slope("flops_cost_analysis"), slope("bytes_cost_analysis")
    flops_per_s = flops / per_sample if flops and per_sample > 0 else None
    bytes_per_s = nbytes / per_sample if nbytes and per_sample > 0 else None
    rates = sweep.rates
    compute = flops_per_s / rates.matmul_flops_per_s if flops_per_s and rates else None
    memory = bytes_per_s / rates.memory_bytes_per_s if bytes_per_s and rates else None
    cache = (
        bytes_per_s / rates.cache_bytes_per_s if bytes_per_s and rates.cache_bytes_per_s else None
    )
    bound = None
    if compute is not None and cache is not None:
        bound = "compute" if compute >= 0.5 else "memory" if cache >= 0.5 else "overhead"
    return StepVerdict(
        crossover_batch=fixed / per_sample if per_sample > 0 else None,
        flops_per_s=flops_per_s,
        bytes_per_s=bytes_per_s,
        forward_share=[r.forward_share for r in rows],
        memory_fraction=memory,
        bound=bound,
    )


def loop_summary(loops: Loops | None) -> tuple[str, str]:
    """`("fwd / bwd", "fwd / bwd")`: loop bodies and conditionals one step executes
    (`measure.loops.count_loops`), forward and backward; dashes where not counted."""
    if not loops:
        return "–", "–"
    bodies = {"forward": 0, "backward": 0}
    for key, n in loops.bodies_by.items():
        bodies[key.split()[0]] += n
    conds = loops.conditional_executions
    return (
        f"{bodies['forward']} / {bodies['backward']}",
        f"{conds.get('forward', 0)} / {conds.get('backward', 0)}",
    )


def session_commit(rec: Sweep | LeverRecord) -> str:
    """A side study's session and commit, `machine, day hh:mm–hh:mm UTC (commit)`, from
    `rec` (a sweep or lever record, its `session` set by `sessions.index`)."""
    session = rec.session
    commit = sessions.short_commit(rec)
    return f"{session.when} ({commit})" if isinstance(session, sessions.Session) else commit


def _rate(value: float | None) -> str:
    """A rate in units of 1e9 (GFLOP/s, GB/s) as a cell; a dash where not measured."""
    return _fmt(value and value / 1e9, 3)


# --- the step-cost sweeps --------------------------------------------------------------

SWEEP_HEADER = (
    "Controller",
    "Variant",
    "Session (commit)",
    "Fixed (us/iteration)",
    "Per sample (us/iteration)",
    "Crossover batch",
    "Forward share",
    "Per-sample GFLOP/s",
    "Matmul GFLOP/s",
    "Per-sample GB/s",
    "Cache GB/s",
    "Memory GB/s",
    "Bound",
)
SWEEP_TEXT = (
    "Step time per executed solver iteration = fixed + per sample x batch, fitted "
    "over batch sizes (`benchmarks/step_cost.py`). **Crossover**: the batch at which "
    "the per-sample work equals the fixed cost; below it the fixed cost bounds the "
    "step. **Forward share**: the forward pass (the loss alone) over the whole step, "
    "over the batch sizes swept. The per-sample work's GFLOP/s and GB/s come from "
    "XLA's cost analysis (one forward and one backward loop body per iteration) "
    "against this machine's measured float32 matmul rate and bandwidths (**cache**: "
    "an elementwise update of a 1 MB array repeated in one compiled loop; "
    "**memory**: of a 256 MB array). XLA counts the bytes of every operation, most "
    "of them cache hits for this model's small arrays, so **bound** is compute "
    "where the FLOP/s reach half the matmul rate, memory where the bytes/s reach "
    "half the cache bandwidth, else overhead."
)


def sweep_row(s: Sweep) -> list[str]:
    """The step-cost table's row of sweep `s`."""
    v = verdict(s)
    rates = s.rates
    shares = [x for x in v.forward_share if x is not None]
    return [
        s.fields.controller or "–",
        escape(s.label or "default"),
        session_commit(s),
        f"{s.fit.fixed_per_iteration_s * 1e6:.0f}",
        f"{s.fit.per_sample_iteration_s * 1e6:.1f}",
        _fmt(v.crossover_batch, 2),
        f"{min(shares):.2f}–{max(shares):.2f}" if shares else "–",
        _rate(v.flops_per_s),
        _rate(rates.matmul_flops_per_s),
        _rate(v.bytes_per_s),
        _rate(rates.cache_bytes_per_s),
        _rate(rates.memory_bytes_per_s),
        v.bound or "–",
    ]


def sweep_section(sweeps: Sequence[Sweep]) -> list[Block]:
    """The step-cost sweeps' table (the default first), or one line where there are none."""
    if not sweeps:
        return [Text("No step-cost sweep of this machine (`benchmarks/step_cost.py`).")]
    order = sorted(sweeps, key=lambda s: (s.fields.controller, s.label != "default"))
    return [Text(SWEEP_TEXT), Grid(SWEEP_HEADER, tuple(sweep_row(s) for s in order))]


# --- the levers ---------------------------------------------------------------------------

LEVER_HEADER = (
    "Controller",
    "Variant",
    "Levers",
    "Step (ms)",
    "Speedup [95% CI]",
    "Loop bodies (fwd / bwd)",
    "Conditionals (fwd / bwd)",
    "Kernels",
    "µs per kernel",
    "Final loss",
    "Trains the same model",
    "Floor (ms)",
    "x floor [95% CI]",
    "Session (commit)",
)


def lever_text(spreads: dict[str, dict[str, Any]]) -> str:
    """What the lever table shows and how, with the default's loss spread per controller."""
    spread_text = "; ".join(
        f"{escape(c)}: {v['spread_relative']:.1%} over {len(v['rows'])} seeds"
        for c, v in sorted(spreads.items())
    )
    return (
        "Each lever against the default on the trained quick model, 1 device, last "
        "(full-length) stage: every variant in its own process, timed from the default's "
        "trained state on the same batches in interleaved blocks; speedup = default "
        "median step / variant's, 95% bootstrap over blocks and steps. **Loop bodies** "
        "and **conditionals**: what one step executes, forward / backward, counted "
        "in a profile of one untimed step (`measure.loops`; every while loop's body: "
        "solver steps, Tsit5's stages, saved times, checkpoint recomputation). "
        "**Kernels**: every instruction of the compiled step that one step executes, "
        "counted in the same profile (each a kernel the runtime dispatches: a fusion, a "
        "matmul, a copy, a loop's test), and the step's median time per kernel. "
        "**Final loss**: the variant's own training from scratch. **Trains the same "
        "model**: its final loss and the default's within the default's run-to-run "
        "spread over training seeds, measured on the record's machine "
        f"({spread_text or 'not measured'}), one way or the other (`loss.verdict`, the "
        "rule every table applies); 'not measured' where its machine has no spread. A "
        "lever that does not is reported, not recommended. " + FLOOR_TEXT
    )


# The lever table's "Trains the same model" cell per verdict of the loss rule.
_SAME = {
    loss.Verdict.SAME: "yes",
    loss.Verdict.DIFFERENT: "no",
    loss.Verdict.UNMEASURED: "not measured",
}


def lever_row(rec: LeverRecord, r: LeverRow) -> list[str]:
    """The lever table's row of variant `r` of lever record `rec` (its first the default)."""
    lo, hi = r.speedup_ci
    loops = r.loops
    bodies, conds = loop_summary(loops)
    kernels = loops.instructions if loops else None
    row, default = loss.in_record(rec, r), rec.rows[0]
    return [
        rec.fields.controller or "–",
        r.label,
        ", ".join(f"{k}={v}" for k, v in r.levers.items()) or "–",
        f"{r.step_time_s * 1e3:.2f}",
        loss.flag(fmt_interval(r.speedup_vs_default, lo, hi), row, default),
        bodies,
        conds,
        "–" if not kernels else str(kernels),
        "–" if not kernels else f"{r.step_time_s / kernels * 1e6:.2f}",
        _fmt(r.final_loss, 3),
        _SAME[loss.verdict(row, default)],
        *floor_cells(rec, r),
        session_commit(rec),
    ]


def _record_levers(rec: LeverRecord) -> dict[str, Any]:
    """The recommended levers for a lever record's problem and controller."""
    scenario = rec.fields
    fields = {k: scenario[k] for k in ("controller", "problem") if scenario.get(k)}
    return recommended_levers(Scenario(**fields))


def recommended_section(levers: Sequence[LeverRecord]) -> list[Block]:
    """What `--recommended` sets per controller (and where the fused solve runs it), and
    its measured speedup over the default in each lever record that holds it."""
    said = Text(
        "Recommended (`odestudy run --recommended`, `odestudy matrix --recommended`), "
        f"{recommended_made_of()}. The default is the reference's algorithm (Tsit5, one "
        "solve per sample under `vmap`, "
        "`SaveAt(ts=...)`, diffrax's default adjoint), so a speedup over the default is "
        "one over the reference's algorithm on this software stack."
    )
    bullets = []
    for controller in study_controllers():
        found = [
            (rec, r)
            for rec in levers
            if rec.fields.controller == controller
            for r in rec.rows
            if r.levers == _record_levers(rec)
        ]
        if found:
            measured = "; ".join(
                f"{fmt_interval(r.speedup_vs_default, *r.speedup_ci)} "
                f"({r.label}: {r.step_time_s * 1e3:.2f} ms a step, final loss "
                f"{_fmt(r.final_loss, 3)} against {_fmt(rec.rows[0].final_loss, 3)}; "
                f"{session_commit(rec)})"
                for rec, r in found
            )
            bullets.append(f"- {escape(controller)}, over the default: {escape(measured)}.")
    return [said, Text("\n".join(bullets))] if bullets else [said]


def lever_section(levers: Sequence[LeverRecord], spreads: dict[str, dict[str, Any]]) -> list[Block]:
    """The levers' section, or one line where this machine has no lever record."""
    rows = tuple(lever_row(rec, r) for rec in levers for r in rec.rows)
    head = Text("## Levers")
    if not rows:
        return [head, Text("No lever records of this machine (`benchmarks/levers.py`).")]
    table = Grid(LEVER_HEADER, rows)
    return [head, Text(lever_text(spreads)), table, *recommended_section(levers)]


def step_table(
    sweeps: Sequence[dict[str, Any]],
    levers: Sequence[dict[str, Any]],
    spreads: dict[str, dict[str, Any]] | None = None,
) -> list[Block]:
    """What bounds one training step and the levers on it, from one machine's records."""
    typed_sweeps, typed_levers = [Sweep(s) for s in sweeps], [LeverRecord(r) for r in levers]
    machines = sorted({escape(r.machine_id) for r in [*typed_sweeps, *typed_levers]})
    said = Text(
        f"Machine: {', '.join(machines)}. Each row says the session it was measured "
        "in (`odestudy/report/sessions.py`); a speedup compares rows of one record, "
        "so of one session."
    )
    parts: list[Block] = [said] if machines else []
    return parts + sweep_section(typed_sweeps) + lever_section(typed_levers, spreads or {})
