"""A step `odestudy tune` chose leaves the harness: `load_step` gives a `Step` whose
`solve` is the solve the study hands a problem's loss, and a plain optax loop of the
researcher's own trains with it: with `make_step(step=...)`, exactly as the study's
training of the same step (what `odestudy run --step FILE` runs), in every mode."""

import json

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import odestudy
from odestudy import Step, load_step
from odestudy.measure.data import batch_stream
from odestudy.measure.modes import modes_here
from odestudy.measure.scenario import Scenario
from odestudy.measure.training import scenario_devices, train
from odestudy.study.steps import KIND

HERE = modes_here()


def _write(tmp_path, fields, **facts):
    step = {"kind": KIND, "problem": "oscillator", "controller": "pid", "device": "cpu",
            "scale": "smoke", "fields": fields, "levers": sorted(fields),
            "speedup": 1.5, "speedup_ci": [1.2, 1.8], **facts}  # fmt: skip
    path = tmp_path / "step.json"
    path.write_text(json.dumps(step))
    return path


def test_a_loaded_step_is_the_studys_solve(tmp_path):
    step = load_step(_write(tmp_path, {"solve": "within_ode"}))
    assert isinstance(step, Step) and step.measured["speedup"] == 1.5
    s = Scenario(problem="oscillator", controller="pid", device="cpu", scale="smoke",
                 solve="within_ode")  # fmt: skip
    assert step.scenario() == s
    assert step.solve().spec == s.ode_solve() and step.solve().within_ode


def test_a_bad_step_file_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="not levers of the step"):
        load_step(_write(tmp_path, {"mode": "pmap"}))
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="is not a step file"):
        load_step(tmp_path / "other.json")


@pytest.mark.long  # about 20 s here
def test_a_plain_loop_trains_with_a_loaded_step(tmp_path):
    """The researcher's own loop: their model, optimiser and batches; the loaded step's
    solve inside their loss. Its loss falls over a few steps."""
    step = load_step(_write(tmp_path, {"solve": "within_ode"}))
    problem = step.scenario().ode_problem
    data = problem.make_data(16, jr.PRNGKey(0))
    batch = problem.take(data, np.arange(8))
    model = problem.make_model(jr.PRNGKey(1), 16)
    solve = step.solve(problem)
    optimiser = optax.adam(3e-3)
    state = optimiser.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def train_step(model, state):
        loss, grads = eqx.filter_value_and_grad(
            lambda m: jnp.asarray(problem.loss(m, batch, None, solve)).sum()
        )(model)
        updates, state = optimiser.update(grads, state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), state, loss

    losses = []
    for _ in range(6):
        model, state, loss = train_step(model, state)
        losses.append(float(loss))
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


# Each mode is over 10 s here (`shard_map` over 40 s): make test-long.
@pytest.mark.long
@pytest.mark.parametrize("mode", HERE)
def test_a_loaded_step_in_a_plain_loop_trains_as_the_study_does(tmp_path, mode):
    """The same initial model, the same batches, 20 steps: the researcher's loop with
    the loaded step (its model, solve, compile options, donation, mode and devices)
    gives the study's training losses of that step, to float tolerance."""
    fields = {"solve": "within_ode", "fast_activations": True, "vector_width": 512,
              "donate": True}  # fmt: skip
    n = 1 if mode == "single" else 2
    step = load_step(_write(tmp_path, fields, mode=mode, devices=n))
    s = step.scenario(steps_per_stage=20, length_fractions=(1.0,))
    assert (s.mode, s.devices_per_process) == (mode, n)
    study = train(s, scenario_devices(s))["train_loss"]  # what `run --step FILE` trains
    # The researcher's own loop: their data, model, optimiser and batches.
    problem = s.ode_problem
    data_key, model_key = jr.split(jr.PRNGKey(s.seed))
    data = problem.make_data(s.dataset_size + s.eval_size, data_key, s.spread)
    model = step.model(problem.make_model(model_key, s.width))
    train_step = odestudy.make_step(
        lambda m, batch, key: problem.loss(m, batch, key, step.solve(problem)),
        problem.optimiser(s.lr),
        step=step,
    )
    assert train_step.compiler_options == {"xla_cpu_prefer_vector_width": 512}
    assert (train_step.mode.name, len(train_step.devices), train_step.donate) == (mode, n, True)
    opt_state, batches, losses = (
        train_step.init(model),
        batch_stream(s.dataset_size, s.global_batch, s.seed),
        [],
    )
    for _ in range(20):
        model, opt_state, value, _ = train_step(model, opt_state, problem.take(data, next(batches)))
        losses.append(float(value))
    np.testing.assert_allclose(losses, study, rtol=1e-5)


def test_a_loss_without_a_problem_class_gets_the_steps_solve_from_its_facts(tmp_path):
    """`step.solve(time_dependent=..., uniform_grid=..., rtol=..., atol=...)`: the same
    solve as the problem's, from its facts alone; refused in one line where the step's
    structure cannot solve such grids, or where a problem is given too."""
    step = load_step(_write(tmp_path, {"solve": "within_ode", "stages": "unrolled"}))
    problem = step.scenario().ode_problem
    ts, ys = problem.take(problem.make_data(8, jr.PRNGKey(0)), np.arange(8))
    field = problem.make_model(jr.PRNGKey(1), 16)
    facts = {"time_dependent": problem.time_dependent, "uniform_grid": True,
             "rtol": problem.rtol, "atol": problem.atol}  # fmt: skip
    by_facts = step.solve(**facts)
    np.testing.assert_array_equal(
        by_facts(field, ts, ys[:, 0]), step.solve(problem)(field, ts, ys[:, 0])
    )
    assert by_facts.within_ode and int(by_facts.steps().max()) > 0
    with pytest.raises(ValueError, match="evenly spaced grids"):
        step.solve(**{**facts, "uniform_grid": False})
    with pytest.raises(ValueError, match="not both"):
        step.solve(problem, **facts)
    with pytest.raises(ValueError, match="time_dependent missing"):
        step.solve(uniform_grid=True, tolerance=1e-3)
