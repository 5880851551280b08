"""Problems as types: resolving them, what they refuse before anything compiles, the
solves' correctness for a time-dependent field on irregular and uniform grids, and the
user's step of an equinox model (`odestudy.make_step`, the example of
`docs/own_model.md`) in every mode."""

import functools
import os
from pathlib import Path
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import odestudy
from odestudy import (
    Scenario,
    diffrax_levers,
    fused_levers,
    make_parallel_step,
    recommended,
    recommended_levers,
    resolve_problem,
    stage_lengths,
)
from odestudy.measure.model import LOSSES, Solve
from odestudy.measure.problem import check_uniform_grids
from odestudy.measure.recommended import controller_levers
from odestudy.measure.solvers import Fused, Structure
from tests.helpers import step_scenario
from tests.problems import FORCED, UNIFORM, ForcedUniform

CPU = jax.devices("cpu")
FORCED_SPEC = "tests.problems:FORCED"
UNIFORM_SPEC = "tests.problems:UNIFORM"


def test_problems_resolve_by_name_or_module_object():
    assert resolve_problem("oscillator").name == "oscillator"
    assert resolve_problem(FORCED_SPEC) is FORCED
    assert isinstance(resolve_problem("tests.problems:ForcedUniform"), ForcedUniform)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "valid choices: oscillator"),
        ("no_such_module_here:X", "cannot load problem"),
        ("tests.problems:MISSING", "cannot load problem"),
        ("tests.problems:EXAMPLE", "not an odestudy.AbstractODEProblem or AbstractProblem"),
    ],
)
def test_a_bad_problem_is_refused_with_the_reason(spec, message):
    with pytest.raises(ValueError, match=message):
        Scenario(problem=spec)


def test_the_default_problem_leaves_names_and_keys_as_they_were():
    assert Scenario(problem="oscillator").key() == Scenario().key()
    assert Scenario(problem="oscillator").name() == Scenario().name()
    own = Scenario(problem=FORCED_SPEC)
    assert own.key() != Scenario().key()
    assert own.name().endswith("-ptests_problems_FORCED")


def test_a_problem_schedule_replaces_the_scale_defaults_it_names():
    s = Scenario(scale="quick", problem=FORCED_SPEC)
    assert (s.steps_per_stage, s.learning_rate) == (150, 1e-2)
    assert s.batch == Scenario(scale="quick").batch  # not named by the problem
    assert Scenario(scale="quick", problem=FORCED_SPEC, steps_per_stage=7).steps_per_stage == 7
    moved = Scenario(scale="quick", mode="shard", devices_per_process=2).for_problem(FORCED_SPEC)
    assert (moved.steps_per_stage, moved.mode) == (150, "shard")


def test_stage_lengths_come_from_the_data():
    assert stage_lengths(100, (0.1, 1.0)) == [10, 100]
    assert stage_lengths(40, (0.01, 0.5)) == [2, 20]


def test_within_ode_is_refused_on_irregular_grids_before_compiling():
    with pytest.raises(ValueError, match="evenly spaced"):
        Scenario(problem=FORCED_SPEC, solve="within_ode")
    with pytest.raises(ValueError, match="evenly spaced"):  # the oscillator's levers
        Scenario(problem=FORCED_SPEC, **controller_levers("pid"))


def test_the_complexity_knob_is_refused_where_a_problem_has_none():
    with pytest.raises(ValueError, match="no complexity knob"):
        Scenario(problem=FORCED_SPEC, spread=0.5)


def test_a_uniform_claim_is_checked_against_the_data():
    irregular = FORCED.make_data(4, jr.PRNGKey(0)).ts
    with pytest.raises(ValueError, match="not evenly spaced"):
        check_uniform_grids(UNIFORM, irregular)
    check_uniform_grids(UNIFORM, UNIFORM.make_data(4, jr.PRNGKey(0)).ts)


@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_recommended_picks_only_levers_valid_for_the_problem(controller):
    oscillator = Scenario(controller=controller)
    # Its softplus computed by its faster equivalent (measured faster on it and a CPU,
    # `data/measured_steps.json`).
    assert diffrax_levers(oscillator) == {
        **controller_levers(controller),
        "fast_activations": True,
    }
    # The oscillator's recommended step is run by the fused solve (measured faster):
    # the same batching and bound, a checkpoint per step, its own saving and stages.
    # Under PID its steps are differentiated by hand (its field is an MLP of the state),
    # and that step is compiled with 512-bit vectors (on a CPU).
    fused = recommended_levers(oscillator)
    by_hand = {"mlp_reverse": True, "vector_width": 512} if controller == "pid" else {}
    assert fused == {
        **fused_levers(diffrax_levers(oscillator), oscillator.stepsize_controller),
        **by_hand,
    }
    assert fused["integrator"] == "fused" and not {"saveat", "stages"} & set(fused)
    assert recommended(oscillator).structure.integrator == Fused()  # valid: no error
    # On a GPU neither the hand-written reverse step nor the vector width (not measured
    # faster there; the width is a CPU compiler's option).
    on_gpu = recommended_levers(Scenario(controller=controller, device="gpu"))
    assert not {"mlp_reverse", "vector_width"} & set(on_gpu)
    # The latent ODE's tunes timed the fused solve level with the study's step
    # (`data/measured_steps.json`, derived by `make steps`): diffrax's loop stays.
    latent = recommended_levers(Scenario(problem="latent_ode", controller=controller))
    assert not {"integrator", "fast_activations"} & set(latent) and latent == diffrax_levers(
        Scenario(problem="latent_ode", controller=controller)
    )
    # A problem the study did not measure: no bound, so no checkpoint per PID step (one
    # for each of 4096 possible steps made such a step slower than the default).
    irregular = recommended_levers(Scenario(problem=FORCED_SPEC, controller=controller))
    assert irregular.get("solve", "per_sample") == "per_sample" and "max_steps" not in irregular
    uniform = recommended_levers(Scenario(problem=UNIFORM_SPEC, controller=controller))
    assert uniform["solve"] == "within_ode" and "max_steps" not in uniform
    if controller == "pid":
        assert "adjoint" not in uniform and "saveat" not in uniform
    recommended(Scenario(problem=FORCED_SPEC, controller=controller))  # valid: no error


def test_the_matrix_on_a_users_problem_applies_only_its_own_levers():
    """`odestudy matrix --problem P`: each recommended row is P's own recommended step,
    not the oscillator's moved over (whose faster activations refuse a tanh field)."""
    from odestudy.study import matrix

    runnable, not_run, _, _ = matrix._scenarios_to_run(
        "quick", "cpu", "scaling", False, None, None, None, False, None, "tests.problems:RISING"
    )
    rows = runnable + [s for s, _ in not_run]
    stepped = [s for s in rows if s.step_tag()]
    assert stepped and len(stepped) == len(rows) // 2
    for s in stepped:
        assert s.key() == recommended(s.default_step()).key()
        assert not s.fast_activations and s.structure.integrator != Fused()


def _loss_and_grads(problem, controller, structure, data):
    params, static = eqx.partition(problem.make_field(jr.PRNGKey(1), 8), eqx.is_array)
    loss_fn = LOSSES[structure.solve]

    def value(p):
        spec = Solve(controller, structure, problem)
        return loss_fn(eqx.combine(p, static), data.ts, data.ys, spec)[0]

    loss, grads = jax.jit(jax.value_and_grad(value))(params)
    return float(loss), grads


def _rel(a, b) -> float:
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y))) for x, y in leaves)


class _Blind(ForcedUniform):
    """The uniform problem, wrongly declared autonomous: within-ODE batching then gives
    the field the observation index instead of the time (the bug this guards)."""

    time_dependent: ClassVar[bool] = False


# Relative tolerance on loss and gradients. PID: the two solves take different steps, so
# they agree to the solver's tolerance; StepTo: the same steps on a rescaled time, so to
# float32 rounding. (Measured: PID 8e-7 on the loss and 1.3e-4 on the gradients.)
TOLERANCE = {"pid": 1e-3, "stepto": 1e-5}


@pytest.mark.long  # over 15 s here: make test-long
@pytest.mark.parametrize("controller", ["pid", "stepto"])
def test_recommended_step_of_a_time_dependent_field_matches_the_default(controller):
    data = UNIFORM.make_data(3, jr.PRNGKey(3)).truncate(8)
    levers = recommended_levers(Scenario(problem=UNIFORM_SPEC, controller=controller))
    fast = Structure(**{k: v for k, v in levers.items()})
    assert fast.solve == "within_ode"
    loss, grads = _loss_and_grads(UNIFORM, controller, Structure(), data)
    loss_fast, grads_fast = _loss_and_grads(UNIFORM, controller, fast, data)
    assert abs(loss_fast - loss) <= TOLERANCE[controller] * loss
    assert _rel(grads_fast, grads) <= TOLERANCE[controller]
    # The check has power: given the index for the time, the gradients are far off
    # (checked with one controller: a third compile of the step each).
    if controller == "stepto":
        _, grads_blind = _loss_and_grads(_Blind(), controller, fast, data)
        assert _rel(grads_blind, grads) > 0.1


@pytest.mark.long  # over 10 s here: make test-long
def test_the_scan_solve_of_a_time_dependent_field_on_irregular_grids_matches_stepto():
    data = FORCED.make_data(4, jr.PRNGKey(4)).truncate(12)
    loss, grads = _loss_and_grads(FORCED, "stepto", Structure(), data)
    loss_scan, grads_scan = _loss_and_grads(FORCED, "stepto", Structure(solve="scan"), data)
    assert abs(loss_scan - loss) <= 1e-5 * loss
    assert _rel(grads_scan, grads) <= 1e-4


def _example() -> str:
    """The python block of `docs/own_model.md`'s "Only the step"."""
    from odestudy.measure.environment import ROOT

    text = (ROOT / "docs" / "own_model.md").read_text()
    section = text[text.index("## Only the step") :]
    start = section.index("```python") + len("```python")
    return section[start : section.index("```\n", start)]


def _arrays(tree):
    return eqx.filter(tree, eqx.is_array)


@functools.cache
def _example_plainly() -> tuple:
    """The example's model, data, loss and optimiser (its lines before the step is
    made), and three steps of a plain equinox step on one device (`eqx.filter_jit`,
    `eqx.filter_value_and_grad`): its losses, model, and the shapes it gives back."""
    code = _example()
    user: dict = {}
    exec(code[: code.index("step = odestudy.make_step")], user)
    model, loss, optimiser = user["model"], user["loss"], user["optimiser"]

    @eqx.filter_jit
    def plain(model, opt_state, batch):
        value, grads = eqx.filter_value_and_grad(loss)(model, batch, None)
        updates, opt_state = optimiser.update(grads, opt_state, _arrays(model))
        return eqx.apply_updates(model, updates), opt_state, value

    want, state, losses = model, optimiser.init(eqx.filter(model, eqx.is_inexact_array)), []
    for _ in range(3):
        want, state, value = plain(want, state, (user["x"], user["y"]))
        losses.append(float(value))
    shapes = jax.tree.map(jnp.shape, _arrays((want, state, value)))
    return user, losses, want, shapes


@pytest.mark.parametrize("mode", list(odestudy.MODES))  # single, pmap, shard, shard_map, explicit
def test_the_make_step_example_trains_alike_in_every_mode(mode):
    """The example's step in `mode` (2 devices but for `single`), three steps: the plain
    equinox step's shapes back (no device axis), its losses and parameters, and a model
    to call and save."""
    import io

    why = odestudy.MODES[mode]().why_not_here()
    if why is not None:
        pytest.skip(why)
    user, want_losses, want, want_shapes = _example_plainly()
    model, x, batch = user["model"], user["x"], (user["x"], user["y"])
    step = odestudy.make_step(
        user["loss"], user["optimiser"], mode, CPU[: 1 if mode == "single" else 2]
    )
    trained, opt_state, losses = model, step.init(model), []
    for _ in range(3):
        trained, opt_state, value, aux = step(trained, opt_state, batch)
        losses.append(float(value))
    assert aux is None
    assert jax.tree.map(jnp.shape, _arrays((trained, opt_state, value))) == want_shapes
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert _rel(_arrays(trained), _arrays(want)) <= 1e-5
    np.testing.assert_allclose(trained(x[0]), want(x[0]), rtol=1e-5)  # an ordinary model
    saved = io.BytesIO()
    eqx.tree_serialise_leaves(saved, trained)
    saved.seek(0)
    assert _rel(_arrays(eqx.tree_deserialise_leaves(saved, model)), _arrays(trained)) == 0


@pytest.mark.long  # over 15 s here: make test-long
def test_the_study_step_called_directly_gives_one_result_in_the_explicit_modes():
    """The study's step called directly (traced and compiled by its call, not AOT) under
    `pmap` and `shard_map`, where the equinox workaround applies: the two give the same
    new parameters. (Compiled AOT, each matches one device: tests/test_modes.py.)"""
    data = UNIFORM.make_data(4, jr.PRNGKey(5)).truncate(8)
    params, static = eqx.partition(UNIFORM.make_field(jr.PRNGKey(1), 8), eqx.is_array)
    optimiser = optax.sgd(0.1)
    out = {}
    for mode in ("pmap", "shard_map"):
        s = step_scenario(mode, 2, "pid")
        step = make_parallel_step(s, jax.devices()[:2], static, optimiser, problem=UNIFORM)
        state = step.place_state(params, optimiser.init(params))
        out[mode] = step.unplace(step(*state, step.place_batch((data.ts, data.ys)))[0])
    assert _rel(out["pmap"], out["shard_map"]) <= 1e-6
    assert _rel(out["pmap"], params) > 0  # a step was taken


def test_a_problem_field_is_a_scenario_field_everywhere():
    s = Scenario(problem=UNIFORM_SPEC)
    assert Scenario.from_dict(s.to_dict()) == s
    assert s.for_problem("oscillator").key() == Scenario().key()  # its schedule undone


@pytest.mark.long  # over 10 s here: make test-long
def test_the_make_step_example_trains_a_user_model_with_shard_map(tmp_path):
    """The `make_step` example of `docs/own_model.md` as a user runs it: a fresh process
    whose local devices are 2 virtual CPUs (this machine's cores)."""
    import subprocess
    import sys

    code = _example()
    assert len(code.strip().splitlines()) <= 25
    prelude = 'import jax\njax.config.update("jax_num_cpu_devices", 2)\n'
    # The loss before training, taken where the loop starts.
    loop = code.index("\nfor ")
    code = code[:loop] + "\nfirst = float(loss(model, (x, y), None))" + code[loop:]
    check = "\nprint(len(step.devices), first, float(value))\n"
    script = tmp_path / "example.py"
    script.write_text(prelude + code + check)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # This checkout's package, whatever the interpreter has installed.
    root = str(Path(odestudy.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    devices, first, last = out.stdout.split()[-3:]
    assert int(devices) == 2 and float(last) < 0.5 * float(first)
