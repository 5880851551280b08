"""A one-node SLURM cluster on localhost, in a folder of its own, for the tests of the
SLURM executor (and to try it by hand).

munged, slurmctld and slurmd run in the foreground as children of this process, with
their keys, sockets, state, logs and configuration in `folder`; clients (sbatch, srun,
scancel, sacct, submitit) find the cluster through `SLURM_CONF`. There is no accounting
database (slurmdbd needs MySQL): finished jobs go to the job completion log
(`jobcomp/filetxt`), which `sacct --completion` reads; `folder/bin/sacct` adds that option
and is first on `PATH` while the cluster is up (the only change a cluster with accounting
does not need).

With `nodes` > 1 (root and iproute2 needed), each node is a network namespace of its
own on this machine (`node_network`): a bridge with the controller's address on the host
side, a veth pair per namespace into it, one `slurmd -N nodeK` per namespace at its own
address (`NodeAddr`). Names resolve per node, through a `hosts` file in `folder` that
is bind-mounted over /etc/hosts in a mount namespace of the node's slurmd (and so of its
jobs; the host's /etc/hosts is untouched): `nodeK` to its namespace's address, for JAX's
coordinator (the first node of `SLURM_STEP_NODELIST`), and this machine's hostname to the
node's own address, for gloo, which binds to the address of the hostname. (Not `ip netns
exec`: it remounts /sys, where slurmd needs the host's cgroups.) munged's socket is a
file in `folder`, shared by every namespace.

The daemons die with the process that started them (`PR_SET_PDEATHSIG`), even killed;
SIGTERM and SIGHUP stop the script the way Ctrl-C does, so that it also removes the
namespaces, veths and bridge. Leftovers of a helper killed outright are
removed by the next one (`sweep`).

Debian/Ubuntu: `apt-get install -y slurm-wlm munge` (22.05 tested). As a script:

    python -m tests.slurm_cluster FOLDER    # starts it, prints the environment, waits
    python -m tests.slurm_cluster --nodes 2 FOLDER --run "COMMAND"   # COMMAND in it
"""

import argparse
import contextlib
import ctypes
import ipaddress
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scancel", "sacct", "sinfo", "squeue")
# The node is named as this machine: JAX under srun takes its coordinator's address
# from the node list (`SLURM_STEP_NODELIST`), which must resolve.
NODE = socket.gethostname().split(".")[0]
PARTITION = "debug"
START_TIMEOUT_S = 60
# Stopping takes at most DRAIN_S for the jobs to be cancelled (`_drain`), then STOP_S for
# the daemons to end on SIGTERM before they are killed: 50 s in all, on a loaded machine
# too (`STOP_BOUND_S`, what a test waits for a stopped helper).
DRAIN_S = 30.0
STOP_S = 20.0
STOP_BOUND_S = DRAIN_S + STOP_S
# The longest cluster folder that holds its nodes' spool folders itself (`_cluster`).
SHORT_PATH = 48


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


def _config(
    folder: Path, cpus: int, memory_mb: int, net: "Network | None" = None, spool: Path | None = None
) -> str:
    """slurm.conf of the cluster in `folder`: one node on localhost, or the nodes of
    `net` at their namespaces' addresses (their files named by node, `%n`); the nodes'
    spool folders under `spool` (default: `folder`)."""
    if net is None:
        controller = f"{NODE}(127.0.0.1)"
        nodes = f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb}"
        node_files = ""
    else:
        controller = f"{NODE}({net.host_address})"
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={a} CPUs={cpus} RealMemory={memory_mb}"
            for n, a in zip(net.names, net.addresses, strict=True)
        )
        node_files = "-%n"
    return f"""\
ClusterName=odestudy
SlurmctldHost={controller}
MailProg=/bin/true
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder / "munge.socket"}
CredType=cred/munge
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={(spool or folder) / "spool"}{node_files}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd"}{node_files}.pid
SlurmctldLogFile={folder / "slurmctld.log"}
SlurmdLogFile={folder / "slurmd"}{node_files}.log
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
{nodes}
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


def _nodes_idle(env: dict[str, str], count: int) -> bool:
    """Whether all `count` nodes of the cluster are up and free."""
    out = subprocess.run(
        [_which("sinfo"), "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True
    )
    states = out.stdout.split()
    return out.returncode == 0 and len(states) == count and set(states) <= {"idle", "mix"}


# Looked up here, not in the forked child (`_die_with_parent`), where another thread's
# locks may be held.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def _die_with_parent() -> None:
    """In a child before it execs: the kernel sends it SIGTERM when the thread that
    started it (here, the main thread) ends, however this process dies
    (`PR_SET_PDEATHSIG`, kept across exec)."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ip ARGS`, its output captured; CalledProcessError (with ip's message) if it
    fails and `check`."""
    out = subprocess.run([_which("ip"), *args], capture_output=True, text=True)
    if check and out.returncode:
        raise subprocess.CalledProcessError(out.returncode, out.args, out.stdout, out.stderr)
    return out


# Everything of a multi-node cluster is named with the PID of the process that made it
# (bridge `odbr<pid>`, veths `od<pid>h<k>`/`od<pid>n<k>`, namespaces `odestudy-<pid>-<k>`):
# unique among live processes, and a dead one's leftovers can be told apart (`sweep`).
NAMESPACE = re.compile(r"odestudy-(\d+)-\d+$")
LINK = re.compile(r"od(?:br(\d+)|(\d+)h\d+)$")  # our bridge or a host end of our veths


@dataclass
class Network:
    """The network of a multi-node cluster on this machine.

    - `bridge`: the bridge the nodes' veths are plugged into.
    - `host_address`: the bridge's address (the controller's, as the nodes see it).
    - `names`: the nodes' SLURM names (`node1`, ...).
    - `namespaces`: each node's network namespace.
    - `addresses`: each node's address in its namespace.
    - `hosts`: each node's /etc/hosts (`_hosts_file`).
    """

    bridge: str
    host_address: str
    names: list[str]
    namespaces: list[str]
    addresses: list[str]
    hosts: list[Path]

    def command(self, node: int, argv: list[str]) -> list[str]:
        """`argv` run as node `node` (0-based): in its network namespace, with its hosts
        file over /etc/hosts in a mount namespace of its own."""
        # sh -c SCRIPT HOSTS NETNS ARGV...: $0 is HOSTS, $1 NETNS, then ARGV.
        nsenter = _which("nsenter")
        script = (
            f'mount --bind "$0" /etc/hosts && n=$1 && shift && exec {nsenter} --net="$n" -- "$@"'
        )
        netns = f"/run/netns/{self.namespaces[node]}"
        unshare = [_which("unshare"), "--mount", "--propagation", "private", "--"]
        return [*unshare, "sh", "-c", script, str(self.hosts[node]), netns, *argv]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep(pid: int | None = None) -> None:
    """Remove the namespaces, veths and bridges left by
    helpers that died without cleaning up, or all those of process `pid`."""
    stale: Callable[[int], bool] = (lambda p: p == pid) if pid else (lambda p: not _alive(p))
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if (m := NAMESPACE.match(ns)) and stale(int(m.group(1))):
            _ip("netns", "delete", ns, check=False)
    # A veth whose namespace is still held by a dying process outlives `netns delete`.
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if (m := LINK.match(name)) and stale(int(m.group(1) or m.group(2))):
            _ip("link", "delete", name, check=False)


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's addresses and routes (but the default)."""
    found = []
    for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
        tokens = line.split()
        if "inet" in tokens:
            found.append(ipaddress.ip_interface(tokens[tokens.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show").stdout.splitlines():
        if line.split() and line.split()[0] != "default":
            found.append(ipaddress.ip_network(line.split()[0], strict=False))
    return [n for n in found if isinstance(n, ipaddress.IPv4Network)]


def free_subnet() -> str:
    """A /24 of 10.213.0.0/16, as `10.213.K`, that overlaps no address or route of this
    machine."""
    used = _networks_in_use()
    for k in random.sample(range(1, 255), 254):
        candidate = ipaddress.ip_network(f"10.213.{k}.0/24")
        if not any(candidate.overlaps(n) for n in used):
            return f"10.213.{k}"
    raise RuntimeError("no free 10.213.K.0/24 subnet on this machine")


def _hosts_file(net: Network, node: int) -> str:
    """The /etc/hosts node `node` sees: the node names, and this machine's hostname at the
    node's own address."""
    lines = ["127.0.0.1 localhost", f"{net.addresses[node]} {socket.gethostname()} {NODE}"]
    lines += [f"{a} {n}" for n, a in zip(net.names, net.addresses, strict=True)]
    return "\n".join(dict.fromkeys(lines)) + "\n"


@contextlib.contextmanager
def node_network(nodes: int, folder: Path) -> Iterator[Network]:
    """`nodes` network namespaces joined by a bridge of their own, on a free private
    subnet (`free_subnet`): the bridge at `.1`, node K at `.(K+1)`, loopback up in each,
    each node's hosts file (`_hosts_file`) in `folder`. Removes the namespaces, veths and
    bridge afterwards, whatever happens."""
    pid = os.getpid()
    sweep()
    sweep(pid)
    prefix = free_subnet()
    net = Network(
        bridge=f"odbr{pid}",
        host_address=f"{prefix}.1",
        names=[f"node{k}" for k in range(1, nodes + 1)],
        namespaces=[f"odestudy-{pid}-{k}" for k in range(1, nodes + 1)],
        addresses=[f"{prefix}.{k + 1}" for k in range(1, nodes + 1)],
        hosts=[folder / f"hosts-node{k}" for k in range(1, nodes + 1)],
    )
    try:
        _ip("link", "add", net.bridge, "type", "bridge")
        _ip("addr", "add", f"{net.host_address}/24", "dev", net.bridge)
        _ip("link", "set", net.bridge, "up")
        for k, (ns, address) in enumerate(zip(net.namespaces, net.addresses, strict=True), 1):
            host_end, node_end = f"od{pid}h{k}", f"od{pid}n{k}"
            _ip("netns", "add", ns)
            net.hosts[k - 1].write_text(_hosts_file(net, k - 1))
            _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            _ip("link", "set", node_end, "netns", ns)
            _ip("link", "set", host_end, "master", net.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", node_end)
            _ip("-n", ns, "link", "set", node_end, "up")
        yield net
    finally:
        sweep(pid)


def _forget_jobs() -> None:
    """Clear submitit's cache of job states in this process: it is keyed by job id, and
    every fresh cluster numbers its jobs from 1 again (a job of an earlier cluster would
    otherwise be taken for the new one's)."""
    try:
        from submitit.slurm.slurm import SlurmJob
    except ImportError:
        return
    SlurmJob.watcher.clear()


@contextlib.contextmanager
def local_cluster(
    folder: str | os.PathLike, cpus: int | None = None, nodes: int = 1
) -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd for a cluster of `nodes` nodes with `cpus` CPUs
    each (default: this machine's) in `folder`: one on localhost, or more in network
    namespaces of their own (`node_network`; root only). Yields the environment its
    clients need (`SLURM_CONF`, `PATH`), set in `os.environ` meanwhile. Stops the daemons
    (and removes the namespaces) afterwards."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(node_network(nodes, folder)) if nodes > 1 else None
        yield stack.enter_context(_cluster(folder, cpus, net))


@contextlib.contextmanager
def _cluster(folder: Path, cpus: int | None, net: Network | None) -> Iterator[dict[str, str]]:
    """The daemons of `local_cluster` in `folder`; `net`: the nodes' namespaces (None:
    one node on localhost)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    names = net.names if net else [NODE]
    spools = [f"spool-{n}" for n in names] if net else ["spool"]
    # A step's Unix socket lives in its node's spool folder, and a socket's path has at
    # most 107 bytes: a long `folder` (pytest's under xdist) gets a short one for them.
    spool = folder if len(str(folder)) <= SHORT_PATH else Path(tempfile.mkdtemp(prefix="ods-"))
    for sub in spools:
        (spool / sub).mkdir(exist_ok=True)
    (folder / "state").mkdir(exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, cpus or os.cpu_count() or 1, memory_mb, net, spool))
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
    }
    for k, node in enumerate(names):
        slurmd = [_which("slurmd"), "-D", "-N", node, "-f", str(conf)]
        commands[f"slurmd-{node}" if net else "slurmd"] = net.command(k, slurmd) if net else slurmd
    procs: list[subprocess.Popen] = []
    saved = {k: os.environ.get(k) for k in env}
    try:
        for name, command in commands.items():
            out = open(folder / f"{name}.out", "w")
            procs.append(
                subprocess.Popen(
                    command,
                    env=daemon_env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=folder,
                    preexec_fn=_die_with_parent,
                )
            )
            out.close()
            if name == "munged":
                _wait((folder / "munge.socket").exists, "munged", procs, folder)
        _wait(lambda: _nodes_idle(daemon_env, len(names)), "the nodes", procs, folder)
        os.environ.update(env)
        _forget_jobs()
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
        stop_by = time.monotonic() + STOP_S  # one deadline for all, not one each
        for p in reversed(procs):
            try:
                p.wait(timeout=max(0.0, stop_by - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        _kill_steps(conf)
        if spool != folder:
            shutil.rmtree(spool, ignore_errors=True)


def _drain(env: dict[str, str], timeout_s: float = DRAIN_S) -> None:
    """Cancel every job and wait until none is left, so that no step daemon is still
    reporting to the controller when it stops; at most `timeout_s` in all, however slow
    the controller answers."""
    deadline = time.monotonic() + timeout_s
    try:
        subprocess.run(
            [_which("scancel"), "--user", "root"], env=env, capture_output=True, timeout=timeout_s
        )
        while (left := deadline - time.monotonic()) > 0:
            out = subprocess.run(
                [_which("squeue"), "-h", "-o", "%i"],
                env=env,
                capture_output=True,
                text=True,
                timeout=left,
            )
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.2)
    except subprocess.TimeoutExpired:
        return


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


class Stopped(Exception):
    """Raised by SIGTERM and SIGHUP in the script, so that its cleanup runs."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def _run_in(command: str, env: dict[str, str]) -> int:
    """Run shell `command` with the cluster's environment `env`; its exit status. It is
    stopped (then killed) if this process is stopped, and dies with it."""
    child = subprocess.Popen(
        command, shell=True, env={**os.environ, **env}, preexec_fn=_die_with_parent
    )
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.slurm_cluster",
        description="A SLURM cluster on this machine: prints its environment and waits "
        "(Ctrl-C, SIGTERM or SIGHUP stop it), or runs a command in it.",
    )
    p.add_argument("folder", help="the cluster's configuration, keys, state and logs")
    p.add_argument("--nodes", type=int, default=1, help="nodes (>1: network namespaces, root)")
    p.add_argument("--cpus", type=int, default=None, help="CPUs per node (default: all)")
    p.add_argument("--run", default=None, help="a shell command to run in the cluster, then stop")
    a = p.parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    status = 0
    try:
        with local_cluster(a.folder, a.cpus, a.nodes) as env:
            if a.run is not None:
                status = _run_in(a.run, env)
            else:
                print(" ".join(f"export {k}={v}" for k, v in env.items()), flush=True)
                # Not `signal.pause()`: a signal that comes after the check for pending
                # handlers but before pause() starts (its reader sends one as soon as it
                # reads the line above) is missed, and pause() waits for another. The
                # loop's handler check runs within a second whenever the signal came.
                while True:
                    time.sleep(1.0)
    except (KeyboardInterrupt, Stopped):
        status = 128 + signal.SIGTERM if a.run is not None else 0
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
