"""The fused solve's reverse step by hand for an MLP field (`mlp_reverse`) against
`jax.vjp`'s (the same reverse loop, `replay.py`): the same loss and gradients to float32
tolerance for the batch as one ODE, with the exact and the faster softplus; float64
gradients against central finite differences; and what it refuses, before compiling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import odestudy
from odestudy import VectorField
from odestudy.measure.activations import faster
from odestudy.measure.checks import ProblemError
from odestudy.measure.model import Solve, solve_within_ode
from odestudy.measure.problem import Oscillator, SharedField
from odestudy.measure.solvers import Structure
from odestudy.measure.training import check_mlp_fields
from tests.helpers import Squashed, TimeField, assert_central_differences, cast

FUSED = dict(solve="within_ode", integrator="fused", adjoint="accepted_steps", max_steps=64)


def _field(width: int, dtype=jnp.float32, scale: float = 8.0) -> VectorField:
    """An MLP field, its output scaled by `scale` (8: PID takes several steps over
    `_grids` at the study's tolerances)."""
    field = VectorField(jr.PRNGKey(1), width=width)
    last = field.mlp.layers[-1].weight
    field = eqx.tree_at(lambda f: f.mlp.layers[-1].weight, field, scale * last)
    return cast(field, dtype)


def _grids(n: int = 6, length: int = 10) -> jax.Array:
    """`n` evenly spaced grids of different steps and starts (within-ODE batching)."""
    dt = jr.uniform(jr.PRNGKey(3), (n, 1), minval=0.2, maxval=0.6)
    start = jr.uniform(jr.PRNGKey(4), (n, 1))
    return start + dt * jnp.arange(length)


def _loss_and_grads(field, ts, y0, by_hand: bool):
    """The loss of the batch solved as one ODE by the fused solve with its own reverse
    loop (`by_hand`: `mlp_reverse`), its step counts, and its gradients with respect to
    the field and the initial states."""
    spec = Solve("pid", Structure(**FUSED, mlp_reverse=by_hand), Oscillator())

    def loss(field, y0):
        ys, steps = solve_within_ode(field, ts, y0, spec)
        return jnp.mean(jnp.sin(ys) ** 2), steps

    return eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))(field, y0)


class _Tight(Oscillator):
    """The oscillator at tolerances where PID's step sizes (constants to the gradient)
    barely move the solution: for central differences."""

    rtol = 1e-10
    atol = 1e-10


# Each about 10 s here: make test-long.
@pytest.mark.long
@pytest.mark.parametrize("fast", [False, True], ids=["softplus", "fast_softplus"])
def test_gradients_match_jax_vjp_for_the_batch_as_one_ode(fast):
    field = _field(16)
    if fast:
        field, _ = faster(field)
    ts = _grids()
    y0 = jr.normal(jr.PRNGKey(2), (ts.shape[0], 2))
    (loss, steps), grads = _loss_and_grads(field, ts, y0, by_hand=True)
    (loss0, steps0), grads0 = _loss_and_grads(field, ts, y0, by_hand=False)
    np.testing.assert_array_equal(steps, steps0)
    assert int(steps[0]) >= 4  # several accepted steps replayed
    np.testing.assert_allclose(loss, loss0, rtol=1e-6)
    for x, y in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(y))))


@pytest.mark.long  # about 20 s here (two compiled reverse loops): make test-long
def test_a_field_of_shared_slices_matches_jax_vjp():
    """The bank's `SharedField` (one MLP on each pair of the state): each pair is a row
    of its own in the reverse step by hand."""
    field = SharedField(jr.PRNGKey(1), 8, copies=3)
    last = field.mlp.layers[-1].weight
    field = eqx.tree_at(lambda f: f.mlp.layers[-1].weight, field, 8.0 * last)
    check_mlp_fields(Oscillator(), field)  # no error: it computes its MLP on each pair
    with pytest.raises(ProblemError, match="groups 1"):
        check_mlp_fields(Oscillator(), field, "integrator='kernel'", grouped=False)
    ts = _grids(n=4)
    y0 = jr.normal(jr.PRNGKey(2), (ts.shape[0], 6))
    (loss, steps), grads = _loss_and_grads(field, ts, y0, by_hand=True)
    (loss0, steps0), grads0 = _loss_and_grads(field, ts, y0, by_hand=False)
    np.testing.assert_array_equal(steps, steps0)
    np.testing.assert_allclose(loss, loss0, rtol=1e-6)
    for x, y in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(y))))


@pytest.mark.long
def test_float64_gradients_match_central_differences():
    with jax.enable_x64(True):
        field = _field(4, jnp.float64, scale=1.0)  # 15 steps at tolerance 1e-10
        ts = _grids(n=3, length=6).astype(jnp.float64)
        y0 = jr.normal(jr.PRNGKey(2), (3, 2), jnp.float64)
        params, static = eqx.partition(field, eqx.is_inexact_array)
        problem = _Tight()
        spec = Solve("pid", Structure(**{**FUSED, "max_steps": 4096}, mlp_reverse=True), problem)

        def loss(p):
            ys, _ = solve_within_ode(eqx.combine(p, static), ts, y0, spec)
            return jnp.sum(jnp.sin(ys))

        assert_central_differences(loss, params)


@pytest.mark.parametrize(
    "levers",
    [
        {"controller": "stepto", "adjoint": "all_steps"},
        {"controller": "pid", "adjoint": "all_steps"},
        {"controller": "pid", "solve": "per_sample"},
        {"controller": "pid", "integrator": "diffrax", "adjoint": "all_steps"},
    ],
)
def test_scenarios_it_cannot_run_are_refused(levers):
    fields = {**FUSED, "max_steps": 64, **levers}
    if fields["controller"] == "stepto":
        del fields["max_steps"]
    with pytest.raises(ValueError, match="mlp_reverse is a reverse step of the fused solve"):
        odestudy.Scenario(scale="quick", mlp_reverse=True, **fields)


def test_a_field_that_is_not_its_mlp_is_refused_before_compiling():
    mlp = VectorField(jr.PRNGKey(1), width=8).mlp
    with pytest.raises(ProblemError, match="holds no odestudy.AbstractMLPField"):
        check_mlp_fields(Oscillator(), mlp)  # an MLP, not a field that says it is one
    with pytest.raises(ProblemError, match="does not compute dy/dt = mlp"):
        check_mlp_fields(Oscillator(), Squashed(mlp))
    check_mlp_fields(Oscillator(), VectorField(jr.PRNGKey(1), width=8))  # no error
    ts = _grids()
    y0 = jnp.ones((ts.shape[0], 2))
    with pytest.raises(ValueError, match="is not an odestudy.AbstractMLPField"):
        jax.eval_shape(
            lambda: _loss_and_grads(TimeField(VectorField(jr.PRNGKey(1), 8)), ts, y0, True)
        )
