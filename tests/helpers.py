"""Helpers shared by the tests."""

import functools

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import optax

from odestudy import VectorField, make_dataset, make_parallel_step

# float32: one step in any mode must match one device to this relative tolerance.
RTOL_STEP = 1e-5


# Several tests of a module check the same compiled step (its result, its collectives):
# built once per test process.
@functools.cache
def one_step(
    mode: str,
    n_devices: int,
    controller: str,
    batch: int = 8,
    length: int = 20,
    solve: str = "per_sample",
):
    """Loss, per-sample solver steps and new parameters after one training step.

    With adabelief's first update close to sign(gradient), the new parameters are
    compared through the gradient instead: the step uses plain SGD with learning
    rate 1, so `params_before - params_after` is the averaged gradient.
    """
    data = make_dataset(batch, jr.PRNGKey(0)).truncate(length)
    model = VectorField(jr.PRNGKey(1))
    params, static = eqx.partition(model, eqx.is_array)
    optimiser = optax.sgd(1.0)
    opt_state = optimiser.init(params)
    step = make_parallel_step(mode, jax.devices()[:n_devices], static, optimiser, controller, solve)
    placed_state = step.place_state(params, opt_state)
    placed_batch = step.place_batch(data.ts, data.ys)
    compiled = step.compile(*placed_state, *placed_batch)
    new_params, _, loss, num_steps = compiled(*placed_state, *placed_batch)
    grads = jax.tree.map(lambda a, b: a - b, params, step.unplace(new_params))
    return float(np.asarray(loss).reshape(-1)[0]), np.asarray(num_steps), grads, compiled
