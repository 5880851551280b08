"""Repeated runs of a scenario: more step-time samples taken at other times.

The first run of a scenario is a fresh kernel that trains and compiles from cold. A
repeat runs the scenario again in a fresh kernel that reads its compiled programs from
the persistent compilation cache the first run wrote (so it skips most compile time),
and contributes only its step times: compile time, final loss and runtime stay those
of the cold run.
"""

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from . import records

REPEATS = 3  # runs per timed scenario: the cold run and two repeats
CACHE_DIR = ".jax_cache"  # per scenario, beside its record (ignored by git)


def cache_environment(out_dir: str | Path) -> dict[str, str]:
    """Environment variables that make a kernel read and write the persistent
    compilation cache of the scenario whose record lives in `out_dir`."""
    return {"JAX_COMPILATION_CACHE_DIR": str(Path(out_dir).resolve() / CACHE_DIR),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}


def clear_cache(out_dir: str | Path) -> None:
    """Remove the scenario's compilation cache, so that the next run compiles cold."""
    shutil.rmtree(Path(out_dir) / CACHE_DIR, ignore_errors=True)


def runs(record: dict[str, Any]) -> int:
    """How many runs' step times a record holds (records before repeats: 1)."""
    return len(record.get("step_time_runs_s") or [record.get("step_time_s")])


def merge_runs(record: dict[str, Any], repeat: dict[str, Any]) -> dict[str, Any]:
    """`record` with the step times of `repeat` (another run of the same scenario) added.

    `step_time_runs_s` gets the repeat's median; `step_time_s` and its quartiles become
    those of all runs' step times pooled. A failed repeat adds nothing but its error
    (under `repeat_errors`).
    """
    out = dict(record)
    if repeat.get("scenario_key") != record.get("scenario_key"):
        raise ValueError("a repeat of another scenario cannot be merged")
    if repeat.get("status") != "ok":
        out["repeat_errors"] = [*record.get("repeat_errors", []), repeat.get("error")]
        return out
    out["step_time_runs_s"] = [*record["step_time_runs_s"], repeat["step_time_runs_s"][0]]
    out["step_times_runs_s"] = [*record["step_times_runs_s"],
                                repeat["step_times_runs_s"][0]]
    pooled = np.concatenate([np.asarray(t, float) for t in out["step_times_runs_s"]])
    out["step_time_s"] = float(np.median(pooled))
    out["step_time_p25_s"] = float(np.percentile(pooled, 25))
    out["step_time_p75_s"] = float(np.percentile(pooled, 75))
    out["epoch_time_s"] = out["step_time_s"] * record["dataset_size"] / record["global_batch"]
    out["runs_finished"] = [*record.get("runs_finished", [record.get("finished")]),
                            repeat.get("finished")]
    out["repeat_compile_time_s"] = [*record.get("repeat_compile_time_s", []),
                                    repeat.get("compile_time_s")]
    return out


def repeat_scenario(s, out_dir: str | Path) -> dict[str, Any]:
    """Run scenario `s` once more (fresh kernel, cached compiles) and merge its step
    times into the record in `out_dir`; returns the updated record (written
    atomically). The repeat's own files go to a temporary subfolder, then away."""
    from .runner import execute_scenario

    out_dir = Path(out_dir)
    path = out_dir / records.RECORD_NAME
    record = records.read_record(path)
    tmp = out_dir / f"repeat{runs(record) + 1}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        repeat = execute_scenario(s, tmp, extra_env=cache_environment(out_dir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    merged = merge_runs(record, repeat)
    records.write_json_atomic(path, dict(merged, code_version=record.get("code_version")))
    return merged
