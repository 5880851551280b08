"""`data/measured_steps.json` is what the committed tune records give (`make steps`),
and the recommended step reads it per device kind."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from odestudy import measured_steps
from odestudy.measure.environment import shipped
from odestudy.measure.recommended import measured
from odestudy.measure.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]


def _committed_tunes(to: Path) -> Path:
    """The tune records git tracks, copied under `to` (a machine's own tunes left out)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "results/*/tune/*.json"], cwd=ROOT, capture_output=True,
            text=True, check=True,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs the git checkout's tracked records")
    for name in listed:
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, to / name)
    return to / "results"


def test_the_shipped_steps_are_derived_from_the_committed_tune_records(tmp_path):
    derived = measured_steps.derive(_committed_tunes(tmp_path))
    assert derived == json.loads(shipped("data", "measured_steps.json").read_text())


def test_a_tie_with_the_studys_step_keeps_it():
    """A tune choice whose interval over the study's step reaches 1 is not taken."""
    record = {
        "scenario": Scenario(scale="smoke", problem="latent_ode").to_dict(),
        "facts": {"solver_steps": 20},
        "levers": ["fused"],
        "fields": {"integrator": "fused"},
        "tried": [
            {"label": "fused", "speedup": 1.0, "fields": {"integrator": "fused"},
             "step_times_runs_s": [[1.0, 1.01, 0.99]] * 3},
            {"label": "study_step", "speedup": 1.0, "fields": {"max_steps": 64},
             "step_times_runs_s": [[1.0, 0.99, 1.01]] * 3},
        ],
    }  # fmt: skip
    step = measured_steps.derived_step(record)
    assert step["levers"] == [] and "the study's step" in step["why"]
    assert step["max_steps"] == 64


def test_a_kind_without_a_tune_takes_the_levers_not_known_faster_only_elsewhere():
    cpu = [lever.name for lever in measured(Scenario(scale="smoke", device="cpu"))[1]]
    gpu = [lever.name for lever in measured(Scenario(scale="smoke", device="gpu"))[1]]
    assert "fast_activations" in cpu and "fast_activations" not in gpu
    assert "fused" in gpu
