"""The machine's own ceiling for weak scaling: two independent 1-device trainings on
one machine at once, against one alone.

No mode can scale better than the machine lets two independent programs run side by
side (shared cores, caches, memory bandwidth, thread pools). One ceiling run starts
three plain processes that each load the trained 1-device scenario (its cold run's
state and executable, `repeats.time_repeat`), then time `CEILING_STEPS` steps in
phases separated by barriers:

1. `alone`: process 0 alone (the others wait);
2. `paired`: processes 0 and 1 together;
3. `one_core`: process 2 alone, started pinned to one core (`os.sched_setaffinity`,
   inherited by every thread XLA starts), which tells whether one device alone is
   slowed by spreading its work over both cores.

The ceiling is `t(alone) / t(paired)`: the best weak-scaling efficiency this machine
allows any mode. Results go to `results/<machine>/<scale>/ceiling/<controller>.json`, a
run appended per matrix round.
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

from . import records
from .config import Scenario

CEILING_STEPS = 40  # timed steps per process and phase (as many as a repeat)
PHASES = (("alone", (0,)), ("paired", (0, 1)), ("one_core", (2,)))
FOLDER = "ceiling"
BARRIER_TIMEOUT_S = 300


def ceiling_path(scale_folder: str | os.PathLike, controller: str) -> Path:
    """Where the ceiling runs of `controller` live in a machine's scale folder."""
    return Path(scale_folder) / FOLDER / f"{controller}.json"


def _wait_for(path: Path, timeout_s: float = BARRIER_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {path.name} not reached in {timeout_s:.0f} s")
        time.sleep(0.005)


def worker(job_path: str | os.PathLike, rank: int) -> int:
    """One process of a ceiling run (see the module docstring): set up, then take part
    in the phases that name `rank`, each behind a barrier file; writes its times."""
    from .devices import configure_devices

    job = json.loads(Path(job_path).read_text())
    work = Path(job_path).parent
    configure_devices("cpu", 1)
    from .repeats import time_repeat

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


def run_ceiling(s: Scenario, out_dir: str | os.PathLike, scale_folder: str | os.PathLike,
                steps: int = CEILING_STEPS) -> dict[str, Any]:
    """Run one ceiling measurement for the trained 1-device scenario `s` whose record
    and saved state are in `out_dir`, and append it to the ceiling record of its
    controller in `scale_folder`. Returns that record (written atomically); a failed
    run is appended with its error."""
    from .devices import child_environment
    from .repeats import cache_environment
    from .timing import PROTOCOL, measurement_env

    if s.total_devices != 1 or s.mode != "single":
        raise ValueError("the ceiling runs 1-device scenarios (mode 'single')")
    path = ceiling_path(scale_folder, s.controller)
    try:
        rec = records.read_record(path)
    except (OSError, ValueError):
        rec = {}
    env = {**child_environment("cpu", 1), **cache_environment(out_dir)}
    here = {"scenario_key": s.key(), "name": s.name(), "scenario": s.to_dict(),
            "protocol": PROTOCOL, "measurement_env": measurement_env(env),
            "machine_id": records.machine_id(records.this_machine()),
            "versions": records.versions()}
    if any(rec.get(k) != v for k, v in here.items()):
        rec = dict(here, runs=[])
    rec.update(here, git_commit=records.git_commit(), hardware=records.cpu_info(),
               phases=[name for name, _ in PHASES], steps=steps)
    run: dict[str, Any] = {"started": records.now()}
    with tempfile.TemporaryDirectory(prefix="odestudy-ceiling-") as tmp:
        work = Path(tmp)
        job = work / "job.json"
        job.write_text(json.dumps({"scenario": s.to_dict(),
                                   "out_dir": str(Path(out_dir).resolve()),
                                   "steps": steps}))
        procs = []
        try:
            for rank in range(3):
                pin = (lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
                       ) if rank == 2 else None
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "odestudy.ceiling", str(job), str(rank)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    text=True, preexec_fn=pin))
            for rank in range(3):
                _wait_for(work / f"ready{rank}")
            for number in range(len(PHASES)):
                (work / f"go{number}").touch()
                for rank in range(3):
                    _wait_for(work / f"done{number}.{rank}")
            for p in procs:
                _, err = p.communicate(timeout=BARRIER_TIMEOUT_S)
                if p.returncode:
                    raise RuntimeError(f"ceiling process exited with {p.returncode}: "
                                       + ((err or "").strip().splitlines() or ["?"])[-1])
            times = [json.loads((work / f"times{r}.json").read_text()) for r in range(3)]
            for number, (name, ranks) in enumerate(PHASES):
                run.setdefault(name, []).extend(
                    times[r]["phases"][str(number)] for r in ranks)
            run["status"] = "ok"
        except Exception as exc:  # recorded; the matrix goes on
            run.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    run["finished"] = records.now()
    rec["runs"] = [*rec.get("runs", []), run]
    records.write_json_atomic(path, rec)
    return rec


def ceiling_interval(rec: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The ceiling `t(alone) / t(paired)` of a ceiling record and `t(one_core) /
    t(alone)`, each `(estimate, low, high)` with a 95% hierarchical bootstrap interval
    (`intervals`; each process's phase is one run)."""
    from .intervals import ratio_interval

    ok = [r for r in rec.get("runs", []) if r.get("status") == "ok"]

    def as_record(phase: str) -> dict[str, Any]:
        runs = [t for r in ok for t in r.get(phase, [])]
        return {"step_times_runs_s": runs,
                "step_time_s": float(np.median(np.concatenate(runs))) if runs else None}

    if not ok:
        return {"runs": 0}
    alone, paired, one = (as_record(p) for p in ("alone", "paired", "one_core"))
    return {"runs": len(ok), "ceiling": ratio_interval(alone, paired, seed=seed),
            "one_core_vs_alone": ratio_interval(one, alone, seed=seed),
            "alone_s": alone["step_time_s"], "paired_s": paired["step_time_s"],
            "one_core_s": one["step_time_s"]}


def ceiling_for(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The ceiling record that goes with scenario record `rec` (read from `rec["path"]`'s
    scale folder): same controller, machine, package versions, protocol and
    measurement environment; None where there is none."""
    if not rec.get("path"):
        return None
    path = ceiling_path(Path(rec["path"]).parent.parent, rec.get("controller", ""))
    try:
        ceiling = records.read_record(path)
    except (OSError, ValueError):
        return None
    keys = ("machine_id", "versions", "protocol", "measurement_env")
    if any(ceiling.get(k) != rec.get(k) for k in keys):
        return None
    return ceiling


def efficiency_against_ceiling(base: dict[str, Any], rec: dict[str, Any],
                               ceiling: dict[str, Any], seed: int = 0
                               ) -> tuple[float, float, float] | None:
    """A weak-scaling row's efficiency `t(base) / t(rec)` divided by the machine's
    ceiling `t(alone) / t(paired)`: 1 means as good as two independent trainings side by
    side. `(estimate, low, high)` with a 95% interval, both ratios bootstrapped
    independently (`intervals.bootstrap_medians`); None without ceiling runs."""
    from .intervals import LEVEL, bootstrap_medians, step_time_runs

    ok = [r for r in ceiling.get("runs", []) if r.get("status") == "ok"]
    alone = [np.asarray(t, float) for r in ok for t in r.get("alone", [])]
    paired = [np.asarray(t, float) for r in ok for t in r.get("paired", [])]
    if not alone or not paired:
        return None
    b, r = step_time_runs(base), step_time_runs(rec)

    def med(runs: list[np.ndarray]) -> float:
        return float(np.median(np.concatenate(runs)))

    estimate = (med(b) / med(r)) / (med(alone) / med(paired))
    rng = np.random.default_rng(seed)
    samples = ((bootstrap_medians(b, rng) / bootstrap_medians(r, rng))
               / (bootstrap_medians(alone, rng) / bootstrap_medians(paired, rng)))
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return estimate, float(low), float(high)


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1], int(sys.argv[2])))
