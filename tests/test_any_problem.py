"""Any neural ODE through the study: the general problem type (its model, batch and
loss, handed the study's solve), the shipped latent and controlled problems, problems
checked before anything compiles, and `make_step`'s exact reductions, scalar aux and
keys."""

import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import odestudy
from odestudy.measure import training
from odestudy.measure.model import BatchSolve, Solve
from odestudy.measure.problem import resolve_problem
from odestudy.measure.solvers import Structure
from odestudy.measure.training import run_scenario
from odestudy.study.matrix import run_matrix
from tests.helpers import step_scenario

CPU = jax.devices("cpu")
BAD = "tests.bad_problems:"


@pytest.fixture
def no_compile(monkeypatch):
    """Fail a test that reaches a training step's compile."""

    def refuse(*args, **kwargs):
        raise AssertionError("a training step was compiled")

    monkeypatch.setattr(training, "compile_step", refuse)


@pytest.mark.parametrize(
    "name, part, rule",
    [
        ("DecreasingTimes", "data", "observation times must increase"),
        ("NaNData", "data", "NaN or infinite"),
        ("RaisingData", "data", "make_data fails: ValueError: assignment destination"),
        ("WrongRank", "data", "ys must have shape (size, n_times, state)"),
        ("BareMLP", "field", "must be callable as field(t, y, args)"),
        ("WrongOutput", "field", "must return the state's shape (2,)"),
        ("PerSeriesLoss", "loss", "must return one floating scalar"),
        ("PerSeriesEval", "eval_loss", "must return one floating scalar"),
        ("NeverSolves", "loss", "never called solve"),
        ("RaggedLeaf", "data", "every leaf needs the"),
    ],
)
def test_a_bad_problem_is_recorded_failed_with_one_line_before_compiling(
    no_compile, name, part, rule
):
    s = odestudy.Scenario(problem=BAD + name, scale="smoke")
    record = run_scenario(s)
    assert record["status"] == "failed"
    error = record["error"]
    assert "\n" not in error and "traceback" not in record
    assert error.startswith(f"problem {s.problem_object.name!r}, {part}: ")
    assert rule in error


@pytest.mark.parametrize(
    "name, rule",
    [
        ("NoName", "name"),
        ("NoField", "make_field"),
    ],
)
def test_an_incomplete_subclass_is_refused_in_one_line(name, rule):
    with pytest.raises(ValueError) as info:
        odestudy.Scenario(problem=BAD + name, scale="smoke")
    message = str(info.value)
    assert "\n" not in message and rule in message and BAD + name in message


@pytest.mark.long  # over 10 s here: make test-long
def test_the_cli_refuses_a_bad_problem_in_one_line_with_a_failed_record(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "run", "--problem", BAD + "DecreasingTimes"]
        + ["--scale", "smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 1
    record = odestudy.read_record(out / "metrics.json")
    assert record["status"] == "failed"
    assert record["error"].startswith("problem 'decreasing_times', data: observation times")
    assert done.stderr.strip().splitlines()[-1] == record["error"]


# --- make_step: exact global means, scalar aux, keys -------------------------------


def _masked_problem():
    """8 samples, 5 observed: 4 on the first device's half, 1 on the second's. The model
    is an array of 3 weights."""
    x = jr.normal(jr.PRNGKey(0), (8, 3))
    y = jr.normal(jr.PRNGKey(1), (8,))
    mask = jnp.array([1, 1, 1, 1, 0, 0, 0, 1], dtype=jnp.float32)
    model = jnp.array([0.3, -0.2, 0.5])

    def loss(p, batch, key):
        x, y, mask = batch
        residual = mask * (x @ p - y) ** 2
        value = odestudy.Mean(jnp.sum(residual), jnp.sum(mask))
        aux = {"observed": jnp.mean(mask), "residual": residual}
        return value, aux

    return loss, model, (np.asarray(x), np.asarray(y), np.asarray(mask))


AUX_KINDS = {"observed": "scalar", "residual": "per_sample"}


def _one(mode, devices, loss, model, batch, **kw):
    step = odestudy.make_step(loss, optax.sgd(1.0), mode, devices, **kw)
    new, _, value, aux = step(model, step.init(model), batch)
    return float(value), np.asarray(model) - np.asarray(new), aux


@pytest.mark.parametrize("mode", ["pmap", "shard", "shard_map", "explicit"])
def test_a_masked_mean_gives_the_global_loss_and_gradients_in_every_mode(mode):
    loss, model, batch = _masked_problem()
    want, want_grad, _ = _one("single", CPU[:1], loss, model, batch, aux=AUX_KINDS)
    x, y, mask = batch
    truth = np.sum(mask * (x @ np.asarray(model) - y) ** 2) / mask.sum()
    np.testing.assert_allclose(want, truth, rtol=1e-6)
    value, grad, aux = _one(mode, CPU[:2], loss, model, batch, aux=AUX_KINDS)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    # A scalar (a mean over the batch) is the global batch's, as averaged over devices;
    # per-sample values keep the batch. The shapes are one device's in every mode.
    assert np.shape(aux["observed"]) == () and np.allclose(aux["observed"], 5 / 8)
    assert np.shape(aux["residual"]) == (8,)


@pytest.mark.parametrize("mode", ["shard_map", "explicit"])
def test_a_scalar_aux_said_to_be_per_sample_is_refused_in_one_line(mode):
    loss, model, batch = _masked_problem()
    with pytest.raises(ValueError, match="aux leaf is a scalar"):
        _one(mode, CPU[:2], loss, model, batch, aux="per_sample")
    with pytest.raises(ValueError, match="unknown aux kind 'scalars'"):
        odestudy.make_step(loss, optax.sgd(1.0), "single", CPU[:1], aux="scalars")


def test_a_call_without_a_key_gives_the_loss_none():
    seen = []

    def loss(p, batch, key):
        seen.append(key)
        return jnp.mean((batch - p) ** 2)

    step = odestudy.make_step(loss, optax.sgd(0.1), "single", CPU[:1])
    p = jnp.zeros(())
    p, _, value, aux = step(p, step.init(p), np.arange(4.0, dtype=np.float32))
    assert seen == [None] and aux is None and float(value) == 3.5
    assert float(p) == pytest.approx(0.3)  # sgd on the mean: 0 - 0.1 * (-3)


def test_a_loss_that_returns_what_make_step_was_not_told_is_refused_in_one_line():
    loss, model, batch = _masked_problem()
    with pytest.raises(ValueError, match=r"returned a tuple: .* make_step\(aux=\.\.\.\)"):
        _one("single", CPU[:1], loss, model, batch)
    with pytest.raises(ValueError, match=r"returns \(value, aux\); it returned a Mean"):
        _one("single", CPU[:1], lambda m, b, k: loss(m, b, k)[0], model, batch, aux="scalar")
    with pytest.raises(ValueError, match=r"a scalar \(a mean\) or an odestudy.Mean, got shape"):
        _one("single", CPU[:1], lambda m, b, k: b[1] - b[0] @ m, model, batch)
    with pytest.raises(ValueError, match="does not split over 2 devices"):
        _one("shard_map", CPU[:2], loss, model, tuple(a[:7] for a in batch), aux=AUX_KINDS)
    with pytest.raises(ValueError, match="mode 'single' runs on 1 device, got 2"):
        odestudy.make_step(loss, optax.sgd(1.0), "single", CPU[:2])
    with pytest.raises(ValueError, match="the optimiser must be an optax transformation"):
        odestudy.make_step(loss, optax.sgd, "single", CPU[:1])


@pytest.mark.parametrize("mode", ["pmap", "shard_map"])
def test_a_keyed_step_gives_each_device_and_call_its_own_key(mode):
    def loss(p, batch, key):
        noise = jr.uniform(key, (batch.shape[0],))
        return jnp.mean((batch - p) ** 2), noise

    step = odestudy.make_step(loss, optax.sgd(0.0), mode, CPU[:2], aux="per_sample")
    p = jnp.zeros(())
    data = np.arange(4.0, dtype=np.float32)
    draws = [
        np.asarray(step(p, step.init(p), data, jr.PRNGKey(k))[3]).reshape(2, 2) for k in (0, 0, 1)
    ]
    np.testing.assert_array_equal(draws[0], draws[1])  # the same key, the same draws
    assert not np.allclose(draws[0][0], draws[0][1])  # each device its own
    assert not np.allclose(draws[0], draws[2])  # each call its own


# --- the general problem type and the shipped problems ----------------------------


def test_a_series_problem_with_unequal_padding_trains_the_global_mean_in_every_mode():
    """An `AbstractProblem` whose series hold different numbers of observed points is
    weighted by them (`SeriesProblem.for_data`): `shard_map` then trains the global mean
    as `single` does (`make_step`'s reduction is tested in every mode above)."""
    problem = odestudy.SeriesProblem(resolve_problem(BAD + "Good"))
    data = problem.make_data(8, jr.PRNGKey(0))
    ts, ys = data.ts.copy(), data.ys.copy()
    for i, length in enumerate([12, 12, 12, 12, 3, 3, 3, 3]):  # pad the second half
        ts[i, length:], ys[i, length:] = ts[i, length - 1], ys[i, length - 1]
    padded = odestudy.Dataset(ts, ys, data.time_scale)
    weighted = problem.for_data(padded)
    assert weighted.weighted and not problem.for_data(data).weighted
    model = weighted.make_model(jr.PRNGKey(1), 8)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    batch = weighted.take(padded, np.arange(8))
    results = {}
    for mode, devices in (("single", CPU[:1]), ("shard_map", CPU[:2])):
        # The fixed-step scan: the cheapest solve to compile, padding steps of length 0.
        s = step_scenario(mode, len(devices), "stepto", Structure(solve="scan"))
        step = odestudy.make_parallel_step(s, devices, static, optax.sgd(1.0), problem=weighted)
        p, o = step.place_state(params, optax.sgd(1.0).init(params))
        new, _, value, _ = step(p, o, step.place_batch(batch))
        grads = jax.tree.map(lambda a, b: a - b, params, step.unplace(new))
        results[mode] = (float(np.asarray(value).reshape(-1)[0]), grads)
    for mode in ("shard_map",):
        np.testing.assert_allclose(results[mode][0], results["single"][0], rtol=1e-5)
        pairs = zip(
            jax.tree.leaves(results[mode][1]), jax.tree.leaves(results["single"][1]), strict=True
        )
        for a, b in pairs:
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


@pytest.mark.long  # about 10 s here
def test_the_controlled_problem_reads_args_alike_in_every_batching():
    """The forced oscillator's field reads each series' forcing (`args`): solved one
    series at a time, as one ODE, and as a fixed-step scan on its grid, the solutions
    agree (the scan to its fixed step's accuracy)."""
    problem = resolve_problem("forced_oscillator")
    field = problem.make_model(jr.PRNGKey(1), 16)
    # Each series on its own even grid (within-ODE batching rescales each one's time).
    start = np.array([[0.0], [0.5], [1.0], [0.2]], np.float32)
    ts = start + np.linspace(0.0, 4.0, 20, dtype=np.float32) * np.array(
        [[1.0], [0.8], [1.2], [1.0]], np.float32
    )
    y0 = np.asarray(jr.uniform(jr.PRNGKey(2), (4, 2), minval=-1.0, maxval=1.0))
    forcing = np.array([[0.2, 0.5], [1.0, 2.0], [0.6, 1.0], [0.9, 1.5]], np.float32)

    def solved(controller, structure):
        solve = BatchSolve(Solve(controller, structure, problem))
        return jax.jit(lambda args: solve(field, ts, y0, args=args))

    per_sample = solved("pid", Structure())
    out = {
        "per_sample": per_sample(forcing),
        "within_ode": solved("pid", Structure(solve="within_ode"))(forcing),
        "scan": solved("stepto", Structure(solve="scan"))(forcing),
    }
    np.testing.assert_allclose(out["within_ode"], out["per_sample"], atol=5e-3)
    np.testing.assert_allclose(out["scan"], out["per_sample"], atol=2e-2)
    # Another forcing gives another solution: the field does read it.
    other = per_sample(forcing[::-1])
    assert not np.allclose(other, out["per_sample"], atol=1e-3)


@pytest.mark.long  # over 15 s here: make test-long
def test_the_latent_ode_trains_through_the_study():
    """The latent ODE (a general problem: its own batch, a key per step, a `Mean` loss)
    through a whole scenario, with the cheapest solve to compile; keys per device are
    tested on `make_step` above, the controlled problem's `args` in every batching."""
    s = odestudy.Scenario(problem="latent_ode", scale="smoke", controller="stepto", solve="scan")
    record = run_scenario(s)
    assert record["status"] == "ok", record["error"]
    assert record["problem_facts"]["name"] == "latent_ode"
    steps = record["solver_steps"]["last_step_per_sample"]
    assert len(steps) == s.global_batch and min(steps) > 0


def test_the_default_truncate_cuts_and_pads_the_leaves_with_a_time_axis():
    problem = resolve_problem("latent_ode")
    data = problem.make_data(3, jr.PRNGKey(0))
    data = {"series": data, "label": np.arange(3.0), "grid": np.zeros((3, 7))}

    class Keyed(type(problem)):
        def times(self, data):
            return data["series"].ts

    cut = Keyed().truncate(data, 4, 6)
    ts = cut["series"].ts
    assert ts.shape == (3, 6) and cut["series"].ys.shape == (3, 6, 2)
    np.testing.assert_array_equal(ts[:, 4:], ts[:, 3:4].repeat(2, axis=1))
    np.testing.assert_array_equal(odestudy.observed(ts).sum(axis=1), [4, 4, 4])
    assert cut["label"] is data["label"] and cut["grid"] is data["grid"]
    with pytest.raises(ValueError, match="need 1 <= length <= total"):
        Keyed().truncate(data, 5, 4)


@pytest.mark.long  # about 16 s here (a scenario run)
def test_a_problem_object_from_a_notebook_runs_by_its_registered_name():
    class Mine(odestudy.AbstractODEProblem):
        name = "mine_in_a_notebook"
        time_dependent = False
        uniform_grid = True
        trained_loss = 1.0
        needs_key = False

        def make_data(self, size, key, spread=0.0):
            y0 = np.asarray(jr.normal(key, (size, 2)))
            ts = np.broadcast_to(np.linspace(0.0, 1.0, 6), (size, 6)).copy()
            return {"ts": ts, "ys": y0[:, None, :] * np.exp(-ts)[..., None]}

        def times(self, data):
            return data["ts"]

        def make_model(self, key, width):
            return odestudy.VectorField(key, width)

        def loss(self, model, batch, key, solve):
            pred = solve(model, batch["ts"], batch["ys"][:, 0])
            return jnp.mean((pred - batch["ys"]) ** 2)

    name = odestudy.register_problem(Mine())
    assert name == "mine_in_a_notebook"
    s = odestudy.Scenario(problem=name, scale="smoke", controller="stepto", solve="scan")
    record = run_scenario(s)
    assert record["status"] == "ok", record["error"]
    assert record["problem_facts"]["class"].endswith("Mine")
    with pytest.raises(ValueError, match="is shipped"):
        odestudy.register_problem(type("Clash", (Mine,), {"name": "oscillator"})())
    # The object itself names the same problem; the matrix's kernels cannot make it.
    assert odestudy.Scenario(problem=Mine(), scale="smoke").problem == name
    with pytest.raises(ValueError, match="registered in this process only"):
        run_matrix("smoke", "cpu", problem=Mine(), results="unused")


def test_a_problem_object_whose_class_is_importable_is_named_as_module_object():
    from tests.bad_problems import Good

    assert odestudy.Scenario(problem=Good(), scale="smoke").problem == "tests.bad_problems:Good"
    shipped = resolve_problem("latent_ode")
    assert odestudy.Scenario(problem=shipped, scale="smoke").problem == "latent_ode"


def test_time_modes_times_a_users_step_in_every_mode_as_a_table():
    loss, model, batch = _masked_problem()
    x, y, mask = batch
    at_model = float(np.sum(mask * (x @ np.asarray(model) - y) ** 2) / mask.sum())
    result = odestudy.time_modes(
        loss, optax.sgd(0.1), model, batch, trained_loss=2 * at_model, devices=CPU[:2],
        aux=AUX_KINDS, blocks=2, steps_per_block=2, warmup_steps=1,
    )  # fmt: skip
    rows = {r["mode"]: r for r in result.rows}
    assert set(rows) == {"single", "pmap", "shard", "shard_map", "explicit"}
    assert rows["single"]["speedup"] is None and rows["pmap"]["speedup"] is not None
    losses = [r["loss"] for r in result.rows]
    np.testing.assert_allclose(losses, at_model, rtol=1e-6)  # one objective, at the model
    for r in result.rows:
        assert [len(b) for b in r["step_times_blocks_s"]] == [2, 2]
        assert r["step_low_s"] <= r["step_s"] <= r["step_high_s"]
    table = result.table()
    assert result.machine in table and table.count("\n| `") == 5
    assert result.trained is True and "\nParameters as given, trained: yes (loss " in table
    with pytest.raises(ValueError, match="does not split over 3 devices"):
        odestudy.time_modes(loss, optax.sgd(0.1), model, batch, devices=CPU[:3])
    with pytest.raises(ValueError, match="trained_loss must be a finite number, got nan"):
        odestudy.time_modes(loss, optax.sgd(0.1), model, batch, trained_loss=float("nan"))


def test_time_modes_says_whether_the_model_timed_was_trained():
    """The table's line on the parameters: trained at or below the user's trained loss,
    untrained above it (its timing says nothing about training), or unknown (counted
    untrained)."""
    rows = [{"mode": "single", "devices": 1, "compile_s": 0.1, "step_s": 1e-3,
             "step_low_s": 1e-3, "step_high_s": 1e-3, "speedup": None, "speedup_low": None,
             "speedup_high": None, "loss": 0.5}]  # fmt: skip
    said = {
        trained_loss: odestudy.ModeTimes(rows, "here", {}, trained_loss)
        for trained_loss in (None, 0.5, 0.25)
    }
    assert [t.trained for t in said.values()] == [None, True, False]
    lines = [t.table().splitlines()[2] for t in said.values()]
    assert lines == [
        "Parameters as given, trained: unknown, so counted untrained "
        "(time_modes(trained_loss=...) checks them): the timing of an untrained model says "
        "nothing about training",
        "Parameters as given, trained: yes (loss 0.5 at the parameters, trained loss 0.5)",
        "Parameters as given, trained: no (loss 0.5 at the parameters, trained loss 0.25): "
        "the timing of an untrained model says nothing about training",
    ]


@pytest.mark.long  # about 15 s here (every committed record)
def test_every_committed_record_keeps_its_name_and_key():
    """The problem types changed how a problem is run, not how scenarios are named: each
    committed record's scenario gives back the record's key, and its name where the
    record has a protocol (records before protocols were named before later fields
    joined the names)."""
    from odestudy.measure.environment import ROOT
    from odestudy.measure.scenario import Scenario

    found = 0
    for path in sorted((ROOT / "results").rglob("metrics.json")):
        record = odestudy.read_record(path)
        if "scenario" not in record or "scenario_key" not in record:
            continue
        s = Scenario.from_dict(record["scenario"])
        assert s.key() == record["scenario_key"], path
        if record.get("protocol") is not None:
            assert s.name() == record["name"], path
        found += 1
    assert found > 100


def test_a_passed_loss_check_is_remembered_in_the_data_cache(tmp_path, monkeypatch):
    """Kernels of one matrix share the data cache folder: a loss check passed there is
    not traced again for the same problem, solve and shapes (and not remembered without
    the folder)."""
    from odestudy.measure import checks
    from odestudy.measure.data import DATA_CACHE_ENV

    traced = []
    monkeypatch.setattr(checks, "check_loss", lambda *args: traced.append(args))
    s = odestudy.Scenario(problem=BAD + "Good", scale="smoke")
    problem = s.ode_problem
    data = problem.make_data(4, jr.PRNGKey(0))
    params, static = eqx.partition(problem.make_model(jr.PRNGKey(1), 8), eqx.is_inexact_array)
    monkeypatch.delenv(DATA_CACHE_ENV, raising=False)
    checks.check_parts(s, problem, data, params, static)
    monkeypatch.setenv(DATA_CACHE_ENV, str(tmp_path))
    for _ in range(2):
        checks.check_parts(s, problem, data, params, static)
    other = odestudy.Scenario(problem=BAD + "Good", scale="smoke", controller="stepto")
    checks.check_parts(other, problem, data, params, static)
    assert len(traced) == 3  # without the folder, then once per controller
    assert len(list(tmp_path.glob("checked-*"))) == 2
