"""The fifth mode, `explicit`: `jax.jit` under an Explicit mesh axis, the loss run under
`jax.sharding.auto_axes`. Its step is one device's (per-sample solves and their loop
collectives: test_modes; within-ODE here), the generic step trains a user's model as
`shard_map` does, the reference's studies keep their four modes, `predict` counts its
own loop collectives, and a JAX without Explicit axes refuses it in one line."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import odestudy
from odestudy import predict, timemodes
from odestudy.measure import compat
from odestudy.measure.modes import MODES, tree_max_rel_diff
from odestudy.measure.scenario import Scenario
from odestudy.study import grid
from odestudy.study.profiles import HardwareProfile, Value
from odestudy.study.workloads import WORKLOADS, map_scenarios

from .helpers import RTOL_STEP, one_step

CPU = jax.devices("cpu")


# Both controllers in `make test-long` (about 25 s here, make test within its 5
# minutes; the explicit mode per sample: test_modes.py).
@pytest.mark.long
@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_a_within_ode_step_matches_single_device(controller):
    """One ODE over the global batch, partitioned by the compiler: the loss, gradients
    and every sample's solver steps are one device's."""
    loss0, steps0, grads0, _ = one_step("single", 1, controller, solve="within_ode")
    loss, steps, grads, _ = one_step("explicit", 2, controller, solve="within_ode")
    assert abs(loss - loss0) <= RTOL_STEP * abs(loss0)
    assert tree_max_rel_diff(grads, grads0) <= RTOL_STEP
    np.testing.assert_array_equal(steps.reshape(-1), steps0.reshape(-1))


def _masked_model():
    """An MLP and a masked squared error as a `Mean`: the devices' halves of the batch
    observe 8 and 2 samples, so the mean of the devices' means is not the global mean.
    `aux`: each sample's error."""
    model = eqx.nn.MLP(3, 1, 16, 2, key=jr.PRNGKey(0))
    x = np.asarray(jr.normal(jr.PRNGKey(1), (16, 3)))
    y = np.sin(x.sum(axis=1, keepdims=True))
    mask = np.r_[np.ones(8), np.arange(8) < 2].astype(np.float32)

    def loss(model, batch, key):
        inputs, targets, observed = batch
        pred = jax.vmap(model)(inputs)
        error = observed * jnp.sum((pred - targets) ** 2, axis=1)
        return odestudy.Mean(jnp.sum(error), jnp.sum(observed)), error

    return loss, model, (x, y, mask)


def test_make_step_trains_a_user_model_as_shard_map_does():
    loss, model, batch = _masked_model()
    value, _ = loss(model, batch, None)
    truth = float(value.total / value.count)  # the global mean: sums over counts
    optimiser = optax.adam(1e-2)
    out = {}
    for mode in ("shard_map", "explicit"):
        step = odestudy.make_step(loss, optimiser, mode, CPU[:2], aux="per_sample")
        m, o = model, step.init(model)
        losses = []
        for _ in range(3):
            m, o, value, aux = step(m, o, batch)
            losses.append(float(value))
        # Host copies: each mode's model keeps its own mesh (explicit: Explicit axes).
        out[mode] = losses, jax.tree.map(np.asarray, eqx.filter(m, eqx.is_array)), aux
    losses, trained, aux = out["explicit"]
    np.testing.assert_allclose(losses[0], truth, rtol=1e-6)
    np.testing.assert_allclose(losses, out["shard_map"][0], rtol=1e-5)
    assert tree_max_rel_diff(trained, out["shard_map"][1]) <= 1e-5
    # The per-sample aux keeps its Explicit type, split over the devices; the mesh is
    # set only while the step runs.
    assert aux.sharding.spec == P("data") and aux.shape == (16,)
    assert aux.sharding.mesh.axis_types == (compat.AxisType.Explicit,)
    assert jax.sharding.get_abstract_mesh().empty


def test_a_keyed_loss_with_a_scalar_aux_is_one_device_s():
    """The key is replicated, not folded per device (one loss over the global batch, as
    in `shard`); a scalar aux is the global batch's."""

    def loss(p, batch, key):
        noise = jr.normal(key, batch.shape)
        error = (batch + 0.1 * noise - p) ** 2
        return jnp.mean(error), {"noise": jnp.mean(noise), "error": error}

    data = np.arange(8.0, dtype=np.float32)
    aux_kinds = {"noise": "scalar", "error": "per_sample"}
    out = {}
    for mode, devices in (("single", CPU[:1]), ("explicit", CPU[:2])):
        step = odestudy.make_step(loss, optax.sgd(0.1), mode, devices, aux=aux_kinds)
        start = jnp.zeros(())
        _, _, value, aux = step(start, step.init(start), data, jr.PRNGKey(3))
        out[mode] = jax.tree.map(np.asarray, (value, aux))
    for a, b in zip(jax.tree.leaves(out["explicit"]), jax.tree.leaves(out["single"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_the_reference_studies_keep_their_modes_and_the_matrix_and_map_add_explicit():
    core = [name for name, m in MODES.items() if m.core]
    assert core == ["single", "pmap", "shard", "shard_map"] and not MODES["explicit"].core
    kept = [*grid.seed_scenarios("cpu"), *grid.seed_scenarios("gpu")]
    for scale in ("smoke", "quick"):
        kept += grid.explain_scenarios(scale) + grid.versions_scenarios(scale)
    assert {s.mode for s in kept} == set(core)
    for device in ("cpu", "gpu"):
        rows = [s for s in grid.scenarios("quick", device) if s.mode == "explicit"]
        assert {(s.controller, s.scaling) for s in rows} == {
            (c, scaling) for c in ("pid", "stepto") for scaling in ("strong", "weak")
        }
    # Per workload and controller, the default and the recommended step on 2 devices.
    assert len([s for s in map_scenarios() if s.mode == "explicit"]) == 2 * 2 * len(WORKLOADS)


def test_predict_gives_each_one_loop_mode_its_own_loop_collectives():
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    assert predict.one_loop_modes(target) == ("shard", "explicit")
    times = [1e-3, 1.1e-3, 0.9e-3]
    sweep = {"rows": [
        {"batch": b, "step_times_s": times, "step_time_s": 1e-3, "iterations_executed": 10.0,
         "per_sample_steps": [10, 12]} for b in (4, 8)
    ]}  # fmt: skip
    gradient, latency = Value(20e-6, 10e-6, 40e-6, "cited"), Value(1e-5, 5e-6, 2e-5, "cited")
    in_loop = {"shard": 5.0, "explicit": 2.0}
    rows = {
        r["mode"]: r
        for r in predict.predict_rows(predict.Measured(sweep, gradient, latency, in_loop), target)
    }
    for mode, k in in_loop.items():
        assert rows[mode]["in_loop_s"] == pytest.approx(k * rows[mode]["iterations"] * 1e-5)
    assert rows["pmap"]["in_loop_s"] == rows["shard_map"]["in_loop_s"] == 0
    loops = {m: {"static": 7, "per_iteration": k} for m, k in in_loop.items()}
    profile = HardwareProfile("probe", "cpu", "a probe", {}, {})
    terms = predict.terms_said(sweep, target, gradient, latency, loops, profile)
    said = {t["term"]: t for t in terms}
    mine = said["`explicit`'s loop collectives per solver iteration"]
    assert mine["value"] == 2.0 and "its own compiled step" in mine["source"]


@pytest.fixture(params=["no Explicit axis type", "no auto_axes", "no set_mesh"])
def old_jax(request, monkeypatch):
    """The running JAX as a release without one of what the mode needs."""
    monkeypatch.setattr(jax, "__version__", "0.4.34")
    if request.param == "no Explicit axis type":
        monkeypatch.setattr(compat, "AxisType", None)
    elif request.param == "no auto_axes":
        monkeypatch.delattr(jax.sharding, "auto_axes")
    else:
        monkeypatch.delattr(jax, "set_mesh")


def test_a_jax_without_explicit_axes_refuses_the_mode_in_one_line(old_jax):
    with pytest.raises(ValueError, match=r"needs JAX 0\.7\.1 or later") as caught:
        Scenario(scale="smoke", mode="explicit", devices_per_process=2)
    assert "this is JAX 0.4.34" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"mode 'explicit' needs JAX 0\.7\.1"):
        odestudy.make_step(lambda m, b, k: jnp.mean(b), optax.sgd(0.1), "explicit", CPU)
    # The other modes run; what runs every mode leaves it out.
    target = Scenario(scale="smoke", mode="shard_map", devices_per_process=2)
    assert predict.predicted_modes(target) == ("pmap", "shard", "shard_map")
    assert timemodes._default_modes(2) == ("single", "pmap", "shard", "shard_map")
