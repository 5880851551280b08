"""Repeated runs of a scenario: more step-time samples taken at other times.

The first run of a scenario is a fresh kernel that trains and compiles from cold, and
saves its trained parameters and optimiser state (`STATE_NAME`). A repeat times
`REPEAT_STEPS` more full-length training steps from that trained state; it compiles
the same step again, reading the persistent compilation cache the cold run wrote, and
contributes only its step times: compile time, final loss and runtime stay those of
the cold run.

Repeats of one-process scenarios run in a plain process per device count and round
(`run_repeat_round`: one process times every scenario of that device count once);
those of multi-process scenarios in their processes, joined again
(`repeat_processes`).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import records

REPEATS = 3  # runs per timed scenario: the cold run and two repeats
REPEAT_STEPS = 40  # timed steps per repeat (after the scenario's warm-up steps)
CACHE_DIR = ".jax_cache"  # per scenario, beside its record (ignored by git)
STATE_NAME = ".repeat_state.npz"  # the cold run's trained state (ignored by git)
# The cold run's compiled last-stage step, one per process (ignored by git).
EXEC_NAME = ".repeat_step.{process}.bin"
DATA_DIR = ".data"  # generated data sets, per scale folder (ignored by git)


def cache_environment(out_dir: str | os.PathLike) -> dict[str, str]:
    """Environment variables for a kernel that runs the scenario whose record lives in
    `out_dir`: JAX's persistent compilation cache of that scenario, and the data set
    cache of its scale folder (`data.cached_dataset`)."""
    out_dir = Path(out_dir).resolve()
    return {"JAX_COMPILATION_CACHE_DIR": str(out_dir / CACHE_DIR),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
            "ODESTUDY_DATA_CACHE": str(out_dir.parent / DATA_DIR)}


def clear_cache(out_dir: str | os.PathLike) -> None:
    """Remove the scenario's compilation cache, saved state and compiled step, so that
    the next run compiles cold and trains from the start."""
    shutil.rmtree(Path(out_dir) / CACHE_DIR, ignore_errors=True)
    Path(out_dir, STATE_NAME).unlink(missing_ok=True)
    for path in Path(out_dir).glob(EXEC_NAME.format(process="*")):
        path.unlink(missing_ok=True)


def save_executable(state_path: str | os.PathLike, payload: bytes, process: int = 0
                    ) -> None:
    """Write the cold run's serialized step (`training.serialize_step`) beside its saved
    state, as `EXEC_NAME` of JAX process `process`, atomically; a repeat then runs that
    very executable instead of tracing the step again (seconds per repeat)."""
    path = Path(state_path).with_name(EXEC_NAME.format(process=process))
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)


def load_executable(out_dir: str | os.PathLike, params: Any, opt_state: Any,
                    placed: tuple) -> Any | None:
    """The compiled step that `save_executable` saved in `out_dir` for this JAX process,
    loaded for arguments shaped like `(params, opt_state, *placed)` (placed on the
    step's devices); None where there is none or it does not load."""
    import jax

    path = Path(out_dir) / EXEC_NAME.format(process=jax.process_index())
    if not path.exists():
        return None
    from jax.experimental.serialize_executable import deserialize_and_load

    in_tree = jax.tree.structure(((params, opt_state, *placed), {}))
    out_tree = jax.tree.structure((params, opt_state, 0, 0))
    try:
        return deserialize_and_load(path.read_bytes(), in_tree, out_tree)
    except Exception:  # noqa: BLE001 - a stale or foreign file: compile instead
        return None


def save_state(path: str | os.PathLike, params: Any, opt_state: Any) -> None:
    """Write host copies of trained `params` and `opt_state` to `path` (npz, atomic)."""
    import jax

    leaves = [np.asarray(x) for x in jax.tree.leaves((params, opt_state))]
    path = Path(path)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, *leaves)
    os.replace(tmp, path)


def load_state(path: str | os.PathLike, params: Any, opt_state: Any) -> tuple[Any, Any]:
    """The `(params, opt_state)` saved at `path`, in the tree structure of the given
    `params` and `opt_state` (for example a fresh model's and optimiser's)."""
    import jax

    treedef = jax.tree.structure((params, opt_state))
    with np.load(path) as f:
        leaves = [f[f"arr_{i}"] for i in range(len(f.files))]
    return jax.tree.unflatten(treedef, leaves)


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
    out["repeat_how"] = repeat.get("repeat_how", "fresh kernel, full training")
    return out


def time_repeat(s, out_dir: str | os.PathLike, timed_steps: int = REPEAT_STEPS
                ) -> dict[str, Any]:
    """Time `timed_steps` full-length training steps of scenario `s` in this process,
    from the trained state its cold run saved in `out_dir`, after `s.warmup_steps`
    untimed ones. JAX must already run on `s`'s devices (`configure_devices`; for a
    multi-process scenario, in every process joined by `jax.distributed`).

    The step is the cold run's own executable where it saved one (`load_executable`),
    else compiled again through the cold run's persistent compilation cache.

    Returns a repeat record for `merge_runs`; a failure gives status "failed".
    """
    from .batching import batch_stream, solver_cost
    from .compat import use_compilation_cache
    from .data import N_TIMES
    from .timing import run_steps
    from .training import prepare, read_loss, scenario_devices

    out_dir = Path(out_dir)
    result: dict[str, Any] = {"scenario_key": s.key(), "name": s.name(),
                              "repeat_how": f"plain process, {timed_steps} steps from "
                                            "the cold run's trained state"}
    try:
        cached = use_compilation_cache(str((out_dir / CACHE_DIR).resolve()))
        setup = prepare(s, scenario_devices(s))
        step = setup.step
        host = load_state(out_dir / STATE_NAME, step.unplace(setup.params),
                          step.unplace(setup.opt_state))
        params, opt_state = step.place_state(*host)
        length = max(2, int(N_TIMES * s.length_fractions[-1]))
        data = setup.data.truncate(length)
        cost = solver_cost(setup.data) if s.batching == "grouped" else None
        batches = batch_stream(len(data), s.global_batch, s.seed + 1, cost)

        def placed_batches():
            while True:
                yield step.place_batch(*_batch(data, next(batches)))

        stream = placed_batches()
        first = next(stream)
        t0 = time.perf_counter()
        compiled = load_executable(out_dir, params, opt_state, first)
        how = "the cold run's executable"
        if compiled is None:
            compiled = step.compile(params, opt_state, *first)
            how = "compiled again (persistent cache)"
        compile_time = time.perf_counter() - t0

        def steps():
            yield first
            yield from stream

        run = run_steps(compiled, params, opt_state, steps(),
                        s.warmup_steps + timed_steps, s.warmup_steps,
                        where="repeat step", read_loss=read_loss)
        times = run.times
        result.update(status="ok", error=None, compile_time_s=compile_time,
                      compile_cache_used=cached, step_from=how,
                      step_time_runs_s=[float(np.median(times))],
                      step_times_runs_s=[times])
    except Exception as exc:  # a failed repeat is recorded, the round goes on
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    result["finished"] = records.now()
    return result


def _batch(data, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return data.ts[idx], data.ys[idx]


def worker(job_path: str | os.PathLike) -> int:
    """Run a job file written by `run_repeat_round`: configure the devices, time every
    listed scenario once, and write each result (JSON, atomically) as it finishes."""
    from .config import Scenario
    from .devices import configure_devices

    job = json.loads(Path(job_path).read_text())
    configure_devices(job["device"], job["n_devices"])
    for item in job["items"]:
        s = Scenario.from_dict(item["scenario"])
        result = time_repeat(s, item["out_dir"], job["timed_steps"])
        records.write_json_atomic(Path(item["result"]), result)
    return 0


def run_repeat_round(items: list[tuple[Any, Path]], timed_steps: int = REPEAT_STEPS
                     ) -> list[dict[str, Any]]:
    """Repeat every `(scenario, out_dir)` of `items` once, in one plain process (all
    items share a device kind and count), and merge each into its record.

    Returns the updated records, in order; a scenario whose repeat failed or did not
    finish keeps its record with the error added under `repeat_errors`.
    """
    from .devices import child_environment

    if not items:
        return []
    first = items[0][0]
    if any((s.device, s.n_devices, s.processes) != (first.device, first.n_devices, 1)
           for s, _ in items):
        raise ValueError("a repeat round runs one device kind and count, one process")
    with tempfile.TemporaryDirectory(prefix="odestudy-repeat-") as tmp:
        job = {"device": first.device, "n_devices": first.n_devices,
               "timed_steps": timed_steps,
               "items": [{"scenario": s.to_dict(), "out_dir": str(Path(d).resolve()),
                          "result": str(Path(tmp) / f"{i}.json")}
                         for i, (s, d) in enumerate(items)]}
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = child_environment(first.device, first.n_devices)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # set per scenario by the worker
        env["ODESTUDY_DATA_CACHE"] = str(Path(items[0][1]).resolve().parent / DATA_DIR)
        done = subprocess.run([sys.executable, "-m", "odestudy.repeats", str(job_path)],
                              env=env, capture_output=True, text=True)
        merged = []
        for (s, out_dir), item in zip(items, job["items"], strict=True):
            try:
                repeat = json.loads(Path(item["result"]).read_text())
            except (OSError, ValueError):
                tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
                repeat = {"scenario_key": s.key(), "status": "failed",
                          "error": f"repeat process exited with {done.returncode} "
                                   f"before this scenario: {tail[0]}"}
            path = Path(out_dir) / records.RECORD_NAME
            record = records.read_record(path)
            out = merge_runs(record, repeat)
            records.write_json_atomic(path, out)
            merged.append(out)
    return merged


def repeat_processes(s, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Repeat multi-process scenario `s` once: its processes, joined again by
    `jax.distributed`, time `REPEAT_STEPS` steps from the trained state its cold run
    saved in `out_dir` (`time_repeat`); merges the step times into the record there and
    returns it (written atomically)."""
    from .distributed import launch

    out_dir = Path(out_dir)
    path = out_dir / records.RECORD_NAME
    record = records.read_record(path)
    env = cache_environment(out_dir)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the workers inherit the scenario's caches
    try:
        repeat = launch(s, repeat_dir=out_dir)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    merged = merge_runs(record, repeat)
    records.write_json_atomic(path, merged)
    return merged


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
