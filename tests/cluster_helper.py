"""The cluster helper script (`python -m tests.slurm_cluster`) as a subprocess, and the
daemons it leaves behind, for the tests of how it stops."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_helper(folder: Path, *args: str, timeout_s: float = 90.0) -> subprocess.Popen:
    """Start the helper on cluster folder `folder` (more options: `args`) and return it
    once it printed the cluster's environment (it is then up)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    helper = subprocess.Popen(
        [sys.executable, "-m", "tests.slurm_cluster", *args, str(folder)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    assert helper.stdout is not None
    for line in helper.stdout:
        if line.startswith("export SLURM_CONF="):
            return helper
        assert time.monotonic() < deadline, "the helper never said the cluster was up"
    raise AssertionError(f"the helper ended with {helper.wait()} before the cluster was up")


def processes_of(folder: Path) -> list[str]:
    """The command lines of the processes that name `folder` (its daemons use it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(folder) in cmdline and "tests.slurm_cluster" not in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def wait_none_left(folder: Path, timeout_s: float = 20.0) -> list[str]:
    """The processes of `folder` still there after `timeout_s` (none once they died)."""
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
