"""Papermill smoke runs of the scenario notebook (two modes, 2 virtual devices), the
matrix's resume and failure handling, and the report over the records made."""

import pytest

from odestudy import Scenario
from odestudy.measure.resume import REPEAT_STEPS
from odestudy.measure.state import STATE_NAME
from odestudy.report.document import ADDED_COLUMNS, REFERENCE_COLUMNS, write_report
from odestudy.study.matrix import record_path, run_matrix
from odestudy.study.records import read_record
from odestudy.study.runner import execute_scenario

SCENARIOS = [Scenario(devices_per_process=2, mode=m, scale="smoke") for m in ("shard", "shard_map")]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    recs = run_matrix("smoke", "cpu", results=root, show_progress=False, only=SCENARIOS, repeats=2)
    return root, recs


def test_notebook_runs_write_records_and_executed_notebooks(results):
    root, recs = results
    assert [r["status"] for r in recs] == ["ok", "ok"], [r["error"] for r in recs]
    for s in SCENARIOS:
        path = record_path(s, root)
        assert path.exists() and (path.parent / "scenario.ipynb").exists()
        rec = read_record(path)
        assert rec["mode"] == s.mode and rec["hardware"]["device_count"] == 2
        assert rec["xla_flags"].endswith("--xla_force_host_platform_device_count=2")
        # the cold run and one repeat: a plain process timing REPEAT_STEPS steps from
        # the cold run's trained state, compiling from the cold run's cache
        assert len(rec["step_time_runs_s"]) == 2 and len(rec["step_times_runs_s"]) == 2
        assert len(rec["step_times_runs_s"][1]) == REPEAT_STEPS
        assert len(rec["repeat_compile_time_s"]) == 1 and "repeat_errors" not in rec
        assert rec["repeat_how"].startswith("plain process")
        assert rec["kernel_wall_s"] >= rec["runtime_s"] > 0
        assert (path.parent / STATE_NAME).exists()


def test_second_run_skips_finished_scenarios(results):
    root, recs = results
    again = run_matrix("smoke", "cpu", results=root, show_progress=False, only=SCENARIOS, repeats=2)
    assert [r["run_id"] for r in again] == [r["run_id"] for r in recs]


def test_failing_scenario_is_recorded_and_matrix_goes_on(tmp_path):
    s = Scenario(devices_per_process=2, mode="pmap", scale="smoke")
    rec = execute_scenario(s, tmp_path / "failing", timeout_s=1)
    assert rec["status"] == "failed"
    assert "Timeout" in rec["error"] or "timed out" in rec["error"].lower()
    assert read_record(tmp_path / "failing" / "metrics.json")["status"] == "failed"


def test_report_tables_and_figures(results, tmp_path):
    root, _ = results
    out = write_report(root, "smoke", tmp_path / "figures")
    table = out["tables"]["cpu"].read_text()
    header = next(line for line in table.splitlines() if line.startswith("| Device"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == list(REFERENCE_COLUMNS + ADDED_COLUMNS)
    rows = [line for line in table.splitlines() if line.startswith("| cpu")]
    assert len(rows) == 2
    assert {r.split("|")[3].strip() for r in rows} == {"shard", "shard_map"}
    assert "one optimiser step" in table
    gpu = out["tables"]["gpu"].read_text().splitlines()
    assert len([line for line in gpu if line.strip()]) == 2  # a title and one line
    assert gpu[2].startswith("No GPU row of the current protocol")
    assert any(p.suffix == ".png" for p in out["figures"])
    assert any(p.suffix == ".svg" for p in out["figures"])


def test_a_failed_repeat_is_recorded_and_the_record_kept(results, tmp_path):
    import shutil

    from odestudy.study.repeats import run_repeat_round

    root, _ = results
    s = SCENARIOS[0]
    copy = tmp_path / s.name()
    shutil.copytree(record_path(s, root).parent, copy)
    (copy / STATE_NAME).unlink()  # no trained state to time from
    before = read_record(copy / "metrics.json")
    (after,) = run_repeat_round([(s, copy)], timed_steps=2)
    assert after["step_time_runs_s"] == before["step_time_runs_s"]
    assert "FileNotFoundError" in after["repeat_errors"][-1]
    assert read_record(copy / "metrics.json")["repeat_errors"] == after["repeat_errors"]
