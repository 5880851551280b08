"""What `make all` runs: the matrix sized to the machine, its plan line, and the exit
status of `odestudy matrix`. Nothing here trains."""

import pytest

from odestudy import cli
from odestudy.measure import environment
from odestudy.measure.scenario import Scenario
from odestudy.study import matrix, runner


@pytest.fixture
def cores(monkeypatch):
    """Set the physical cores this machine reports."""

    def set_cores(n: int) -> None:
        info = dict(environment.cpu_info(), physical_cores=n)
        monkeypatch.setattr(environment, "cpu_info", lambda: info)

    return set_cores


def test_the_sized_matrix_runs_devices_up_to_the_physical_cores(cores):
    cores(2)
    sized, _ = matrix.plan("quick", "cpu")
    assert {s.total_devices for s in sized} == {1, 2}
    assert {s.mode for s in sized} == {"single", "pmap", "shard", "shard_map", "explicit"}
    assert {(s.scaling, s.controller) for s in sized if s.total_devices == 2} == {
        (a, b) for a in ("strong", "weak") for b in ("pid", "stepto")
    }
    assert any(s.processes == 2 for s in sized)  # 2 processes x 1 device fit 2 cores
    whole, _ = matrix.plan("quick", "cpu", full=True)
    assert {s.total_devices for s in whole} == {1, 2, 4, 8}
    assert set(sized) < set(whole)
    cores(1)
    assert {s.total_devices for s in matrix.plan("quick", "cpu")[0]} == {1}
    # The seed scale is the reference's configuration: always whole.
    assert {s.total_devices for s in matrix.plan("seed", "cpu")[0]} == {1, 2, 8}


def test_a_selection_that_matches_nothing_is_an_error(tmp_path, capsys):
    code = cli.main(
        [
            "matrix",
            "--scale",
            "smoke",
            "--device",
            "cpu",
            "--results",
            str(tmp_path),
            "--select",
            "mode=pmapp",
        ]
    )
    assert code == 2
    assert "matches none of the" in capsys.readouterr().err


def test_matrix_exits_non_zero_naming_failed_scenarios(tmp_path, monkeypatch, capsys):
    ok = {"name": "a", "status": "ok"}
    bad = {"name": "cpu-2dev-shard-pid-strong-smoke", "status": "failed"}
    monkeypatch.setattr(matrix, "run_matrix", lambda *a, **k: [ok, bad])
    assert cli.main(["matrix", "--scale", "smoke", "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 scenarios ok; failed: cpu-2dev-shard-pid-strong-smoke" in out
    monkeypatch.setattr(matrix, "run_matrix", lambda *a, **k: [ok])
    assert cli.main(["matrix", "--scale", "smoke", "--results", str(tmp_path)]) == 0


def test_the_plan_line_says_what_runs_and_how_long(tmp_path, cores, monkeypatch, capsys):
    cores(2)
    # Run nothing: every scenario's cold run is replaced by a failed record.
    monkeypatch.setattr(
        runner,
        "execute_scenario",
        lambda s, out, **k: {"status": "failed", "error": "skipped", "name": s.name()},
    )
    recs = matrix.run_matrix(
        "smoke",
        "cpu",
        results=tmp_path,
        selection={"scaling": "strong", "devices_per_process": "1", "processes": "1"},
    )
    assert [r["status"] for r in recs] == ["failed", "failed"]
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(
        "smoke scaling matrix (sized: devices 1): 2 scenarios, "
        "0 reusable; 6 run(s) to do (2 cold, 4 repeats, machine ceiling"
    )
    assert "min here" in first
    assert Scenario(scale="smoke").name() in "\n".join(r["name"] for r in recs)
