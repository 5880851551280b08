"""The lever `fast_activations`: `tanh_softplus` against `jax.nn.softplus` (values and
derivatives, float32 and float64), the swap in a model, and its refusal where the model
holds nothing to swap (before anything compiles)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from odestudy import FASTER, ProblemError, Scenario, tanh_softplus
from odestudy.measure.activations import faster
from odestudy.measure.levers import FastActivations
from odestudy.measure.recommended import recommended
from odestudy.measure.training import prepare, scenario_devices

GRID = np.linspace(-30.0, 30.0, 120_001)


def test_values_match_jax_softplus_in_float32_to_1e_6():
    x = jnp.asarray(GRID, jnp.float32)
    exact = np.logaddexp(np.asarray(x, np.float64), 0.0)
    ours = np.asarray(tanh_softplus(x), np.float64)
    theirs = np.asarray(jax.nn.softplus(x), np.float64)
    # Within one float32 spacing of the largest value (1.9e-6 at 30), as jax's is.
    assert np.max(np.abs(ours - exact)) <= 1e-6 + np.spacing(np.float32(30))
    assert np.max(np.abs(theirs - exact)) <= 1e-6 + np.spacing(np.float32(30))
    assert np.max(np.abs(ours - exact)[np.abs(GRID) <= 8]) <= 1e-6
    # Relatively: 1e-4 where softplus(x) > 1e-3 (x > -7); below, the log of a number
    # next to 1 rounds (the absolute bound above holds there).
    big = GRID > -7
    assert np.max(np.abs(ours[big] / exact[big] - 1)) <= 1e-4


@pytest.mark.parametrize("order", ["jvp", "grad"])
def test_derivative_is_the_sigmoid(order):
    x = jnp.asarray(GRID, jnp.float32)
    if order == "jvp":
        _, d = jax.jvp(tanh_softplus, (x,), (jnp.ones_like(x),))
    else:
        d = jax.vmap(jax.grad(tanh_softplus))(x)
    sigmoid = 1 / (1 + np.exp(-GRID))
    assert np.max(np.abs(np.asarray(d, np.float64) - sigmoid)) <= 1e-6


def test_float64_derivatives_match_central_differences():
    with jax.enable_x64(True):
        x = jnp.linspace(-8.0, 8.0, 33, dtype=jnp.float64)
        # First order: the study's reverse mode (the rule is not meant to be nested).
        check_grads(tanh_softplus, (x,), order=1, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(tanh_softplus(x), jax.nn.softplus(x), rtol=1e-12, atol=1e-14)


def test_faster_swaps_an_mlps_softplus_and_keeps_the_rest():
    mlp = eqx.nn.MLP(2, 2, 16, 2, activation=jax.nn.softplus, key=jr.PRNGKey(0))
    fast, swapped = faster(mlp)
    assert swapped == 1 and fast.activation is FASTER[jax.nn.softplus]
    assert fast.final_activation is mlp.final_activation
    weights = zip(jax.tree.leaves(mlp), jax.tree.leaves(fast), strict=True)
    assert all(a is b for a, b in weights if eqx.is_array(a))
    y = jnp.array([0.3, -1.2])
    np.testing.assert_allclose(fast(y), mlp(y), atol=1e-6)
    tanh_mlp = eqx.nn.MLP(2, 2, 16, 2, activation=jnp.tanh, key=jr.PRNGKey(0))
    assert faster(tanh_mlp)[1] == 0


def test_the_lever_sets_the_oscillators_field_and_its_name():
    s = Scenario(scale="smoke", fast_activations=True)
    assert s.name().endswith("-fastact") and s.key() != Scenario(scale="smoke").key()
    setup = prepare(s, scenario_devices(s), check=False)
    activations = [leaf for leaf in jax.tree.leaves(setup.static) if callable(leaf)]
    assert tanh_softplus in activations and jax.nn.softplus not in activations


def test_a_model_without_a_faster_activation_is_refused_before_compiling():
    s = Scenario(scale="smoke", problem="forced_oscillator", fast_activations=True)
    with pytest.raises(ProblemError, match="fast_activations: the model holds no activation"):
        prepare(s, scenario_devices(s))


@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_the_recommended_step_takes_the_lever_on_the_devices_measured_faster(controller):
    """Measured faster on the oscillator (`data/measured_steps.json`); the device decides
    too (`FastActivations.faster_on`: the CPU, not a GPU); a problem where it was not
    measured faster never takes it."""
    for device in ("cpu", "gpu"):
        s = recommended(Scenario(scale="smoke", controller=controller, device=device))
        assert s.fast_activations == (device in FastActivations.faster_on)
    forced = Scenario(scale="smoke", controller=controller, problem="forced_oscillator")
    assert not recommended(forced).fast_activations
