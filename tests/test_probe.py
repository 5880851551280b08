"""The machine probe in every timing session's records, the hardware profiles, and the
prediction's arithmetic (intervals, the lock-step term, the terms said measured or
profiled), on synthetic sweeps: no timing is asserted."""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from odestudy import predict
from odestudy.cli import main
from odestudy.measure.environment import machine_id, this_machine
from odestudy.measure.probe import GRADIENT_FLOATS, PROBE_VARIABLE, allreduce_s, read_probe
from odestudy.measure.scenario import Scenario
from odestudy.predict import (
    Anchor,
    Measured,
    check_prediction,
    expected_max,
    one_device,
    pooled,
    predict_rows,
    predicted_modes,
    session_profile,
)
from odestudy.study.probing import PROBE_OFF, session_probe
from odestudy.study.profiles import (
    HardwareProfile,
    ProfileError,
    Value,
    load_profile,
    machine_profile,
    machine_profile_if_any,
    profile_from_file,
    shipped_profiles,
)


@pytest.mark.long  # the smoke matrix's run (conftest): over a minute here
def test_a_record_of_a_session_carries_the_sessions_probe(smoke_matrix):
    root, rec = smoke_matrix
    p = rec["probe"]
    assert p is not None and p == read_probe(p["path"])  # the session's probe file
    assert Path(p["path"]).is_relative_to(root)
    assert {(a["n_devices"], a["size"]) for a in p["allreduce"]} == {
        (2, 1),
        (2, GRADIENT_FLOATS),
    }
    assert all(a["latency_s"] >= 0 for a in p["allreduce"])
    assert p["matmul"][0]["flops_per_s"] > 0 and p["loop_iteration_s"] > 0
    assert p["machine_id"] == machine_id(this_machine())


@pytest.mark.long
def test_a_multi_process_row_measures_its_cross_process_allreduce(two_process_record):
    found = two_process_record["probe_processes"]
    assert [(a["n_devices"], a["processes"], a["size"]) for a in found] == [
        (2, 2, 1),
        (2, 2, GRADIENT_FLOATS),
    ]


def test_a_session_inside_another_keeps_its_probe_and_off_runs_none(tmp_path, monkeypatch):
    outer = tmp_path / "outer.json"
    outer.write_text("{}")
    monkeypatch.setenv(PROBE_VARIABLE, str(outer))
    with session_probe("cpu", 2, tmp_path) as found:
        assert found == outer
    monkeypatch.setenv(PROBE_VARIABLE, PROBE_OFF)
    with session_probe("cpu", 2, tmp_path) as found:
        assert found is None
    assert not (tmp_path / "probes").exists()


def test_the_probe_interpolates_the_gradient_size():
    probe = {"allreduce": [
        {"n_devices": 2, "size": 1, "latency_s": 10e-6},
        {"n_devices": 2, "size": 1001, "latency_s": 20e-6},
    ]}  # fmt: skip
    assert allreduce_s(probe, 2, 1) == pytest.approx(10e-6)
    assert allreduce_s(probe, 2, 501) == pytest.approx(15e-6)
    assert allreduce_s(probe, 4, 1) is None


@pytest.mark.parametrize("name", sorted(shipped_profiles()))
def test_every_shipped_profile_cites_each_value_and_states_a_range(name):
    profile = load_profile(name)
    assert profile.placements()
    for value in profile.allreduce.values():
        assert value.low <= value.central <= value.high and value.source
        assert not value.measured
    big, small = profile.gradient(10**6, 2), profile.gradient(1, 2)
    assert big.central > small.central and big.low <= big.central <= big.high


def test_a_profile_names_the_placements_it_has():
    with pytest.raises(ProfileError, match="no all-reduce for 3 devices; it has: 2 devices"):
        load_profile("h100-nvlink").latency(3)
    with pytest.raises(ProfileError, match="valid choices: cpu, h100-nvlink, pcie-gpu"):
        load_profile("no-such-profile")


def test_this_machines_profile_is_its_probes_median_and_spread(tmp_path):
    here = machine_id(this_machine())
    folder = tmp_path / here / "probes"
    folder.mkdir(parents=True)
    for i, latency in enumerate((10e-6, 30e-6, 20e-6)):
        probe = {"allreduce": [
            {"n_devices": 2, "processes": 1, "size": 1, "latency_s": latency},
            {"n_devices": 2, "processes": 1, "size": 101, "latency_s": latency + 1e-6},
        ]}  # fmt: skip
        (folder / f"{i}.json").write_text(json.dumps(probe))
    row = tmp_path / here / "quick" / "cpu-2x1-shard_map-pid-strong-quick"
    row.mkdir(parents=True)
    found = [{"n_devices": 2, "processes": 2, "size": 1, "latency_s": 50e-6}]
    (row / "metrics.json").write_text(json.dumps({"probe_processes": found, "scenario": {}}))
    profile = machine_profile(tmp_path)
    one = profile.latency(2)
    assert (one.central, one.low, one.high, one.measured) == (20e-6, 10e-6, 30e-6, True)
    assert "3 probe(s)" in one.source
    assert profile.latency(2, processes=2).central == 50e-6
    assert profile.gradient(101, 2).central == pytest.approx(20e-6 + 1e-6, rel=0.3)
    with pytest.raises(ProfileError, match="no machine probe recorded"):
        machine_profile(tmp_path / "empty")
    assert machine_profile_if_any(tmp_path / "empty") is None
    assert machine_profile_if_any(tmp_path) == profile


def _sweep(local_times, full_times, per_sample):
    return {"rows": [
        {"batch": 4, "step_times_s": local_times, "step_time_s": float(np.median(local_times)),
         "iterations_executed": 10.0, "per_sample_steps": per_sample},
        {"batch": 8, "step_times_s": full_times, "step_time_s": float(np.median(full_times)),
         "iterations_executed": 12.0, "per_sample_steps": per_sample},
    ]}  # fmt: skip


def test_each_mode_gets_its_step_and_speedup_with_intervals():
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    rng = np.random.default_rng(1)
    sweep = _sweep(list(1e-3 + 1e-4 * rng.random(10)), list(2e-3 + 1e-4 * rng.random(10)),
                   list(rng.integers(8, 13, 64)))  # fmt: skip
    gradient = Value(20e-6, 10e-6, 40e-6, "cited")
    loop = Value(10e-6, 5e-6, 20e-6, "cited")
    rows = {r["mode"]: r for r in predict_rows(Measured(sweep, gradient, loop, 5.0), target)}
    assert tuple(rows) == predicted_modes(target) == ("pmap", "shard", "shard_map", "explicit")
    for r in rows.values():
        lo, hi = r["step_time_interval_s"]
        assert lo <= r["step_time_s"] <= hi and r["allreduce_s"] == gradient.central
        assert r["speedup_interval"][0] <= r["speedup"] <= r["speedup_interval"][1]
        parts = r["compute_s"] + r["allreduce_s"] + r["in_loop_s"]
        assert r["central_step_time_s"] == pytest.approx(parts)
        assert r["iterations_per_device"] <= r["iterations"] <= 12
    assert rows["shard"]["in_loop_s"] == pytest.approx(5 * rows["shard"]["iterations"] * 10e-6)
    assert rows["pmap"]["in_loop_s"] == rows["shard_map"]["in_loop_s"] == 0
    assert rows["pmap"]["step_time_s"] == rows["shard_map"]["step_time_s"]


@pytest.mark.parametrize("profile", sorted(shipped_profiles()))
@pytest.mark.parametrize("skew", [(8, 13), (4, 40), (30, 31)])
def test_every_predicted_estimate_lies_inside_its_interval(profile, skew):
    """Every mode's step and speedup estimate inside its own interval, for every shipped
    profile and per-sample steps narrow, skewed or flat (the central terms alone could
    fall outside)."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    rng = np.random.default_rng(3)
    sweep = _sweep(list(1e-3 + 3e-4 * rng.random(10)), list(2e-3 + 3e-4 * rng.random(10)),
                   list(rng.integers(*skew, 64)))  # fmt: skip
    gradient = profile_from_file(shipped_profiles()[profile]).gradient(4482, 2)
    for r in predict_rows(Measured(sweep, gradient, gradient, 30.0), target):
        lo, hi = r["step_time_interval_s"]
        assert lo <= r["step_time_s"] <= hi, (profile, r["mode"])
        slo, shi = r["speedup_interval"]
        assert slo <= r["speedup"] <= shi, (profile, r["mode"])


def test_a_prediction_from_a_recorded_row_takes_its_level_from_the_row():
    """The sweep gives the ratio of batches, the recorded 1-device row its session's
    level: a sweep run 1.5x slower than the row (another session) predicts the same."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    rng = np.random.default_rng(2)
    local, full = list(1e-3 + 1e-5 * rng.random(20)), list(2e-3 + 1e-5 * rng.random(20))
    sweep, slow = _sweep(local, full, [10, 12]), _sweep(
        [1.5 * t for t in local], [1.5 * t for t in full], [10, 12])  # fmt: skip
    gradient, loop = Value(20e-6, 10e-6, 40e-6, "cited"), Value(10e-6, 5e-6, 20e-6, "cited")
    # A slower cold run, then two from the trained state: the anchor is the latter.
    cold = [3e-3] * 10
    runs = {
        "global_batch": 8,
        "step_time_s": 0.0,
        "step_times_runs_s": [cold, full[:10], full[10:]],
    }
    row = Anchor.of_record(runs, "row")
    assert row.step_time_s == pytest.approx(float(np.median(full)))

    def rows(s, anchor=None):
        return {
            r["mode"]: r for r in predict_rows(Measured(s, gradient, loop, 5.0, anchor), target)
        }

    plain, off, fixed = rows(sweep), rows(slow), rows(slow, row)
    for mode, r in fixed.items():
        assert r["central_step_time_s"] == pytest.approx(plain[mode]["central_step_time_s"])
        assert r["step_time_s"] == pytest.approx(plain[mode]["step_time_s"], rel=0.01)
        assert r["one_device_s"] == pytest.approx(row.step_time_s)
        assert off[mode]["compute_s"] == pytest.approx(1.5 * plain[mode]["compute_s"])
        lo, hi = r["step_time_interval_s"]
        assert lo <= r["step_time_s"] <= hi
    # An anchor at the per-device batch (a weak-scaling row) scales by the sweep's there.
    weak = Anchor(4, tuple(local), "row at the per-device batch")
    assert rows(slow, weak)["pmap"]["compute_s"] == pytest.approx(plain["pmap"]["compute_s"])


def _with_neighbours(sweep, together):
    timed = {"median_s": 20e-6, "interval_s": [10e-6, 30e-6], "times_s": [20e-6], "n": 2}
    neighbours = {"n": 2, "alone_s": together, "together_s": together,
                  "alone_median_s": float(np.median(together)),
                  "together_median_s": float(np.median(together)), "factor": 1.0}  # fmt: skip
    return dict(sweep, neighbours={"4": neighbours}, allreduce=timed, loop_meeting=timed)


def test_terms_measured_in_several_processes_give_an_interval_over_all_of_them():
    """Two processes whose device step differs by 1.5x: each alone predicts a tight
    interval that misses the other's; pooled (`sweep_in_processes`), a draw takes one
    process's times, so the interval covers both predictions and the estimate lies
    between them; the pooled lists keep every time and the processes apart."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    rng = np.random.default_rng(4)
    full, per_sample = list(2e-3 + 1e-5 * rng.random(20)), [10, 12]
    fast, slow = (
        _with_neighbours(_sweep(list(f * 1e-3 + 1e-5 * rng.random(20)), full, per_sample),
                         list(f * 1.1e-3 + 1e-5 * rng.random(20)))
        for f in (1.0, 1.5)
    )  # fmt: skip
    gradient, loop = Value(20e-6, 10e-6, 40e-6, "cited"), Value(10e-6, 5e-6, 20e-6, "cited")

    def pmap(sweep):
        return next(r for r in predict_rows(Measured(sweep, gradient, loop, 5.0), target)
                    if r["mode"] == "pmap")  # fmt: skip

    one, other, both = pmap(fast), pmap(slow), pmap(pooled([fast, slow]))
    assert one["speedup_interval"][0] > other["speedup_interval"][1]
    lo, hi = both["speedup_interval"]
    assert lo <= other["speedup"] < both["speedup"] < one["speedup"] <= hi
    merged = pooled([fast, slow])
    assert merged["processes"] == 2 and len(merged["rows"][0]["step_times_s"]) == 40
    assert merged["rows"][0]["step_times_by_process_s"][1] == slow["rows"][0]["step_times_s"]
    assert (
        merged["neighbours"]["4"]["together_by_process_s"][0]
        == fast["neighbours"]["4"]["together_s"]
    )
    assert pooled([fast]) is fast


def test_a_record_without_runs_anchors_on_its_one_step():
    row = Anchor.of_record({"global_batch": 32, "step_time_s": 0.02}, "old row")
    assert (row.batch, row.step_times_s, row.step_time_s) == (32, (0.02,), 0.02)
    assert row.to_dict() == {"batch": 32, "step_time_s": 0.02, "source": "old row"}


def test_a_prediction_from_a_row_is_anchored_and_ranged_over_the_machines_probes(
    tmp_path, monkeypatch
):
    """`predict_from_row` (the map's and the rows' predictions) hands the sweep the
    recorded row as its anchor, and a session probe's latency the machine's range."""
    from odestudy.measure.state import STATE_NAME
    from odestudy.study import records

    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke")
    path = records.record_path(one_device(target), tmp_path)
    path.parent.mkdir(parents=True)
    (path.parent / STATE_NAME).write_bytes(b"")
    rec = {"status": "ok", "started": "then", "final_loss": 0.01, "global_batch": 32,
           "step_time_s": 0.02, "step_times_runs_s": [[0.01, 0.02, 0.03]],
           **_made_here()}  # fmt: skip
    path.write_text(json.dumps(rec))
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"allreduce": [{"n_devices": 2, "size": 1, "latency_s": 15e-6}]}))
    monkeypatch.setenv(PROBE_VARIABLE, str(probe))
    machine = HardwareProfile("cpu", "cpu", "", {(2, 1, 1): Value(40e-6, 10e-6, 90e-6, "x", True)})
    seen = {}

    def made(target, profile, swept, anchor, axis=()):
        seen.update(profile=profile, anchor=anchor)
        return {"rows": []}

    monkeypatch.setattr(predict, "sweep_terms", lambda *args: None)
    monkeypatch.setattr(predict, "predict_modes", made)
    out = tmp_path / "p.json"
    p = predict.predict_from_row(target, tmp_path, out, None, "it", False, None, machine)
    assert p is not None and p["made_from"]["model"] == predict.PREDICTION_MODEL
    assert seen["anchor"].step_times_s == (0.01, 0.02, 0.03)
    assert seen["anchor"].batch == 32
    one = seen["profile"].latency(2)
    assert (one.central, one.low, one.high) == (15e-6, 10e-6, 90e-6)


def test_the_lock_step_term_is_the_expected_maximum_of_a_share():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 101)
    shares = [expected_max(steps, b, rng) for b in (1, 4, 32, 256)]
    assert shares == sorted(shares) and shares[-1] <= 100
    assert expected_max(np.full(10, 7), 64, rng) == 7


def test_a_probe_session_profile_is_measured_and_spans_this_machines_range():
    probe = {"path": "p.json", "platform": "cpu", "allreduce": [
        {"n_devices": 2, "size": 1, "latency_s": 40e-6},
        {"n_devices": 2, "size": 1001, "latency_s": 50e-6},
    ]}  # fmt: skip
    machine = HardwareProfile("cpu", "cpu", "", {(2, 1, 1): Value(30e-6, 20e-6, 35e-6, "x", True)})
    one = session_profile(probe, machine).latency(2)
    assert (one.central, one.low, one.high, one.measured) == (40e-6, 20e-6, 40e-6, True)


def test_predict_checks_its_placement_before_anything_runs(capsys):
    target = Scenario(mode="shard_map", devices_per_process=1, processes=2, scale="smoke")
    with pytest.raises(ValueError, match="cross-process all-reduce from a profile"):
        check_prediction(target)
    with pytest.raises(ProfileError, match="it has: 2 devices, 4 devices, 8 devices"):
        check_prediction(target, load_profile("h100-nvlink"))
    assert one_device(target).total_devices == 1
    assert main(["predict", "--devices", "8", "--profile", "nope", "--scale", "smoke"]) == 2
    assert "valid choices: cpu, h100-nvlink" in capsys.readouterr().err
    assert main(["predict", "--devices", "1", "--scale", "smoke"]) == 2
    assert "2 or more devices" in capsys.readouterr().err
    assert os.environ.get(PROBE_VARIABLE) == PROBE_OFF  # nothing started a session


def test_the_prediction_page_checks_each_row_against_its_own_scenario():
    from odestudy.builtin.prediction import checked_rows, summary_lines
    from odestudy.study.rec import Rec

    def scenario(mode, processes, nodes, **fields):
        return Scenario(mode=mode, devices_per_process=2 // processes, processes=processes,
                        nodes=nodes, scale="quick", **fields)  # fmt: skip

    def row(step, *placed, **fields):
        s = scenario(*placed, **fields)
        return Rec({"status": "ok", "scaling": "strong", "controller": "pid", "mode": s.mode,
                    "n_devices": 2, "problem": "oscillator", "step_time_s": step,
                    "scenario": s.to_dict(), "name": s.name(), "session": None})  # fmt: skip

    rows = [row(0.010, "shard_map", 1, 1), row(0.020, "shard_map", 2, 1),
            row(0.05, "shard", 2, 2), row(0.030, "shard_map", 2, 1, batch=64)]  # fmt: skip

    def prediction(**fields):
        return {"scenario": scenario("shard_map", 2, 1, **fields).to_dict(), "n_devices": 2,
                "processes": 2, "nodes": 1, "profile": {"name": "cpu"}, "trained": True,
                "rows": [
             {"mode": "shard_map", "step_time_s": 0.022, "step_time_interval_s": [0.018, 0.03]},
             {"mode": "shard", "step_time_s": 0.04, "step_time_interval_s": [0.03, 0.045]},
        ]}  # fmt: skip

    found = [prediction()]
    assert checked_rows(rows, [{**found[0], "trained": False}]) == []  # did not train
    checked = checked_rows(rows, found)
    assert [(c["mode"], c["placement"]) for c in checked] == [("shard_map", (2, 2, 1))]
    assert checked[0]["error"] == pytest.approx(0.1) and checked[0]["inside"]
    lines = summary_lines(checked)
    assert lines == [
        "- 2 devices, 2 processes, `shard_map`: median |error| 10 % over 1 row(s); 1 of 1 "
        "measured inside the predicted interval (prediction model unknown; 1 of unknown time)."
    ]
    # A prediction of another batch is checked against that batch's row, not the default's.
    other = checked_rows(rows, [prediction(batch=64)])
    assert [(c["name"], c["measured_s"]) for c in other] == [(rows[3]["name"], 0.030)]


def test_a_user_problem_s_check_compares_predicted_and_measured_speedups():
    """The prediction page's section on a problem written outside the package: each
    2-device row's speedup against the one predicted, within 25 % or not, and verdicts."""
    from odestudy.builtin.prediction import checked_rows, own_said, own_table, speedup_error
    from odestudy.study.rec import Rec

    s = Scenario(mode="shard_map", devices_per_process=2, scale="quick")

    def row(mode, speedup, lo, hi):
        m = dataclasses.replace(s, mode=mode)
        return Rec({"status": "ok", "scaling": "strong", "controller": "pid", "mode": mode,
                    "n_devices": 2, "step_time_s": 0.01, "speedup": speedup,
                    "speedup_ci": (lo, hi), "scenario": m.to_dict(), "name": m.name(),
                    "session": None})  # fmt: skip

    def predicted(mode, speedup, lo, hi):
        return {"mode": mode, "step_time_s": 0.01, "step_time_interval_s": [0.009, 0.011],
                "speedup": speedup, "speedup_interval": [lo, hi]}  # fmt: skip

    rows = [row("pmap", 1.5, 1.4, 1.6), row("shard", 0.8, 0.7, 0.9)]
    found = [{"scenario": s.to_dict(), "n_devices": 2, "profile": {"name": None},
              "trained": True, "made_from": {"model": 15},
              "rows": [predicted("pmap", 1.45, 1.2, 1.6),
                                        predicted("shard", 1.2, 1.1, 1.3)]}]  # fmt: skip
    checked = checked_rows(rows, found)
    errors = {c.mode: speedup_error(c) for c in checked}
    assert errors == pytest.approx({"pmap": 1.45 / 1.5 - 1, "shard": 1.2 / 0.8 - 1})
    said = own_said(checked, [], "quick")
    assert "1 of 2 predicted speedups lie within 25 %" in said
    assert "the measured one at 1 of 2, the opposite at 1" in said  # shard: pays / does not
    # pmap's measured 1.5x lies inside its predicted [1.2, 1.6]; shard's 0.8x outside.
    assert "model 15, measurement protocol unknown: 1 of 2 within 25 %, the measured " in said
    assert "the measured speedup inside the predicted " in said
    # pmap's predicted 1.45x lies inside its measured [1.4, 1.6]; shard's 1.2x outside.
    assert "interval at 1, the predicted speedup inside the measured row's interval at 1, " in said
    # One session: each row's median over the sessions is its own speedup.
    assert (
        "each row's median over these sessions (known only afterwards) within 25 % of its "
        "measured speedup at 2." in said
    )
    assert [r[0] for r in own_table(checked).rows] == ["`pmap`", "`shard`"]


def test_a_row_s_median_over_sessions_bounds_what_a_prediction_can_hit():
    """Each measured speedup against its row's median over the sessions checked: a row
    measured at 1.0x, 1.1x and 2.0x has its median 1.1x within 25 % of two of them."""
    from odestudy.builtin.prediction import _row_medians_within_25
    from odestudy.report.heldout import Checked

    def c(name, measured):
        return Checked(name=name, predicted_speedup=(1.0, 0.9, 1.1),
                       measured_speedup=(measured, measured, measured))  # fmt: skip

    assert _row_medians_within_25([c("a", 1.0), c("a", 1.1), c("a", 2.0), c("b", 0.5)]) == 3
    assert _row_medians_within_25([c("a", 1.0), c("a", 2.0)]) == 0  # median 1.5: both off


def test_a_profile_value_s_range_holds_its_central_value():
    """A session's probe outside the range of the machine's other sessions widens it."""
    from odestudy.study.profiles import Value

    v = Value(central=1.0, low=2.0, high=3.0, source="test")
    assert (v.low, v.central, v.high) == (1.0, 1.0, 3.0)
    w = Value(central=5.0, low=2.0, high=3.0, source="test")
    assert (w.low, w.high) == (2.0, 5.0)


def _made_here(s=None) -> dict:
    """A record's fields that say it was made here (`plan.why_not_here`) for scenario
    `s` (default: the default scenario): in the environment its kernel runs in."""
    from odestudy.measure import environment
    from odestudy.measure.timing import PROTOCOL
    from odestudy.study.plan import expected_env

    return {
        "machine_id": environment.machine_id(environment.this_machine()),
        "versions": environment.versions(),
        "protocol": PROTOCOL,
        "measurement_env": expected_env(s or Scenario()),
    }


def test_a_prediction_is_made_only_from_a_1_device_row_made_here(tmp_path):
    """`predict_from_row` scales to and starts from the recorded 1-device row only where
    that row was made here (machine, versions, protocol, measurement environment)."""
    from odestudy.predict import _unusable

    state, base = tmp_path / "state.npz", Scenario()
    here = {"status": "ok", **_made_here(base)}
    assert _unusable(here, state, base).startswith("its 1-device row's trained state is not")
    state.write_bytes(b"")
    assert _unusable(here, state, base) is None
    # A kernel's environment, not this process's: the matrix's kernels run with
    # EQX_ON_ERROR=nan (`devices.child_environment`), a `predict` process may not.
    assert here["measurement_env"].get("EQX_ON_ERROR") == "nan"
    assert _unusable({**here, "status": "failed"}, state, base) == "its 1-device row is failed"
    foreign = _unusable({**here, "machine_id": "elsewhere"}, state, base)
    assert foreign.startswith("its 1-device row was not made here (machine differs")


def test_a_held_out_prediction_is_kept_when_its_1_device_row_is_measured_again(tmp_path):
    """A prediction made before its target's multi-device rows is not replaced by one made
    after them from a 1-device row measured again (that would be in-sample) unless asked
    `again`; one of an older prediction model, or made after the rows, is."""
    from odestudy.predict import PREDICTION_MODEL, _made_from
    from odestudy.study import records

    target = Scenario(mode="shard_map", devices_per_process=2, scale="quick")
    base, out = predict.one_device(target), tmp_path / "prediction.json"
    records.write_json_atomic(
        records.record_path(base, tmp_path), {"started": "2026-01-03T00:00:00+00:00"}
    )
    row = records.record_path(dataclasses.replace(target, mode="pmap"), tmp_path)
    records.write_json_atomic(row, {"status": "ok", "started": "2026-01-02T00:00:00+00:00"})
    made_from = {"model": PREDICTION_MODEL, "profile": None, "target_key": target.key(),
                 "started": "2026-01-01T00:00:00+00:00"}  # fmt: skip
    old = {"made_from": made_from, "finished": "2026-01-01T12:00:00+00:00"}
    records.write_json_atomic(out, old)
    assert _made_from(target, tmp_path, out, None)[2] == old  # held out: kept
    assert _made_from(target, tmp_path, out, None, again=True)[2] is None  # asked anew
    records.write_json_atomic(out, {**old, "made_from": {**made_from, "model": 6}})
    assert _made_from(target, tmp_path, out, None)[2] is None  # an older model: made again
    records.write_json_atomic(out, {**old, "finished": "2026-01-02T12:00:00+00:00"})
    assert _made_from(target, tmp_path, out, None)[2] is None  # made after its rows
    records.write_json_atomic(out, {**old, "made_from": {**made_from, "axis": [4, 16]}})
    assert _made_from(target, tmp_path, out, None)[2] is None  # along other batches


def test_a_prediction_along_a_batch_axis_is_scaled_to_its_anchor():
    """Points of a batch axis whose batches are not the anchor's are scaled to the
    anchor's session too (the sweep holds the anchor's batch)."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke", batch=8)
    times = [1e-3, 1.1e-3, 0.9e-3]
    sweep = {"rows": [
        {"batch": b, "step_times_s": [t * b / 4 for t in times], "step_time_s": 1e-3 * b / 4,
         "iterations_executed": 10.0, "per_sample_steps": [10, 12], "per_iteration_s": 1e-4}
        for b in (2, 4, 8, 16)
    ]}  # fmt: skip
    anchor = predict.Anchor(8, (4e-3, 4e-3, 4e-3), "a row")  # twice the sweep's level
    gradient, latency = Value(0.0, 0.0, 0.0, "none"), Value(0.0, 0.0, 0.0, "none")
    along = predict.predict_axis(
        predict.Measured(sweep, gradient, latency, 0.0, anchor), target, (2, 8)
    )
    (point, _) = along["modes"]["shard_map"]["points"]
    assert point["per_device_batch"] == 2 and point["global_batch"] == 4
    assert point["step_time_s"] > 0 and point["speedup"] > 0


def test_a_user_problem_s_check_reads_every_session_of_its_rows(tmp_path):
    """The example's rows measured again are kept under `sessions/`; the check reads them
    too and joins speedups within one session only."""
    from odestudy.builtin.prediction import _by_session, _every_own_record
    from odestudy.study import records

    root = tmp_path / "results" / "own"
    machine = machine_id(this_machine())
    s = Scenario(scale="quick")
    again = root / records.REPLACED / "x"
    before = root / records.REPLACED / "y"  # measured again 10 minutes later (own-rows)
    for folder, started in (
        (root, "2026-01-01T12:00:00+00:00"),
        (again, "2026-01-01T09:00:00+00:00"),
        (before, "2026-01-01T11:50:00+00:00"),
    ):
        records.write_json_atomic(
            records.record_path(s, folder),
            {"status": "ok", "machine_id": machine, "started": started, "finished": started,
             "scenario": s.to_dict(), "scale": "quick"},
        )  # fmt: skip
    recs = [r for r in _every_own_record(root, "quick") if r.machine_id == machine]
    assert len(recs) == 3
    groups = _by_session(recs)
    assert [len(g) for g in groups] == [1, 1]  # three hours apart: two sessions
    # One scenario twice in a session: its newest record counts, not an ambiguous pair.
    assert [g[0].started for g in groups] == [
        "2026-01-01T09:00:00+00:00",
        "2026-01-01T12:00:00+00:00",
    ]


def test_the_model_predicts_from_what_was_measured_alone():
    """`predict_modes` is the model: given the measurements (`Swept`), it times nothing;
    its one-loop modes pay their loop meetings on top of the compute, the others none."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke", batch=8)
    rows = [{"batch": b, "step_times_s": [1e-3 * b / 4] * 3, "step_time_s": 1e-3 * b / 4,
             "iterations_executed": 10.0, "per_sample_steps": [10, 10], "per_iteration_s": 1e-4}
            for b in (4, 8)]  # fmt: skip
    meeting = {"n": 2, "form": "x", "median_s": 5e-5, "interval_s": [4e-5, 6e-5], "times_s": [5e-5]}
    sweep = {"rows": rows, "final_loss": 1.0, "loop_meeting": meeting}
    loops = {m: {"static": 2, "per_iteration": 2.0} for m in predict.one_loop_modes(target)}
    profile = HardwareProfile("cpu", "cpu", "", {(2, 1, 1): Value(1e-5, 1e-5, 1e-5, "x", True)})
    out = predict.predict_modes(target, profile, predict.Swept(sweep, loops, 100))
    by_mode = {r["mode"]: r for r in out["rows"]}
    assert out["loop_meeting_s"] == 5e-5 and out["gradient_floats"] == 100
    for mode, row in by_mode.items():
        assert row["one_device_s"] == pytest.approx(2e-3)
        extra = 10 * 2 * 5e-5 if mode in loops else 0.0
        assert row["central_step_time_s"] == pytest.approx(1e-3 + 1e-5 + extra, rel=1e-6)


def test_a_device_computes_as_long_as_its_copies_inside_one_program_take():
    """Model 14: on CPU devices a device's compute is the N copies' time inside one
    program (`neighbours.together_s`), per iteration of the sweep at that batch; the step
    alone timed between the copies (`alone_s`) does not enter, however slow it read."""
    target = Scenario(mode="pmap", devices_per_process=2, scale="smoke", batch=8)
    rows = [{"batch": b, "step_times_s": [1e-3 * b / 4] * 3, "step_time_s": 1e-3 * b / 4,
             "iterations_executed": 10.0, "per_sample_steps": [10, 10], "per_iteration_s": 1e-4}
            for b in (4, 8)]  # fmt: skip
    together = {"n": 2, "form": "one program", "together_s": [3e-3] * 3, "alone_s": [9e-3] * 3,
                "together_median_s": 3e-3, "alone_median_s": 9e-3, "factor": 1 / 3}  # fmt: skip
    sweep = {"rows": rows, "final_loss": 1.0, "neighbours": {"4": together}}
    loops = {m: {"static": 2, "per_iteration": 2.0} for m in predict.one_loop_modes(target)}
    profile = HardwareProfile("cpu", "cpu", "", {(2, 1, 1): Value(0.0, 0.0, 0.0, "x", True)})
    out = predict.predict_modes(target, profile, predict.Swept(sweep, loops, 100))
    (row,) = [r for r in out["rows"] if r["mode"] == "pmap"]
    assert row["compute_s"] == pytest.approx(3e-3, rel=1e-6)  # the copies' 3 ms, not 1 ms / 3
    assert row["speedup"] == pytest.approx(2e-3 / 3e-3, rel=1e-6)
    (said,) = [t for t in out["terms"] if t["term"].startswith("a device's compute")]
    assert "4: 3.00" in said["term"]  # over the sweep's 1 ms step at batch 4


def _with_own_programs(sweep, seconds):
    """`sweep`'s neighbours at batch 4 with `pmap`'s and `shard_map`'s own programs timed."""
    found = {m: {"times_s": [seconds] * 3, "median_s": seconds} for m in ("pmap", "shard_map")}
    neighbours = {b: dict(v, modes=found) for b, v in sweep["neighbours"].items()}
    return dict(sweep, neighbours=neighbours)


def test_a_mode_with_a_loop_per_device_is_charged_its_own_program_all_reduce_inside():
    """Model 16: on CPU devices of one process, `pmap` and `shard_map` (each device its
    own solver loop) are charged their own program at the per-device batch repeated
    (`neighbours.modes`), per iteration of the sweep there, and no all-reduce besides
    (it is inside that program); a one-loop mode keeps the copies and the all-reduce."""
    target = Scenario(mode="pmap", devices_per_process=2, scale="smoke", batch=8)
    assert predict.own_programs(target) == ("pmap", "shard_map")
    across = dataclasses.replace(target, mode="shard_map", processes=2, devices_per_process=1)
    assert predict.own_programs(across) == ()
    rows = [{"batch": b, "step_times_s": [1e-3 * b / 4] * 3, "step_time_s": 1e-3 * b / 4,
             "iterations_executed": 10.0, "per_sample_steps": [10, 10], "per_iteration_s": 1e-4}
            for b in (4, 8)]  # fmt: skip
    together = {"n": 2, "form": "one program", "together_s": [3e-3] * 3, "alone_s": [3e-3] * 3,
                "together_median_s": 3e-3, "alone_median_s": 3e-3, "factor": 1.0}  # fmt: skip
    plain = {"rows": rows, "final_loss": 1.0, "neighbours": {"4": together}}
    sweep = _with_own_programs(plain, 5e-3)
    loops = {m: {"static": 2, "per_iteration": 0.0} for m in predict.one_loop_modes(target)}
    cost = Value(1e-3, 1e-3, 1e-3, "x", True)
    profile = HardwareProfile("cpu", "cpu", "", {(2, 1, 1): cost})
    out = predict.predict_modes(target, profile, predict.Swept(sweep, loops, 100))
    by_mode = {r["mode"]: r for r in out["rows"]}
    for mode in ("pmap", "shard_map"):
        r = by_mode[mode]
        assert r["own_program"] and r["allreduce_s"] == 0.0
        assert r["compute_s"] == r["step_time_s"] == pytest.approx(5e-3, rel=1e-6)
        assert r["speedup"] == pytest.approx(2e-3 / 5e-3, rel=1e-6)
    shard = by_mode["shard"]
    assert not shard["own_program"] and shard["compute_s"] == pytest.approx(3e-3, rel=1e-6)
    assert shard["allreduce_s"] > 0
    (said,) = [t for t in out["terms"] if t["term"].startswith("`pmap`'s own step")]
    assert "4: 5.00" in said["term"]  # over the sweep's 1 ms step at batch 4
    # Pooled over processes, each program's times are kept by process.
    merged = pooled([sweep, _with_own_programs(sweep, 7e-3)])
    found = merged["neighbours"]["4"]["modes"]["pmap"]
    assert found["times_by_process_s"] == [[5e-3] * 3, [7e-3] * 3]
    assert found["median_s"] == pytest.approx(6e-3)


def test_a_mode_s_own_program_is_not_scaled_to_the_anchor():
    """Model 18: a 1-device row twice as slow as the sweep (`Anchor`) doubles the
    1-device step a speedup is over and a one-loop mode's copies, but not `pmap`'s and
    `shard_map`'s own program on the N devices, timed as it is."""
    target = Scenario(mode="pmap", devices_per_process=2, scale="smoke", batch=8)
    rows = [{"batch": b, "step_times_s": [1e-3 * b / 4] * 3, "step_time_s": 1e-3 * b / 4,
             "iterations_executed": 10.0, "per_sample_steps": [10, 10], "per_iteration_s": 1e-4}
            for b in (4, 8)]  # fmt: skip
    together = {"n": 2, "form": "one program", "together_s": [3e-3] * 3, "alone_s": [3e-3] * 3,
                "together_median_s": 3e-3, "alone_median_s": 3e-3, "factor": 1.0}  # fmt: skip
    sweep = _with_own_programs({"rows": rows, "final_loss": 1.0, "neighbours": {"4": together}},
                               5e-3)  # fmt: skip
    gradient, loop = Value(0.0, 0.0, 0.0, "x"), Value(0.0, 0.0, 0.0, "x")
    slow_row = Anchor(8, (4e-3,) * 3, "a 1-device row twice the sweep's step")

    def rows_of(anchor):
        return {r["mode"]: r for r in predict_rows(Measured(sweep, gradient, loop, 0.0, anchor),
                                                   target)}  # fmt: skip

    plain, anchored = rows_of(None), rows_of(slow_row)
    for mode in ("pmap", "shard_map"):
        assert anchored[mode]["compute_s"] == pytest.approx(plain[mode]["compute_s"])
        assert anchored[mode]["one_device_s"] == pytest.approx(4e-3)
        assert anchored[mode]["speedup"] == pytest.approx(2 * plain[mode]["speedup"])
    assert anchored["shard"]["compute_s"] == pytest.approx(2 * plain["shard"]["compute_s"])


@pytest.mark.long  # about 50 s here (two compiles of the own programs): make test-long
def test_a_mode_s_own_program_is_timed_beside_the_copies_in_the_same_rounds():
    """`cost.inside_one_program` with `modes`: each mode's own step at the batch repeated
    on every device, compiled without donation, timed in every round."""
    import jax.random as jr

    from odestudy.measure.cost import inside_one_program

    s = Scenario(scale="smoke")
    problem = s.ode_problem
    data = problem.make_data(8, jr.PRNGKey(0))
    model = problem.make_model(jr.PRNGKey(1), s.width)
    state = {"model": model, "optimiser": problem.optimiser(1e-3), "problem": problem}
    batch = problem.take(data, np.arange(4))
    found = inside_one_program(s, batch, 2, state, rounds=2, warmup=1, modes=("pmap",))
    assert set(found["modes"]) == {"pmap"} and len(found["modes"]["pmap"]["times_s"]) == 2
    assert len(found["together_s"]) == len(found["alone_s"]) == 2
    assert "modes" not in inside_one_program(s, batch, 2, state, rounds=1, warmup=0)


def test_terms_in_several_processes_are_refused_on_gpus_before_anything_runs():
    """A GPU is held by the process that predicts: its terms are measured there, once."""
    target = Scenario(mode="shard_map", devices_per_process=2, scale="smoke", device="gpu")
    profile = HardwareProfile("p", "gpu", "", {})
    with pytest.raises(ValueError, match="terms in 3 processes are for CPU devices, not gpu"):
        predict.sweep_in_processes(target, profile, 5, ("state.npz", 0.1), (), 3)


def test_a_user_problem_s_check_shows_every_machine_that_made_one(tmp_path, monkeypatch):
    """The page's machine first, then each other machine with checked rows under its own
    heading: a check made on another VM reaches the page."""
    from odestudy.builtin import prediction
    from odestudy.study.rec import Rec
    from odestudy.study.studies import Grid, Text

    s = Scenario(mode="pmap", devices_per_process=2, scale="quick")
    row = dict(status="ok", scaling="strong", controller="pid", mode="pmap", n_devices=2,
               step_time_s=0.01, speedup=1.5, speedup_ci=(1.4, 1.6), scenario=s.to_dict(),
               name=s.name(), session=None)  # fmt: skip
    found = [{"scenario": s.to_dict(), "n_devices": 2, "profile": {"name": None},
              "trained": True, "made_from": {"model": 18},
              "rows": [{"mode": "pmap", "step_time_s": 0.01, "step_time_interval_s": [0.009, 0.011],
                        "speedup": 1.45, "speedup_interval": [1.2, 1.6]}]}]  # fmt: skip
    every = [Rec(row, machine_id=m) for m in ("other-vm", "page-vm")]
    monkeypatch.setattr(prediction, "_every_own_record", lambda root, scale: every)
    monkeypatch.setattr(prediction, "row_predictions", lambda root, m: found)
    monkeypatch.setattr(prediction, "scaling_rows", list)  # the row has its speedup
    parts = prediction.own_problem_section(tmp_path, "page-vm")
    heads = [p.markdown for p in parts if isinstance(p, Text) and p.markdown.startswith("#")]
    assert heads == ["## A problem written outside the package", "### Machine other-vm"]
    assert sum(isinstance(p, Grid) for p in parts) == 2
