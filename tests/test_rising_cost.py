"""One timed quantity on a problem whose step costs more as it trains (`problems.Spiral`):
`odestudy run` reports the trained model's step (its repeats, timed from the state its
cold run saved), as `odestudy tune` times it, and keeps the training run's step apart.
The two commands are compared by what a step's cost follows, its solver steps per
sample, never by their times: nothing here times anything for a verdict. (A model that
did not train goes on learning in its repeats, which carry their updates: there the two
would differ, and its record says it did not train.)"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from odestudy.measure.lever import LEVERS
from odestudy.measure.scenario import Scenario
from odestudy.report.runs import trained_state
from odestudy.study.rec import Rec

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "tests.problems:RISING"


@pytest.mark.long
def test_run_and_tune_time_the_trained_models_step(tmp_path, monkeypatch):
    import odestudy.tune
    from odestudy.tune import tune

    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "odestudy.cli", "run", "--scale", "smoke", "--problem", PROBLEM,
         "--runs", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "metrics.json").read_text())
    cold, repeat = record["solver_steps_runs"]
    # The problem does what it is for: it trains, and its trained model's solve takes
    # more steps than its solves took while it learned.
    assert record["trained"] and repeat > 1.3 * cold, (record["final_loss"], cold, repeat)
    # The report times the repeat alone, the cold run's median kept apart.
    timed = trained_state(Rec(record))
    assert timed["step_time_s"] == float(np.median(record["step_times_runs_s"][1]))
    assert timed["cold_step_time_s"] == float(np.median(record["step_times_runs_s"][0]))
    # tune times the same trained model: its default step's solver steps are the repeat's.
    monkeypatch.setattr(odestudy.tune, "study_measured", lambda s: False)
    saved = dict(LEVERS)
    try:
        LEVERS.clear()  # the default step alone
        tuned = tune(Scenario(scale="smoke").for_problem(PROBLEM), blocks=2,
                     steps_per_block=4, results=tmp_path)  # fmt: skip
    finally:
        LEVERS.update(saved)
    (default,) = [r for r in tuned["tried"] if r["label"] == "default"]
    steps = float(np.mean(default["solver_steps_blocks"]))
    assert steps == pytest.approx(repeat, rel=0.15), (cold, repeat, steps)
