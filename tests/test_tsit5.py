"""`StraightTsit5` (Tsit5's stages as straight-line code) against diffrax's `Tsit5` on
the study's field and data: the same steps, solution and gradients, per sample under
`vmap`, for a field that uses `t` (the stages' times), after jumps, and from its dense
output; and against an exact solution. (A training step of each controller with the
study's field, and its loop counts: tests/test_structure.py.)"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from odestudy import StraightTsit5, VectorField, make_dataset
from odestudy.measure import tsit5

SOLVERS = {"loop": diffrax.Tsit5(), "unrolled": StraightTsit5()}


class TimeField(eqx.Module):
    """`dy/dt = cos(3 t) * MLP(y) + [t, -t]`: every stage's time matters."""

    field: VectorField

    def __call__(self, t, y, args):
        return jnp.cos(3 * t) * self.field(t, y, args) + jnp.stack([t, -t])


def _solve(solver, field, ts, y0):
    """One series under PID with jumps at three of the observations (diffrax then
    passes `made_jump` as a traced value), saving the dense output; the solution at
    `ts` and halfway between, and the step counts."""
    pid = diffrax.PIDController(rtol=1e-3, atol=1e-6)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        solver,
        ts[0],
        ts[-1],
        ts[1] - ts[0],
        y0,
        stepsize_controller=diffrax.ClipStepSizeController(pid, jump_ts=ts[25::25]),
        saveat=diffrax.SaveAt(dense=True),
    )
    at = jnp.concatenate([ts, (ts[1:] + ts[:-1]) / 2])
    return jax.vmap(sol.evaluate)(at), (sol.stats["num_steps"], sol.stats["num_accepted_steps"])


@eqx.filter_jit
def _train_batch(solver, field, ts, ys):
    """Per-sample solves (vmap) of a batch, as the study trains: the loss, its
    gradients with respect to the field, the dense solutions and the step counts."""

    def loss(field):
        dense, stats = jax.vmap(lambda t, y0: _solve(solver, field, t, y0))(ts, ys[:, 0])
        pred = dense[:, : ts.shape[1]]
        return jnp.mean((pred - ys) ** 2), (dense, stats)

    (value, (dense, stats)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(field)
    return value, grads, dense, stats


@pytest.mark.long  # over 15 s here: make test-long
def test_time_dependent_field_with_jumps_and_dense_output_under_vmap():
    """The study's field, its stages at their times (`TimeField`), on the study's data
    (different steps per sample), with jumps (the first stage evaluated again after
    each) and diffrax's Tsit5 interpolation of the stages; the autonomous field in a
    training step of each controller: test_structure.py."""
    data = make_dataset(8, jr.PRNGKey(0), spread=0.5)
    field = TimeField(VectorField(jr.PRNGKey(1)))
    ts, ys = jnp.asarray(data.ts), jnp.asarray(data.ys)
    loss0, grads0, dense0, (steps0, accepted0) = _train_batch(SOLVERS["loop"], field, ts, ys)
    loss, grads, dense, (steps, accepted) = _train_batch(SOLVERS["unrolled"], field, ts, ys)
    np.testing.assert_array_equal(steps, steps0)
    np.testing.assert_array_equal(accepted, accepted0)
    assert len(set(np.asarray(steps).tolist())) > 1  # the spread of time scales
    np.testing.assert_allclose(dense, dense0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, loss0, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(b))))


def test_stage_times_reach_an_analytic_solution():
    """`dy/dt = [cos t, 2 t]` from 0: `y = [sin t, t^2]`; a stage at a wrong time
    misses it by far more than Tsit5's error on this grid (StepTo, no jumps)."""

    def field(t, y, args):
        return jnp.stack([jnp.cos(t), 2 * t])

    ts = jnp.linspace(0.0, 5.0, 11)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        StraightTsit5(),
        ts[0],
        ts[-1],
        None,
        jnp.zeros(2),
        stepsize_controller=diffrax.StepTo(ts=ts),
        saveat=diffrax.SaveAt(ts=ts),
    )
    exact = np.stack([np.sin(ts), ts**2], axis=-1)
    np.testing.assert_allclose(sol.ys, exact, atol=5e-5)


def test_the_interpolant_weights_and_error_order_are_diffrax_s():
    """`tsit5.interpolation_weights` (the kernel's) are the weights of diffrax's Tsit5
    interpolant: its value for unit stages; the error order is diffrax's Tsit5's."""
    theta = jnp.linspace(0.0, 1.0, 11)
    unit = diffrax.Tsit5.interpolation_cls(t0=0.0, t1=1.0, y0=jnp.zeros(7), y1=None, k=jnp.eye(7))
    expected = jax.vmap(unit.evaluate)(theta)
    got = jnp.stack(tsit5.interpolation_weights(theta), axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert tsit5.ERROR_ORDER == diffrax.Tsit5().error_order(diffrax.ODETerm(TimeField))
