"""Where a training step's time goes: one device's step time against the batch size on a
trained model, as a fixed cost per solver iteration plus a cost per sample-iteration;
the forward pass's share; FLOPs and bytes from XLA's cost analysis against this
machine's measured matmul rate and memory bandwidth; and a verdict on what bounds the
step.

A device's step with its neighbours busy (`inside_one_program`): N copies of the
1-device step inside one program (`jax.pmap` of its function, no collective), against
the same step alone, interleaved. Virtual CPU devices of one process share the machine's
cores, caches and runtime threads, so a device may run its share slower than one device
alone; `odestudy predict` charges a device's compute at the copies' time (not on GPUs).
One program, as a multi-device mode runs: N programs dispatched at once read far slower
where equinox's error checks put a host callback in every solve. With `modes`, each
mode's own step on the N devices (the batch repeated) is timed in the same rounds.
"""

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .compat import closure_convert_ignores_manual_sharding
from .loss import mean_value
from .modes import ParallelStep
from .scenario import Scenario, validate
from .step import make_parallel_step, study_loss
from .timing import interleaved, median_interval, median_time, run_steps
from .training import environment, load_trained, scenario_devices, step_key, train


def _cost(compiled, key: str = "flops") -> float | None:
    """`key` of a compiled program's XLA cost analysis (a loop body counted once), or None."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    value = (cost or {}).get(key)
    return float(value) if value is not None else None


def machine_rates(
    device: jax.Device,
    n: int = 1024,
    megabytes: int = 256,
    cache_kilobytes: int = 1024,
    cache_passes: int = 200,
) -> dict[str, float]:
    """What one device sustains: float32 matmul FLOP/s, memory bandwidth (an update of an
    array far larger than the caches) and cache bandwidth (a small one, in a loop)."""
    a = jax.device_put(np.random.default_rng(0).standard_normal((n, n), np.float32), device)
    matmul = jax.jit(lambda x: x @ x)
    flops = 2.0 * n**3 / median_time(matmul, a)
    x = jax.device_put(np.ones(megabytes * 2**20 // 4, np.float32), device)
    update = jax.jit(lambda v: v * 1.0001 + 1.0)
    bandwidth = 2.0 * x.nbytes / median_time(update, x)
    small = jax.device_put(np.ones(cache_kilobytes * 2**10 // 4, np.float32), device)
    passes = jax.jit(lambda v: jax.lax.fori_loop(0, cache_passes, lambda i, w: w * 1.0001 + 1.0, v))
    cache = 2.0 * small.nbytes * cache_passes / median_time(passes, small)
    return {
        "matmul_flops_per_s": flops,
        "memory_bytes_per_s": bandwidth,
        "cache_bytes_per_s": cache,
        "matmul_n": n,
        "memory_megabytes": megabytes,
        "cache_kilobytes": cache_kilobytes,
    }


def fit_per_iteration(batches: list[int], per_iteration_s: list[float]) -> dict[str, float]:
    """Least-squares line `time per solver iteration = fixed + per_sample * batch`."""
    b = np.asarray(batches, dtype=float)
    y = np.asarray(per_iteration_s, dtype=float)
    if len(b) < 2 or np.ptp(b) == 0:
        raise ValueError("need at least two different batch sizes to fit a line")
    slope, intercept = np.polyfit(b, y, 1)
    pred = intercept + slope * b
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2)) or 1e-30
    return {
        "fixed_per_iteration_s": float(intercept),
        "per_sample_iteration_s": float(slope),
        "r2": 1 - ss_res / ss_tot,
    }


def step_cost_sweep(
    s: Scenario,
    batches: tuple[int, ...],
    timed_steps: int = 20,
    warmup_steps: int = 3,
    seed: int = 0,
    trained_state: tuple[str | os.PathLike, float] | None = None,
    extras: bool = True,
    state_out: dict | None = None,
) -> dict[str, Any]:
    """Train one-device `s` (or start from `trained_state`, `(path, final_loss)`), then
    time the trained model's step at each batch size (random training samples, with
    replacement where a batch exceeds the set); with `extras`, the forward pass alone and
    this machine's rates too. `state_out` receives the trained state."""
    _check_sweep(s, batches)
    devices = scenario_devices(s)
    state: dict[str, Any] = {} if state_out is None else state_out
    trained: dict[str, Any]
    if trained_state is None:
        trained = dict(train(s, devices, state_out=state))
    else:
        trained = load_trained(s, devices, trained_state[0], state_out=state)
        trained["final_loss"] = trained_state[1]
    params, static = eqx.partition(state["model"], eqx.is_inexact_array)
    data, problem = state["data"], state["problem"]
    rng = np.random.default_rng(seed)
    loss = study_loss(s.ode_solve(problem))

    # The forward pass alone (the loss, no gradient), timed on the same batches.
    @jax.jit
    def forward(p, placed):
        batch, key = placed if problem.needs_key else (placed, None)
        return mean_value(loss(p, static, batch, key)[0])

    size = problem.size(data)
    keys = iter(range(1 << 30))

    def sample(step: ParallelStep, batch: int) -> Any:
        idx = rng.choice(size, batch, replace=batch > size)
        key = step_key(s, next(keys)) if problem.needs_key else None
        return step.place_batch(problem.take(data, idx), key)

    timing = (timed_steps, warmup_steps)
    rows = [
        _batch_row(s, devices, state, batch, sample, timing, forward if extras else None)
        for batch in batches
    ]  # fmt: skip
    fit = fit_per_iteration(
        [int(r["batch"]) for r in rows], [float(r["per_iteration_s"]) for r in rows]
    )
    return {
        "scenario": s.to_dict(),
        "final_loss": trained["final_loss"],
        "device_kind": trained["device_kind"],
        "rows": rows,
        "fit": fit,
        "rates": machine_rates(devices[0]) if extras else None,
        **environment(s),
    }


def _check_sweep(s: Scenario, batches: tuple[int, ...]) -> None:
    """Refuse a sweep of anything but one device, or of fewer than two batch sizes."""
    validate(s)
    if s.parallel.multi_device or s.total_devices != 1:
        raise ValueError(
            f"the step-cost sweep runs mode 'single' on 1 device, got "
            f"{s.mode!r} on {s.total_devices}"
        )
    if any(b < 1 for b in batches) or len(set(batches)) < 2:
        raise ValueError(f"batches must be >= 1 with at least two sizes, got {batches}")


def _batch_row(
    s: Scenario,
    devices: list,
    state: dict[str, Any],
    batch: int,
    sample: Callable[[ParallelStep, int], Any],
    timing: tuple[int, int],
    forward: Any = None,
) -> dict[str, Any]:
    """One batch's row of the sweep; with `forward`, the forward pass's share too."""
    timed_steps, warmup_steps = timing
    step, (p, o) = _placed_state(s, devices, state)
    placed = sample(step, batch)
    t0 = time.perf_counter()
    compiled = step.compile(p, o, placed)
    compile_time = time.perf_counter() - t0
    samples = [placed, *(sample(step, batch) for _ in range(warmup_steps + timed_steps - 1))]
    run = run_steps(
        compiled, p, o, samples, warmup_steps + timed_steps, warmup_steps, carry=False,
        where=f"batch {batch}, step",
    )  # fmt: skip
    times = run.times
    executed = float(np.mean([int(np.max(np.asarray(n))) for n in run.num_steps]))
    median = float(np.median(times))
    forward_s = same_batch_s = None
    if forward is not None:
        forward_compiled = forward.lower(p, samples[-1]).compile(step.compiler_options)
        forward_s = median_time(forward_compiled, p, samples[-1], repeats=timed_steps)
        same_batch_s = median_time(compiled, p, o, samples[-1], repeats=timed_steps)
    return {
        "batch": batch,
        "compile_time_s": compile_time,
        "forward_time_s": forward_s,
        "forward_share": forward_s / same_batch_s if forward_s and same_batch_s else None,
        "step_time_s": median,
        "step_time_p25_s": float(np.percentile(times, 25)),
        "step_time_p75_s": float(np.percentile(times, 75)),
        "step_times_s": times,
        "iterations_executed": executed,
        # Every sample's solver steps over the timed steps: the distribution the
        # lock-step term of a prediction draws device shares from.
        "per_sample_steps": np.concatenate([np.asarray(n).reshape(-1) for n in run.num_steps])
        .astype(int)
        .tolist(),
        "per_iteration_s": median / executed,
        "flops_cost_analysis": _cost(compiled, "flops"),
        "bytes_cost_analysis": _cost(compiled, "bytes accessed"),
    }


def _placed_state(s: Scenario, devices: list, state: dict[str, Any]) -> tuple[ParallelStep, Any]:
    """The step of `s` over `devices` and the trained `state` placed for it."""
    params, static = eqx.partition(state["model"], eqx.is_inexact_array)
    optimiser = state["optimiser"]
    step = make_parallel_step(s, devices, static, optimiser, problem=state["problem"])
    return step, step.place_state(params, optimiser.init(params))


def placed_step(s: Scenario, devices: list, state: dict[str, Any], batch: Any, key: Any) -> tuple:
    """`(step, compiled, args)`: the step of `s` over `devices`, its arguments placed."""
    step, placed = _placed_state(s, devices, state)
    args = (*placed, step.place_batch(batch, key))
    return step, step.compile(*args), args


def one_program(s: Scenario, n: int, state: dict[str, Any], batch: Any, key: Any) -> tuple:
    """The 1-device step of `s` on one CPU device and `n` copies of it inside one program
    on `n` (placed as the `pmap` mode places them), each compiled with its arguments."""
    devices = jax.devices("cpu")[:n]
    if len(devices) < n:
        raise ValueError(f"neighbours on {n} CPU devices needs them: {len(devices)} here")
    single, alone, alone_args = placed_step(s, devices[:1], state, batch, key)
    repeated = jax.tree.map(lambda x: np.concatenate([np.asarray(x)] * n), batch)
    pmap = dataclasses.replace(s, mode="pmap", devices_per_process=n)
    _, _, args = placed_step(pmap, devices, state, repeated, key)
    with closure_convert_ignores_manual_sharding():
        together = jax.pmap(single.fn, devices=devices).lower(*args).compile()
    return alone, alone_args, together, args


def _bound(compiled: Any, args: tuple) -> Callable[[], Any]:
    """`compiled` called on `args`, as a function of nothing."""
    return lambda: compiled(*args)


def real_steps(
    s: Scenario, n: int, state: dict[str, Any], batch: Any, key: Any, modes: tuple[str, ...]
) -> dict[str, tuple[Any, tuple]]:
    """Each of `modes`' own step of the 1-device scenario `s` on `n` CPU devices, the
    batch repeated on every device, compiled with its arguments (not donated: reused)."""
    devices = jax.devices("cpu")[:n]
    repeated = jax.tree.map(lambda x: np.concatenate([np.asarray(x)] * n), batch)
    out = {}
    for mode in modes:
        m = dataclasses.replace(s, mode=mode, devices_per_process=n, donate=False)
        _, compiled, args = placed_step(m, devices, state, repeated, key)
        out[mode] = (compiled, args)
    return out


def inside_one_program(
    s: Scenario,
    batch: Any,
    n: int,
    state: dict[str, Any],
    key: Any = None,
    rounds: int = 20,
    warmup: int = 3,
    modes: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The 1-device step of `s` on `batch`, timed alone, as `n` copies inside one program,
    and as `modes`' own steps (`real_steps`); `factor` > 1 where neighbours slow a device."""
    alone_c, alone_args, together_c, args = one_program(s, n, state, batch, key)
    real = real_steps(s, n, state, batch, key, modes)
    calls = [_bound(together_c, args), _bound(alone_c, alone_args)]
    calls += [_bound(c, a) for c, a in real.values()]
    together, alone, *by_mode = interleaved(calls, rounds, warmup)
    a, t = float(np.median(alone)), float(np.median(together))
    found = {m: {"times_s": ts, "median_s": float(np.median(ts))}
             for m, ts in zip(real, by_mode, strict=True)}  # fmt: skip
    return {"n": n, "form": "one program", "alone_s": alone, "together_s": together,
            "alone_median_s": a, "together_median_s": t, "factor": t / a,
            **({"modes": found} if found else {})}  # fmt: skip


def gradient_mean(copies: Any, devices: list) -> Any:
    """The gradient's all-reduce as the `pmap` step issues it, compiled for `copies`."""
    with closure_convert_ignores_manual_sharding():
        mean = jax.pmap(lambda g: jax.lax.pmean(g, "d"), axis_name="d", devices=devices)
        return mean.lower(copies).compile()


def gradient_allreduce(
    s: Scenario, n: int, state: dict[str, Any], rounds: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """The gradient's all-reduce alone on `n` CPU devices, as the `pmap` step issues it:
    the times, their median and a 95% bootstrap interval of the median."""
    devices = jax.devices("cpu")[:n]
    if len(devices) < n:
        raise ValueError(f"an all-reduce on {n} CPU devices needs them: {len(devices)} here")
    params = eqx.filter(state["model"], eqx.is_inexact_array)
    stacked = jax.tree.map(lambda x: np.stack([np.asarray(x)] * n), params)
    with closure_convert_ignores_manual_sharding():
        copies = jax.pmap(lambda g: g, devices=devices)(stacked)  # placed as pmap places
    compiled = gradient_mean(copies, devices)
    (times,) = interleaved([_bound(compiled, (copies,))], rounds, warmup)
    return {"n": n, "form": "pmean in one program", **median_interval(times)}
