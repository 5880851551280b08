"""The package outside a checkout: built as a wheel, installed (not editable) into a
folder of its own, and run from an empty directory that holds only the README's example
problem (`examples/own_problem.py`): `odestudy run --problem ...` writes its record under
that directory's `results/`, `odestudy predict` predicts every mode from that trained
row, and `odestudy report` shows the record."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from odestudy.measure.environment import ROOT


def _installed(tmp_path: Path) -> dict[str, str]:
    """Build the wheel, install it with no dependencies into `tmp_path/site` (they come
    from this environment), and return the environment that imports it from there (with
    no test device flags: each command sets its own devices)."""
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheels)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("odestudy-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    return {**env, "PYTHONPATH": str(site)}


def _odestudy(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "odestudy.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.long
def test_the_example_problem_runs_and_reports_from_an_installed_wheel(tmp_path):
    env = _installed(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "examples" / "own_problem.py", work)
    where = subprocess.run(
        [sys.executable, "-c", "import odestudy; print(odestudy.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(tmp_path / "site")), where  # the wheel, not the checkout

    run = _odestudy(env, work, "run", "--problem", "own_problem:PROBLEM", "--scale", "smoke")
    assert run.returncode == 0, run.stdout + run.stderr
    (path,) = (work / "results").glob("*/smoke/*/metrics.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok"
    assert record["problem"] == "own_problem:PROBLEM"
    assert record["problem_facts"]["name"] == "forced_decay"
    assert record["problem_facts"]["time_dependent"] is True
    assert record["trained"] is (record["final_loss"] <= record["trained_loss"])
    assert "not trained" in run.stdout or record["trained"]

    _predicts_every_mode_from_the_trained_row(env, work, path.parent)

    report = _odestudy(env, work, "report", "--scale", "smoke")
    assert report.returncode == 0, report.stdout + report.stderr
    tables = "\n".join(p.read_text() for p in (work / "figures" / "tables").glob("*.md"))
    assert "forced_decay" in tables or "own_problem" in tables
    assert (work / "figures" / "report_smoke.html").exists()


def _predicts_every_mode_from_the_trained_row(env: dict[str, str], work: Path, row: Path):
    """`odestudy predict` for the example problem on 2 devices, from the trained row
    (`row`) that `run` recorded: every mode gets a prediction built from the measured
    parts the model names. The numbers are measurements of this moment (not checked)."""
    out = work / "prediction.json"
    args = ("--problem", "own_problem:PROBLEM", "--devices", "2", "--scale", "smoke")
    # The row `run` recorded is the default step's (predict's own default is the best).
    args += ("--default-step",)
    run = _odestudy(env, work, "predict", *args, "--timed-steps", "2", "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    p = json.loads(out.read_text())
    assert p["trained_from"] == str(row) and "no training" in run.stdout
    assert [r["mode"] for r in p["rows"]] == ["pmap", "shard", "shard_map", "explicit"]
    assert p["scenario"]["problem"] == "own_problem:PROBLEM" and p["n_devices"] == 2
    assert isinstance(p["shard_loop_collectives"], int) and p["assumptions"]
    assert p["shard_loop_collectives"] > 0 and p["shard_loop_collectives_per_iteration"] > 0
    assert set(p["loop_collectives"]) == {"shard", "explicit"}  # each its own program's
    # The neighbours term: the step's copies timed inside one program, as a mode runs.
    assert {v["form"] for v in p["sweep"]["neighbours"].values()} == {"one program"}
    # The gradient all-reduce: timed here, on the devices of this process, the term it is.
    allreduce = p["sweep"]["allreduce"]
    assert allreduce["form"] == "pmean in one program" and allreduce["n"] == 2
    assert p["allreduce_gradient_s"] == allreduce["median_s"]
    # Model 16: `pmap` and `shard_map` are charged their own program, the all-reduce inside.
    own = {r["mode"] for r in p["rows"] if r["own_program"]}
    assert own == {"pmap", "shard_map"}
    assert all(r["allreduce_s"] == (0.0 if r["mode"] in own else allreduce["median_s"])
               for r in p["rows"])  # fmt: skip
    for r in p["rows"]:
        # The parts are the terms' central values; the estimates, their draws' medians.
        parts = r["compute_s"] + r["allreduce_s"] + r["in_loop_s"]
        assert r["step_time_s"] > 0 and abs(r["central_step_time_s"] - parts) <= 1e-12
        assert (r["in_loop_s"] > 0) == (r["mode"] in p["loop_collectives"])
        lo, hi = r["step_time_interval_s"]
        assert lo <= r["step_time_s"] <= hi
        slo, shi = r["speedup_interval"]
        assert slo <= r["speedup"] <= shi
    assert p["profile"]["name"] == "probe" and p["pmap_is_shard_map"] in (True, False)
    assert {t["measured"] for t in p["terms"]} == {True}  # 2 devices probed here
    assert "shard" in run.stdout and "assumptions" in run.stdout and "terms:" in run.stdout
