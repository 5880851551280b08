"""Where a training step's time goes: one device's step time against the batch size on a
trained model, as a fixed cost per solver iteration plus a cost per sample-iteration."""

import time
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .config import Scenario, validate
from .parallel import make_parallel_step
from .training import environment, scenario_devices, train


def _flops(compiled) -> float | None:
    """FLOPs of a compiled program from XLA's cost analysis (a while loop's body is
    counted once, whatever its trip count), or None where the backend gives none."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    value = (cost or {}).get("flops")
    return float(value) if value is not None else None


def fit_per_iteration(batches: list[int], per_iteration_s: list[float]) -> dict[str, float]:
    """Least-squares line `time per solver iteration = fixed + per_sample * batch`.

    - `batches`: batch sizes; `per_iteration_s`: step time / executed solver iterations.
    """
    b = np.asarray(batches, dtype=float)
    y = np.asarray(per_iteration_s, dtype=float)
    if len(b) < 2 or np.ptp(b) == 0:
        raise ValueError("need at least two different batch sizes to fit a line")
    slope, intercept = np.polyfit(b, y, 1)
    pred = intercept + slope * b
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2)) or 1e-30
    return {"fixed_per_iteration_s": float(intercept),
            "per_sample_iteration_s": float(slope), "r2": 1 - ss_res / ss_tot}


def step_cost_sweep(s: Scenario, batches: tuple[int, ...], timed_steps: int = 20,
                    warmup_steps: int = 3, seed: int = 0) -> dict[str, Any]:
    """Train `s` (one device), then time the training step of the trained model at each
    batch size, the model held fixed (every step starts from the trained parameters).

    - `s`: a one-device scenario (`mode="single"`); its training sets the model.
    - `batches`: batch sizes to time (random samples of the training set, with
      replacement where a batch exceeds it).
    - `timed_steps`, `warmup_steps`: steps timed (each waited for) and steps discarded.
    - `seed`: the batch sampler's seed.

    Returns a record: the trained scenario's final loss, and per batch the compile
    time, median step time with quartiles, executed solver iterations (the batch's
    slowest sample) and FLOPs from the compiled program; plus the fitted line.
    """
    validate(s)
    if s.mode != "single" or s.total_devices != 1:
        raise ValueError(f"the step-cost sweep runs mode 'single' on 1 device, got "
                         f"{s.mode!r} on {s.total_devices}")
    if any(b < 1 for b in batches) or len(set(batches)) < 2:
        raise ValueError(f"batches must be >= 1 with at least two sizes, got {batches}")
    devices = scenario_devices(s)
    state: dict[str, Any] = {}
    trained = train(s, devices, state_out=state)
    params, static = eqx.partition(state["model"], eqx.is_array)
    optimiser, data = state["optimiser"], state["data"]
    rng = np.random.default_rng(seed)
    rows = []
    for batch in batches:
        step = make_parallel_step("single", devices, static, optimiser, s.controller,
                                  s.solve)
        p, o = step.place_state(params, optimiser.init(params))

        def sample(batch=batch, step=step):
            idx = rng.choice(len(data), batch, replace=batch > len(data))
            return step.place_batch(data.ts[idx], data.ys[idx])

        placed = sample()
        t0 = time.perf_counter()
        compiled = step.compile(p, o, *placed)
        compile_time = time.perf_counter() - t0
        times, iterations = [], []
        for i in range(warmup_steps + timed_steps):
            placed = jax.block_until_ready(sample())
            t0 = time.perf_counter()
            out = jax.block_until_ready(compiled(p, o, *placed))
            elapsed = time.perf_counter() - t0
            if i >= warmup_steps:
                times.append(elapsed)
                iterations.append(int(np.max(np.asarray(out[3]))))
        median = float(np.median(times))
        executed = float(np.mean(iterations))
        rows.append({"batch": batch, "compile_time_s": compile_time,
                     "step_time_s": median,
                     "step_time_p25_s": float(np.percentile(times, 25)),
                     "step_time_p75_s": float(np.percentile(times, 75)),
                     "step_times_s": times, "iterations_executed": executed,
                     "per_iteration_s": median / executed,
                     "flops_cost_analysis": _flops(compiled)})
    fit = fit_per_iteration([r["batch"] for r in rows], [r["per_iteration_s"] for r in rows])
    return {"scenario": s.to_dict(), "final_loss": trained["final_loss"],
            "device_kind": trained["device_kind"], "rows": rows, "fit": fit,
            **environment(s)}
