"""A Papermill smoke run of the scenario notebook (`shard_map`, 2 virtual devices), the
matrix's resume and failure handling, and the report over the record made."""

import pytest

from odestudy import Scenario
from odestudy.measure.resume import REPEAT_STEPS
from odestudy.measure.state import STATE_NAME
from odestudy.report.device_tables import ADDED_COLUMNS, REFERENCE_COLUMNS
from odestudy.report.document import write_report
from odestudy.study.matrix import record_path, run_matrix
from odestudy.study.records import read_record
from odestudy.study.runner import execute_scenario

from .helpers import SMOKE


@pytest.fixture(scope="module")
def results(smoke_matrix):
    """The smoke matrix (conftest): `(results folder, records)`."""
    return smoke_matrix


# The smoke matrix (`results`) is a notebook run, a repeat and the machine probe, over a
# minute here: the tests that read it run in make test-long.
@pytest.mark.long
def test_notebook_run_writes_its_record_and_executed_notebook(results):
    root, rec = results
    assert rec["status"] == "ok", rec["error"]
    path = record_path(SMOKE, root)
    assert path.exists() and (path.parent / "scenario.ipynb").exists()
    assert rec["mode"] == SMOKE.mode and rec["hardware"]["device_count"] == 2
    assert rec["xla_flags"].endswith("--xla_force_host_platform_device_count=2")
    # the cold run and one repeat: a plain process timing REPEAT_STEPS steps from the
    # cold run's trained state, compiling from the cold run's cache
    assert len(rec["step_time_runs_s"]) == 2 and len(rec["step_times_runs_s"]) == 2
    assert len(rec["step_times_runs_s"][1]) == REPEAT_STEPS
    assert len(rec["repeat_compile_time_s"]) == 1 and "repeat_errors" not in rec
    assert rec["repeat_how"].startswith("plain process")
    assert rec["kernel_wall_s"] >= rec["runtime_s"] > 0
    assert (path.parent / STATE_NAME).exists()


@pytest.mark.long
def test_second_run_skips_finished_scenarios(results):
    root, rec = results
    again = run_matrix("smoke", "cpu", results=root, show_progress=False, only=[SMOKE], repeats=2)
    assert [r["run_id"] for r in again] == [rec["run_id"]]


def test_failing_scenario_is_recorded_and_matrix_goes_on(tmp_path):
    s = Scenario(devices_per_process=2, mode="pmap", scale="smoke")
    rec = execute_scenario(s, tmp_path / "failing", timeout_s=1)
    assert rec["status"] == "failed"
    assert "Timeout" in rec["error"] or "timed out" in rec["error"].lower()
    assert read_record(tmp_path / "failing" / "metrics.json")["status"] == "failed"


@pytest.mark.long  # about 15 s here (the report's figures)
def test_report_tables_and_figures(results, tmp_path):
    root, _ = results
    out = write_report(root, "smoke", tmp_path / "figures")
    table = out["tables"]["cpu"].read_text()
    header = next(line for line in table.splitlines() if line.startswith("| Device"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == list(REFERENCE_COLUMNS + ADDED_COLUMNS)
    rows = [line for line in table.splitlines() if line.startswith("| cpu")]
    assert [r.split("|")[3].strip() for r in rows] == ["shard_map"]
    assert "one optimiser step" in table
    gpu = out["tables"]["gpu"].read_text().splitlines()
    assert len([line for line in gpu if line.strip()]) == 2  # a title and one line
    assert gpu[2].startswith("No GPU row of the current protocol")
    assert any(p.suffix == ".png" for p in out["figures"])
    assert any(p.suffix == ".svg" for p in out["figures"])


@pytest.mark.long  # about 12 s here (a repeat's process)
def test_a_failed_repeat_is_recorded_and_the_record_kept(results, tmp_path):
    import shutil

    from odestudy.study.repeats import run_repeat_round

    root, _ = results
    copy = tmp_path / SMOKE.name()
    shutil.copytree(record_path(SMOKE, root).parent, copy)
    (copy / STATE_NAME).unlink()  # no trained state to time from
    before = read_record(copy / "metrics.json")
    (after,) = run_repeat_round([(SMOKE, copy)], timed_steps=2)
    assert after["step_time_runs_s"] == before["step_time_runs_s"]
    assert "FileNotFoundError" in after["repeat_errors"][-1]
    assert read_record(copy / "metrics.json")["repeat_errors"] == after["repeat_errors"]


def _gpu_session(parts: list[str], results, **sizes: str):
    """Run benchmarks/gpu_session.sh's `parts` with this interpreter on `results`, in a
    plain environment (no test device flags), at the given sizes."""
    import os
    import subprocess
    import sys

    from odestudy.measure.environment import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS", "OUT")}
    env.update(GPU_PYTHON=sys.executable, RESULTS=str(results), **sizes)
    script = ROOT / "benchmarks" / "gpu_session.sh"
    return subprocess.run(
        ["bash", str(script), *parts], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.long  # over 15 s here (a JAX process per part): make test-long
def test_gpu_session_all_runs_each_part_and_fails_with_the_failed_one(tmp_path):
    """`gpu_session.sh all` runs each part of ALL_PARTS under its own budget and goes on
    after a part fails; its status is the failed part's (here an unknown one)."""
    import json

    from odestudy.study.records import machine_folder

    run = _gpu_session(["all"], tmp_path, ALL_PARTS="nosuch:30 roofline:120", KERNEL_DEVICE="cpu")
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    assert "unknown part nosuch" in run.stderr
    (reading,) = (machine_folder(tmp_path) / "roofline").glob("cpu-*.json")
    assert json.loads(reading.read_text())["platform"] == "cpu"


@pytest.mark.long
def test_gpu_session_cpu_parts_run_tiny(results, tmp_path):
    """The GPU machine's script (benchmarks/gpu_session.sh), its CPU parts at tiny
    sizes: a step-cost sweep and an all-reduce latency written to this machine's
    folder, and the CPU rows resumed from the matrix's finished records (nothing run
    again)."""
    import json
    import shutil

    from odestudy.study.grid import sized_limit
    from odestudy.study.records import machine_folder

    root, _ = results
    copy = tmp_path / "results"
    shutil.copytree(root, copy)
    parts = ["cpucost"] + (["cpu"] if sized_limit("cpu") >= 2 else [])
    run = _gpu_session(
        parts,
        copy,
        COST_SCALE="smoke",
        COST_CONTROLLERS="pid",
        COST_BATCHES="1,2",
        COST_TIMED_STEPS="1",
        COLLECTIVE_DEVICES="2",
        COLLECTIVE_SIZES="1",
        COLLECTIVE_ITERATIONS="10",
        CPU_SCALE="smoke",
        CPU_SELECT="scaling=strong,processes=1,controller=pid,mode=shard_map,devices_per_process=2,"
        "solve=per_sample",  # the default step's row, which the fixture measured
        CPU_RUNS="2",
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    folder = machine_folder(copy)
    sweep = json.loads((folder / "step_cost" / "cpu-pid-default.json").read_text())
    assert [r["batch"] for r in sweep["rows"]] == [1, 2]
    latency = json.loads((folder / "collectives" / "cpu-2-1.json").read_text())
    # A measurement of this moment: its value is not checked (10 iterations can clip to 0).
    assert latency["n_devices"] == 2 and latency["latency_s"] >= 0
    if "cpu" in parts:
        assert "1 reusable; 0 run(s) to do" in run.stdout, run.stdout[-3000:]


@pytest.mark.long
def test_gpu_session_best_step_parts_run_tiny(tmp_path):
    """Its parts for the best step, on the CPU at tiny sizes: `sweep` (the recommended
    step's 1-device row, then the batch sweep of its trained model), `predictbest` (the
    prediction from that row's model, no training again) and `cpubest` (the recommended
    CPU rows: here the same 1-device row, reused)."""
    import json

    from odestudy.measure.recommended import recommended
    from odestudy.study.records import machine_folder

    best = recommended(Scenario(scale="smoke", controller="pid"))
    run = _gpu_session(
        ["sweep", "predictbest", "cpubest"],
        tmp_path,
        SWEEP_DEVICE="cpu",
        SWEEP_CONTROLLERS="pid",
        SWEEP_BATCHES="1,2",
        COST_SCALE="smoke",
        COST_TIMED_STEPS="1",
        PREDICT_DEVICES="2",
        CPU_SCALE="smoke",
        CPU_SELECT="scaling=strong,processes=1,controller=pid,devices_per_process=1",
        CPU_RUNS="1",
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    folder = machine_folder(tmp_path)
    sweep = json.loads((folder / "step_cost" / "cpu-pid-recommended.json").read_text())
    row = record_path(best, tmp_path).parent
    assert [r["batch"] for r in sweep["rows"]] == [1, 2] and sweep["label"] == "recommended"
    assert Scenario.from_dict(sweep["scenario"]) == best and sweep["trained_from"] == str(row)
    name = "cpu-pid-smoke-2-h100-nvlink-recommended.json"
    predicted = json.loads((folder / "predictions" / name).read_text())
    assert Scenario.from_dict(predicted["scenario"]).solve == best.solve
    assert predicted["trained_from"] == str(row) and predicted["profile"]["name"] == "h100-nvlink"
    assert "1 reusable; 0 run(s) to do" in run.stdout.split("=== cpubest")[1], run.stdout[-3000:]


@pytest.mark.long
def test_gpu_session_kernel_sweep_runs_tiny_in_interpret_mode(tmp_path):
    """Its kernel solve's batch sweep (`kernelsweep`) on the CPU at tiny sizes, the
    kernels in Pallas's interpret mode: a step-cost record per batching, the kernel
    solve's levers in its scenario."""
    import json

    from odestudy.study.records import machine_folder

    run = _gpu_session(
        ["kernelsweep"],
        tmp_path,
        KERNEL_DEVICE="cpu",
        SWEEP_BATCHES="1,2",
        COST_SCALE="smoke",
        COST_TIMED_STEPS="1",
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    folder = machine_folder(tmp_path) / "step_cost"
    for label, solve in (("kernel", "per_sample"), ("within_ode+kernel", "within_ode")):
        sweep = json.loads((folder / f"cpu-pid-{label}.json").read_text())
        s = Scenario.from_dict(sweep["scenario"])
        assert (s.integrator, s.solve, s.adjoint) == ("kernel", solve, "accepted_steps")
        assert [r["batch"] for r in sweep["rows"]] == [1, 2] and sweep["label"] == label


def test_gpu_session_gpu_cost_part_runs_tiny(tmp_path):
    """Its GPU step-cost part at tiny sizes, where a GPU is present."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi"]).returncode != 0:
        pytest.skip("no GPU here: the GPU parts of benchmarks/gpu_session.sh are not run")
    run = _gpu_session(
        ["cost"], tmp_path, COST_SCALE="smoke", COST_TIMED_STEPS="1", GPU_COST_BATCHES="1,2"
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    from odestudy.study.records import machine_folder

    for c in ("pid", "stepto"):
        assert (machine_folder(tmp_path) / "step_cost" / f"gpu-{c}-default.json").exists()
