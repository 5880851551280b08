"""Honest counts: "holds in k of n sessions" counts only sessions that hold rows of the
comparison and names the sessions that found otherwise; a record's commit that this
repository does not hold is flagged; a GPU sweep's bound on splitting is said as a bound.
Synthetic records; nothing is timed or compiled."""

import dataclasses

import pytest

from odestudy.measure.scenario import Scenario
from odestudy.report import answer, sessions
from odestudy.report.claims import KINDS, agreement, holds, judged_sessions
from odestudy.report.sessions import UNKNOWN, Session
from odestudy.study.rec import Rec

from .helpers import record


def _session(day: str, shard_s: float, controllers=("pid", "stepto")) -> list[dict]:
    out = []
    for controller in controllers:
        for mode, n, t in (("single", 1, 0.02), ("shard_map", 2, 0.01), ("shard", 2, shard_s)):
            s = Scenario(scale="smoke", controller=controller, mode=mode, devices_per_process=n)
            rec = dict(record(s, step=t, jitter=0.02), final_loss=0.004, trained=True)
            rec["session"] = Session("m", None, None, (day,))
            out.append(rec)
    return out


def _by_session(*groups: list[dict]) -> dict:
    return {g[0]["session"]: g for g in groups}


def test_k_of_n_counts_only_sessions_with_rows_of_the_comparison():
    # Three sessions with PID rows (shard slower in two, faster in one), one with StepTo
    # rows only: it does not answer a PID comparison.
    by = _by_session(
        _session("a", 0.04), _session("b", 0.05), _session("c", 0.005),
        _session("d", 0.04, controllers=("stepto",)),
    )  # fmt: skip
    judged = judged_sessions(by, "strong", 2)
    assert len(judged) == 4

    def slower(p):
        if "pid" not in p:
            return None
        return "shard" in [r.mode for r in p["pid"].avoid]

    assert holds(judged, slower) == (2, 3)
    found = agreement(judged, "pid", "shard", KINDS["avoid"])
    assert (
        found.said(KINDS["avoid"])
        == "slower in 2 of 3 sessions with such rows; faster in 1 (commit c)"
    )


def test_a_commit_this_repository_lacks_is_flagged():
    from odestudy.measure.environment import git_commit

    rec = record(Scenario(scale="smoke"))
    if sessions.commit_time("HEAD") is None:
        pytest.skip("a copy without its history: no commits to check against")
    assert UNKNOWN in sessions.short_commit(dict(rec, git_commit="7db7c5821"))
    known = (git_commit() or "").removesuffix("-dirty")
    assert UNKNOWN not in sessions.short_commit(dict(rec, git_commit=known))


def test_a_gpu_sweep_bounds_splitting_and_says_so(tmp_path):
    import json

    sweep = {
        "scenario": dataclasses.asdict(Scenario(device="gpu")) | {"length_fractions": [1.0]},
        "label": "default",
        "rows": [{"batch": b, "step_time_s": 0.02 + 0.0001 * b} for b in (1, 4, 16, 64, 256)],
    }
    folder = tmp_path / "a-gpu-machine" / "step_cost"
    folder.mkdir(parents=True)
    (folder / "gpu-pid-default.json").write_text(json.dumps(sweep))
    found = answer.ideal_speedups(sweep, 4)
    assert [b for b, _ in found] == [1, 4, 16, 64]
    assert found[0][1] == (0.02 + 0.0004) / (0.02 + 0.0001)
    (line, _) = answer.gpu_bound_line(tmp_path)
    assert "4 GPUs at most" in line and "a bound, not a measurement" in line
    assert "4 GPUs at most 1.01x [1.01, 1.01]–1.73x [1.73, 1.73] at 1–64" in line  # intervals
    assert answer.gpu_bound_line(tmp_path / "none") == []
    assert "bounds" not in answer.gpu_lines(tmp_path)[0]  # the default step's: no bound said
    sweep["label"] = "recommended"
    (folder / "gpu-pid-recommended.json").write_text(json.dumps(sweep))
    (line, _) = answer.gpu_lines(tmp_path)
    assert "sweep (pid, a-gpu-machine, one sweep, its session not recorded) bounds" in line
    assert "4 GPUs at most 1.01x [1.01, 1.01]–1.73x [1.73, 1.73]" in line  # no step times
    assert "at 1–64 series per GPU" in line and "(20.4–45.6 ms)" in line


def test_a_page_section_comes_from_a_machine_that_holds_its_records():
    from odestudy.builtin.explain import section
    from odestudy.study.studies import Text

    def make(recs):
        return ([Text(f"{len(recs)} rows")] if recs else [], [])

    by = {"here": [], "there": [{"x": 1}, {"x": 2}]}
    blocks, _ = section("Batch size", make, by, "here")
    assert blocks[0] == Text("## Batch size") and "Measured on there" in blocks[1].markdown
    assert blocks[2] == Text("2 rows")
    assert section("Batch size", make, {"here": []}, "here") == ([], [])
    blocks, _ = section("Batch size", make, {**by, "here": [{"x": 1}]}, "here")
    assert blocks == [Text("## Batch size"), Text("1 rows")]


def test_a_prediction_says_whether_it_was_made_before_its_rows():
    from odestudy.report.heldout import made_before, said

    p = {"finished": "2026-11-27T09:00:00+00:00"}
    assert made_before(p, [{"started": "2026-11-27T10:00:00+00:00"}]) is True
    assert made_before(p, [{"started": "2026-11-27T08:00:00+00:00"}]) is False
    assert made_before({}, [{"started": "2026-11-27T08:00:00+00:00"}]) is None
    assert said([{"model": 5, "before": True}] * 2) == "prediction model 5; made before the rows"
    assert "in-sample" in said([{"model": 5, "before": False}])
    assert said([{"model": 4, "before": True}, {"model": 5, "before": False}]) == (
        "prediction model 4, 5; 1 made before the rows, 1 in-sample"
    )


def test_the_recommended_step_measured_again_after_its_choice_is_counted(spread_measured):
    from odestudy.report.heldout import recommended_again
    from odestudy.report.workloads import MapRow
    from odestudy.study.rec import LeverRecord, Rec

    def row(speedup, loss, started="2026-11-27T09:00:00+00:00"):
        record = Rec(started=started, final_loss=loss)
        base = Rec(started=started, final_loss=0.004)
        return MapRow(
            workload="w", controller="pid", step="recommended",
            mode="single", n_devices=1, status="ok", record=record, base=base,
            per_iteration_s=None, speedup=speedup, best=None, speedup_best=None,
        )  # fmt: skip

    rows = [row((2.0, 1.5, 2.5), 0.004), row((1.2, 0.9, 1.4), 0.004), row((3.0, 2.0, 4.0), 0.02)]
    chosen = [LeverRecord(finished="2026-11-26T20:14:00+00:00")]
    line = recommended_again(rows, chosen)
    assert "made up to 2026-11-26 20:14 UTC" in line and "1.20x to 3.00x over 3" in line
    # The third is faster but trained to a loss 5 times the default's: not at equal loss.
    assert "1 faster with the whole interval above 1 at equal loss, 0 slower" in line
    # A record made after the rows cannot have informed the step they measured: the
    # choice is made on those before them, and without any there is no check in time.
    later = [LeverRecord(finished="2026-11-28T00:00:00+00:00")]
    assert recommended_again(rows, later) == ""
    assert "made up to 2026-11-26 20:14 UTC" in recommended_again(rows, chosen + later)


def test_a_row_predicted_again_is_checked_against_the_prediction_made_before_it(tmp_path):
    """A prediction made again from a newer 1-device row keeps the one it replaces
    (`records.keep_earlier`); a row measured after the earlier one and before the newer
    is checked against the earlier: made before the rows."""
    from odestudy.builtin.prediction import checked_rows, row_predictions
    from odestudy.measure.scenario import Scenario
    from odestudy.report.heldout import said
    from odestudy.study import records

    target = Scenario(mode="shard_map", devices_per_process=2, scale="quick")

    def prediction(made: str, step_s: float) -> dict:
        return {
            "trained": True, "scenario": target.to_dict(), "n_devices": 2,
            "finished": made, "made_from": {"model": 6},
            "rows": [{"mode": "shard_map", "step_time_s": step_s,
                      "step_time_interval_s": [step_s * 0.9, step_s * 1.1]}],
        }  # fmt: skip

    out = tmp_path / "m" / "predict" / "p-profile-cpu.json"
    out.parent.mkdir(parents=True)
    records.write_json_atomic(out, prediction("2026-11-27T09:05:00+00:00", 0.010))
    kept = records.keep_earlier(out)
    assert kept is not None and kept.parent.name == records.EARLIER and not out.exists()
    records.write_json_atomic(out, prediction("2026-11-27T19:05:00+00:00", 0.020))
    found = row_predictions(tmp_path, "m")
    assert len(found) == 2
    row = Rec(status="ok", name=target.name(), step_time_s=0.0125, session=None,
              started="2026-11-27T18:40:00+00:00")  # fmt: skip
    (checked,) = checked_rows([row], found)
    assert checked["predicted_s"] == 0.010 and checked["before"] is True
    assert said([checked]) == "prediction model 6; made before the rows"
    # A row measured before both: checked in-sample against the newest.
    early = Rec(row, started="2026-11-27T08:40:00+00:00")
    (checked,) = checked_rows([early], found)
    assert checked["predicted_s"] == 0.020 and checked["before"] is False


def test_a_record_measured_again_keeps_its_session_for_the_claims(tmp_path):
    """`matrix --force` keeps the record it replaces (`records.keep_replaced`) under
    `sessions/<when>/`, below its machine as before; the claims count it as a session
    that repeats the scenario (`claims.related_records`)."""
    import json

    from odestudy.report.claims import related_records
    from odestudy.study import records

    path = tmp_path / "m" / "quick" / "cpu-2dev-pmap-pid-strong-quick" / records.RECORD_NAME
    path.parent.mkdir(parents=True)
    old = {"status": "ok", "scenario_key": "k", "protocol": 2, "versions": {"jax": "0.10.2"}}
    path.write_text(json.dumps(old))
    kept = records.keep_replaced(path, tmp_path, "20261127T1742")
    assert kept == tmp_path / "sessions" / "20261127T1742" / path.relative_to(tmp_path)
    assert json.loads(kept.read_text())["scenario_key"] == "k"
    assert records.keep_replaced(tmp_path / "none.json", tmp_path, "x") is None
    found = related_records(tmp_path, "quick", [Rec(old)])
    assert [r["source"] for r in found] == ["20261127T1742"]


def test_the_error_of_predictions_made_before_their_rows_is_said_apart():
    from odestudy.report.crossover import verdict_of
    from odestudy.report.heldout import held_out_said

    before = [{"model": 10, "before": True, "error": e} for e in (-0.2, -0.1, 0.3)]
    after = [{"model": 6, "before": False, "error": 0.9}]
    line = held_out_said(before + after, "rows")
    assert "median |error| 20 % at 3 rows" in line and "median signed error -10 %" in line
    assert "prediction model 10; made before the rows" in line
    assert held_out_said(before) == "" and held_out_said(after) == ""  # nothing apart
    assert [verdict_of(x) for x in ((1.2, 1.1, 1.3), (0.8, 0.7, 0.9), (1.0, 0.9, 1.1))] == [
        "pays", "does not", "undecided"]  # fmt: skip


def test_a_session_measured_under_an_older_protocol_says_so():
    """Records of an older `timing.PROTOCOL` name it where their session is listed; a
    session of the current protocol adds nothing."""
    from odestudy.measure.timing import PROTOCOL

    def rec(protocol, hour):
        return {"machine_id": "m", "git_commit": "", "protocol": protocol,
                "started": f"2026-11-30T{hour:02d}:00:00+00:00"}  # fmt: skip

    old, new, none = rec(PROTOCOL - 1, 1), rec(PROTOCOL, 5), rec(None, 9)
    line = sessions.sessions_line([old, new, none], [old, new, none])
    assert line.count(f"(now {PROTOCOL})") == 2
    assert f"measurement protocol {PROTOCOL - 1} (now {PROTOCOL})" in line
    assert f"measurement protocol none recorded (now {PROTOCOL})" in line
    assert sessions.sessions_line([new], [new]).endswith("05:00–05:00 UTC (commit ).")


def test_claims_count_only_sessions_of_the_current_protocol(tmp_path):
    """A record measured under an older `timing.PROTOCOL` is neither a session for nor
    against a claim (`claims.scale_records`)."""
    from odestudy.measure.timing import PROTOCOL
    from odestudy.report.claims import scale_records
    from odestudy.study import records

    current = Scenario(scale="smoke")
    older = Scenario(scale="smoke", devices_per_process=2, mode="shard_map")
    records.write_json_atomic(records.record_path(current, tmp_path), record(current))
    old = dict(record(older), protocol=PROTOCOL - 1)
    records.write_json_atomic(records.record_path(older, tmp_path), old)
    assert [r.scenario_key for r in scale_records(tmp_path, "smoke")] == [current.key()]


def test_the_answer_names_an_older_protocol_of_the_crossover_sessions():
    from odestudy.measure.timing import PROTOCOL

    old = Session("m", None, None, ("a",), (PROTOCOL - 1,))
    new = Session("m", None, None, ("b",), (PROTOCOL,))
    assert answer._older([new]) == ""
    assert answer._older([old, new]) == f"; measurement protocol {PROTOCOL - 1} (now {PROTOCOL})"
