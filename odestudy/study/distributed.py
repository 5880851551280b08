"""Multi-process data parallelism on `jax.distributed`: local launcher and worker.

`launch` starts `processes` local workers on loopback (coordinator on 127.0.0.1 at a
free port), each with its own virtual CPU devices; they join with
`jax.distributed.initialize` and train one scenario over the global mesh. Inside a SLURM
job with `LAUNCHER_VARIABLE=srun` (the SLURM executor's jobs, `slurm.py`), `launch` starts
them as the tasks of one `srun` step instead, with no coordinator: JAX's cluster detection
reads SLURM's environment (`SLURM_STEP_NODELIST`, `SLURM_NTASKS`, `SLURM_PROCID`).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..measure import environment
from ..measure.devices import child_environment, configure_devices
from ..measure.record import Record
from ..measure.resume import time_repeat
from ..measure.scenario import Scenario, validate
from ..measure.state import STATE_NAME
from ..measure.training import run_scenario
from . import records
from .runner import failed_record

INIT_TIMEOUT_S = 60
LAUNCHER_VARIABLE = "ODESTUDY_LAUNCHER"  # "srun": workers are the tasks of an srun step
STOP_WAIT_S = 10  # how long srun gets to end its step before it is killed
# Whole-run limits per scale (seconds), unless the caller gives one.
RUN_TIMEOUT_S = {"smoke": 300, "quick": 1800, "seed": 6 * 3600}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None and _under_srun():
            p.terminate()  # srun ends its step's tasks on every node, then exits
            try:
                p.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def _under_srun() -> bool:
    """Whether workers start as the tasks of an srun step (see the module docstring)."""
    return os.environ.get(LAUNCHER_VARIABLE) == "srun"


def srun_command(s: Scenario, worker_args: list[str]) -> list[str]:
    """The srun step that runs one worker per process of `s` in the current SLURM job:
    the job's tasks spread over its nodes, each with its share of the node's CPUs."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    per_node = -(-s.processes // nodes)
    cpus = max(1, int(os.environ.get("SLURM_CPUS_ON_NODE", "1")) // per_node)
    # A row over several nodes places its processes evenly, as it says.
    spread = (
        [f"--nodes={s.nodes}", f"--ntasks-per-node={s.processes // s.nodes}"] if s.nodes > 1 else []
    )
    return [
        "srun",
        f"--ntasks={s.processes}",
        *spread,
        f"--cpus-per-task={cpus}",
        "--kill-on-bad-exit=1",
        "--label",
        sys.executable,
        "-m",
        "odestudy.study.distributed",
        *worker_args,
    ]


def launch(
    s: Scenario,
    timeout_s: float | None = None,
    on_start: Callable[[list[int]], None] | None = None,
    state_path: str | os.PathLike | None = None,
    repeat_dir: str | os.PathLike | None = None,
) -> Record:
    """Run scenario `s` in `s.processes` local processes (or as the tasks of an srun
    step); return process 0's record. Past `timeout_s` (default by scale), or within a
    second or so of a worker failing, every process is killed (each in its own process
    group) and the scenario recorded as failed. `on_start`: called with the worker PIDs;
    `state_path`: where process 0 saves the trained state; `repeat_dir`: time a repeat
    from the trained state saved there instead of training (the repeat record)."""
    validate(s)
    if s.nodes > 1 and not _under_srun():  # its record would claim hosts it never had
        return failed_record(s, f"{s.nodes} nodes: runs only as a SLURM job (--executor slurm)")
    timeout_s = RUN_TIMEOUT_S[s.scale] if timeout_s is None else timeout_s
    start = time.perf_counter()
    port = free_port()
    # Under srun the workers may run on other nodes: their files go beside the record
    # (the shared results folder) rather than in this node's /tmp.
    shared = Path(state_path).parent if state_path else repeat_dir
    where = str(shared) if _under_srun() and shared else None
    with tempfile.TemporaryDirectory(prefix=".odestudy-mp-", dir=where) as tmp:
        scenario_file = Path(tmp) / "scenario.json"
        scenario_file.write_text(json.dumps(s.to_dict()))
        out_file = Path(tmp) / "record.json"
        env = child_environment("cpu" if s.device == "cpu" else "gpu", s.devices_per_process)
        common = [
            "--scenario",
            str(scenario_file),
            "--out",
            str(out_file),
            *(["--state", str(Path(state_path).resolve())] if state_path else []),
            *(["--repeat", str(Path(repeat_dir).resolve())] if repeat_dir else []),
        ]
        procs: list[subprocess.Popen] = []
        logs: list[IO[str]] = []
        try:
            for rank in range(1 if _under_srun() else s.processes):
                log = open(Path(tmp) / f"worker{rank}.log", "w+")
                logs.append(log)
                command = _worker_command(s, common, rank, port)
                procs.append(
                    subprocess.Popen(
                        command, env=env, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )  # fmt: skip
            if on_start is not None:
                on_start([p.pid for p in procs])
            error = _wait(s, procs, start, timeout_s)
        finally:
            _kill_all(procs)
        if error is None and out_file.exists():
            return records.read_record(out_file)
        return failed_record(
            s,
            error or "process 0 wrote no record",
            runtime_s=time.perf_counter() - start,
            worker_logs=_tails(logs),
        )


def _worker_command(s: Scenario, common: list[str], rank: int, port: int) -> list[str]:
    """The command of worker `rank`: an srun step, or a local process on loopback `port`."""
    if _under_srun():
        return srun_command(s, common)
    return [
        sys.executable, "-m", "odestudy.study.distributed", *common,
        "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(s.processes),
        "--process-id", str(rank), "--parent-pid", str(os.getpid()),
    ]  # fmt: skip


def _wait(s: Scenario, procs: list[subprocess.Popen], start: float, timeout_s: float) -> str | None:
    """Wait for every worker to exit 0 (None), the first to fail or the time limit (why)."""
    while True:
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c is not None and c != 0]
        if bad:
            rank, code = bad[0]
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if _under_srun():
                return f"the srun step of {s.processes} processes failed with {how}"
            return f"process {rank} of {s.processes} failed with {how}"
        if all(c == 0 for c in codes):
            return None
        if time.perf_counter() - start > timeout_s:
            return f"timed out after {timeout_s:.0f} s"
        time.sleep(0.2)


def _tails(logs: list[IO[str]]) -> str:
    """The last lines of each worker's log (closed), for a failed record."""
    tails = []
    for rank, log in enumerate(logs):
        log.seek(0)
        text = log.read().strip().splitlines()[-8:]
        tails.append(f"--- process {rank} ---\n" + "\n".join(text))
        log.close()
    return "\n".join(tails)


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux; elsewhere nothing),
    first thing in a worker or SLURM job (whose batch script `scancel` kills while
    submitit ignores SIGTERM; `proctrack/linuxproc` clusters lose orphans)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1  # from <sys/prctl.h>
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _exit_with_parent(parent: int | None = None) -> None:
    """Follow the launcher if it dies (workers run in their own process group, out of
    reach of its signals). `parent`: the launcher's PID from the command line, since a
    launcher killed during the imports would already be replaced by init; None (under
    SLURM): the parent now."""
    die_with_parent()
    parent = os.getppid() if parent is None else parent
    if os.getppid() != parent:  # the launcher died before we got here
        os._exit(3)

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="odestudy-parent-watch").start()


def worker(
    scenario_file: str,
    out_file: str,
    coordinator: str | None,
    num_processes: int | None,
    process_id: int | None,
    parent_pid: int | None = None,
    state_path: str | None = None,
    repeat_dir: str | None = None,
) -> int:
    """One process of a multi-process scenario (see `launch`); process 0 writes the record."""
    _exit_with_parent(parent_pid)
    s = Scenario.from_dict(json.loads(Path(scenario_file).read_text()))
    import jax

    configure_devices(s.device, s.devices_per_process)
    if s.device == "cpu":
        # CPU collectives across processes need gloo (the default has none).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs: dict[str, Any] = dict(initialization_timeout=INIT_TIMEOUT_S)
    if coordinator:  # local launch; under SLURM the cluster is detected instead
        kwargs.update(
            coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
        )
    jax.distributed.initialize(**kwargs)
    record: dict[str, Any]
    if repeat_dir:
        record = time_repeat(s, repeat_dir)
        how = record["repeat_how"].removeprefix("plain process, ")
        record["repeat_how"] = f"{s.processes} plain processes, {how}"
    else:
        record = {**run_scenario(s, state_path=state_path)}
        record["per_process_hardware"] = _gather_hardware()
    if jax.process_index() == 0:
        records.write_json_atomic(out_file, record)
    jax.distributed.shutdown()
    return 0 if record["status"] == "ok" else 1


def _gather_hardware() -> list[dict[str, Any]]:
    """Every process's CPU facts, gathered through the coordinator's key-value store."""
    import jax
    from jax._src import distributed

    client = distributed.global_state.client
    assert client is not None, "jax.distributed is not initialised"
    me = jax.process_index()
    info = dict(
        environment.cpu_info(),
        process_index=me,
        hostname=socket.gethostname(),
        local_devices=[str(d) for d in jax.local_devices()],
    )
    client.key_value_set(f"odestudy/hw/{me}", json.dumps(info))
    return [
        json.loads(client.blocking_key_value_get(f"odestudy/hw/{i}", 60_000))
        for i in range(jax.process_count())
    ]


def run_scenario_any(s: Scenario, out_dir: str | None = None) -> Record:
    """Run a scenario in this process, or in several when `s.processes > 1`; a profiler
    trace goes to `out_dir/trace`, the trained state for repeats into `out_dir`."""
    state_path = Path(out_dir) / STATE_NAME if out_dir else None
    if s.processes > 1:
        return launch(s, state_path=state_path)

    trace_dir = str(Path(out_dir) / "trace") if (s.trace and out_dir) else None
    return run_scenario(s, trace_dir=trace_dir, state_path=state_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="odestudy multi-process worker")
    add = parser.add_argument
    add("--scenario", dest="scenario_file", required=True, help="scenario JSON file")
    add("--out", dest="out_file", required=True, help="record file (process 0 writes)")
    add("--coordinator", help="host:port; none under SLURM")
    add("--num-processes", type=int)
    add("--process-id", type=int)
    add("--parent-pid", type=int, help="the local launcher's PID; the worker exits if it dies")
    add("--state", dest="state_path", help="where process 0 saves the trained state (repeats)")
    add("--repeat", dest="repeat_dir", help="time a repeat from the trained state saved here")
    return worker(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
