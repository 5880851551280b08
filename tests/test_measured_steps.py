"""`data/measured_steps.json` is what the committed tune records give (`make steps`),
and the recommended step reads it per device kind."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from odestudy import measured_steps
from odestudy.measure.environment import shipped
from odestudy.measure.recommended import measured, recommended
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


def test_a_file_that_holds_no_tune_record_is_said_and_left_out(tmp_path, capsys):
    results = _committed_tunes(tmp_path)
    broken = results / "some-machine" / "tune" / "cpu-latent_ode-pid-quick.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"problem": "latent_ode", "dev')  # a write cut short
    derived = measured_steps.derive(results)
    assert derived == json.loads(shipped("data", "measured_steps.json").read_text())
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and str(broken) in said[0] and "left out" in said[0]


def test_a_tie_with_the_studys_step_keeps_it(tmp_path):
    """The latent ODE's PID tune chose the fused solve, which it timed level with the
    study's step: the study's step stays."""
    path = _committed_tunes(tmp_path) / "amd-epyc-2cpu-1a6ba1/tune/cpu-latent_ode-pid-quick.json"
    record = json.loads(path.read_text())
    assert record["levers"] == ["fused"]
    step = measured_steps.derived_step(record)
    assert step["levers"] == [] and step["why"].startswith("the study's step")
    assert step["max_steps"] == 64


def test_a_kind_without_a_tune_takes_the_levers_not_known_faster_only_elsewhere():
    cpu = [lever.name for lever in measured(Scenario(scale="smoke", device="cpu"))[1]]
    gpu = [lever.name for lever in measured(Scenario(scale="smoke", device="gpu"))[1]]
    assert "fast_activations" in cpu and "fast_activations" not in gpu
    assert "fused" in gpu


def test_the_recommended_rule_rebuilds_each_derived_step_as_its_tune_timed_it(tmp_path):
    """Per tune record the derivation used: the recommended step on its problem,
    controller, device kind and width sets the levers of the step it took."""
    results = _committed_tunes(tmp_path)
    for (problem, _, controller), path in measured_steps.tune_records(results).items():
        record = json.loads(path.read_text())
        s = Scenario.from_dict(record["scenario"])
        taken = measured_steps.derived_step(record)["fields"]
        rebuilt = recommended(s)
        assert {k: getattr(rebuilt, k) for k in taken} == taken, (problem, controller)
        assert all(rebuilt.default(k) == getattr(rebuilt, k) for k in Scenario.levers()
                   if k not in taken), (problem, controller)  # fmt: skip
