"""Resume a trained scenario: a cold run saves its trained state (`STATE_NAME`) and
last stage's compiled step (`EXEC_NAME`) beside its record; `time_repeat` loads both in
another process and times `REPEAT_STEPS` more full-length steps (`timing.run_steps`)."""

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import environment
from .compat import use_compilation_cache
from .data import batch_stream, solver_cost
from .problem import stage_lengths
from .state import CACHE_DIR, STATE_NAME, load_executable, load_state
from .timing import run_steps
from .training import placed_batches, prepare, read_loss, scenario_devices

REPEAT_STEPS = 40  # timed steps per repeat (after the scenario's warm-up steps)


def repeat_batches(s, step: Any, problem: Any, data: Any) -> Iterator[Any]:
    """The placed batches a repeat trains on: series of `data` at the last stage's length,
    drawn by a stream of its own (seed + 1), keys numbered on from the cold run's. `tune`
    times its candidates on the same ones, so that both commands time one quantity."""
    grid = np.asarray(problem.times(data))
    length = stage_lengths(grid.shape[1], s.length_fractions)[-1]
    data = problem.truncate(data, length, length)
    cost = solver_cost(grid) if s.batching == "grouped" else None
    batches = batch_stream(len(grid), s.global_batch, s.seed + 1, cost)
    start = s.steps_per_stage * len(s.length_fractions)
    yield from placed_batches(s, step, problem, data, batches, start)


def time_repeat(s, out_dir: str | os.PathLike, timed_steps: int = REPEAT_STEPS) -> dict[str, Any]:
    """Time `timed_steps` full-length training steps of scenario `s` in this process,
    from the trained state its cold run saved in `out_dir`, after `s.warmup_steps`
    untimed ones, with the cold run's own executable where it saved one (else compiled
    again through its compilation cache). JAX must already run on `s`'s devices.
    Returns a repeat record for `merge_runs` (status "failed" on a failure).
    """
    out_dir = Path(out_dir)
    result: dict[str, Any] = {
        "scenario_key": s.key(),
        "name": s.name(),
        "repeat_how": f"plain process, {timed_steps} steps from the cold run's trained state",
    }
    try:
        cached = use_compilation_cache(str((out_dir / CACHE_DIR).resolve()))
        setup = prepare(s, scenario_devices(s), check=False)  # its cold run checked it
        step = setup.step
        host = load_state(
            out_dir / STATE_NAME, step.unplace(setup.params), step.unplace(setup.opt_state)
        )
        params, opt_state = step.place_state(*host)
        stream = repeat_batches(s, step, setup.problem, setup.data)
        first = next(stream)
        t0 = time.perf_counter()
        compiled = load_executable(out_dir, params, opt_state, first)
        how = "the cold run's executable"
        if compiled is None:
            compiled = step.compile(params, opt_state, first)
            how = "compiled again (persistent cache)"
        compile_time = time.perf_counter() - t0

        run = run_steps(
            compiled,
            params,
            opt_state,
            itertools.chain([first], stream),
            s.warmup_steps + timed_steps,
            s.warmup_steps,
            where="repeat step",
            read_loss=read_loss,
        )
        times = run.times
        result.update(
            status="ok",
            error=None,
            compile_time_s=compile_time,
            compile_cache_used=cached,
            step_from=how,
            step_time_runs_s=[float(np.median(times))],
            step_times_runs_s=[times],
            host_runs=[run.host],
            solver_steps_runs=[
                float(np.mean([np.mean(step.per_sample(n)) for n in run.num_steps]))
            ],
        )
    except Exception as exc:  # a failed repeat is recorded, the round goes on
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    result["finished"] = environment.now()
    return result
