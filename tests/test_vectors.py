"""The `vector_width` lever: a compile option of the step's executable, refused where it
does not apply, reaching XLA, and computing what XLA's default computes."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from odestudy import Scenario, VectorField, make_parallel_step
from odestudy.measure import vectors
from odestudy.measure.modes import make_params_step


def _mlp_step(options):
    """A small MLP's training step (`make_params_step`, one device) compiled with `options`,
    and its result on one batch."""
    model = eqx.nn.MLP(2, 2, 64, 2, activation=jax.nn.softplus, key=jr.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)

    def loss(p, static, batch):
        x, y = batch
        pred = jax.vmap(eqx.combine(p, static))(x)
        return jnp.mean((pred - y) ** 2), jnp.zeros(x.shape[0])

    optimiser = optax.sgd(0.1)
    devices = jax.devices()[:1]
    step = make_params_step(
        loss, optimiser, "single", devices, static=static, compiler_options=options
    )
    x = jr.normal(jr.PRNGKey(1), (32, 2))
    batch = step.place_batch((x, jnp.sin(x)))
    state = step.place_state(params, optimiser.init(params))
    return step.compile(*state, batch)(*state, batch)


def test_a_wider_vector_computes_what_the_default_computes():
    default = _mlp_step(None)
    wide = _mlp_step(vectors.compiler_options(512))
    assert np.isfinite(float(default[2]))
    for a, b in zip(jax.tree.leaves(default[:3]), jax.tree.leaves(wide[:3]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_the_options_reach_xla():
    # An option XLA does not know stops the compile: `compile` hands the step's on.
    with pytest.raises(Exception, match="no_such_option"):
        _mlp_step({"xla_no_such_option": 1})


def test_a_scenario_compiles_its_step_with_its_width():
    static = eqx.partition(VectorField(jr.PRNGKey(0)), eqx.is_array)[1]
    made = {
        width: make_parallel_step(
            Scenario(scale="smoke", vector_width=width), jax.devices()[:1], static, optax.sgd(1.0)
        )
        for width in (0, 512)
    }
    assert made[512].compiler_options == {"xla_cpu_prefer_vector_width": 512}
    assert made[0].compiler_options is None


@pytest.mark.parametrize(
    "fields, rule",
    [
        ({"vector_width": 128}, "valid choices: 0, 256, 512"),
        ({"vector_width": True}, "valid choices"),
        ({"vector_width": 512, "device": "gpu"}, "option of XLA's CPU compiler"),
    ],
)
def test_a_width_that_cannot_apply_is_refused(fields, rule):
    with pytest.raises(ValueError, match=rule):
        Scenario(**fields)


def test_the_floor_probe_tries_every_width_a_step_may_take():
    on_cpu = vectors.probed_options("cpu")
    assert on_cpu[0] is None and vectors.compiler_options(512) in on_cpu
    assert vectors.probed_options("gpu") == [None]
