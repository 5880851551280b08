"""`odestudy predict`: bad input is refused before anything compiles. (A prediction for
the example problem, from the row `odestudy run` trained, is made by `test_installed`.)"""

import subprocess
import sys


def test_predict_refuses_bad_input_before_compiling():
    run = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "predict", "--devices", "3", "--scale", "smoke"],
        capture_output=True,
        text=True,
        timeout=120,
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
    )  # fmt: skip
    assert run.returncode == 2 and "its 1-device row is missing" in run.stderr
    assert "devices_per_process=1" in run.stderr and not (tmp_path / "predict").exists()
