"""The machine's weak-scaling ceiling in the tables: a weak row's efficiency against
two independent 1-device trainings side by side, joined only within one machine,
protocol and measurement environment. Synthetic records; nothing here runs JAX."""

import pytest

from odestudy.measure import environment
from odestudy.measure.recommended import recommended
from odestudy.measure.scenario import Scenario
from odestudy.measure.timing import PROTOCOL
from odestudy.report.ceiling import ceiling_for, ceiling_interval
from odestudy.report.frames import read_records, scaling_rows
from odestudy.study import records
from odestudy.study.ceiling import ceiling_path
from odestudy.study.matrix import record_path
from odestudy.study.plan import expected_env
from odestudy.study.rec import Ceiling, Rec

from .helpers import record


def _ceiling(s: Scenario, alone: float, paired: float, runs: int = 2) -> dict:
    """A ceiling record for 1-device scenario `s` with constant step times."""
    one = {
        "status": "ok",
        "alone": [[alone] * 20, [alone] * 20],
        "paired": [[paired] * 20, [paired] * 20],
        "one_core": [[alone] * 20],
    }
    return {
        "scenario_key": s.key(),
        "name": s.name(),
        "scenario": s.to_dict(),
        "protocol": PROTOCOL,
        "measurement_env": expected_env(s),
        "machine_id": environment.machine_id(environment.this_machine()),
        "versions": environment.versions(),
        "runs": [one] * runs,
    }


def _write(tmp_path, s: Scenario, step: float) -> dict:
    rec = record(s, step=step)
    records.write_json_atomic(record_path(s, tmp_path), rec)
    return rec


def test_weak_efficiency_is_set_against_the_machine_ceiling(tmp_path):
    one = Scenario(scale="smoke")
    _write(tmp_path, one, 0.020)
    _write(
        tmp_path,
        Scenario(scale="smoke", devices_per_process=2, mode="shard_map", scaling="weak"),
        0.025,
    )
    folder = record_path(one, tmp_path).parent.parent
    records.write_json_atomic(ceiling_path(folder, "pid"), _ceiling(one, 0.020, 0.0225))
    rows = scaling_rows(read_records(tmp_path, "smoke"), "weak")
    (two,) = [r for r in rows if r["n_devices"] == 2]
    assert two["efficiency"] == pytest.approx(0.8)
    assert two["ceiling"][0] == pytest.approx(0.020 / 0.0225)
    # 0.8 of one device's throughput per device, where the machine allows 0.889.
    est, low, high = two["efficiency_vs_ceiling"]
    assert est == pytest.approx(0.9) and low <= est <= high


def test_a_ceiling_of_another_protocol_or_controller_is_not_used(tmp_path):
    one = Scenario(scale="smoke")
    rec = Rec(_write(tmp_path, one, 0.02), path=str(record_path(one, tmp_path)))
    folder = record_path(one, tmp_path).parent.parent
    assert ceiling_for(rec) is None
    records.write_json_atomic(
        ceiling_path(folder, "pid"), dict(_ceiling(one, 0.02, 0.02), protocol=PROTOCOL + 1)
    )
    assert ceiling_for(rec) is None
    records.write_json_atomic(ceiling_path(folder, "pid"), _ceiling(one, 0.02, 0.02))
    assert ceiling_for(rec) is not None
    assert ceiling_for(Rec(rec, controller="stepto")) is None


def test_ceiling_interval_pools_every_run():
    one = Scenario(scale="smoke")
    got = ceiling_interval(Ceiling(_ceiling(one, 0.02, 0.025, runs=3)))
    assert got["runs"] == 3
    assert got["ceiling"] == pytest.approx((0.8, 0.8, 0.8))
    assert got["one_core_vs_alone"] == pytest.approx((1.0, 1.0, 1.0))
    assert ceiling_interval(Ceiling(runs=[{"status": "failed", "error": "x"}])) == {"runs": 0}


def test_a_ceiling_of_an_earlier_cold_run_is_not_used(tmp_path):
    """Ceiling runs pool only over one cold run of the probe: a new cold run (another
    `run_id`) makes the ceiling record another measurement's."""
    one = Scenario(scale="smoke")
    rec = Rec(_write(tmp_path, one, 0.02), run_id="cold-1")
    records.write_json_atomic(record_path(one, tmp_path), rec)
    rec["path"] = str(record_path(one, tmp_path))
    folder = record_path(one, tmp_path).parent.parent
    ceiling = dict(_ceiling(one, 0.02, 0.02), probe_run_id="cold-1")
    records.write_json_atomic(ceiling_path(folder, "pid"), ceiling)
    assert ceiling_for(rec) is not None
    records.write_json_atomic(ceiling_path(folder, "pid"), dict(ceiling, probe_run_id="cold-0"))
    assert ceiling_for(rec) is None


def test_each_step_has_its_own_ceiling_and_never_reads_another_steps(tmp_path):
    """The default and the recommended 1-device probes of one controller write apart
    (`Scenario.step_tag`), and a record reads only its own step's ceiling."""
    one = Scenario(scale="smoke")
    fast = recommended(one)
    assert fast.step_tag() and not one.step_tag()
    folder = record_path(one, tmp_path).parent.parent
    assert ceiling_path(folder, "pid") != ceiling_path(folder, "pid", fast.step_tag())
    default = Rec(_write(tmp_path, one, 0.02), path=str(record_path(one, tmp_path)))
    best = Rec(_write(tmp_path, fast, 0.01), path=str(record_path(fast, tmp_path)))
    records.write_json_atomic(ceiling_path(folder, "pid"), _ceiling(fast, 0.01, 0.02))
    assert ceiling_for(default) is None  # the recommended probe's runs, misfiled
    records.write_json_atomic(
        ceiling_path(folder, "pid", fast.step_tag()), _ceiling(fast, 0.01, 0.02)
    )
    assert ceiling_for(best)["name"] == fast.name()
    assert ceiling_for(default) is None
