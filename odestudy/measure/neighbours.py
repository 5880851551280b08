"""A device's step with its neighbours busy: the 1-device step run on N devices of this
process at once, against the same step alone.

On virtual CPU devices the devices of one process share the machine's cores, caches and
the runtime's threads, so a device runs its share of a data-parallel step slower than
one device alone runs the same batch. `odestudy predict` charges a device's compute at
the side-by-side time (`side_by_side`); on GPUs, separate devices, it does not apply.
Each round dispatches the N copies before waiting for any (they run at once) and then
the first alone, interleaved, so that the two times share the machine's state.
"""

import time
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .scenario import Scenario
from .step import make_parallel_step


def _placed(s: Scenario, device: Any, state: dict[str, Any], batch: Any, key: Any) -> tuple:
    """The 1-device step of `s` compiled for `device` with its arguments placed there."""
    params, static = eqx.partition(state["model"], eqx.is_inexact_array)
    optimiser, problem = state["optimiser"], state["problem"]
    step = make_parallel_step(s, [device], static, optimiser, problem=problem)
    p, o = step.place_state(params, optimiser.init(params))
    placed = step.place_batch(batch, key)
    return step.compile(p, o, placed), (p, o, placed)


def side_by_side(
    s: Scenario,
    batch: Any,
    n: int,
    state: dict[str, Any],
    key: Any = None,
    rounds: int = 20,
    warmup: int = 3,
) -> dict[str, Any]:
    """The 1-device step of `s` (a `single` scenario) on one batch `batch` (host arrays,
    the problem's layout; `key` its random key where the problem takes one), timed alone
    and on `n` devices at once (`rounds` timed rounds after `warmup`, interleaved):
    `alone_s` and `together_s` (the time for all `n` to finish), their medians and their
    ratio `factor` (above 1 where neighbours slow a device). `state` is the trained
    model's (`cost.step_cost_sweep`'s `state_out`)."""
    devices = jax.devices("cpu")[:n]
    if len(devices) < n:
        raise ValueError(f"side by side on {n} CPU devices needs them: {len(devices)} here")
    steps = [_placed(s, d, state, batch, key) for d in devices]
    alone, together = [], []
    for i in range(warmup + rounds):
        jax.block_until_ready([args for _, args in steps])
        t0 = time.perf_counter()
        jax.block_until_ready([compiled(*args) for compiled, args in steps])
        t1 = time.perf_counter()
        compiled, args = steps[0]
        jax.block_until_ready(compiled(*args))
        t2 = time.perf_counter()
        if i >= warmup:
            together.append(t1 - t0)
            alone.append(t2 - t1)
    a, t = float(np.median(alone)), float(np.median(together))
    return {"n": n, "alone_s": alone, "together_s": together, "alone_median_s": a,
            "together_median_s": t, "factor": t / a}  # fmt: skip
