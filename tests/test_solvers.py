"""Solvers against independent references, and within-ODE batching against vmap."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from odestudy import Solve, VectorField, make_dataset, solve, solve_within_ode


class Rotation(eqx.Module):
    """dy/dt = [y1, -y0]: y(t) = [cos t, -sin t] from y0 = [1, 0]."""

    def __call__(self, t, y, args):
        return jnp.stack([y[1], -y[0]])


def test_stepto_matches_analytic_linear_solution():
    ts = jnp.linspace(0.0, 10.0, 100)
    ys, num_steps = solve(Rotation(), ts, jnp.array([1.0, 0.0]), Solve("stepto"))
    exact = np.stack([np.cos(ts), -np.sin(ts)], axis=-1)
    # Tsit5 (order 5) with h = 0.101 over 10 time units, in float32.
    np.testing.assert_allclose(ys, exact, atol=2e-5)
    assert int(num_steps) == 99


def test_pid_matches_analytic_linear_solution():
    ts = jnp.linspace(0.0, 10.0, 100)
    ys, num_steps = solve(Rotation(), ts, jnp.array([1.0, 0.0]), Solve("pid"))
    exact = np.stack([np.cos(ts), -np.sin(ts)], axis=-1)
    np.testing.assert_allclose(ys, exact, atol=1e-2)  # rtol 1e-3 controller
    assert 0 < int(num_steps) < 99


def test_spread_zero_is_the_reference_data():
    data = make_dataset(16, jr.PRNGKey(0), spread=0.0)
    np.testing.assert_allclose(data.ts, np.tile(np.linspace(0, 10, 100), (16, 1)), rtol=1e-6)
    assert np.all(data.time_scale == 1.0)
    y0 = data.ys[:, 0]
    assert np.all((y0 >= -0.6) & (y0 <= 1.0))


def test_spread_makes_adaptive_step_counts_differ():
    data = make_dataset(16, jr.PRNGKey(0), spread=0.5)
    model = VectorField(jr.PRNGKey(1))
    steps = [int(solve(model, data.ts[i], data.ys[i, 0], Solve("pid"))[1]) for i in range(16)]
    assert len(set(steps)) > 1


@pytest.mark.parametrize("spread", [0.0, 0.5])
def test_within_ode_matches_per_sample_with_stepto(spread):
    # Same fixed steps in rescaled time: the same solution up to float32 rounding.
    data = make_dataset(8, jr.PRNGKey(2), spread=spread).truncate(30)
    model = VectorField(jr.PRNGKey(3))
    within, _ = solve_within_ode(
        model, jnp.asarray(data.ts), jnp.asarray(data.ys[:, 0]), Solve("stepto")
    )
    per = np.stack([solve(model, data.ts[i], data.ys[i, 0], Solve("stepto"))[0] for i in range(8)])
    np.testing.assert_allclose(within, per, rtol=1e-5, atol=1e-6)
