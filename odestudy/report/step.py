"""What bounds a training step: the verdict of a step-cost sweep
(`measure.cost.step_cost_sweep`), from its fit and the machine's measured rates."""

from typing import Any

import numpy as np

from .loss import unequal


def verdict(sweep: dict[str, Any]) -> dict[str, Any]:
    """What bounds the step of a step-cost sweep (`step_cost_sweep`'s record).

    - `crossover_batch`: the batch at which the per-sample work of a solver iteration
      equals its fixed cost: below it the fixed cost (loop and kernel overhead) bounds
      the step, above it the work that grows with the batch.
    - The per-sample work's FLOP/s and bytes/s: the slopes of XLA's cost analysis (one
      forward and one backward loop body, the rest of the step counted once) against
      the batch, divided by the fitted time per sample-iteration; set against this
      machine's measured matmul rate and memory bandwidth (`rates`), where recorded.
    - `bound`: "compute" where the per-sample work reaches half of the measured matmul
      rate; "memory" where its bytes reach half of the measured cache bandwidth
      (`cache_bytes_per_s`); else "overhead" (many small operations per sample, each
      far from what the machine sustains). XLA counts the bytes every operation reads
      and writes; for this model's small arrays most are cache hits, so the ceiling is
      the cache's bandwidth, not memory's: `memory_fraction` (against the bandwidth of
      a large array) above 1 shows it. Sweeps recorded before the cache bandwidth was
      measured get no bound.
    """
    fit, rows = sweep["fit"], sweep["rows"]
    per_sample, fixed = fit["per_sample_iteration_s"], fit["fixed_per_iteration_s"]
    batches = np.asarray([r["batch"] for r in rows], float)

    def slope(key: str) -> float | None:
        values = [r.get(key) for r in rows]
        if any(v is None for v in values):
            return None
        return float(np.polyfit(batches, np.asarray(values, float), 1)[0])

    flops, nbytes = slope("flops_cost_analysis"), slope("bytes_cost_analysis")
    out: dict[str, Any] = {
        "crossover_batch": fixed / per_sample if per_sample > 0 else None,
        "flops_per_sample_iteration": flops,
        "bytes_per_sample_iteration": nbytes,
        "flops_per_s": flops / per_sample if flops and per_sample > 0 else None,
        "bytes_per_s": nbytes / per_sample if nbytes and per_sample > 0 else None,
        "forward_share": [r.get("forward_share") for r in rows],
    }
    rates = sweep.get("rates") or {}
    out["compute_fraction"] = (
        out["flops_per_s"] / rates["matmul_flops_per_s"] if out["flops_per_s"] and rates else None
    )
    out["memory_fraction"] = (
        out["bytes_per_s"] / rates["memory_bytes_per_s"] if out["bytes_per_s"] and rates else None
    )
    out["cache_fraction"] = (
        out["bytes_per_s"] / rates["cache_bytes_per_s"]
        if out["bytes_per_s"] and rates.get("cache_bytes_per_s")
        else None
    )
    if out["compute_fraction"] is None or out["cache_fraction"] is None:
        out["bound"] = None
    elif out["compute_fraction"] >= 0.5:
        out["bound"] = "compute"
    elif out["cache_fraction"] >= 0.5:
        out["bound"] = "memory"
    else:
        out["bound"] = "overhead"
    return out


def same_model(
    final_loss: float, default_loss: float, spread: dict[str, Any] | None
) -> bool | None:
    """Whether a lever trained the default's model: its final loss and the default's
    within the default's run-to-run spread (`benchmarks/loss_spread.py`: the relative
    range of the default's final loss over training seeds), by `loss.unequal`, the test
    every table applies; None without a spread."""
    if not spread:
        return None
    return not unequal(final_loss, default_loss, 1.0 + spread["spread_relative"])


def loop_summary(loops: dict[str, Any] | None) -> tuple[str, str]:
    """`("fwd / bwd", "fwd / bwd")`: loop bodies and conditionals one step executes
    (`measure.loops.count_loops`), forward and backward; dashes where not counted."""
    if not loops:
        return "–", "–"
    bodies = {"forward": 0, "backward": 0}
    for key, n in loops["bodies_by"].items():
        bodies[key.split()[0]] += n
    conds = loops["conditional_executions"]
    return (
        f"{bodies['forward']} / {bodies['backward']}",
        f"{conds.get('forward', 0)} / {conds.get('backward', 0)}",
    )
