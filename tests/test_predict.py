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
