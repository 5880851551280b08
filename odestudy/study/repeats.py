"""Repeated runs of a scenario: more step-time samples taken at other times.

A repeat times `REPEAT_STEPS` more full-length steps from the trained state the cold run
saved, compiling from its persistent cache; it adds only its step times. One-process
scenarios repeat in a plain process per device count and round (`run_repeat_round`),
multi-process ones in their processes, joined again (`repeat_processes`).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..measure.data import DATA_CACHE_ENV
from ..measure.devices import child_environment, configure_devices
from ..measure.record import Record
from ..measure.resume import REPEAT_STEPS, time_repeat
from ..measure.scenario import Scenario
from ..measure.state import CACHE_DIR, EXEC_NAME, STATE_NAME
from ..measure.timing import pooled
from . import records
from .distributed import die_with_parent, launch
from .lock import measuring
from .runner import environ

REPEATS = 3  # runs per timed scenario: the cold run and two repeats
DATA_DIR = ".data"  # generated data sets, per scale folder (ignored by git)


def data_cache(out_dir: str | os.PathLike) -> str:
    """The data set cache of the scenario whose record lives in `out_dir`:
    `ODESTUDY_DATA_CACHE` where set, else its scale folder's."""
    return os.environ.get(DATA_CACHE_ENV) or str(Path(out_dir).resolve().parent / DATA_DIR)


def cache_environment(out_dir: str | os.PathLike) -> dict[str, str]:
    """A kernel's variables for the scenario whose record lives in `out_dir`: its JAX
    compilation cache and the data set cache."""
    out_dir = Path(out_dir).resolve()
    return {
        "JAX_COMPILATION_CACHE_DIR": str(out_dir / CACHE_DIR),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        DATA_CACHE_ENV: data_cache(out_dir),
    }


def clear_cache(out_dir: str | os.PathLike) -> None:
    """Remove the scenario's compilation cache, saved state and compiled step, so that
    the next run compiles cold and trains from the start."""
    shutil.rmtree(Path(out_dir) / CACHE_DIR, ignore_errors=True)
    Path(out_dir, STATE_NAME).unlink(missing_ok=True)
    for path in Path(out_dir).glob(EXEC_NAME.format(process="*")):
        path.unlink(missing_ok=True)


def runs(record: Mapping[str, Any]) -> int:
    """How many runs' step times a record holds (records before repeats: 1)."""
    return len(record.get("step_time_runs_s") or [record.get("step_time_s")])


def merge_runs(record: Mapping[str, Any], repeat: Mapping[str, Any]) -> Record:
    """`record` with the step times of `repeat` added, pooled over all runs; a failed
    repeat adds its error (`repeat_errors`)."""
    out: dict[str, Any] = {**record}
    if repeat.get("scenario_key") != record.get("scenario_key"):
        raise ValueError("a repeat of another scenario cannot be merged")
    if repeat.get("status") != "ok":
        out["repeat_errors"] = [*record.get("repeat_errors", []), repeat.get("error")]
        return Record(out)
    out["step_times_runs_s"] = [*record["step_times_runs_s"], repeat["step_times_runs_s"][0]]
    # Per run: what the host did (`measure.host`) and the mean solver steps per sample;
    # None for runs made before records kept them.
    for key in ("host_runs", "solver_steps_runs"):
        earlier = record.get(key) or [None] * len(record["step_times_runs_s"])
        out[key] = [*earlier, (repeat.get(key) or [None])[0]]
    out.update(pooled(out["step_times_runs_s"]))
    out["epoch_time_s"] = out["step_time_s"] * record["dataset_size"] / record["global_batch"]
    out["runs_finished"] = [
        *record.get("runs_finished", [record.get("finished")]),
        repeat.get("finished"),
    ]
    out["repeat_compile_time_s"] = [
        *record.get("repeat_compile_time_s", []),
        repeat.get("compile_time_s"),
    ]
    out["repeat_how"] = repeat.get("repeat_how", "fresh kernel, full training")
    return Record(out)


def worker(job_path: str | os.PathLike) -> int:
    """Run a job file of `run_repeat_round`: time every listed scenario once, each result
    written as it finishes."""
    die_with_parent()
    job = json.loads(Path(job_path).read_text())
    configure_devices(job["device"], job["devices_per_process"])
    for item in job["items"]:
        s = Scenario.from_dict(item["scenario"])
        result = time_repeat(s, item["out_dir"], job["timed_steps"])
        records.write_json_atomic(Path(item["result"]), result)
    return 0


def run_repeat_round(
    items: list[tuple[Any, Path]], timed_steps: int = REPEAT_STEPS
) -> list[Record]:
    """Repeat every `(scenario, out_dir)` of `items` (of one device kind and count) once,
    in one plain process, and merge each into its record; returns them, in order."""
    if not items:
        return []
    first = items[0][0]
    if any(
        (s.device, s.devices_per_process, s.processes)
        != (first.device, first.devices_per_process, 1)
        for s, _ in items
    ):
        raise ValueError("a repeat round runs one device kind and count, one process")
    with tempfile.TemporaryDirectory(prefix="odestudy-repeat-") as tmp:
        job = {
            "device": first.device,
            "devices_per_process": first.devices_per_process,
            "timed_steps": timed_steps,
            "items": [
                {
                    "scenario": s.to_dict(),
                    "out_dir": str(Path(d).resolve()),
                    "result": str(Path(tmp) / f"{i}.json"),
                }
                for i, (s, d) in enumerate(items)
            ],
        }
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = child_environment(first.device, first.devices_per_process)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # set per scenario by the worker
        env[DATA_CACHE_ENV] = data_cache(items[0][1])
        with measuring(f"repeat round of {len(items)} scenario(s)"):
            done = subprocess.run(
                [sys.executable, "-m", "odestudy.study.repeats", str(job_path)],
                env=env,
                capture_output=True,
                text=True,
            )
        merged = []
        for (s, out_dir), item in zip(items, job["items"], strict=True):
            try:
                repeat = json.loads(Path(item["result"]).read_text())
            except (OSError, ValueError):
                tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
                repeat = {
                    "scenario_key": s.key(),
                    "status": "failed",
                    "error": f"repeat process exited with {done.returncode} "
                    f"before this scenario: {tail[0]}",
                }
            path = Path(out_dir) / records.RECORD_NAME
            record = records.read_record(path)
            out = merge_runs(record, repeat)
            records.write_json_atomic(path, out)
            merged.append(out)
    return merged


def repeat_processes(s: Scenario, out_dir: str | os.PathLike) -> Record:
    """Repeat multi-process scenario `s` once, its processes joined again, and merge the
    step times into its record in `out_dir`; returns it."""
    out_dir = Path(out_dir)
    path = out_dir / records.RECORD_NAME
    record = records.read_record(path)
    # The workers inherit the scenario's caches.
    with measuring(f"repeat of {s.name()}"), environ({**os.environ, **cache_environment(out_dir)}):
        repeat = launch(s, repeat_dir=out_dir)
    merged = merge_runs(record, repeat)
    records.write_json_atomic(path, merged)
    return merged


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
