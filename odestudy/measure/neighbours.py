"""A device's step with its neighbours busy: N copies of the 1-device step inside one
program (`jax.pmap` of its function, no collective), against the same step alone.

Virtual CPU devices of one process share the machine's cores, caches and runtime
threads, so a device may run its share of a data-parallel step slower than one device
alone; `odestudy predict` charges a device's compute at the copies' time (not on GPUs).
Timed inside one program, as a multi-device mode runs: N programs dispatched at once
read far slower where equinox's error checks put a host callback in every solve.
Copies and the step alone are timed interleaved, so that both share the machine's state.
"""

import dataclasses
import time
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .compat import closure_convert_ignores_manual_sharding
from .scenario import Scenario
from .step import make_parallel_step


def placed_step(s: Scenario, devices: list, state: dict[str, Any], batch: Any, key: Any) -> tuple:
    """The step of `s` over `devices`, compiled, with its arguments placed: `(step,
    compiled, args)`. `state` is the trained model's (`cost.step_cost_sweep`'s)."""
    params, static = eqx.partition(state["model"], eqx.is_inexact_array)
    optimiser, problem = state["optimiser"], state["problem"]
    step = make_parallel_step(s, devices, static, optimiser, problem=problem)
    args = (*step.place_state(params, optimiser.init(params)), step.place_batch(batch, key))
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


def inside_one_program(
    s: Scenario,
    batch: Any,
    n: int,
    state: dict[str, Any],
    key: Any = None,
    rounds: int = 20,
    warmup: int = 3,
) -> dict[str, Any]:
    """The 1-device step of `single` scenario `s` on `batch`, timed alone and as `n`
    copies inside one program, interleaved; `factor` is above 1 where neighbours slow a
    device."""
    alone_c, alone_args, together_c, args = one_program(s, n, state, batch, key)
    alone, together = [], []
    for i in range(warmup + rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(together_c(*args))
        t1 = time.perf_counter()
        jax.block_until_ready(alone_c(*alone_args))
        t2 = time.perf_counter()
        if i >= warmup:
            together.append(t1 - t0)
            alone.append(t2 - t1)
    a, t = float(np.median(alone)), float(np.median(together))
    return {"n": n, "form": "one program", "alone_s": alone, "together_s": together,
            "alone_median_s": a, "together_median_s": t, "factor": t / a}  # fmt: skip


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
    times = []
    for i in range(warmup + rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(copies))
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    boot = np.random.default_rng(0).choice(times, size=(2000, len(times)))
    low, high = np.percentile(np.median(boot, axis=1), [2.5, 97.5])
    median = float(np.median(times))
    return {"n": n, "form": "pmean in one program", "times_s": times, "median_s": median,
            "interval_s": [float(low), float(high)]}  # fmt: skip
