"""The neural ODE solved with Tsit5 (one solve per sample, the batch as one ODE, or a
fixed-step scan) as a `Solve` says; the configured batched solve a problem's loss is
handed (`BatchSolve`), and the training loss of a problem."""

import abc
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from . import tsit5
from .controllers import AbstractController, parse_controller
from .loss import mean_value
from .mlp_reverse import AbstractMLPField, MLPRows, extra_inputs
from .problem import (
    AbstractODEProblem,
    AbstractProblem,
    Oscillator,
    VectorField,  # noqa: F401 - re-exported: `odestudy.VectorField`
    as_ode_problem,
    observed,
)
from .solvers import Structure

DEFAULT = Structure()  # diffrax's default solve


@dataclasses.dataclass(frozen=True)
class Solve:
    """How the study solves the ODE: the step-size controller (or its name), the solve's
    `Structure`, and the problem whose tolerances it uses."""

    controller: AbstractController
    structure: Structure = DEFAULT
    problem: "AbstractProblem | AbstractODEProblem" = Oscillator()

    def __post_init__(self) -> None:
        object.__setattr__(self, "controller", parse_controller(self.controller))

    def as_ode(self) -> "Solve":
        """This solve with its problem as the study runs it (`as_ode_problem`)."""
        return dataclasses.replace(self, problem=as_ode_problem(self.problem))


def solve(
    model: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Float[Array, " state"],
    spec: Solve,
    args: Any = None,
) -> tuple[Float[Array, "times state"], Int[Array, ""]]:
    """Solve one series (times `ts`) with Tsit5 as `spec` says; `args`: the field's third
    argument. Returns `(ys, num_steps)`: the states at `ts` and the forward step count."""
    return spec.structure.integrator.solve(model, ts, y0, spec, args)


def solve_scan(
    model: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Float[Array, " state"],
    unroll: int = 1,
    time_dependent: bool = False,
    args: Any = None,
) -> tuple[Float[Array, "times state"], Int[Array, ""]]:
    """One series solved with Tsit5, one step per interval of `ts` (as `StepTo(ts)`), as
    a `lax.scan`: no adaptive loop, saving loop or checkpointing. `time_dependent`: give
    the field each stage's time (else `t=None`). Returns `(ys, num_steps)`."""
    a_lower = [jnp.asarray(row, y0.dtype) for row in tsit5.A_LOWER]
    c = tsit5.C  # stage i + 1 at time t + c[i] h

    def f(t, y):
        return model(t, y, args)

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


def solve_batch(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    y0: Float[Array, "batch state"],
    spec: Solve,
    args: Any = None,
) -> tuple[Float[Array, "batch times state"], Int[Array, " batch"]]:
    """Each series of a batch solved on its own (vmap of `solve` or `solve_scan`, or the
    integrator's own `solve_batch`); `args`: per series, or None. Returns `(ys,
    num_steps)`, `num_steps` per series."""
    structure = spec.structure
    if structure.integrator.solves_batch:
        return structure.integrator.solve_batch(model, ts, y0, spec, args)
    if structure.solve_kind.fixed_step:
        one = functools.partial(
            solve_scan, unroll=structure.unroll, time_dependent=spec.problem.time_dependent
        )
    else:
        one = functools.partial(solve, spec=spec)
    if args is None:  # the study's program as it was measured
        return jax.vmap(one, in_axes=(None, 0, 0))(model, ts, y0)
    return jax.vmap(lambda t, y, a: one(model, t, y, args=a))(ts, y0, args)


def batch_loss(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times state"],
    spec: Solve,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """The training loss of `spec.problem` over a batch's observed points, each series
    solved on its own: `(loss, num_steps)`."""
    problem = spec.problem
    assert isinstance(problem, AbstractProblem)
    pred, num_steps = solve_batch(model, ts, ys[:, 0], spec)
    return problem.loss(pred, ys, observed(ts)[..., None]), num_steps


class _BatchField(eqx.Module):
    """`du_i/dtau = speed_i * f(t_i, u_i)` for a whole batch in one state, where
    `t_i = start_i + speed_i * tau` (given to `f` only where it is time-dependent)."""

    model: Callable[..., Any]
    speed: jax.Array
    start: jax.Array | None

    def __call__(self, tau, y, args):
        # `args`: None, or each series' own (the batch on its first axis).
        times = tau if self.start is None else self.start + self.speed * tau
        in_axes = (None if self.start is None else 0, 0, None if args is None else 0)
        return self.speed[:, None] * jax.vmap(self.model, in_axes=in_axes)(times, y, args)

    def mlp_rows(self, args: Any = None) -> MLPRows:
        """This field as `mlp_reverse` reads it, given the solve's `args`; a ValueError
        unless the model is an `AbstractMLPField`."""
        if not isinstance(self.model, AbstractMLPField):
            raise ValueError(
                f"mlp_reverse: the vector field ({type(self.model).__name__}) is not an "
                "odestudy.AbstractMLPField (dy/dt = mlp([y, inputs(t, args)]))"
            )
        mlp, groups = self.model.mlp, self.model.groups
        if not extra_inputs(mlp):
            return MLPRows(mlp, self.speed, groups)
        return MLPRows(mlp, self.speed, groups, functools.partial(self._inputs, args))

    def _inputs(self, args: Any, tau: Array) -> Array:
        """Each row's MLP inputs after its state at the solve's time `tau`."""
        inputs = cast(AbstractMLPField, self.model).inputs
        if args is None and self.start is None:
            one = inputs(tau, None)
            return jnp.broadcast_to(one, (self.speed.shape[0], *jnp.shape(one)))
        times = tau if self.start is None else self.start + self.speed * tau
        in_axes = (None if self.start is None else 0, None if args is None else 0)
        return jax.vmap(inputs, in_axes=in_axes)(times, args)

    def with_mlp(self, mlp: Any) -> "_BatchField":
        """This field with its model's MLP replaced by `mlp`."""
        return eqx.tree_at(lambda f: f.model.mlp, self, mlp)


def solve_within_ode(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    y0: Float[Array, "batch state"],
    spec: Solve,
    args: Any = None,
) -> tuple[Float[Array, "batch times state"], Int[Array, " batch"]]:
    """Solve a batch of evenly spaced series as one ODE with one shared step size
    (DiffEqFlux's "within-ODE" batching): each series rescaled to `tau = (t - t_i0) /
    dt_i`, so `y_i(t) = u_i(tau)` with `du_i/dtau = dt_i * f(t, u_i)`. Returns `(ys,
    num_steps)`, `num_steps` repeated per sample."""
    speed = ts[:, 1] - ts[:, 0]
    start = ts[:, 0] if spec.problem.time_dependent else None
    taus = jnp.arange(ts.shape[1], dtype=ts.dtype)
    field = _BatchField(model, speed, start)
    ys, steps = spec.structure.integrator.solve(field, taus, y0, spec, args)
    return jnp.swapaxes(ys, 0, 1), jnp.broadcast_to(steps, (ts.shape[0],))


def batch_loss_within_ode(
    model: Callable[..., Any],
    ts: Float[Array, "batch times"],
    ys: Float[Array, "batch times state"],
    spec: Solve,
) -> tuple[Float[Array, ""], Int[Array, " batch"]]:
    """`batch_loss` with the batch solved as one ODE (no padding: no mask)."""
    problem = spec.problem
    assert isinstance(problem, AbstractProblem)
    pred, num_steps = solve_within_ode(model, ts, ys[:, 0], spec)
    return problem.loss(pred, ys, None), num_steps


# The loss of each `Structure.solve` (`scan` is a per-sample solve).
LOSSES: dict[str, Callable[..., Any]] = {
    "per_sample": batch_loss,
    "within_ode": batch_loss_within_ode,
    "scan": batch_loss,
}


class AbstractBatchSolve(abc.ABC):
    """What a problem's loss is handed as `solve(field, ts, y0, args)`, keeping the
    per-sample solver steps of every call (`steps`): `BatchSolve` or a stand-in."""

    def __init__(self, spec: Solve):
        self.spec = spec
        self.calls: list[Int[Array, " batch"]] = []

    @property
    def within_ode(self) -> bool:
        """The batch is solved as one ODE (every series on an equal, unpadded grid)."""
        return self.spec.structure.solve_kind.one_ode

    @abc.abstractmethod
    def __call__(self, field: Callable[..., Any], ts: Array, y0: Array, args: Any = None) -> Array:
        """The states of every series at its times `ts`, from `y0`."""

    def steps(self) -> Int[Array, " batch"]:
        """Per-sample solver steps of the calls so far (summed); a ValueError if the loss
        never called the solve."""
        if not self.calls:
            raise ValueError("the loss never called solve: the study times solved models")
        return functools.reduce(jnp.add, self.calls)


class BatchSolve(AbstractBatchSolve):
    """The study's configured batched solve, handed to a problem's loss as `solve`."""

    def __call__(
        self,
        field: Callable[..., Any],
        ts: Float[Array, "batch times"],
        y0: Float[Array, "batch state"],
        args: Any = None,
    ) -> Float[Array, "batch times state"]:
        """The states of every series at its times `ts` (`(batch, n_times)`, padding
        repeating the last time), from `y0`; `args`: the batch on its first axis, or
        None."""
        if jnp.ndim(ts) != 2 or jnp.ndim(y0) != 2 or ts.shape[0] != y0.shape[0]:
            raise ValueError(
                "solve takes ts of shape (batch, n_times) and y0 of shape (batch, state), "
                f"got {jnp.shape(ts)} and {jnp.shape(y0)}"
            )
        if self.within_ode:
            ys, steps = solve_within_ode(field, ts, y0, self.spec, args)
        else:
            ys, steps = solve_batch(field, ts, y0, self.spec, args)
        self.calls.append(steps)
        return ys


def problem_loss(
    model: Any,
    batch: Any,
    key: jax.Array | None,
    spec: Solve,
    evaluate: bool = False,
) -> tuple[Any, Int[Array, " batch"]]:
    """`spec.problem.loss` (`eval_loss` where `evaluate`) of `model` on `batch` with the
    study's solve, and the per-sample solver steps."""
    problem = spec.problem
    assert isinstance(problem, AbstractODEProblem)
    solve = BatchSolve(spec)
    which = problem.eval_loss if evaluate else problem.loss
    return which(model, batch, key, solve), solve.steps()


def evaluation(model: Any, batch: Any, spec: Solve) -> Float[Array, ""]:
    """The evaluation loss of `spec`'s problem with diffrax's default solve and a fixed
    key: the same in every mode."""
    problem = spec.problem
    assert isinstance(problem, AbstractODEProblem)
    key = jax.random.PRNGKey(0) if problem.needs_key else None
    default = dataclasses.replace(spec, structure=DEFAULT)
    value, _ = problem_loss(model, batch, key, default, evaluate=True)
    return mean_value(value)
