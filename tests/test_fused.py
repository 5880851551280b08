"""The fused solve (`odestudy.measure.fused`) against diffrax's Tsit5 with the same
controller: the same accepted and rejected steps, saved values, loss and gradients to
float32 tolerance, per sample under `vmap` and for the batch as one ODE, for a field that
reads its time, on irregular grids (PID: padded with repeats of the last time); float64
gradients against central finite differences; a PID solve past its bound is NaN. (One
training step of each reverse mode against the default solve: test_structure.py.)"""

import functools
import types

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from odestudy import VectorField
from odestudy.measure import fused, replay
from odestudy.measure.model import Solve, solve_within_ode
from odestudy.measure.solvers import Structure
from tests.helpers import assert_central_differences, assert_same_solve, cast


class TimeField(eqx.Module):
    """`dy/dt = 2 cos(5 t) MLP(y) + [t, -t]`: every stage's time matters."""

    field: VectorField

    def __call__(self, t, y, args):
        return jnp.cos(5 * t) * 2 * self.field(t, y, args) + jnp.stack([t, -t])


def _grid(n: int = 6, length: int = 12, pad: int = 0) -> jax.Array:
    """`n` irregular grids, each of its own horizon and a large first interval (so that
    PID rejects steps), the last `pad` times repeating the series' end."""
    gaps = jr.uniform(jr.PRNGKey(3), (n, length - 1), minval=0.05, maxval=0.4)
    gaps = gaps.at[:, 0].set(1.5)
    ts = jnp.concatenate([jnp.zeros((n, 1)), jnp.cumsum(gaps, axis=1)], axis=1)
    if pad:
        ts = ts.at[:, -pad:].set(ts[:, -pad - 1 : -pad])
    return ts


def _diffrax(field, ts, y0, controller):
    """One series by diffrax's default solve, saved at `ts`; (ys, steps, rejected)."""
    pid = diffrax.PIDController(rtol=1e-3, atol=1e-6)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        ts[0],
        ts[-1],
        ts[1] - ts[0] if controller == "pid" else None,
        y0,
        stepsize_controller=pid if controller == "pid" else diffrax.StepTo(ts=ts),
        saveat=diffrax.SaveAt(ts=ts),
        max_steps=64,  # as the fused solves' bound: a smaller program to compile
    )
    return sol.ys, sol.stats["num_steps"]


def _fused(field, ts, y0, controller, reverse, tol=(1e-3, 1e-6), max_steps=64):
    if reverse == replay.ADJOINT:  # the fused solve's own reverse loop
        if controller == "pid":
            return replay.solve_pid(field, ts, y0, None, *tol, max_steps)
        return replay.solve_stepto(field, ts, y0, None)
    if controller == "pid":
        return fused.solve_pid(field, ts, y0, None, *tol, max_steps, reverse)
    return fused.solve_stepto(field, ts, y0, None, reverse)


@eqx.filter_jit
def _per_sample(solve, field, ts, y0):
    """A batch solved one series at a time (vmap): the loss, its gradients with respect
    to the field, the solutions and the step counts."""

    def loss(field):
        ys, steps = jax.vmap(lambda t, y: solve(field, t, y))(ts, y0)
        return jnp.mean(ys**2), (ys, steps)

    (value, (ys, steps)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(field)
    return value, grads, ys, steps


def _irregular(controller: str):
    """The field, grids and initial states of the irregular-grid comparison."""
    field = TimeField(VectorField(jr.PRNGKey(1), width=16))
    ts = _grid(pad=2 if controller == "pid" else 0)  # diffrax's StepTo takes no repeats
    return field, ts, jr.normal(jr.PRNGKey(2), (ts.shape[0], 2))


@functools.cache
def _irregular_diffrax(controller: str):
    """Diffrax's result on `_irregular(controller)`, computed once per test process."""
    return _per_sample(lambda f, t, y: _diffrax(f, t, y, controller), *_irregular(controller))


# Each of these compiles a solve (10 to 20 s here): make test-long, as do the fused
# solve's other checks against diffrax that compile (the accepted steps counted, central
# differences, the training step's gradients in test_structure.py, the kernel).
_LONG = pytest.mark.long


@_LONG
@pytest.mark.parametrize(
    ("controller", "reverse"),
    [
        ("pid", "accepted_steps"),
        ("stepto", "all_steps"),
        ("stepto", "accepted_steps"),
        ("pid", "all_steps"),
        ("pid", "recursive"),
        ("pid", "scan"),
        ("pid", "checkpointed_scan"),
        ("stepto", "checkpointed_scan"),
    ],
)
def test_time_dependent_field_on_irregular_grids_matches_diffrax(controller, reverse):
    base = _irregular_diffrax(controller)
    solve = functools.partial(_fused, controller=controller, reverse=reverse)
    ours = _per_sample(lambda f, t, y: solve(f, t, y), *_irregular(controller))
    assert_same_solve(ours, base)
    if controller == "pid":  # the grids make PID reject, and the samples differ
        assert len(set(np.asarray(base[3]).tolist())) > 1


@pytest.mark.long  # within-ODE fused steps of both controllers: test_structure.py
@pytest.mark.parametrize("reverse", ["all_steps", "accepted_steps"])
@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_batch_as_one_ode_with_a_time_dependent_field_matches_diffrax(controller, reverse):
    """Within-ODE batching (one shared step; the field given each series' true time).

    In float64: the solution grows to some 13, and in float32 the two orders of the same
    work left weight gradients 5e-3 apart (relative; CI's host, not this one's)."""
    with jax.enable_x64(True):
        field = cast(TimeField(VectorField(jr.PRNGKey(1), width=16)), jnp.float64)
        ts = jnp.stack([jnp.linspace(0.0, 2.0 + i, 10) for i in range(4)])
        y0 = jr.normal(jr.PRNGKey(2), (4, 2), jnp.float64)
        problem = types.SimpleNamespace(rtol=1e-3, atol=1e-6, time_dependent=True)
        adjoint = "all_steps" if controller == "pid" else "recursive"
        fused_adjoint = adjoint if reverse == "all_steps" else reverse
        structures = {
            "diffrax": Structure(solve="within_ode", adjoint=adjoint),
            "fused": Structure(solve="within_ode", adjoint=fused_adjoint, integrator="fused"),
        }

        @eqx.filter_jit
        def run(field, structure):
            def loss(field):
                ys, steps = solve_within_ode(field, ts, y0, Solve(controller, structure, problem))
                return jnp.mean(ys**2), (ys, steps)

            (value, aux), grads = eqx.filter_value_and_grad(loss, has_aux=True)(field)
            return value, grads, *aux

        assert_same_solve(
            run(field, structures["fused"]), run(field, structures["diffrax"]), scale=1e-5
        )


@_LONG  # each 9 to 13 s here
@pytest.mark.parametrize(
    ("controller", "reverse"),
    [
        ("pid", "accepted_steps"),
        ("stepto", "accepted_steps"),
        ("stepto", "checkpointed_scan"),
        ("pid", "all_steps"),
    ],
)
def test_float64_gradients_match_central_differences(controller, reverse):
    """PID's step sizes are constants to the gradient (diffrax's controller stops their
    gradient), so its solve is held to tolerances at which they barely move the
    solution; StepTo's steps are the grid's."""
    with jax.enable_x64(True):
        field = TimeField(VectorField(jr.PRNGKey(1), width=4))
        field = cast(field, jnp.float64)
        ts = _grid(n=1, length=8)[0].astype(jnp.float64)
        y0 = jnp.array([0.3, -0.2], jnp.float64)
        params, static = eqx.partition(field, eqx.is_inexact_array)

        def loss(p):
            ys, _ = _fused(
                eqx.combine(p, static), ts, y0, controller, reverse, (1e-10, 1e-10), 4096
            )
            return jnp.sum(jnp.sin(ys))

        assert_central_differences(loss, params)


@pytest.mark.parametrize("reverse", ["all_steps", "accepted_steps"])
def test_pid_past_its_bound_is_nan_where_unreached(reverse):
    field = VectorField(jr.PRNGKey(1), width=16)
    ts = _grid(n=1)[0]
    solve = jax.jit(lambda y0: _fused(field, ts, y0, "pid", reverse, max_steps=1))
    ys, steps = solve(jnp.ones(2))
    assert int(steps) == 1
    assert bool(jnp.all(jnp.isfinite(ys[0]))) and bool(jnp.isnan(ys[-1]).all())


@_LONG  # about 17 s here
def test_the_accepted_steps_counted_are_those_diffrax_accepts():
    """`replay.solve_pid(count_only=True)` (the floor's count of the steps the own reverse
    loop replays): diffrax's `num_accepted_steps` per sample, on grids where PID rejects."""
    field, ts, y0 = _irregular("pid")

    def diffrax_accepted(t, y):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            diffrax.Tsit5(),
            t[0],
            t[-1],
            t[1] - t[0],
            y,
            stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
            saveat=diffrax.SaveAt(ts=t),
            max_steps=64,
        )
        return sol.stats["num_steps"], sol.stats["num_accepted_steps"]

    taken, accepted = jax.jit(jax.vmap(diffrax_accepted))(ts, y0)

    def count_one(t, y):
        return replay.solve_pid(field, t, y, None, 1e-3, 1e-6, 64, count_only=True)

    count = jax.jit(jax.vmap(count_one))
    _, ours = count(ts, y0)
    np.testing.assert_array_equal(ours, accepted)
    assert np.any(np.asarray(ours) < np.asarray(taken))  # some steps were rejected
