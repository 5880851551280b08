"""`odestudy predict`: a prediction for a user's problem from a short 1-device sweep, in
a fresh process with the device count it predicts for. The numbers are measurements of
this moment (not checked here); what is checked is that every mode gets a prediction
built from the measured parts the model names."""

import json
import os
import subprocess
import sys

from odestudy.measure.environment import ROOT


def test_predict_gives_every_mode_a_prediction_for_the_example_problem(tmp_path):
    out = tmp_path / "prediction.json"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["PYTHONPATH"] = str(ROOT / "examples")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "odestudy.cli",
            "predict",
            "--problem",
            "own_problem:PROBLEM",
            "--devices",
            "2",
            "--scale",
            "smoke",
            "--batch",
            "8",
            "--timed-steps",
            "2",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    p = json.loads(out.read_text())
    assert [r["mode"] for r in p["rows"]] == ["pmap", "shard", "shard_map"]
    assert p["scenario"]["problem"] == "own_problem:PROBLEM" and p["n_devices"] == 2
    assert isinstance(p["shard_loop_collectives"], int) and p["assumptions"]
    assert p["shard_loop_collectives"] > 0 and p["shard_loop_collectives_per_iteration"] > 0
    for r in p["rows"]:
        parts = r["compute_s"] + r["allreduce_s"] + r["in_loop_s"]
        assert r["step_time_s"] > 0 and abs(r["step_time_s"] - parts) <= 1e-12
        assert abs(r["speedup"] - p["one_device_step_s"] / r["step_time_s"]) <= 1e-9
        assert (r["in_loop_s"] > 0) == (r["mode"] == "shard")
    assert "shard" in run.stdout and "assumptions" in run.stdout


def test_predict_refuses_bad_input_before_compiling():
    run = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "predict", "--devices", "3", "--scale", "smoke"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "not divisible by the device count 3" in run.stderr
