"""Multi-process runs on jax.distributed (local processes, gloo CPU collectives)."""

import os
import threading
import time
from pathlib import Path

import pytest

from odestudy import Scenario, launch

from .helpers import SMOKE, TWO_PROCESSES

# 2 processes x 1 device and 1 process x 2 devices run the same float32 computation
# with a different all-reduce implementation; after training, final losses agree to:
RTOL_LOSS = 1e-4


def _alive(pid: int) -> bool:
    """Whether `pid` still runs. A process that exited but that its new parent (after
    the launcher died: init, or a subreaper such as a CI runner) has not reaped yet is a
    zombie: `kill(pid, 0)` still succeeds on it, yet it runs nothing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux), or gone meanwhile
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _matches_two_devices(multi: dict, local: dict) -> None:
    """`multi` (a 2-process record of a mode) against `local`, a run of the mode on 2
    devices of one process."""
    assert multi["status"] == "ok", (multi["error"], multi.get("worker_logs"))
    assert local["mode"] == multi["mode"]
    assert local["status"] == "ok" and local["n_devices"] == 2 and local["processes"] == 1
    assert multi["n_devices"] == 2 and multi["processes"] == 2
    assert multi["hardware"]["process_count"] == 2
    assert len(multi["per_process_hardware"]) == 2
    assert abs(multi["final_loss"] - local["final_loss"]) <= RTOL_LOSS * local["final_loss"]


@pytest.mark.long
def test_two_processes_match_two_devices_with_shard(tmp_path):
    from odestudy.study.matrix import run_matrix

    two = Scenario(devices_per_process=2, mode="shard", scale="smoke")
    (local,) = run_matrix("smoke", "cpu", results=tmp_path, show_progress=False, only=[two])
    multi = launch(Scenario(devices_per_process=1, processes=2, mode="shard", scale="smoke"))
    _matches_two_devices(multi, local)


@pytest.mark.long
def test_two_processes_match_two_devices_with_shard_map(two_process_record, smoke_matrix):
    """The matrix's run of the row (`two_process_record`, through `launch`)."""
    assert two_process_record["mode"] == TWO_PROCESSES.mode == SMOKE.mode
    _matches_two_devices(two_process_record, smoke_matrix[1])


def test_killed_process_fails_the_scenario_in_bounded_time():
    pids: list[int] = []

    def kill_second(started):
        pids.extend(started)
        threading.Timer(3.0, os.kill, (started[1], 9)).start()

    # Far more steps than can finish before the kill, so that the worker is alive
    # then however fast the machine is. The error names the signal, not the time limit:
    # the launcher noticed the dead worker, it did not wait out `timeout_s`.
    rec = launch(
        Scenario(
            devices_per_process=1,
            processes=2,
            mode="shard_map",
            scale="smoke",
            steps_per_stage=1_000_000,
        ),
        timeout_s=240,
        on_start=kill_second,
    )
    assert rec["status"] == "failed"
    assert "process 1 of 2 failed with signal 9" in rec["error"]
    assert not any(_alive(p) for p in pids)


# Killed while starting, or once the workers run: each about 20 s here, make test-long.
@pytest.mark.long
@pytest.mark.parametrize("kill_after_s", [0.3, 3.0])
def test_killed_launcher_leaves_no_workers(kill_after_s):
    """Killed while the workers still import the package (0.3 s) or later (3 s)."""
    import signal
    import subprocess
    import sys

    code = (
        "import os, sys, time\n"
        "from odestudy import Scenario, launch\n"
        "launch(Scenario(devices_per_process=1, processes=2, mode='shard_map', scale='smoke'),"
        " on_start=lambda pids: print(*pids, flush=True))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(kill_after_s)
    proc.send_signal(signal.SIGKILL)  # no cleanup code runs in the launcher
    proc.wait()
    # Workers follow the launcher within a second or so once they run; under load they
    # may still be importing for a while, so wait generously (nothing is timed here).
    deadline = time.time() + 120
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.5)
    assert not any(_alive(p) for p in pids)
