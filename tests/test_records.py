"""Records: a real scenario's record survives JSON, carries its environment, and is
written atomically."""

import json

import pytest

from odestudy import Scenario, read_record, run_scenario, write_json_atomic
from odestudy.records import REQUIRED_KEYS


@pytest.fixture(scope="module")
def record():
    return run_scenario(Scenario(n_devices=2, mode="shard_map", scale="smoke"))


def test_record_has_required_keys_and_environment(record):
    assert record["status"] == "ok", record["error"]
    for key in REQUIRED_KEYS:
        assert key in record
    for pkg in ("python", "jax", "jaxlib", "diffrax", "equinox", "optax"):
        assert record["versions"][pkg]
    assert record["hardware"]["physical_cores"] >= 1
    assert record["hardware"]["device_count"] == 8
    assert "pmap_implementation" in record
    assert record["n_devices"] == 2 and record["global_batch"] == 8
    assert record["step_time_p25_s"] <= record["step_time_s"] <= record["step_time_p75_s"]
    assert len(record["solver_steps"]["per_device_max"]) == 2
    assert record["collectives_in_loops"] == 0 and record["collectives_total"] >= 1
    assert len(record["compile_time_per_stage_s"]) == len(record["scenario"]["length_fractions"])


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
