"""The built-in studies' scenarios: the scaling matrix (`scenarios`, sized to a machine by
`scaling_plan`), the reference's configuration (`seed_scenarios`), the rows over several
hosts (`node_scenarios`), the explanation and time-to-target studies
(`explain_scenarios`, `target_scenarios`) and the version study's core rows
(`versions_scenarios`). Each built-in study (`odestudy/builtin/`) plans from these."""

from typing import Any

from ..measure import environment
from ..measure.controllers import CONTROLLERS
from ..measure.devices import gpu_count
from ..measure.modes import MODES
from ..measure.recommended import recommended as apply
from ..measure.scenario import SCALES, Scenario, heterogeneous_training
from .studies import STUDIES, THIS_MACHINE, Sizing, Study
from .workloads import MULTI_MODES

CPU_DEVICE_COUNTS = (2, 4, 8)
GPU_DEVICE_COUNTS = (2, 4, 8)
# Multi-process CPU rows: (processes, devices per process).
PROCESS_LAYOUTS = ((2, 1),)
# The reference study's multi-device modes (`AbstractMode.core`): the modes of the
# studies whose records cover exactly those (seed, explain, versions; the version study
# runs JAX releases that have no Explicit mesh axes). The scaling matrix and the map run
# every multi-device mode (`MULTI_MODES`).
CORE_MULTI_MODES = tuple(name for name, m in MODES.items() if m.multi_device and m.core)


def weak_batch(scale: str) -> int:
    """Per-device batch under weak scaling: the strong global batch, so that weak
    scaling at 1 device is the strong 1-device run (smaller per-device batches did not
    train in the quick scale's steps: the batch-size study's records)."""
    return SCALES[scale]["batch"]


# The reference configuration on CPU (`make seed`): its rows (1 device `single`, 8
# devices `pmap` and `shard`) plus `shard_map` at 8, and this machine's 2 physical cores
# in every mode; both controllers, strong scaling, evaluated every this many steps for
# the time to the target loss. One run each (no repeats: a row takes minutes).
SEED_DEVICE_COUNTS = (2, 8)
SEED_EVAL_EVERY = 100
# The seed scale's GPU rows: 1 and 2 GPUs (the committed records' rows).
SEED_GPU_DEVICE_COUNTS = (2,)


def seed_scenarios(device: str = "cpu") -> list[Scenario]:
    """The seed scale's rows: on CPU the reference's configuration (see
    `SEED_DEVICE_COUNTS`), on GPU 1 and 2 devices (`SEED_GPU_DEVICE_COUNTS`); strong
    scaling, both controllers; the core modes (`CORE_MULTI_MODES`)."""
    counts = SEED_DEVICE_COUNTS if device == "cpu" else SEED_GPU_DEVICE_COUNTS
    every = SEED_EVAL_EVERY if device == "cpu" else 0
    at: dict[str, Any] = dict(device=device, scale="seed", eval_every=every)
    return [s for c in CONTROLLERS for s in _placed(counts, CORE_MULTI_MODES, controller=c, **at)]


def _placed(counts: tuple[int, ...], modes: tuple[str, ...], **at: Any) -> list[Scenario]:
    """1 device, then every mode of `modes` on each of `counts` devices, all with `at`."""
    multi = [Scenario(devices_per_process=n, mode=m, **at) for n in counts for m in modes]
    return [Scenario(**at), *multi]


def node_scenarios(scale: str) -> list[Scenario]:
    """The rows over several hosts (`make nodes`, through SLURM; not in the local matrix):
    2 nodes x 1 device `shard_map`, PID."""
    return [
        Scenario(mode="shard_map", processes=2, devices_per_process=1, nodes=2, device="cpu",
                 scale=scale, controller="pid")
    ]  # fmt: skip


def scenarios(scale: str, device: str, max_devices: int | None = None) -> list[Scenario]:
    """The matrix of one device kind: 1 device, and every multi-device mode on the
    kind's device counts, both controllers, strong and weak scaling, each with the
    default and the recommended step; on CPU also the multi-process rows. `max_devices`:
    only rows on at most this many devices in all (None: the whole matrix)."""
    found = seed_scenarios(device) if scale == "seed" else _scaling_scenarios(scale, device)
    return [s for s in found if max_devices is None or s.total_devices <= max_devices]


def _scaling_scenarios(scale: str, device: str) -> list[Scenario]:
    """The default step's rows, each beside the recommended step's
    (`recommended.recommended`, every multi-device speedup's base case); on CPU, the
    multi-process rows, with the default step."""
    out = [s for row in _default_step_rows(scale, device) for s in (row, apply(row))]
    if device == "cpu":
        out += _process_rows(scale)
    return out


def _default_step_rows(scale: str, device: str) -> list[Scenario]:
    counts = CPU_DEVICE_COUNTS if device == "cpu" else GPU_DEVICE_COUNTS
    strong = SCALES[scale]["batch"]
    out = []
    for scaling in ("strong", "weak"):
        batch = strong if scaling == "strong" else weak_batch(scale)
        for controller in CONTROLLERS:
            at = dict(
                device=device, controller=controller, scaling=scaling, scale=scale, batch=batch
            )
            # Where weak scaling gives the strong run's batches, that run serves both.
            kept = tuple(n for n in counts if scaling == "strong" or n * batch != strong)
            rows = _placed(kept, MULTI_MODES, **at)
            out += rows if batch != strong or scaling == "strong" else rows[1:]
    return out


def _process_rows(scale: str) -> list[Scenario]:
    """The multi-process CPU rows (`PROCESS_LAYOUTS`), every multi-process mode, PID."""
    at: dict[str, Any] = dict(device="cpu", controller="pid", scaling="strong", scale=scale)
    modes = [name for name, m in MODES.items() if m.multi_process]
    return [
        Scenario(devices_per_process=per_process, mode=mode, processes=processes, **at)
        for processes, per_process in PROCESS_LAYOUTS
        for mode in modes
    ]


EXPLAIN_DEVICES = 2  # no more devices than this machine's physical cores
# Spreads of the heterogeneity study, trained as `scenario.HETEROGENEOUS_TRAINING` says
# (spread 1 does not train; at 0.75 only the 1-device row did, at 0.0184: measured, marked).
SPREADS = (0.25, 0.5, 0.75)
WITHIN_ODE_SPREAD = 0.5  # the largest spread whose rows train (the within-ODE study's)
BATCH_SWEEP = (8, 16, 64, 128)
TARGET_EVAL_EVERY = 10  # the time-to-target runs evaluate every this many steps


def explain_scenarios(scale: str) -> list[Scenario]:
    """The scenarios that explain the scaling (CPU, 2 devices, strong scaling):
    heterogeneity (`SPREADS` in every core mode, PID: StepTo takes the same steps for
    every sample), complexity-aware batching at the same spreads, within-ODE batching
    (both controllers at spread 0, PID at `WITHIN_ODE_SPREAD`), one-device throughput
    against batch size, and time to target loss (`target_scenarios`)."""
    n = EXPLAIN_DEVICES
    one: dict[str, Any] = dict(scale=scale, device="cpu")
    out = []

    def spread_at(spread: float) -> dict[str, Any]:
        return dict(spread=spread, **(heterogeneous_training(scale) if spread > 0 else {}))

    for spread in SPREADS:
        at = spread_at(spread)
        out += _placed((n,), CORE_MULTI_MODES, **at, **one)
        out += _placed((n,), ("shard", "shard_map"), batching="grouped", **at, **one)
    for controller, spreads in (("pid", (0.0, WITHIN_ODE_SPREAD)), ("stepto", (0.0,))):
        for spread in spreads:
            at = spread_at(spread)
            within = dict(controller=controller, solve="within_ode", **at, **one)
            out += _placed((n,), ("shard", "shard_map"), **within)
    for batch in BATCH_SWEEP:
        if batch <= SCALES[scale]["dataset_size"]:  # the smoke scale's data set is smaller
            out.append(Scenario(mode="single", batch=batch, **one))
    return out + target_scenarios(scale)


def target_scenarios(scale: str) -> list[Scenario]:
    """Time to target loss (CPU, PID, evaluated every `TARGET_EVAL_EVERY` steps): global
    batch the scale's and twice it, learning rate fixed and scaled linearly, on 1 and 2
    devices (`shard_map`); and the recommended step at the scale's batch."""
    n = EXPLAIN_DEVICES
    base = SCALES[scale]["batch"]
    # The scale's staged training (at the quick scale, one stage at full length from the
    # start did not train in 150 steps: evaluation loss 0.22 in every row).
    target: dict[str, Any] = dict(eval_every=TARGET_EVAL_EVERY, scale=scale, device="cpu")
    out = []
    for mode, devices in (("single", 1), ("shard_map", n)):
        for batch, lr_scaling in ((base, "fixed"), (2 * base, "fixed"), (2 * base, "linear")):
            out.append(Scenario(mode=mode, devices_per_process=devices, batch=batch,
                                lr_scaling=lr_scaling, **target))  # fmt: skip
        # The recommended step's time to target, beside the default's.
        out.append(apply(Scenario(mode=mode, devices_per_process=devices, **target)))
    return out


def sized_limit(device: str) -> int:
    """The most devices a row of the sized matrix uses on `device`: this machine's
    physical cores (more virtual devices measure overhead), or the GPUs present."""
    if device == "cpu":
        return max(1, environment.cpu_info()["physical_cores"])
    return gpu_count()


# The version study's core rows: 1 device, and 2 devices in every core mode
# (`CORE_MULTI_MODES`), both controllers, strong scaling; plus the reference's headline
# row, 8 devices `shard` PID (on 2 cores: overhead, as the reference measured it).
VERSION_DEVICES = 2


def versions_scenarios(scale: str) -> list[Scenario]:
    """The core rows that `make versions` measures under each JAX release (CPU)."""
    out = []
    for controller in CONTROLLERS:
        out += _placed((VERSION_DEVICES,), CORE_MULTI_MODES, scale=scale, controller=controller)
    out.append(Scenario(scale=scale, mode="shard", devices_per_process=8))
    return out


# The device kinds of `odestudy matrix --device`: "auto" is every kind present here.
DEVICES = ("cpu", "gpu", "auto")
KINDS = {"cpu": ("cpu",), "gpu": ("gpu",), "auto": ("cpu", "gpu")}


def check_sizing(device: str, sizing: Sizing, study: Study) -> None:
    """A one-line ValueError where `sizing` asks what cannot be planned."""
    n = sizing.devices
    if n is None:
        return
    if n < 1:
        raise ValueError(f"--device-count must be 1 or more, got {n}")
    if device == "auto":
        raise ValueError("--device-count needs --device cpu or --device gpu (the kind it counts)")
    if not study.sized:
        sized = ", ".join(name for name, c in STUDIES.items() if c.sized)
        raise ValueError(
            f"--device-count sizes a study's matrix to N devices; study {study.name!r} is "
            f"not sized to a machine (sized: {sized})"
        )


def absent(s: Scenario, sizing: Sizing) -> str | None:
    """Why row `s` cannot run where the rows run (its GPUs are not present), or None."""
    have = gpu_count() if sizing.gpus is None else sizing.gpus
    if s.device != "gpu" or s.total_devices <= have:
        return None
    if sizing.devices is None:
        return f"needs {s.total_devices} GPU(s), {have} present"
    return f"planned for {sizing.devices} GPU(s); not present here ({have} present)"


def in_sized(s: Scenario) -> bool:
    """Whether row `s` is in the sized matrix (`make all`): strong scaling in one process.
    Weak scaling and the multi-process rows would take a 2-core machine past 15 minutes."""
    return s.scaling == "strong" and s.processes == 1


def scaling_plan(
    scale: str, device: str, full: bool, sizing: Sizing = THIS_MACHINE
) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
    """The scaling study's scenarios, sized to `sizing` (`in_sized`) unless `full` or the
    seed scale; GPU rows on more GPUs than are present are listed with why (`absent`)."""
    runnable: list[Scenario] = []
    not_run: list[tuple[Scenario, str]] = []
    sized = not full and scale != "seed"
    for kind in KINDS[device]:
        limit = sizing.devices if sizing.devices is not None else sized_limit(kind)
        found = scenarios(scale, kind, max(limit, 1) if sized else None)
        for s in [s for s in found if in_sized(s)] if sized else found:
            why = absent(s, sizing)
            if why is None:
                runnable.append(s)
            else:
                not_run.append((s, why))
    return runnable, not_run


def for_problem(found: list, problem: str) -> list:
    """Scenarios (or `(scenario, why)` pairs) moved to `problem` (`_moved`), leaving out
    those it cannot run."""
    out = []
    for item in found:
        s, rest = (item[0], item[1:]) if isinstance(item, tuple) else (item, ())
        try:
            moved = _moved(s, problem)
        except ValueError:  # for example a spread on a problem without one
            continue
        out.append((moved, *rest) if rest else moved)
    return out


def _moved(s: Scenario, problem: str) -> Scenario:
    """`s` training `problem`; a recommended-step row takes `problem`'s own recommended
    step, not levers chosen for another that may refuse it."""
    base = s.default_step()
    if s.key() != base.key() and s.key() == apply(base).key():
        return apply(base.for_problem(problem))
    return s.for_problem(problem)
