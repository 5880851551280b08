"""A user's own training step timed in every mode on the local devices, with the study's
protocol (`time_modes`): compiled apart, warmed up, then interleaved blocks of timed
steps; medians and speedups with 95% intervals (a bootstrap over blocks, then steps)."""

import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .filterstep import check_batch, make_step
from .measure.modes import MODES, modes_here
from .report.intervals import bootstrap_medians, fmt_interval, ratio_interval


class ModeTimes(NamedTuple):
    """What `time_modes` measured: a row per mode (compile time, pooled median step with
    its interval, speedup over `single`, the first step's loss, every block's step
    times), where and with what, and the `trained_loss` given (or None)."""

    rows: list[dict[str, Any]]
    machine: str
    versions: dict[str, str | None]
    trained_loss: float | None = None

    @property
    def loss(self) -> float:
        """The loss at the parameters timed: the largest of the modes' first steps'."""
        return max(r["loss"] for r in self.rows)

    @property
    def trained(self) -> bool | None:
        """Whether `loss` is at or below `trained_loss`; None without one."""
        return None if self.trained_loss is None else self.loss <= self.trained_loss

    def trained_line(self) -> str:
        """The table's line on whether the parameters timed were trained."""
        why = "the timing of an untrained model says nothing about training"
        if self.trained_loss is None:
            return (
                "Parameters as given, trained: unknown, so counted untrained "
                f"(time_modes(trained_loss=...) checks them): {why}"
            )
        said = f"loss {self.loss:.4g} at the parameters, trained loss {self.trained_loss:.4g}"
        if self.trained:
            return f"Parameters as given, trained: yes ({said})"
        return f"Parameters as given, trained: no ({said}): {why}"

    def table(self) -> str:
        """The rows as a markdown table, naming the machine (and `trained_line`)."""
        lines = [
            f"Machine {self.machine}; step time (median ms) and speedup over `single`, "
            "95% intervals over blocks and steps",
            "",
            self.trained_line(),
            "",
            "| mode | devices | compile s | step ms | speedup | loss |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in self.rows:
            step = fmt_interval(1e3 * r["step_s"], 1e3 * r["step_low_s"], 1e3 * r["step_high_s"])
            speedup = fmt_interval(r["speedup"], r["speedup_low"], r["speedup_high"])
            lines.append(
                f"| `{r['mode']}` | {r['devices']} | {r['compile_s']:.2f} | {step} | "
                f"{speedup} | {r['loss']:.4g} |"
            )
        return "\n".join(lines)


def _default_modes(n_devices: int) -> tuple[str, ...]:
    """Every mode the running JAX has with 2 or more devices, else `single`."""
    return modes_here() if n_devices > 1 else ("single",)


def time_modes(
    loss: Any,
    optimiser: Any,
    model: Any,
    batch: Any,
    *,
    trained_loss: float | None = None,
    devices: Sequence[Any] | None = None,
    modes: Sequence[str] | None = None,
    aux: Any = None,
    key: Any = None,
    blocks: int = 5,
    steps_per_block: int = 10,
    warmup_steps: int = 3,
) -> ModeTimes:
    """Time one training step of `loss` (as `make_step` takes it) from the trained
    `model` on one global `batch` in every mode on the local devices.

    - `trained_loss`: the loss at or below which `model` counts as trained; without it
      the table counts it untrained (an untrained model's timing says nothing).
    - `devices`: default every local device (`single` runs on the first); `modes`:
      default every mode the running JAX has, with 2 or more devices.
    - `blocks` of `steps_per_block` timed steps, interleaved (the order of modes
      rotates), after `warmup_steps` untimed steps.

    Each mode's step is the one `make_step` runs. The timings are of everything the
    machine does meanwhile: hold it to yourself. `.table()` renders the `ModeTimes`.
    """
    import jax

    from .measure.environment import machine_id, this_machine, versions
    from .measure.timing import run_steps
    from .study.lock import measuring

    devices = list(devices or jax.local_devices())
    modes = tuple(modes or _default_modes(len(devices)))
    # One-line ValueErrors before anything compiles.
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid choices: {', '.join(MODES)}")
    check_batch(batch, 1 if set(modes) == {"single"} else len(devices))
    if blocks < 2 or steps_per_block < 1 or warmup_steps < 1:
        raise ValueError(
            "need blocks >= 2, steps_per_block >= 1 and warmup_steps >= 1, got "
            f"{blocks}, {steps_per_block}, {warmup_steps}"
        )
    if trained_loss is not None and not math.isfinite(trained_loss):
        raise ValueError(f"trained_loss must be a finite number, got {trained_loss!r}")
    # The lock covers compiles and warm-up too: they load the cores another
    # measurement would be timing.
    with measuring("odestudy.time_modes", wait=True):
        runs = {m: _prepare(m, loss, optimiser, model, batch, devices, aux, key,
                            warmup_steps) for m in modes}  # fmt: skip
        for b in range(blocks):
            for mode in modes[b % len(modes) :] + modes[: b % len(modes)]:
                r = runs[mode]
                p, o, placed = r["args"]
                timed = run_steps(
                    r["compiled"], p, o, [placed] * steps_per_block, steps_per_block, carry=False
                )
                r["blocks"].append(np.asarray(timed.times))
    return ModeTimes(
        [_row(runs[m], runs.get("single")) for m in modes],
        machine_id(this_machine()),
        versions(),
        trained_loss,
    )


def _prepare(
    mode, loss, optimiser, model, batch, devices, aux, key, warmup_steps
) -> dict[str, Any]:
    """One mode's step compiled apart (AOT, timed) and warmed up (untimed)."""
    from .measure.timing import run_steps

    on = devices[:1] if mode == "single" else devices
    filtered = make_step(loss, optimiser, mode, on, aux=aux)
    params, rest = filtered.partition(model)
    step = filtered.parallel_step(rest, keyed=key is not None)
    p, o = step.place_state(params, filtered.init(model))
    placed = step.place_batch(batch, key)
    t0 = time.perf_counter()
    compiled = step.compile(p, o, placed)
    compile_s = time.perf_counter() - t0
    first = run_steps(compiled, p, o, [placed] * warmup_steps, warmup_steps, carry=False)
    return dict(
        mode=mode, devices=len(on), compile_s=compile_s, loss=first.losses[0],
        compiled=compiled, args=(p, o, placed), blocks=[],
    )  # fmt: skip


def _row(run: dict[str, Any], single: dict[str, Any] | None) -> dict[str, Any]:
    blocks = run["blocks"]
    low, high = np.percentile(bootstrap_medians(blocks, np.random.default_rng(0)), [2.5, 97.5])
    speedup: tuple[float | None, ...] = (None, None, None)
    if single is not None and single is not run:
        speedup = ratio_interval(
            {"step_times_runs_s": single["blocks"]}, {"step_times_runs_s": blocks}
        )
    return {
        "mode": run["mode"],
        "devices": run["devices"],
        "compile_s": run["compile_s"],
        "step_s": float(np.median(np.concatenate(blocks))),
        "step_low_s": float(low),
        "step_high_s": float(high),
        "speedup": speedup[0],
        "speedup_low": speedup[1],
        "speedup_high": speedup[2],
        "loss": run["loss"],
        "step_times_blocks_s": [b.tolist() for b in blocks],
    }
