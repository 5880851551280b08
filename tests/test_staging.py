"""Length stages with PID share one program: a series padded by repeating its last
point gives the loss, gradients and solver steps of the truncated series."""

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest

from odestudy import Scenario, Solve, VectorField, batch_loss, train
from odestudy.measure.problem import Oscillator, SeriesProblem
from odestudy.measure.training import shares_program

from .helpers import RTOL_STEP, dataset


@pytest.mark.long  # over 15 s here: make test-long
def test_padding_leaves_loss_gradients_and_solver_steps_alone():
    """At the quick scale's first stage: 10 of 100 points."""
    length = 10
    data = dataset(8, 0)
    params, static = eqx.partition(VectorField(jr.PRNGKey(1)), eqx.is_array)

    def loss_fn(p, ts, ys):
        return batch_loss(eqx.combine(p, static), ts, ys, Solve("pid"))

    grad = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
    short, padded = data.truncate(length), SeriesProblem(Oscillator()).truncate(data, length, 100)
    assert padded.ts.shape == (8, 100)
    (loss_a, steps_a), grads_a = grad(params, short.ts, short.ys)
    (loss_b, steps_b), grads_b = grad(params, padded.ts, padded.ys)
    assert float(loss_b) == pytest.approx(float(loss_a), rel=RTOL_STEP)
    np.testing.assert_array_equal(np.asarray(steps_a), np.asarray(steps_b))
    for a, b in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=RTOL_STEP, atol=1e-7)


def test_which_scenarios_share_one_program():
    assert shares_program(Scenario(controller="pid"))
    assert not shares_program(Scenario(controller="stepto"))
    assert not shares_program(Scenario(controller="pid", solve="within_ode"))


@pytest.mark.long  # over 10 s here: make test-long keeps make test within its budget
def test_pid_stages_compile_once():
    s = Scenario(scale="smoke", steps_per_stage=3, warmup_steps=1)
    out = train(s, jax.devices("cpu")[:1])
    first, second = out["stages"]
    assert first["length"] < second["length"] == first["points"] == second["points"]
    assert not first["program_reused"] and second["program_reused"]
    assert second["compile_time_s"] == 0.0 < first["compile_time_s"] == out["compile_time_s"]
    assert first["program_fingerprint"] == second["program_fingerprint"]
