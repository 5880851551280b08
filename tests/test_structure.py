"""The solve's structure levers (`solvers.Structure`) train the same model: one step of
each gives the default's loss and gradients to float32 tolerance; the fixed-step
`lax.scan` is diffrax's StepTo Tsit5; donation gives the same step and consumes its
inputs; bad combinations are refused before anything is compiled."""

import dataclasses
import json

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import optax
import pytest

from odestudy import Scenario, VectorField, make_parallel_step
from odestudy.measure.solvers import (
    INTEGRATORS,
    Diffrax,
    Fused,
    Kernel,
    Structure,
    parse_integrator,
)
from tests.helpers import dataset, one_step, step_scenario

# (controller, structure) pairs, each against the default solve of its controller.
# Levers that touch different parts of the solve (what is saved, how the backward pass
# is made, how the stages run) are checked together where they combine, one compiled
# step for several: a lever that changed the loss or gradients fails its combination.
# Every lever's value is in one pair at least, with each controller where it applies.
# Each pair compiles a step and its one-device baseline (10 to 20 s here): make test-long.
LEVERS = [
    ("stepto", Structure(solve="scan")),
    ("stepto", Structure(solve="scan", unroll=4)),
    ("stepto", Structure(solve="within_ode", saveat="steps", adjoint="all_steps")),
    ("stepto", Structure(saveat="steps", adjoint="direct")),
    ("stepto", Structure(saveat="dense", stages="unrolled")),
    ("pid", Structure(saveat="dense", adjoint="all_steps", max_steps=64)),
    ("pid", Structure(adjoint="direct", max_steps=64)),
    ("pid", Structure(stages="unrolled")),
    # The fused solve (`fused.py`) per sample and within-ODE (each reverse mode against
    # diffrax on a time-dependent field and irregular grids: test_fused.py).
    ("pid", Structure(integrator="fused", adjoint="all_steps", max_steps=64)),
    ("pid", Structure(solve="within_ode", integrator="fused", adjoint="scan", max_steps=64)),
    # StepTo's recommended fused step (`fused_adjoint`: a checkpoint per step).
    ("stepto", Structure(solve="within_ode", integrator="fused", adjoint="all_steps")),
    ("stepto", Structure(solve="within_ode", integrator="fused", adjoint="checkpointed_scan")),
    # Its own reverse loop over the accepted steps (`replay.py`); under PID each step's
    # reverse by jax.vjp, and by hand (`mlp_reverse`: the recommended PID step's).
    (
        "pid",
        Structure(solve="within_ode", integrator="fused", adjoint="accepted_steps", max_steps=64),
    ),
    (
        "pid",
        Structure(
            solve="within_ode",
            integrator="fused",
            adjoint="accepted_steps",
            max_steps=64,
            mlp_reverse=True,
        ),
    ),
    ("stepto", Structure(integrator="fused", adjoint="accepted_steps")),
]


def _grad_rel_diff(a, b) -> float:
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.max(np.abs(x - y)) / np.max(np.abs(y))) for x, y in leaves)


@pytest.mark.long
@pytest.mark.parametrize(("controller", "structure"), LEVERS, ids=str)
def test_lever_gives_the_default_loss_and_gradients(controller, structure):
    base = "within_ode" if structure.solve == "within_ode" else "per_sample"
    loss0, steps0, grads0, _ = one_step("single", 1, controller, solve=base)
    loss, steps, grads, _ = one_step("single", 1, controller, solve=structure)
    np.testing.assert_allclose(loss, loss0, rtol=2e-5)
    assert _grad_rel_diff(grads, grads0) < 1e-4
    np.testing.assert_array_equal(steps, steps0)  # the same solver steps per sample


@pytest.mark.long  # the scan's step compiled, over 10 s here
def test_scan_takes_one_step_per_interval():
    _, steps, _, _ = one_step("single", 1, "stepto", solve=Structure(solve="scan"))
    assert set(np.asarray(steps).tolist()) == {19}  # length 20: 19 intervals


@pytest.mark.long
def test_scan_runs_no_diffrax_loop():
    *_, compiled = one_step("single", 1, "stepto", solve=Structure(solve="scan"))
    *_, default = one_step("single", 1, "stepto")
    text, base = compiled.as_text(), default.as_text()
    assert "diffeqsolve" not in text and "diffeqsolve" in base


@pytest.mark.long  # over 10 s here: make test-long keeps make test within its budget
def test_donated_step_matches_and_consumes_its_inputs():
    """The donated form of `one_step`'s PID step (plain SGD at learning rate 1, so that
    the new parameters give the gradient): the same loss and gradients, bit for bit,
    and its inputs consumed."""
    loss0, _, grads0, _ = one_step("single", 1, "pid")
    data = dataset(8, 0).truncate(20)
    params, static = eqx.partition(VectorField(jr.PRNGKey(1)), eqx.is_array)
    optimiser = optax.sgd(1.0)
    before = jax.tree.map(np.array, params)  # host copies: placing may share buffers
    s = step_scenario("single", 1, "pid", donate=True)
    step = make_parallel_step(s, jax.devices()[:1], static, optimiser)
    p, o = step.place_state(params, optimiser.init(params))
    batch = step.place_batch((data.ts, data.ys))
    new_params, _, loss, _ = step.compile(p, o, batch)(p, o, batch)
    assert all(x.is_deleted() for x in jax.tree.leaves(p))
    grads = jax.tree.map(lambda a, b: a - b, before, step.unplace(new_params))
    assert float(np.asarray(loss).reshape(-1)[0]) == loss0
    assert _grad_rel_diff(grads, grads0) == 0.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(controller="pid", solve="scan"), "needs controller='stepto'"),
        (dict(controller="pid", saveat="steps"), "needs controller='stepto'"),
        (dict(controller="stepto", unroll=4), "unroll applies to solve='scan' only"),
        (dict(controller="stepto", solve="scan", adjoint="direct"), "leave them default"),
        (dict(stages="scan"), "valid choices: loop, bounded, unrolled"),
        (dict(adjoint="checkpointed"), "valid choices: recursive, all_steps, direct, scan"),
        (dict(adjoint="scan"), "needs integrator='fused'"),
        (dict(adjoint="checkpointed_scan"), "needs integrator='fused'"),
        (dict(integrator="fused", saveat="dense"), "leave saveat at ts and stages at loop"),
        (dict(integrator="fused", stages="unrolled"), "leave saveat at ts and stages at loop"),
        (dict(integrator="fused", adjoint="direct"), "takes adjoint all_steps, recursive, scan"),
        (dict(controller="stepto", solve="scan", integrator="fused"), "cannot use it"),
        (dict(integrator="loop"), "valid choices: diffrax, fused, kernel"),
        (dict(saveat="all"), "valid choices: ts, dense, steps"),
        (dict(max_steps=0), "max_steps must be a whole number >= 1"),
    ],
)
def test_bad_structure_is_refused_at_construction(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Scenario(scale="smoke", **fields)


def test_the_integrator_is_a_type_and_the_scenario_keeps_its_name():
    """A structure holds its integrator's type (parsed from its name at construction);
    a scenario and its record keep the name, so that records read as before."""
    assert INTEGRATORS == {"diffrax": Diffrax, "fused": Fused, "kernel": Kernel}
    for name, cls in INTEGRATORS.items():
        adjoint = "all_steps" if "all_steps" in cls.adjoints else cls.adjoints[0]
        s = Scenario(scale="smoke", integrator=name, adjoint=adjoint)
        assert type(s.structure.integrator) is cls and s.to_dict()["integrator"] == name
        assert Structure(integrator=name) == Structure(integrator=cls())
        assert s.structure.fields() == {**dataclasses.asdict(s.structure), "integrator": name}
        assert Scenario.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    old = {k: v for k, v in Scenario(scale="smoke").to_dict().items() if k != "integrator"}
    assert isinstance(Scenario.from_dict(old).structure.integrator, Diffrax)
    assert Structure().is_default and not Structure(integrator="fused").is_default
    with pytest.raises(
        ValueError, match="integrator 'loop'; valid choices: diffrax, fused, kernel"
    ):
        parse_integrator("loop")


def test_structure_fields_name_and_key_only_where_set():
    default = Scenario(scale="smoke", controller="stepto")
    lever = Scenario(scale="smoke", controller="stepto", solve="scan", unroll=4, donate=True)
    assert default.name() == "cpu-1dev-single-stepto-strong-smoke"
    assert lever.name() == "cpu-1dev-single-stepto-strong-smoke-scan-unroll4-donate"
    assert lever.key() != default.key()
    assert lever.structure == Structure(solve="scan", unroll=4)


@pytest.mark.long  # compiles the default StepTo step, over 10 s here
def test_loop_counts_of_the_default_stepto_step():
    """Length 20: 19 StepTo steps per sample, each with Tsit5's stages in a loop of its
    own; 20 saved times; every sample takes the same steps, so vmap adds none."""
    *_, compiled = one_step("single", 1, "stepto")
    counts = _loop_counts(compiled, "stepto")
    by = counts["bodies_by"]
    assert by["forward solver"] == 19
    assert by["forward stages"] == 6 * 19 + 1  # FSAL: 6 new stages a step, 7 in the first
    assert by["forward save"] == 20
    assert counts["conditional_executions"]["backward"] >= 19  # one per backward step


@pytest.mark.long
def test_loop_counts_of_the_scan():
    *_, compiled = one_step("single", 1, "stepto", solve=Structure(solve="scan"))
    counts = _loop_counts(compiled, "stepto")
    assert counts["bodies_by"] == {"backward scan": 19, "forward scan": 19}
    assert counts["conditional_executions"] == {}


@pytest.mark.long  # over 10 s here
def test_unrolled_stages_run_no_stage_loop():
    """`stages="unrolled"` (PID: the solve's bound and checkpoints unchanged): the same
    solver steps and saved times, forward and backward, and none of the stage loops'
    bodies (6 a step, 7 in the first; again in the backward pass)."""
    *_, default = one_step("single", 1, "pid")
    *_, unrolled = one_step("single", 1, "pid", solve=Structure(stages="unrolled"))
    base, counts = _loop_counts(default, "pid"), _loop_counts(unrolled, "pid")
    stage_bodies = {k: v for k, v in base["bodies_by"].items() if k.endswith(" stages")}
    assert stage_bodies["forward stages"] > 0 and stage_bodies["backward stages"] > 0
    assert counts["bodies_by"] == {
        k: v for k, v in base["bodies_by"].items() if k not in stage_bodies
    }
    assert counts["bodies"] == base["bodies"] - sum(stage_bodies.values())
    assert counts["static_loops"] == base["static_loops"] - 3  # forward, 2 backward
    # Every executed instruction is a dispatched kernel: no stage loop, fewer of them
    # (a loop body runs at least one instruction each time).
    assert base["instructions"] >= base["bodies"] and counts["instructions"] >= counts["bodies"]
    assert counts["instructions"] < base["instructions"]


def _loop_counts(compiled, controller):
    from odestudy.measure.loops import count_loops

    data = dataset(8, 0).truncate(20)
    params, _ = eqx.partition(VectorField(jr.PRNGKey(1)), eqx.is_array)
    return count_loops(compiled, params, optax.sgd(1.0).init(params), (data.ts, data.ys))


def test_stepto_refuses_a_step_bound_it_would_ignore():
    with pytest.raises(ValueError, match="leave max_steps at 4096"):
        Scenario(scale="smoke", controller="stepto", max_steps=64)
