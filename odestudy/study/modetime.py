"""A mode's step on N devices from measured terms: the one formula both `odestudy
predict` and the report's projection use."""

from ..measure.modes import MODES


def mode_time(
    mode: str, terms: dict[str, float], gradient_s: float, loop_s: float, in_loop: float
) -> dict[str, float]:
    """One mode's step from the measured `terms` (`per_iteration_s`: a device's time per
    solver iteration at its share of the batch; `iterations_step`: the iterations of the
    step's slowest sample), the gradient all-reduce (`gradient_s`) and, for a mode with
    one loop over the global batch (`AbstractMode.one_loop`: `shard`, `explicit`),
    `in_loop` collectives per solver iteration at `loop_s` each. Returns the step and
    its parts (seconds)."""
    compute = terms["per_iteration_s"] * terms["iterations_step"]
    loop = in_loop * terms["iterations_step"] * loop_s if MODES[mode].one_loop else 0.0
    total = compute + gradient_s + loop
    return {"step_time_s": total, "compute_s": compute, "allreduce_s": gradient_s,
            "in_loop_s": loop}  # fmt: skip
