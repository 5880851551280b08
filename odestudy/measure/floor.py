"""A training step's compute floor: the arithmetic its solver steps must do, from XLA's
cost analysis, at the rate this device's probe sustains at the step's own shapes.

XLA's cost analysis counts a while loop's body once, whatever its trip count, so the
compiled step's own count says little of a solve. The floor is counted instead on
programs without loops: the problem's loss and gradient with the solve replaced by `k`
field evaluations (`EvaluationsSolve`), for `k = 1` and `k = 2`. Their difference is one
field evaluation over the batch, forward and backward; the rest is what the step does
outside the solve (encoder, decoder, loss). A step whose solve executes `n` solver steps
(the batch's slowest sample under `vmap`, the shared count within-ODE) evaluates the
field `6 n + 1` times (Tsit5: six new stages a step, FSAL, one first stage), so

    floor FLOPs = rest + (6 n + 1) x per evaluation,
    floor time = floor FLOPs / the device's matmul-and-tanh rate at (batch, width).

The ratio of a step's time to its floor says how far above its arithmetic it runs: the
rest is loop machinery, memory traffic and launch cost.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .loss import mean_value
from .model import BatchSolve
from .problem import stage_lengths
from .scenario import Scenario
from .training import prepare

STAGES_PER_STEP = 6  # Tsit5's new stages per solver step (first same as last)


class EvaluationsSolve(BatchSolve):
    """`evaluations` chained field evaluations (explicit Euler steps over each series'
    first interval) in place of the solve, every saved time given the last state: the
    arithmetic of that many evaluations, with no loop. Arguments as `BatchSolve`'s."""

    def __init__(self, evaluations: int, *args: Any):
        super().__init__(*args)
        self.evaluations = evaluations

    def __call__(self, field: Callable[..., Any], ts: Any, y0: Any, args: Any = None) -> Any:
        h = (ts[:, 1] - ts[:, 0]).reshape((-1,) + (1,) * (jnp.ndim(y0) - 1))
        y = y0
        for _ in range(self.evaluations):
            if args is None:
                f = jax.vmap(lambda t, yi: field(t, yi, None))(ts[:, 0], y)
            else:
                f = jax.vmap(field)(ts[:, 0], y, args)
            y = y + h * f
        self.calls.append(jnp.zeros(ts.shape[0], jnp.int32))
        return jnp.broadcast_to(y[:, None], (y.shape[0], ts.shape[1], *y.shape[1:]))


def _flops(s: Scenario, problem: Any, model: Any, batch: Any, evaluations: int) -> float:
    """XLA's FLOPs for the loss and gradient of `model` on `batch` with `evaluations`
    field evaluations in place of the solve."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    key = jax.random.PRNGKey(0) if problem.needs_key else None

    def loss(p):
        solve = EvaluationsSolve(evaluations, s.ode_solve(problem))
        return mean_value(problem.loss(eqx.combine(p, static), batch, key, solve))

    cost = jax.jit(jax.value_and_grad(loss)).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        raise ValueError("this backend's XLA gives no cost analysis: no floor")
    return float(cost["flops"])


def evaluation_flops(s: Scenario) -> dict[str, float]:
    """The FLOPs of one field evaluation over `s`'s per-device batch, forward and
    backward (`per_evaluation`), and of the step outside its solve (`rest`), counted on
    this process's default device from `s`'s problem, model and full-length data."""
    setup = prepare(s, jax.devices()[:1], check=False)
    problem = setup.problem
    n_times = np.shape(problem.times(setup.data))[1]
    last = stage_lengths(n_times, s.length_fractions)[-1]
    data = problem.truncate(setup.data, last, last)
    per_device = s.global_batch // s.total_devices
    batch = problem.take(data, np.arange(min(per_device, problem.size(data))))
    params = setup.step.unplace(setup.params)
    model = eqx.combine(params, setup.static)
    one, two = (_flops(s, problem, model, batch, k) for k in (1, 2))
    # XLA's fusion choices can leave the difference a little above `one` (a wide field
    # with a cheap loss): the rest is then counted as nothing.
    # The bytes a step moves at the least: its parameters read and written once, its
    # batch read once (a roofline's memory term, `roofline.roofline_s`).
    least_bytes = 2 * _nbytes(params) + _nbytes(batch)
    return {
        "per_evaluation": two - one,
        "rest": max(0.0, 2 * one - two),
        "batch": per_device,
        "least_bytes": float(least_bytes),
    }


def _nbytes(tree: Any) -> int:
    """The bytes of a pytree's arrays."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree) if eqx.is_array(x))


def floor_time(flops: dict[str, float], solver_steps: float, flops_per_s: float) -> float:
    """Seconds the step's arithmetic takes at `flops_per_s`: the rest plus
    `6 solver_steps + 1` field evaluations (`evaluation_flops`'s `flops`)."""
    evaluations = STAGES_PER_STEP * solver_steps + 1
    return (flops["rest"] + evaluations * flops["per_evaluation"]) / flops_per_s
