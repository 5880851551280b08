"""The machine's own ceiling for weak scaling: two independent 1-device trainings on
one machine at once, against one alone.

No mode can scale better than the machine lets two independent programs run side by
side (shared cores, caches, memory bandwidth, thread pools). One ceiling run starts
three plain processes that each load the trained 1-device scenario
(`repeats.time_repeat`), then time `CEILING_STEPS` steps in phases behind barriers:
`alone` (process 0), `paired` (processes 0 and 1), `one_core` (process 2, pinned to one
core: whether one device alone is slowed by spreading its work over both cores).

The ceiling is `t(alone) / t(paired)`: the best weak-scaling efficiency this machine
allows any mode. A run is appended per matrix round to the record of its controller and
step (`records.ceiling_path`), pooled while the probe's cold run is the same.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..measure import environment
from ..measure.devices import child_environment, configure_devices
from ..measure.scenario import Scenario
from ..measure.timing import PROTOCOL, measurement_env
from . import records
from .distributed import die_with_parent
from .lock import measuring
from .records import ceiling_path
from .repeats import cache_environment, time_repeat

CEILING_STEPS = 40  # timed steps per process and phase (as many as a repeat)
PHASES = (("alone", (0,)), ("paired", (0, 1)), ("one_core", (2,)))
BARRIER_TIMEOUT_S = 300


def _wait_for(path: Path, timeout_s: float = BARRIER_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {path.name} not reached in {timeout_s:.0f} s")
        time.sleep(0.005)


def worker(job_path: str | os.PathLike, rank: int) -> int:
    """One process of a ceiling run: the phases that name `rank`, each behind a barrier
    file; writes its times."""
    die_with_parent()
    job = json.loads(Path(job_path).read_text())
    work = Path(job_path).parent
    configure_devices("cpu", 1)

    s = Scenario.from_dict(job["scenario"])
    out: dict[str, Any] = {"rank": rank, "phases": {}}
    (work / f"ready{rank}").touch()
    for number, (_, ranks) in enumerate(PHASES):
        _wait_for(work / f"go{number}")
        if rank in ranks:
            result = time_repeat(s, job["out_dir"], job["steps"])
            if result["status"] != "ok":
                raise RuntimeError(result["error"])
            out["phases"][str(number)] = result["step_times_runs_s"][0]
        (work / f"done{number}.{rank}").touch()
    records.write_json_atomic(work / f"times{rank}.json", out)
    return 0


def _pinned() -> None:
    """In a ceiling worker before it starts: run on one core."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_ceiling(
    s: Scenario,
    out_dir: str | os.PathLike,
    scale_folder: str | os.PathLike,
    steps: int = CEILING_STEPS,
) -> dict[str, Any]:
    """Run one ceiling measurement for the trained 1-device scenario `s` (in `out_dir`)
    and append it, failed or not, to its ceiling record in `scale_folder`; returns it."""
    if s.total_devices != 1 or s.parallel.multi_device:
        raise ValueError("the ceiling runs 1-device scenarios (mode 'single')")
    path = ceiling_path(scale_folder, s.controller, s.step_tag())
    env = {**child_environment("cpu", 1), **cache_environment(out_dir)}
    rec = _ceiling_record(s, out_dir, path, env, steps)
    run: dict[str, Any] = {"started": environment.now()}
    with (
        measuring(f"machine ceiling, {s.controller}"),
        tempfile.TemporaryDirectory(prefix="odestudy-ceiling-") as tmp,
    ):
        try:
            run.update(_phase_times(s, Path(tmp), out_dir, env, steps), status="ok")
        except Exception as exc:  # recorded; the matrix goes on
            run.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    run["finished"] = environment.now()
    rec["runs"] = [*rec.get("runs", []), run]
    records.write_json_atomic(path, rec)
    return rec


def _ceiling_record(
    s: Scenario, out_dir: str | os.PathLike, path: Path, env: dict[str, str], steps: int
) -> dict[str, Any]:
    """The ceiling record at `path` to append a run to: its runs kept while the probe's
    cold run, machine, versions, protocol and measurement environment are the same."""
    rec = records.read_or(path, {})
    probe = records.read_or(Path(out_dir) / records.RECORD_NAME, {}, records.read_record)
    probe_run_id = probe.get("run_id")
    here = {
        "probe_run_id": probe_run_id,
        "scenario_key": s.key(),
        "name": s.name(),
        "scenario": s.to_dict(),
        "protocol": PROTOCOL,
        "measurement_env": measurement_env(env),
        "machine_id": environment.machine_id(environment.this_machine()),
        "versions": environment.versions(),
    }
    if any(rec.get(k) != v for k, v in here.items()):
        rec = dict(here, runs=[])
    rec.update(
        here,
        **environment.provenance(),
        hardware=environment.cpu_info(),
        phases=[name for name, _ in PHASES],
        steps=steps,
    )
    return rec


def _phase_times(
    s: Scenario, work: Path, out_dir: str | os.PathLike, env: dict[str, str], steps: int
) -> dict[str, list]:
    """Run the three ceiling processes in `work` through every phase; each phase's times."""
    job = work / "job.json"
    job.write_text(
        json.dumps(
            {"scenario": s.to_dict(), "out_dir": str(Path(out_dir).resolve()), "steps": steps}
        )
    )
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(3):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "odestudy.study.ceiling", str(job), str(rank)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    preexec_fn=_pinned if rank == 2 else None,
                )
            )  # fmt: skip
        for rank in range(3):
            _wait_for(work / f"ready{rank}")
        for number in range(len(PHASES)):
            (work / f"go{number}").touch()
            for rank in range(3):
                _wait_for(work / f"done{number}.{rank}")
        for p in procs:
            _, err = p.communicate(timeout=BARRIER_TIMEOUT_S)
            if p.returncode:
                raise RuntimeError(
                    f"ceiling process exited with {p.returncode}: "
                    + ((err or "").strip().splitlines() or ["?"])[-1]
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    times = [json.loads((work / f"times{r}.json").read_text()) for r in range(3)]
    out: dict[str, list] = {}
    for number, (name, ranks) in enumerate(PHASES):
        out.setdefault(name, []).extend(times[r]["phases"][str(number)] for r in ranks)
    return out


def last_ceiling(rec: dict[str, Any]) -> float | None:
    """The last ceiling run's median `t(alone) / t(paired)` (no interval: for progress
    lines; the report bootstraps the interval over all runs)."""
    last = (rec.get("runs") or [{}])[-1]
    if last.get("status") != "ok":
        return None
    alone = np.median(np.concatenate([np.asarray(t, float) for t in last["alone"]]))
    paired = np.median(np.concatenate([np.asarray(t, float) for t in last["paired"]]))
    return float(alone / paired)


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1], int(sys.argv[2])))
