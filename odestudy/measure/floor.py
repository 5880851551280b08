"""A training step's compute floor: the arithmetic its solver steps must do, from XLA's
cost analysis, at the rate this device's probe sustains at the step's own shapes.

XLA's cost analysis counts a while loop's body once, whatever its trip count. The floor
is counted instead on programs without loops: the loss and gradient with the solve
replaced by `k` field evaluations (`EvaluationsSolve`), `k = 1` and `k = 2`. Their
difference is one field evaluation, forward and backward; the rest is the step outside
the solve. A solve of `n` steps (the batch's slowest sample under `vmap`) evaluates the
field `6 n + 1` times (Tsit5: six new stages a step, FSAL), so

    floor FLOPs = rest + (6 n + 1) x per evaluation,
    floor time = floor FLOPs / the device's matmul-and-tanh rate at (batch, width).

A step's time over its floor: how far above its arithmetic it runs.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .loss import mean_value
from .model import AbstractBatchSolve, BatchSolve
from .problem import stage_lengths
from .scenario import Scenario
from .solvers import Fused
from .training import prepare

STAGES_PER_STEP = 6  # Tsit5's new stages per solver step (first same as last)


class EvaluationsSolve(AbstractBatchSolve):
    """`evaluations` chained field evaluations (Euler steps over each series' first
    interval) in place of the solve, with no loop; every saved time the last state."""

    def __init__(self, evaluations: int, *args: Any):
        super().__init__(*args)
        self.evaluations = evaluations

    def __call__(self, field: Callable[..., Any], ts: Any, y0: Any, args: Any = None) -> Any:
        h = (ts[:, 1] - ts[:, 0]).reshape((-1,) + (1,) * (jnp.ndim(y0) - 1))
        y, in_axes = y0, (0, 0, None if args is None else 0)
        for _ in range(self.evaluations):
            y = y + h * jax.vmap(field, in_axes=in_axes)(ts[:, 0], y, args)
        self.calls.append(jnp.zeros(ts.shape[0], jnp.int32))
        return jnp.broadcast_to(y[:, None], (y.shape[0], ts.shape[1], *y.shape[1:]))


def reverse_steps(s: Scenario, problem: Any, model: Any, batch: Any, key: Any = None) -> int | None:
    """The most steps over `batch` that `s`'s reverse pass replays, where it replays only
    the accepted ones (the fused solve's own reverse under PID); else None."""
    structure = s.structure
    adaptive = s.stepsize_controller.adaptive
    if not (adaptive and isinstance(structure.integrator, Fused) and structure.reverse.own_reverse):
        return None
    counting = dataclasses.replace(structure, integrator=Fused(count_accepted=True))
    spec = dataclasses.replace(s.ode_solve(problem), structure=counting)

    def accepted(m: Any, b: Any) -> Any:
        solve = BatchSolve(spec)
        problem.loss(m, b, key, solve)
        return solve.steps()

    return int(np.max(np.asarray(eqx.filter_jit(accepted)(model, batch))))


def _cost(
    s: Scenario, problem: Any, model: Any, batch: Any, evaluations: int, grad: bool = True
) -> tuple[float, float]:
    """XLA's FLOPs and transcendentals (counted apart) for the loss of `model` on `batch`
    and, with `grad`, its gradient, with `evaluations` field evaluations as the solve."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    key = jax.random.PRNGKey(0) if problem.needs_key else None

    def loss(p):
        solve = EvaluationsSolve(evaluations, s.ode_solve(problem))
        return mean_value(problem.loss(eqx.combine(p, static), batch, key, solve))

    fn = jax.value_and_grad(loss) if grad else loss
    cost = jax.jit(fn).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        raise ValueError("this backend's XLA gives no cost analysis: no floor")
    return float(cost["flops"]), float(cost.get("transcendentals", 0.0))


def evaluation_flops(s: Scenario) -> dict[str, float]:
    """What `s`'s step computes at its per-device batch: FLOPs of one field evaluation
    (`per_evaluation`, and its forward alone) and of the rest of the step (`rest`), the
    same of transcendentals, and `least_bytes` (parameters read and written, batch read)."""
    setup = prepare(s, jax.devices()[:1], check=False)
    problem = setup.problem
    n_times = np.shape(problem.times(setup.data))[1]
    last = stage_lengths(n_times, s.length_fractions)[-1]
    data = problem.truncate(setup.data, last, last)
    per_device = s.global_batch // s.total_devices
    batch = problem.take(data, np.arange(min(per_device, problem.size(data))))
    params = setup.step.unplace(setup.params)
    model = eqx.combine(params, setup.static)
    (f1, t1), (f2, t2) = (_cost(s, problem, model, batch, k) for k in (1, 2))
    (g1, _), (g2, _) = (_cost(s, problem, model, batch, k, grad=False) for k in (1, 2))
    # XLA's fusion choices can leave a difference a little above the one-evaluation
    # count (a wide field with a cheap loss): the rest is then counted as nothing.
    return {
        "per_evaluation": f2 - f1,
        "per_evaluation_forward": min(max(0.0, g2 - g1), f2 - f1),
        "rest": max(0.0, 2 * f1 - f2),
        "per_evaluation_transcendentals": max(0.0, t2 - t1),
        "rest_transcendentals": max(0.0, 2 * t1 - t2),
        "batch": per_device,
        "least_bytes": float(2 * _nbytes(params) + _nbytes(batch)),
    }


def _nbytes(tree: Any) -> int:
    """The bytes of a pytree's arrays."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree) if eqx.is_array(x))


def floor_time(
    flops: dict[str, float],
    solver_steps: float,
    flops_per_s: float,
    reverse_steps: float | None = None,
    transcendentals_per_s: float | None = None,
) -> float:
    """Seconds the step's arithmetic takes at `flops_per_s`: the rest plus `6 n + 1`
    field evaluations forward for its `solver_steps`, backward for its `reverse_steps`
    (None: as many), and, given `transcendentals_per_s`, its transcendentals. Counts
    without a forward share charge forward and backward for every step."""
    forward = STAGES_PER_STEP * solver_steps + 1
    backward = forward if reverse_steps is None else STAGES_PER_STEP * reverse_steps + 1
    per = flops["per_evaluation"]
    fwd = flops.get("per_evaluation_forward")
    if fwd is None:
        fwd, backward = per, 0.0  # counted together: charged for every executed step
    seconds = (flops["rest"] + forward * fwd + backward * (per - fwd)) / flops_per_s
    if transcendentals_per_s and "per_evaluation_transcendentals" in flops:
        counted = flops["rest_transcendentals"] + forward * flops["per_evaluation_transcendentals"]
        seconds += counted / transcendentals_per_s
    return seconds
