"""The package outside a checkout: built as a wheel, installed (not editable) into a
folder of its own, and run from an empty directory that holds only the README's example
problem (`examples/own_problem.py`): `odestudy run --problem ...` writes its record under
that directory's `results/`, and `odestudy report` shows it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from odestudy.measure.environment import ROOT


def _installed(tmp_path: Path) -> dict[str, str]:
    """Build the wheel, install it with no dependencies into `tmp_path/site` (they come
    from this environment), and return the environment that imports it from there."""
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
    return {**os.environ, "PYTHONPATH": str(site)}


def _odestudy(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "odestudy.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


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

    report = _odestudy(env, work, "report", "--scale", "smoke")
    assert report.returncode == 0, report.stdout + report.stderr
    tables = "\n".join(p.read_text() for p in (work / "figures" / "tables").glob("*.md"))
    assert "forced_decay" in tables or "own_problem" in tables
    assert (work / "figures" / "report_smoke.html").exists()
