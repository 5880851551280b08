"""Records: a real scenario's record (the smoke matrix's `shard_map` run, conftest)
survives JSON, carries its environment, and is written atomically."""

import json
import subprocess

import pytest

from odestudy import Scenario, read_record, write_json_atomic
from odestudy.measure import environment
from odestudy.measure.record import REQUIRED_KEYS


@pytest.fixture(scope="module")
def record(smoke_matrix):
    """The record of a notebook run of `shard_map` on 2 of its kernel's 2 devices."""
    return smoke_matrix[1]


@pytest.mark.long  # the smoke matrix's run (conftest): over a minute here
def test_record_has_required_keys_and_environment(record):
    assert record["status"] == "ok", record["error"]
    for key in REQUIRED_KEYS:
        assert key in record
    for pkg in ("python", "jax", "jaxlib", "diffrax", "equinox", "optax"):
        assert record["versions"][pkg]
    assert record["hardware"]["physical_cores"] >= 1
    assert record["hardware"]["device_count"] == 2  # the kernel's virtual devices
    assert "pmap_implementation" in record
    assert record["n_devices"] == 2 and record["global_batch"] == 8
    assert record["step_time_p25_s"] <= record["step_time_s"] <= record["step_time_p75_s"]
    assert len(record["solver_steps"]["per_device_max"]) == 2
    assert record["collectives_in_loops"] == 0 and record["collectives_total"] >= 1
    assert len(record["compile_time_per_stage_s"]) == len(record["scenario"]["length_fractions"])


@pytest.mark.long
def test_record_survives_json_round_trip(record, tmp_path):
    path = tmp_path / "metrics.json"
    write_json_atomic(path, record)
    again = read_record(path)
    assert again == json.loads(json.dumps(record))
    assert Scenario.from_dict(again["scenario"]) == Scenario.from_dict(record["scenario"])
    assert Scenario.from_dict(again["scenario"]).key() == record["scenario_key"]


def test_interrupted_write_keeps_the_old_record(tmp_path):
    path = tmp_path / "metrics.json"
    write_json_atomic(path, {"status": "ok", "step_time_s": 1.0})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"status": "ok", "bad": object()})
    assert read_record(path) == {"status": "ok", "step_time_s": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_cached_dataset_is_the_generated_one(tmp_path):
    import jax.random as jr
    import numpy as np

    from odestudy.measure.data import cached_dataset, make_dataset

    key = jr.PRNGKey(3)
    made, hit = cached_dataset(8, key, 0.5, tmp_path)
    again, hit_again = cached_dataset(8, key, 0.5, tmp_path)
    other, hit_other = cached_dataset(8, key, 0.0, tmp_path)
    assert (hit, hit_again, hit_other) == (False, True, False)
    for a, b in ((made, again), (made, make_dataset(8, key, 0.5))):
        np.testing.assert_array_equal(a.ys, b.ys)
        np.testing.assert_array_equal(a.ts, b.ts)
    assert not np.array_equal(other.ts, made.ts)


def test_saved_state_loads_into_the_same_tree(tmp_path):
    import equinox as eqx
    import jax
    import jax.random as jr
    import numpy as np
    import optax

    from odestudy.measure.model import VectorField
    from odestudy.measure.state import load_state, save_state

    params, _ = eqx.partition(VectorField(jr.PRNGKey(0)), eqx.is_array)
    opt_state = optax.adabelief(1e-2).init(params)
    trained = jax.tree.map(lambda x: x + 1, (params, opt_state))
    save_state(tmp_path / "state.npz", *trained)
    loaded = load_state(tmp_path / "state.npz", params, opt_state)
    assert jax.tree.structure(loaded) == jax.tree.structure(trained)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(trained), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_git_commit_ignores_the_study_outputs_but_not_its_code(tmp_path):
    """A run that rewrites committed records or figures still names a clean commit;
    a change to code or inputs makes it dirty."""

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for name in ("code.py", "results/a/metrics.json", "figures/tables/cpu.md", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    clean = environment.git_commit(tmp_path / "results")
    assert clean is not None and not clean.endswith("-dirty")
    (tmp_path / "results/a/metrics.json").write_text("1\n")
    (tmp_path / "figures/tables/cpu.md").write_text("1\n")
    (tmp_path / "README.md").write_text("1\n")  # its results section, rewritten
    assert environment.git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("1\n")
    assert environment.git_commit(tmp_path) == clean + "-dirty"
