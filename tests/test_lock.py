"""One measurement at a time: a second `odestudy matrix` refuses at once, naming the
first, or waits for it with `--wait`; nothing is recorded meanwhile. Nothing here trains
(the runs are replaced by fakes)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from odestudy import cli
from odestudy.study import lock, runner

HOLD = textwrap.dedent(
    """
    import sys, time
    from odestudy.study.lock import measuring
    with measuring("a test holder"):
        print("held", flush=True)
        time.sleep(float(sys.argv[1]))
    """
)

MATRIX = [
    "matrix",
    "--scale",
    "smoke",
    "--device",
    "cpu",
    "--runs",
    "1",
    "--select",
    "scaling=strong,devices_per_process=1,processes=1",
]


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """Start another process that holds the lock for `seconds`; returns it once it holds."""
    monkeypatch.setenv(lock.LOCK_VARIABLE, str(tmp_path / "measure.lock"))
    started = []

    def start(seconds: float) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(seconds)], stdout=subprocess.PIPE, text=True
        )
        started.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.terminate()
        p.wait()


@pytest.fixture
def fake_runs(monkeypatch):
    """Cold runs that return an ok record at once, counted."""
    calls = []

    def fake(s, out, **kwargs):
        calls.append(s)
        return {"status": "ok", "name": s.name(), "step_time_s": 0.01, "kernel_wall_s": 0.0}

    monkeypatch.setattr(runner, "execute_scenario", fake)
    return calls


def test_a_second_matrix_refuses_at_once_naming_the_first(holder, fake_runs, tmp_path, capsys):
    first = holder(60)
    results = tmp_path / "results"
    start = time.monotonic()
    code = cli.main([*MATRIX, "--results", str(results)])
    assert code == lock.BUSY_STATUS and time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert f"process {first.pid}" in err and "-c" in err and "started 20" in err
    assert "a test holder" in err and "--wait" in err
    assert fake_runs == []
    assert not [p for p in results.rglob("*") if p.is_file()]  # nothing recorded


def test_wait_runs_once_the_first_is_done(holder, fake_runs, tmp_path, capsys):
    first = holder(2)
    code = cli.main([*MATRIX, "--results", str(tmp_path / "results"), "--wait"])
    assert code == 0
    assert first.wait(timeout=60) == 0
    assert f"waiting for process {first.pid}" in capsys.readouterr().err
    # The selection's scenarios, each ok: per controller, the default and the recommended step.
    assert len(fake_runs) == 4
    assert lock.holder() is None  # released, its holder file gone


def test_the_lock_is_reentrant_and_inherited_by_children(tmp_path, monkeypatch):
    monkeypatch.setenv(lock.LOCK_VARIABLE, str(tmp_path / "measure.lock"))
    with lock.measuring("outer"):
        with lock.measuring("inner"):  # the same process: goes straight on
            assert lock.holder()["pid"] == os.getpid()
        child = subprocess.run(
            [sys.executable, "-c", HOLD, "0"], capture_output=True, text=True, timeout=120
        )
        assert child.returncode == 0 and child.stdout.strip() == "held"
        assert lock.holder()["what"] == "outer"  # the child did not take it over
    # Outside, a process that did not inherit it takes it anew.
    monkeypatch.delenv(lock.HOLDER_VARIABLE, raising=False)
    with lock.measuring("again"):
        assert lock.holder()["what"] == "again"
