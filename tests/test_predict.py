"""`odestudy predict`: bad input is refused before anything compiles. (A prediction for
the example problem, from the row `odestudy run` trained, is made by `test_installed`.)"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from odestudy import predict
from odestudy.study.profiles import Value

# `EQX_ON_ERROR` set, as the scenario kernels have it: the command does not start itself
# again to set it (`cli._timed_as_kernels`), one import of the package (5 s here) less.
QUIET = {**os.environ, "EQX_ON_ERROR": "nan"}


def test_predict_refuses_bad_input_before_compiling():
    run = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "predict", "--devices", "3", "--scale", "smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        env=QUIET,
    )
    assert run.returncode == 2 and "not divisible by the device count 3" in run.stderr


def test_predict_record_refuses_a_problem_without_its_trained_1_device_row(tmp_path):
    """`predict --record` predicts from the recorded 1-device row: without one it says so
    in one line, naming what to run, before anything compiles."""
    run = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "predict", "--devices", "2", "--scale", "smoke",
         "--record", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=QUIET,
    )  # fmt: skip
    assert run.returncode == 2 and "its 1-device row is missing" in run.stderr
    assert "devices_per_process=1" in run.stderr and not (tmp_path / "predict").exists()


@pytest.mark.long
def test_a_recorded_prediction_measures_its_terms_in_several_processes(tmp_path):
    """`predict --record` on CPU devices measures its terms in `TERM_PROCESSES` fresh
    processes from the 1-device row's trained state and pools them: every list of times
    is kept by process, and the prediction says so."""
    results = str(tmp_path / "results")
    select = "controller=pid,scaling=strong,processes=1,devices_per_process=1,stages=loop"
    base = [sys.executable, "-m", "odestudy.cli"]
    common = ["--scale", "smoke", "--results", results]
    rows = [*base, "matrix", *common, "--select", f"{select},device=cpu,integrator=diffrax"]
    assert subprocess.run(rows, capture_output=True, timeout=600).returncode == 0
    out = tmp_path / "p.json"
    env = {k: v for k, v in os.environ.items() if k != "ODESTUDY_PROBE"}  # probe the devices
    made = subprocess.run(
        [*base, "predict", *common, "--devices", "2", "--record", "--default-step",
         "--crossover-batches", "", "--out", str(out)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    p = json.loads(out.read_text())
    k = predict.TERM_PROCESSES
    assert p["made_from"]["processes"] == p["sweep"]["processes"] == k
    assert all(len(r["step_times_by_process_s"]) == k for r in p["sweep"]["rows"])
    assert {len(v["together_by_process_s"]) for v in p["sweep"]["neighbours"].values()} == {k}
    # Model 16: each mode with a loop per device timed as its own program, in each process.
    own = {m: len(t["times_by_process_s"]) for v in p["sweep"]["neighbours"].values()
           for m, t in v["modes"].items()}  # fmt: skip
    assert own == {m: k for m in ("pmap", "shard_map")}
    assert all(r["own_program"] for r in p["rows"] if r["mode"] in own)
    assert p["sweep"]["allreduce"]["processes"] == k
    assert f"in each of {k} processes" in made.stdout


def test_a_collective_timed_in_several_processes_is_drawn_from_its_times():
    """Model 17: one process that read the loop meeting at a quarter of the others' moves
    the draws no more than the median; a cited value is still drawn over its range."""
    times = [12e-6] * 15 + [46e-6] * 30  # one of three processes low
    sweep = {"loop_meeting": {"median_s": float(np.median(times)), "times_s": times,
                              "interval_s": [12e-6, 51e-6], "n": 2, "form": "a loop"}}  # fmt: skip
    found = predict.meeting_measured(sweep)
    assert found is not None and "samples" not in found.to_dict()
    rng = np.random.default_rng(0)
    draws = [predict._draw(found, rng) for _ in range(500)]
    assert np.median(draws) == pytest.approx(46e-6)
    cited = Value(46e-6, 12e-6, 51e-6, "a profile")
    assert np.median([predict._draw(cited, rng) for _ in range(500)]) < 35e-6
