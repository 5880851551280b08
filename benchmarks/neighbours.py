"""What a device pays when its neighbours work, measured three ways on the trained model
(`odestudy predict`'s neighbours term, issue: the term read about 2x where 2 devices
measured 1.1-2x faster than one).

At each per-device batch `b`, on the same batch of the trained model's data, in
interleaved rounds (each round's order rotated), every call waited for:

- `alone`: the 1-device step at `b` on the first device;
- `side_by_side`: that step compiled once per device, the N programs dispatched at once
  (what prediction model 8 charged a device's compute);
- `inside`: the same 1-device step, N copies in ONE program (`jax.pmap` of its function:
  each device its copy of the batch, no collective);
- each multi-device mode's real step at global batch `N * b` (the batch repeated on every
  device, so each device solves what `alone` solves), gradient all-reduce included;
- `allreduce`: the gradient's all-reduce alone (`pmean` of the parameters' pytree over
  the N devices, in one program), as the `pmap` step issues it.

Ratios over `alone` (median over rounds, 95% bootstrap interval over rounds) say what a
device pays for its neighbours in each form. More devices than physical cores measure
overhead, not parallel speedup. A benchmark, not a test; nothing here is a fit.

    .venv/bin/python benchmarks/neighbours.py --devices 2 --batches 4,16,64

(default `--out`: results/<machine>/neighbours/cpu-<problem>-<controller>-<step>.json)
"""

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

METHOD = (
    "alone, side by side (one program per device, dispatched at once) and inside one "
    "program (pmap of the 1-device step, no collective), then each multi-device mode at "
    "N x b with the batch repeated per device, and the gradient's pmean alone; same "
    "trained parameters and batch; "
    "interleaved rounds after warm-up, order rotated per round, every call waited for; "
    "ratio over alone: median over rounds, 95% bootstrap over rounds"
)
MODES = ("pmap", "shard_map")


def _interval(num: list[float], den: list[float], draws: int = 2000) -> list[float]:
    """The ratio of medians `num / den` over paired rounds, with a 95% bootstrap."""
    a, b = np.asarray(num), np.asarray(den)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(a), size=(draws, len(a)))
    boot = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return [float(np.median(a) / np.median(b)), *map(float, np.percentile(boot, [2.5, 97.5]))]


def _calls(step: Any, state: dict[str, Any], batch: Any, key: Any, n: int) -> dict[str, Any]:
    """Each form's call, compiled ahead of time, as a function of nothing (it waits)."""
    import jax

    from odestudy.measure.cost import gradient_mean, one_program, placed_step, real_steps

    devices = jax.devices("cpu")[:n]
    one, one_args, inside, inside_args = one_program(step, n, state, batch, key)
    per_device = [placed_step(step, [d], state, batch, key)[1:] for d in devices]
    calls: dict[str, Any] = {
        "alone": lambda: jax.block_until_ready(one(*one_args)),
        "side_by_side": lambda: jax.block_until_ready([c(*a) for c, a in per_device]),
        "inside": lambda: jax.block_until_ready(inside(*inside_args)),
    }
    # The gradient all-reduce alone, as the pmap step issues it: `pmean` of the
    # parameters' pytree (the gradient's shape) over the devices, in one program.
    allreduce = gradient_mean(inside_args[0], devices)
    calls["allreduce"] = lambda: jax.block_until_ready(allreduce(inside_args[0]))
    for mode, (c, a) in real_steps(step, n, state, batch, key, MODES).items():
        calls[mode] = lambda c=c, a=a: jax.block_until_ready(c(*a))
    return calls


def measure(problem: str, controller: str, which: str, n: int, batches: list[int],
            rounds: int, warmup: int, scale: str = "quick") -> dict[str, Any]:  # fmt: skip
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as odestudy predict times (cli.TIMED_HERE)
    import odestudy

    odestudy.configure_devices("cpu", n)
    from odestudy.measure.cost import step_cost_sweep
    from odestudy.measure.environment import now
    from odestudy.measure.recommended import recommended
    from odestudy.measure.training import environment, step_key

    s = odestudy.Scenario(scale=scale, controller=controller).for_problem(problem)
    step = recommended(s) if which == "recommended" else s.default_step()
    if step.donate:  # the same arguments are called again: no buffer may be given up
        step = dataclasses.replace(step, donate=False)
    started, state = now(), {}
    sweep = step_cost_sweep(step, (1, max(batches)), timed_steps=2, extras=False, state_out=state)
    prob, data = state["problem"], state["data"]
    key = step_key(step, 0) if prob.needs_key else None
    rng = np.random.default_rng(1)
    rows = []
    for b in batches:
        batch = prob.take(data, rng.choice(prob.size(data), b, replace=b > prob.size(data)))
        calls = _calls(step, state, batch, key, n)
        names = list(calls)
        times: dict[str, list[float]] = {k: [] for k in names}
        for r in range(warmup + rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                calls[name]()
                if r >= warmup:
                    times[name].append(time.perf_counter() - t0)
        ratios = {k: _interval(times[k], times["alone"]) for k in names if k != "alone"}
        medians = {k: float(np.median(v)) for k, v in times.items()}
        rows.append({"per_device_batch": b, "times_s": times, "median_s": medians,
                     "over_alone": ratios})  # fmt: skip
        print(b, {k: [round(x, 2) for x in v] for k, v in ratios.items()}, flush=True)
    return {
        "kind": "neighbours",
        "method": METHOD,
        "scenario": step.to_dict(),
        "step": which,
        "devices": n,
        "final_loss": sweep["final_loss"],
        "trained": bool(sweep["final_loss"] <= step.problem_object.trained_loss),
        "rows": rows,
        "started": started,
        "finished": now(),
        **environment(dataclasses.replace(step, mode="pmap", devices_per_process=n)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="oscillator")
    ap.add_argument("--controller", default="pid")
    ap.add_argument("--step", choices=("default", "recommended"), default="default")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--batches", default="4,16,64")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    rec = measure(a.problem, a.controller, a.step, a.devices,
                  [int(b) for b in a.batches.split(",")], a.rounds, a.warmup, a.scale)  # fmt: skip
    from odestudy.study.records import machine_folder, write_json_atomic

    name = f"cpu-{a.problem}-{a.controller}-{a.step}-{a.devices}dev.json"
    out = a.out or machine_folder() / "neighbours" / name
    write_json_atomic(out, rec)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
