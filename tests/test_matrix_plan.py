"""What `make all` runs: the matrix sized to the machine, its plan line, and the exit
status of `odestudy matrix`. Nothing here trains."""

import pytest

from odestudy import cli
from odestudy.measure import environment
from odestudy.measure.scenario import Scenario
from odestudy.study import grid, matrix, runner


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
    # `make all`: strong scaling in one process, both controllers, both steps.
    assert {(s.scaling, s.controller, s.processes) for s in sized} == {
        ("strong", c, 1) for c in ("pid", "stepto")
    }
    assert len({s.step_tag() for s in sized}) == 3  # the default step, each recommended one
    whole, _ = matrix.plan("quick", "cpu", full=True)
    assert {s.total_devices for s in whole} == {1, 2, 4, 8}
    assert set(sized) < set(whole)
    # Weak scaling and the multi-process rows (2 processes x 1 device) are `make full`'s.
    assert {s.scaling for s in whole} == {"strong", "weak"}
    assert any(s.processes == 2 and s.total_devices == 2 for s in whole)
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
    # Per controller, the default and the recommended step on 1 device.
    assert [r["status"] for r in recs] == ["failed"] * 4
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(
        "smoke scaling matrix (sized: devices 1): 4 scenarios, "
        "0 reusable; 12 run(s) to do (4 cold, 8 repeats, machine ceiling"
    )
    assert "min here" in first
    assert Scenario(scale="smoke").name() in "\n".join(r["name"] for r in recs)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if a dry run would take the lock, probe, or run a scenario."""

    def refuse(*args, **kwargs):
        raise AssertionError("a dry run ran, locked or probed something")

    monkeypatch.setattr(matrix, "measuring", refuse)
    monkeypatch.setattr(matrix, "session_probe", refuse)
    monkeypatch.setattr(runner, "execute_scenario", refuse)


def _dry_run(args: list[str], results, capsys) -> tuple[int, list[str]]:
    """`odestudy matrix --dry-run ARGS --results RESULTS`: exit status and the lines."""
    code = cli.main(["matrix", "--dry-run", "--results", str(results), *args])
    return code, capsys.readouterr().out.splitlines()


def _listed(lines: list[str]) -> dict[str, str]:
    """The scenario lines of a dry run, by scenario name."""
    return {
        line.split()[0]: line for line in lines if line.startswith("  ") and "run(s) to do" in line
    }


def test_a_dry_run_plans_8_gpus_where_none_is_present(tmp_path, monkeypatch, capsys, nothing_runs):
    monkeypatch.setattr(grid, "gpu_count", lambda: 0)
    results = tmp_path / "results"
    args = ["--scale", "quick", "--device", "gpu", "--device-count", "8"]
    code, lines = _dry_run(args, results, capsys)
    assert code == 0 and not results.exists()  # nothing written, not even the folder
    assert lines[0].startswith("quick scaling matrix (sized to 8 GPU devices: devices 1, 2, 4, 8)")
    listed = _listed(lines)
    want = [s for s in grid.scenarios("quick", "gpu", 8) if grid.in_sized(s)]
    assert set(listed) == {s.name() for s in want}
    assert {s.total_devices for s in want} == {1, 2, 4, 8}
    for s in want:
        line = listed[s.name()]
        assert f"[{s.key()}]" in line and "3 run(s) to do (1 cold, 2 repeats); no record" in line
        assert line.endswith("planned for 8 GPU(s); not present here (0 present)")


def test_a_dry_run_plans_4_cpu_devices_and_says_which_records_stand(
    tmp_path, cores, capsys, nothing_runs
):
    from odestudy.study import records

    cores(2)
    one = Scenario(scale="quick")
    path = records.record_path(one, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"status": "ok", "scenario_key": "another"}')
    code, lines = _dry_run(["--scale", "quick", "--device", "cpu", "--device-count", "4"],
                           tmp_path, capsys)  # fmt: skip
    assert code == 0
    listed = _listed(lines)
    four = [
        s for s in grid.scenarios("quick", "cpu", 4) if s.total_devices == 4 and grid.in_sized(s)
    ]
    assert four and all(s.name() in listed for s in four)
    assert all("beyond this machine's 2 physical cores" in listed[s.name()] for s in four)
    assert "record stale: scenario differs" in listed[one.name()]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["metrics.json"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "gpu", "--device-count", "0"], "--device-count must be 1 or more, got 0"),
        (["--device-count", "2"], "--device-count needs --device cpu or --device gpu"),
        (["--device", "cpu", "--device-count", "2", "--study", "explain"], "not sized"),
    ],
)
def test_a_bad_device_count_is_refused_in_one_line(tmp_path, capsys, args, message, nothing_runs):
    results = tmp_path / "results"
    assert cli.main(["matrix", "--results", str(results), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not results.exists()


def test_the_gpu_matrix_is_1_gpu_and_every_multi_device_mode_at_2_4_8():
    from odestudy.measure.modes import MODES

    multi = {name for name, m in MODES.items() if m.multi_device}
    found = grid.scenarios("quick", "gpu")
    assert {s.mode for s in found if s.total_devices == 1} == {"single"}
    for scaling in ("strong", "weak"):
        for n in (2, 4, 8):
            modes = {s.mode for s in found if s.total_devices == n and s.scaling == scaling}
            assert modes == multi, (scaling, n)
    # The seed scale's GPU rows stay the committed records': 1 and 2 GPUs.
    assert {s.total_devices for s in grid.scenarios("seed", "gpu")} == {1, 2}


def test_gpus_planned_run_on_a_partition_and_not_here(monkeypatch):
    """With SLURM the rows run on the partition's nodes, which have the GPUs planned;
    run here, they need GPUs present here."""
    from odestudy.study.executors import LocalExecutor
    from odestudy.study.slurm import SlurmExecutor
    from odestudy.study.studies import Sizing

    monkeypatch.setattr(grid, "gpu_count", lambda: 0)
    planned = Sizing(4, SlurmExecutor().gpus(4))
    runnable, not_run = matrix.plan("quick", "gpu", sizing=planned)
    assert not not_run and {s.total_devices for s in runnable} == {1, 2, 4}
    here = Sizing(4, LocalExecutor().gpus(4))
    runnable, not_run = matrix.plan("quick", "gpu", sizing=here)
    assert not runnable and {s.total_devices for s, _ in not_run} == {1, 2, 4}


def test_a_repeat_line_gives_that_run_s_median_not_the_pooled_one(capsys):
    """A repeat's record pools every run so far (`repeats.merge_runs`); the matrix's
    line for it names the run's own median step."""
    from odestudy.measure.record import Record
    from odestudy.study.executors import Progress
    from odestudy.study.plan import Done

    rec = Record(status="ok", step_time_s=0.0034, step_times_runs_s=[[0.0033] * 80, [0.0047] * 40])
    Progress(2, "quick", show=True).line(Done("s (run 2)", Scenario(), rec))
    assert "this run's median step 4.70 ms" in capsys.readouterr().out
