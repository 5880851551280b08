"""A one-node SLURM cluster on localhost, in a folder of its own, for the tests of the
SLURM executor (and to try it by hand).

munged, slurmctld and slurmd run in the foreground as children of this process, with
their keys, sockets, state, logs and configuration in `folder`; clients (sbatch, srun,
scancel, sacct, submitit) find the cluster through `SLURM_CONF`. There is no accounting
database (slurmdbd needs MySQL): finished jobs go to the job completion log
(`jobcomp/filetxt`), which `sacct --completion` reads; `folder/bin/sacct` adds that option
and is first on `PATH` while the cluster is up (the only change a cluster with accounting
does not need).

Debian/Ubuntu: `apt-get install -y slurm-wlm munge` (22.05 tested). As a script:

    python -m tests.slurm_cluster FOLDER    # starts it, prints the environment, waits
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scancel", "sacct", "sinfo", "squeue")
# The node is named as this machine: JAX under srun takes its coordinator's address
# from the node list (`SLURM_STEP_NODELIST`), which must resolve.
NODE = socket.gethostname().split(".")[0]
PARTITION = "debug"
START_TIMEOUT_S = 60


def missing_binaries() -> list[str]:
    """The daemons and clients of a local cluster that are not installed."""
    paths = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
    path = os.pathsep.join([os.environ.get("PATH", ""), *paths])
    return [b for b in DAEMONS + CLIENTS if shutil.which(b, path=path) is None]


def _which(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])
    found = shutil.which(name, path=path)
    if found is None:
        raise FileNotFoundError(f"{name} not installed (apt-get install -y slurm-wlm munge)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(folder: Path, cpus: int, memory_mb: int) -> str:
    return f"""\
ClusterName=odestudy
SlurmctldHost={NODE}(127.0.0.1)
MailProg=/bin/true
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder / "munge.socket"}
CredType=cred/munge
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "slurmctld.log"}
SlurmdLogFile={folder / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={folder / "jobcomp.log"}
MinJobAge=600
KillWait=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} \
RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _sacct_shim(folder: Path) -> None:
    """`folder/bin/sacct`: the real sacct reading the job completion log."""
    shim = folder / "bin" / "sacct"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {_which("sacct")} --completion "$@"\n')
    shim.chmod(0o755)


def _wait(check, what: str, procs: list[subprocess.Popen], folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not check():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {p.name} ---\n" + p.read_text()[-2000:] for p in sorted(folder.glob("*.log"))
            )
            raise RuntimeError(f"local SLURM: {what} did not come up\n{logs}")
        time.sleep(0.1)


def _node_idle(env: dict[str, str]) -> bool:
    out = subprocess.run(
        [_which("sinfo"), "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True
    )
    return out.returncode == 0 and out.stdout.strip() in ("idle", "mix")


@contextlib.contextmanager
def local_cluster(folder: str | os.PathLike, cpus: int | None = None) -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd for a one-node cluster with `cpus` CPUs (default:
    this machine's) in `folder`; yields the environment its clients need (`SLURM_CONF`,
    `PATH`), set in `os.environ` meanwhile. Stops the daemons afterwards."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, cpus or os.cpu_count() or 1, memory_mb))
    _sacct_shim(folder)
    env = {"SLURM_CONF": str(conf), "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    daemon_env = {**os.environ, **env}
    commands = {
        "munged": [
            _which("munged"),
            "--foreground",
            "--force",
            f"--socket={folder / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        ],
        "slurmctld": [_which("slurmctld"), "-D", "-i", "-f", str(conf)],
        "slurmd": [_which("slurmd"), "-D", "-N", NODE, "-f", str(conf)],
    }
    procs: list[subprocess.Popen] = []
    saved = {k: os.environ.get(k) for k in env}
    try:
        for name, command in commands.items():
            out = open(folder / f"{name}.out", "w")
            procs.append(
                subprocess.Popen(
                    command, env=daemon_env, stdout=out, stderr=subprocess.STDOUT, cwd=folder
                )
            )
            out.close()
            if name == "munged":
                _wait((folder / "munge.socket").exists, "munged", procs, folder)
        _wait(lambda: _node_idle(daemon_env), "the node", procs, folder)
        os.environ.update(env)
        yield env
    finally:
        _drain(daemon_env)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        _kill_steps(conf)


def _drain(env: dict[str, str], timeout_s: float = 30.0) -> None:
    """Cancel every job and wait until none is left, so that no step daemon is still
    reporting to the controller when it stops."""
    subprocess.run([_which("scancel"), "--user", "root"], env=env, capture_output=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(
            [_which("squeue"), "-h", "-o", "%i"], env=env, capture_output=True, text=True
        )
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(0.2)


def _kill_steps(conf: Path) -> None:
    """Kill the step daemons (`slurmstepd`, started by slurmd) of this cluster that
    outlive it."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "comm").read_text().startswith("slurmstepd"):
                continue
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_CONF={conf}".encode() in env:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with local_cluster(argv[0]) as env:
        print(" ".join(f"export {k}={v}" for k, v in env.items()), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
