"""The neural ODE: an MLP vector field solved with Tsit5, and the training loss."""

import functools
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .solvers import Structure, controller_and_dt0, saved_values, solve_options

DEFAULT = Structure()  # diffrax's default solve


class VectorField(eqx.Module):
    """`dy/dt = MLP(y)`: 2 -> 2, width 64, depth 2, softplus."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int = 64, depth: int = 2):
        self.mlp = eqx.nn.MLP(2, 2, width, depth, activation=jax.nn.softplus, key=key)

    def __call__(self, t: Any, y: Float[Array, "2"], args: Any) -> Float[Array, "2"]:
        del t, args
        return self.mlp(y)


def solve(
    model: VectorField,
    ts: Float[Array, " times"],
    y0: Float[Array, "2"],
    controller: str,
    structure: Structure = DEFAULT,
) -> tuple[Float[Array, "times 2"], Int[Array, ""]]:
    """Solve one series with Tsit5 (by default with diffrax's default adjoint,
    `RecursiveCheckpointAdjoint`, saving at `ts`).

    - `model`: the vector field.
    - `ts`: observation times of this series, shape `(n_times,)`.
    - `y0`: initial state, shape `(2,)`.
    - `controller`: `"pid"` or `"stepto"`.
    - `structure`: how the solve saves, differentiates and bounds its steps.

    Returns `(ys, num_steps)`: the states at `ts` and the solver's forward step count.
    """
    stepsize_controller, dt0 = controller_and_dt0(controller, ts)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(model),
        structure.solver(),
        ts[0],
        ts[-1],
        dt0,
        y0,
        stepsize_controller=stepsize_controller,
        **solve_options(structure, controller, ts),
    )
    return saved_values(sol, structure, ts), sol.stats["num_steps"]


def solve_scan(
    model: VectorField, ts: Float[Array, " times"], y0: Float[Array, "2"], unroll: int = 1
) -> tuple[Float[Array, "times 2"], Int[Array, ""]]:
    """One series solved with diffrax's Tsit5 arithmetic, one step per interval of `ts`
    (what `StepTo(ts)` takes), as a `lax.scan`: no adaptive loop, no saving loop, no
    checkpointing (reverse mode stores every step).

    - `ts`, `y0`: as in `solve`; a repeated time (padding) is a step of length 0.
    - `unroll`: `lax.scan`'s unroll.

    The tableau is diffrax's own (`diffrax.Tsit5.tableau`: first stage the same as the
    last, the last stage's state the step's result); the field is autonomous, so the
    stages' times are not needed. Returns `(ys, num_steps)` as `solve` does.
    """
    tableau = diffrax.Tsit5.tableau
    a_lower = [jnp.asarray(row, y0.dtype) for row in tableau.a_lower]

    def f(y):
        return model(None, y, None)

    def step(carry, h):
        y, f0 = carry
        ks = [f0]
        for row in a_lower:
            yi = y + h * sum(row[j] * k for j, k in enumerate(ks))
            ks.append(f(yi))
        return (yi, ks[-1]), yi

    with jax.named_scope("fixed-step-scan"):  # names its loop (`loops.control_flow`)
        _, ys = jax.lax.scan(step, (y0, f(y0)), jnp.diff(ts), unroll=unroll)
    return jnp.concatenate([y0[None], ys]), jnp.asarray(ts.shape[0] - 1)


def observed(ts: Float[Array, "batch times"]) -> Float[Array, "batch times"]:
    """Which points of each series are observations, not padding: the first, and
    every later one whose time exceeds the one before (`Dataset.truncate_padded`
    repeats the last time). Shape `(batch, n_times)`, float 0/1."""
    later = ts[:, 1:] > ts[:, :-1]
    return jnp.concatenate([jnp.ones_like(later[:, :1]), later], axis=1).astype(ts.dtype)


def batch_loss(
    model: VectorField,
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times 2"],
    controller: str,
    structure: Structure = DEFAULT,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """Mean squared error over a batch's observed points (`observed`), each series
    solved on its own (vmap); with `structure.solve="scan"` by `solve_scan`.

    - `ts`: shape `(batch, n_times)`; `ys`: shape `(batch, n_times, 2)`.
    - `structure`: as in `solve`.

    Returns `(loss, num_steps)` with `num_steps` of shape `(batch,)`.
    """
    if structure.solve == "scan":
        one = functools.partial(solve_scan, unroll=structure.unroll)
        pred, num_steps = jax.vmap(one, in_axes=(None, 0, 0))(model, ts, ys[:, 0])
    else:
        pred, num_steps = jax.vmap(solve, in_axes=(None, 0, 0, None, None))(
            model, ts, ys[:, 0], controller, structure
        )
    mask = observed(ts)[..., None]
    loss = jnp.sum(mask * (pred - ys) ** 2) / (jnp.sum(mask) * ys.shape[-1])
    return loss, num_steps


class _BatchField(eqx.Module):
    """`dy_i/dtau = speed_i * f(y_i)` for a whole batch in one state."""

    model: VectorField
    speed: jax.Array

    def __call__(self, tau, y, args):
        return self.speed[:, None] * jax.vmap(lambda yi: self.model(tau, yi, args))(y)


def solve_within_ode(
    model: VectorField,
    ts: Float[Array, "batch times"],
    y0: Float[Array, "batch 2"],
    controller: str,
    structure: Structure = DEFAULT,
) -> tuple[Float[Array, "batch times 2"], Int[Array, " batch"]]:
    """Solve a whole batch as one ODE with one shared step size (DiffEqFlux's
    "within-ODE" batching).

    - `ts`: shape `(batch, n_times)`, each row `linspace(0, T_i, n_times)`.
    - `y0`: shape `(batch, 2)`.
    - `structure`: as in `solve`.

    Each series is rescaled to a common time `tau = t / dt_i` (its observation index),
    so `y_i(t) = u_i(t / dt_i)` with `du_i/dtau = dt_i * f(u_i)`: the same solution,
    one solver loop, one step size for all. Returns `(ys, num_steps)` with
    `num_steps` repeated per sample so that it reads like the per-sample solve.
    """
    speed = ts[:, 1] - ts[:, 0]
    taus = jnp.arange(ts.shape[1], dtype=ts.dtype)
    stepsize_controller, dt0 = controller_and_dt0(controller, taus)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_BatchField(model, speed)),
        structure.solver(),
        taus[0],
        taus[-1],
        dt0,
        y0,
        stepsize_controller=stepsize_controller,
        **solve_options(structure, controller, taus),
    )
    ys = jnp.swapaxes(saved_values(sol, structure, taus), 0, 1)
    return ys, jnp.broadcast_to(sol.stats["num_steps"], (ts.shape[0],))


def batch_loss_within_ode(
    model: VectorField,
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times 2"],
    controller: str,
    structure: Structure = DEFAULT,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """Like `batch_loss`, but the batch is solved as one ODE (`solve_within_ode`)."""
    pred, num_steps = solve_within_ode(model, ts, ys[:, 0], controller, structure)
    return jnp.mean((pred - ys) ** 2), num_steps


# The loss of each `Structure.solve` (`scan` is a per-sample solve).
LOSSES = {"per_sample": batch_loss, "within_ode": batch_loss_within_ode, "scan": batch_loss}
