"""The neural ODE solved with Tsit5 (one solve per sample, the batch as one ODE, or a
fixed-step scan), and the training loss of a problem (`problem.AbstractProblem`)."""

import functools
from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .problem import AbstractProblem, Oscillator, VectorField
from .solvers import Structure, controller_and_dt0, saved_values, solve_options

DEFAULT = Structure()  # diffrax's default solve
OSCILLATOR = Oscillator()  # the default problem

__all__ = [
    "VectorField",
    "batch_loss",
    "batch_loss_within_ode",
    "eval_loss",
    "solve",
    "solve_batch",
    "solve_scan",
]


def solve(
    model: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Float[Array, " state"],
    controller: str,
    structure: Structure = DEFAULT,
    problem: AbstractProblem = OSCILLATOR,
) -> tuple[Float[Array, "times state"], Int[Array, ""]]:
    """Solve one series with Tsit5 (by default with diffrax's default adjoint,
    `RecursiveCheckpointAdjoint`, saving at `ts`).

    - `model`: the vector field.
    - `ts`: observation times of this series, shape `(n_times,)`.
    - `y0`: initial state, shape `(2,)`.
    - `controller`: `"pid"` or `"stepto"`.
    - `structure`: how the solve saves, differentiates and bounds its steps.
    - `problem`: gives the PID controller's tolerances.

    Returns `(ys, num_steps)`: the states at `ts` and the solver's forward step count.
    """
    stepsize_controller, dt0 = controller_and_dt0(controller, ts, problem.rtol, problem.atol)
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
    model: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Float[Array, " state"],
    unroll: int = 1,
    time_dependent: bool = False,
) -> tuple[Float[Array, "times state"], Int[Array, ""]]:
    """One series solved with diffrax's Tsit5 arithmetic, one step per interval of `ts`
    (what `StepTo(ts)` takes), as a `lax.scan`: no adaptive loop, no saving loop, no
    checkpointing (reverse mode stores every step).

    - `ts`, `y0`: as in `solve`; a repeated time (padding) is a step of length 0.
    - `unroll`: `lax.scan`'s unroll.
    - `time_dependent`: give the field each stage's time (`t + c_i h`); an autonomous
      field is called with `t=None`.

    The tableau is diffrax's own (`diffrax.Tsit5.tableau`: first stage the same as the
    last, the last stage's state the step's result). Returns `(ys, num_steps)` as
    `solve` does.
    """
    tableau = diffrax.Tsit5.tableau
    a_lower = [jnp.asarray(row, y0.dtype) for row in tableau.a_lower]
    c = [float(ci) for ci in tableau.c]  # stage i + 1 at time t + c[i] h

    def f(t, y):
        return model(t, y, None)

    def step(carry, interval):
        y, f0 = carry
        t, h = interval if time_dependent else (None, interval)
        ks = [f0]
        for i, row in enumerate(a_lower):
            yi = y + h * sum(row[j] * k for j, k in enumerate(ks))
            ks.append(f(None if t is None else t + c[i] * h, yi))
        return (yi, ks[-1]), yi

    with jax.named_scope("fixed-step-scan"):  # names its loop (`loops.control_flow`)
        first = (y0, f(ts[0] if time_dependent else None, y0))
        # An autonomous field's program carries no times (the study's default program).
        intervals = (ts[:-1], jnp.diff(ts)) if time_dependent else jnp.diff(ts)
        _, ys = jax.lax.scan(step, first, intervals, unroll=unroll)
    return jnp.concatenate([y0[None], ys]), jnp.asarray(ts.shape[0] - 1)


def observed(ts: Float[Array, "batch times"]) -> Float[Array, "batch times"]:
    """Which points of each series are observations, not padding: the first, and
    every later one whose time exceeds the one before (`Dataset.truncate_padded`
    repeats the last time). Shape `(batch, n_times)`, float 0/1."""
    later = ts[:, 1:] > ts[:, :-1]
    return jnp.concatenate([jnp.ones_like(later[:, :1]), later], axis=1).astype(ts.dtype)


def solve_batch(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    y0: Float[Array, "batch state"],
    controller: str,
    structure: Structure = DEFAULT,
    problem: AbstractProblem = OSCILLATOR,
) -> tuple[Float[Array, "batch times state"], Int[Array, " batch"]]:
    """Each series of a batch solved on its own (vmap of `solve`; with
    `structure.solve="scan"` of `solve_scan`). Returns `(ys, num_steps)` with
    `num_steps` of shape `(batch,)`."""
    if structure.solve == "scan":
        one = functools.partial(
            solve_scan, unroll=structure.unroll, time_dependent=problem.time_dependent
        )
        return jax.vmap(one, in_axes=(None, 0, 0))(model, ts, y0)
    return jax.vmap(solve, in_axes=(None, 0, 0, None, None, None))(
        model, ts, y0, controller, structure, problem
    )


def batch_loss(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times state"],
    controller: str,
    structure: Structure = DEFAULT,
    problem: AbstractProblem = OSCILLATOR,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """The problem's training loss (`problem.loss`; the oscillator's: mean squared
    error) over a batch's observed points (`observed`), each series solved on its own
    (`solve_batch`).

    - `ts`: shape `(batch, n_times)`; `ys`: shape `(batch, n_times, state)`.
    - `structure`, `problem`: as in `solve`.

    Returns `(loss, num_steps)` with `num_steps` of shape `(batch,)`.
    """
    pred, num_steps = solve_batch(model, ts, ys[:, 0], controller, structure, problem)
    return problem.loss(pred, ys, observed(ts)[..., None]), num_steps


def eval_loss(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times state"],
    controller: str,
    problem: AbstractProblem = OSCILLATOR,
) -> Float[Array, ""]:
    """The problem's evaluation loss (`problem.eval_loss`) of full series, each solved
    on its own with diffrax's default solve: the same definition in every mode."""
    pred, _ = solve_batch(model, ts, ys[:, 0], controller, DEFAULT, problem)
    return problem.eval_loss(pred, ys, observed(ts)[..., None])


class _BatchField(eqx.Module):
    """`du_i/dtau = speed_i * f(t_i, u_i)` for a whole batch in one state, where
    `t_i = start_i + speed_i * tau` (given to `f` only where it is time-dependent)."""

    model: eqx.Module
    speed: jax.Array
    start: jax.Array | None

    def __call__(self, tau, y, args):
        if self.start is None:  # autonomous: the field does not read its time
            return self.speed[:, None] * jax.vmap(lambda yi: self.model(tau, yi, args))(y)
        times = self.start + self.speed * tau
        field = jax.vmap(lambda ti, yi: self.model(ti, yi, args))(times, y)
        return self.speed[:, None] * field


def solve_within_ode(
    model: eqx.Module,
    ts: Float[Array, "batch times"],
    y0: Float[Array, "batch state"],
    controller: str,
    structure: Structure = DEFAULT,
    problem: AbstractProblem = OSCILLATOR,
) -> tuple[Float[Array, "batch times state"], Int[Array, " batch"]]:
    """Solve a whole batch as one ODE with one shared step size (DiffEqFlux's
    "within-ODE" batching).

    - `ts`: shape `(batch, n_times)`, each row an evenly spaced grid (the problem's
      `uniform_grid`; `scenario.validate` refuses within-ODE batching otherwise).
    - `y0`: shape `(batch, state)`.
    - `structure`, `problem`: as in `solve`.

    Each series is rescaled to a common time `tau = (t - t_i0) / dt_i` (its observation
    index), so `y_i(t) = u_i(tau)` with `du_i/dtau = dt_i * f(t, u_i)`: the same
    solution, one solver loop, one step size for all. A time-dependent field is given
    the true time `t`. Returns `(ys, num_steps)` with `num_steps` repeated per sample
    so that it reads like the per-sample solve.
    """
    speed = ts[:, 1] - ts[:, 0]
    start = ts[:, 0] if problem.time_dependent else None
    taus = jnp.arange(ts.shape[1], dtype=ts.dtype)
    stepsize_controller, dt0 = controller_and_dt0(controller, taus, problem.rtol, problem.atol)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_BatchField(model, speed, start)),
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
    model: eqx.Module,
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times state"],
    controller: str,
    structure: Structure = DEFAULT,
    problem: AbstractProblem = OSCILLATOR,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """Like `batch_loss`, but the batch is solved as one ODE (`solve_within_ode`);
    every point is an observation (no padding), so the loss's mask is None."""
    pred, num_steps = solve_within_ode(model, ts, ys[:, 0], controller, structure, problem)
    return problem.loss(pred, ys, None), num_steps


# The loss of each `Structure.solve` (`scan` is a per-sample solve).
LOSSES: dict[str, Callable[..., Any]] = {
    "per_sample": batch_loss,
    "within_ode": batch_loss_within_ode,
    "scan": batch_loss,
}
