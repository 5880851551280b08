"""The study's scenario matrix: which scenarios, where records go, resumable runs."""

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

from ..measure import environment
from ..measure.controllers import CONTROLLERS
from ..measure.devices import gpu_count
from ..measure.modes import MODES
from ..measure.problem import DEFAULT_PROBLEM, AnyProblem, in_this_process_only, problem_spec
from ..measure.problem import _import as import_module
from ..measure.recommended import recommended as apply
from ..measure.record import Record
from ..measure.scenario import SCALES, Scenario, heterogeneous_training
from . import records
from .executors import Executor, LocalExecutor, Progress
from .lock import measuring
from .plan import CeilingProbe, expected_env, make_plan, reusable, runs, why_stale
from .plan import Plan as MatrixPlan
from .probing import session_probe
from .records import DEFAULT_RESULTS, record_path
from .repeats import REPEAT_STEPS
from .runner import execute_scenario, failed_record
from .steps import MATCHED, apply_step
from .studies import STUDIES, THIS_MACHINE, Page, Sizing, Study
from .workloads import MAP_FOLDER, MULTI_MODES, map_scenarios

__all__ = [
    "Crossover",
    "STUDIES",
    "execute_scenario",
    "expected_env",
    "reusable",
    "runs",
    "why_stale",
]

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
    scaling at 1 device is the strong 1-device run (and every row trains on batches
    of at least that size: smaller per-device batches did not reach the trained loss
    in the quick scale's steps; the batch-size study's records say by how much)."""
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
    out = []
    for controller in CONTROLLERS:
        out.append(Scenario(device=device, controller=controller, scale="seed", eval_every=every))
        for n in counts:
            for mode in CORE_MULTI_MODES:
                out.append(
                    Scenario(
                        device=device,
                        devices_per_process=n,
                        mode=mode,
                        controller=controller,
                        scale="seed",
                        eval_every=every,
                    )
                )
    return out


def node_scenarios(scale: str) -> list[Scenario]:
    """The rows over several hosts (`make nodes`, through SLURM): 2 nodes x 1 device
    `shard_map`, PID. Not in the local matrix (one host cannot run them); the report
    reads their records beside it."""
    return [
        Scenario(mode="shard_map", processes=2, devices_per_process=1, nodes=2, device="cpu",
                 scale=scale, controller="pid")
    ]  # fmt: skip


def scenarios(scale: str, device: str, max_devices: int | None = None) -> list[Scenario]:
    """The matrix of one device kind.

    CPU (`CPU_DEVICE_COUNTS`) and GPU (`GPU_DEVICE_COUNTS`): 1 device (`single`), and
    every multi-device mode (`MULTI_MODES`) on 2, 4 and 8 devices, both controllers,
    strong and weak scaling (where both give the same per-device and global batch, the
    strong run serves both), each with the default and the recommended step; on CPU also
    the multi-process rows of the multi-process modes with PID.

    - `max_devices`: keep only rows on at most this many devices in all (the matrix
      sized to a machine, `sized_limit`); None keeps the whole matrix.
    """
    if scale == "seed":
        found = seed_scenarios(device)
    else:
        found = _scaling_scenarios(scale, device)
    if max_devices is None:
        return found
    return [s for s in found if s.total_devices <= max_devices]


def _scaling_scenarios(scale: str, device: str) -> list[Scenario]:
    """Per controller, 1 device and every multi-device mode on the kind's device counts,
    strong and weak, each with the default and with the recommended step
    (`recommended.recommended`: the best 1-device step's candidate, every multi-device
    speedup's base case); on CPU, the multi-process rows, with the default step."""
    one_process = _default_step_rows(scale, device)
    out = [s for row in one_process for s in (row, apply(row))]
    if device == "cpu":
        out += _process_rows(scale)
    return out


def _default_step_rows(scale: str, device: str) -> list[Scenario]:
    counts = CPU_DEVICE_COUNTS if device == "cpu" else GPU_DEVICE_COUNTS
    out = []
    for scaling in ("strong", "weak"):
        batch = SCALES[scale]["batch"] if scaling == "strong" else weak_batch(scale)
        for controller in CONTROLLERS:
            if batch != SCALES[scale]["batch"] or scaling == "strong":
                out.append(
                    Scenario(
                        device=device,
                        devices_per_process=1,
                        mode="single",
                        controller=controller,
                        scaling=scaling,
                        scale=scale,
                        batch=batch,
                    )
                )
            for n in counts:
                if scaling == "weak" and n * batch == SCALES[scale]["batch"]:
                    continue  # the same run as strong scaling at n devices: reused
                for mode in MULTI_MODES:
                    out.append(
                        Scenario(
                            device=device,
                            devices_per_process=n,
                            mode=mode,
                            controller=controller,
                            scaling=scaling,
                            scale=scale,
                            batch=batch,
                        )
                    )
    return out


def _process_rows(scale: str) -> list[Scenario]:
    """The multi-process CPU rows (`PROCESS_LAYOUTS`), every multi-process mode, PID."""
    return [
        Scenario(
            device="cpu",
            devices_per_process=per_process,
            mode=mode,
            controller="pid",
            scaling="strong",
            scale=scale,
            processes=processes,
        )
        for processes, per_process in PROCESS_LAYOUTS
        for mode in (n for n, m in MODES.items() if m.multi_process)
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

    - heterogeneity: `SPREADS` in every core mode (`CORE_MULTI_MODES`) with PID (spread
      0 is in the scaling matrix); StepTo takes the same steps for every sample by
      construction;
    - complexity-aware batching: `batching="grouped"` at the same spreads;
    - within-ODE batching: `solve="within_ode"` with both controllers at spread 0, and
      with PID at `WITHIN_ODE_SPREAD`;
    - one-device throughput against batch size;
    - time to target loss (`target_scenarios`).

    Rows with heterogeneous data train as `scenario.heterogeneous_training` says.
    """
    n = EXPLAIN_DEVICES
    one: dict[str, Any] = dict(scale=scale, device="cpu")
    out = []

    def spread_at(spread: float) -> dict[str, Any]:
        return dict(spread=spread, **(heterogeneous_training(scale) if spread > 0 else {}))

    for spread in SPREADS:
        at = spread_at(spread)
        out.append(Scenario(mode="single", **at, **one))
        for mode in CORE_MULTI_MODES:
            out.append(Scenario(devices_per_process=n, mode=mode, **at, **one))
        out.append(Scenario(mode="single", batching="grouped", **at, **one))
        for mode in ("shard", "shard_map"):
            out.append(Scenario(devices_per_process=n, mode=mode, batching="grouped", **at, **one))
    for controller, spreads in (("pid", (0.0, WITHIN_ODE_SPREAD)), ("stepto", (0.0,))):
        for spread in spreads:
            at = spread_at(spread)
            out.append(
                Scenario(mode="single", controller=controller, solve="within_ode", **at, **one)
            )
            for mode in ("shard", "shard_map"):
                out.append(
                    Scenario(
                        devices_per_process=n,
                        mode=mode,
                        controller=controller,
                        solve="within_ode",
                        **at,
                        **one,
                    )
                )
    for batch in BATCH_SWEEP:
        if batch <= SCALES[scale]["dataset_size"]:  # the smoke scale's data set is smaller
            out.append(Scenario(mode="single", batch=batch, **one))
    return out + target_scenarios(scale)


def target_scenarios(scale: str) -> list[Scenario]:
    """Time to target loss (CPU, PID, evaluated every `TARGET_EVAL_EVERY` steps, the
    scale's staged training): global batch the scale's and twice it, learning rate fixed
    and scaled linearly, on 1 and 2 devices (`shard_map`); and the recommended step
    (`recommended.recommended`) at the scale's batch. Part of the explain study; alone,
    `odestudy matrix --study target` (the seed scale's rows)."""
    n = EXPLAIN_DEVICES
    base = SCALES[scale]["batch"]
    # The scale's staged training (at the quick scale, one stage at full length from the
    # start did not train in 150 steps: evaluation loss 0.22 in every row).
    target: dict[str, Any] = dict(eval_every=TARGET_EVAL_EVERY, scale=scale, device="cpu")
    out = []
    for mode, devices in (("single", 1), ("shard_map", n)):
        for batch, lr_scaling in ((base, "fixed"), (2 * base, "fixed"), (2 * base, "linear")):
            out.append(
                Scenario(
                    mode=mode,
                    devices_per_process=devices,
                    batch=batch,
                    lr_scaling=lr_scaling,
                    **target,
                )
            )
        # The recommended step's time to target, beside the default's.
        out.append(apply(Scenario(mode=mode, devices_per_process=devices, **target)))
    return out


def sized_limit(device: str) -> int:
    """The most devices a row of the sized matrix uses on `device`: CPU devices up to
    this machine's physical cores (more virtual devices than cores measure overhead,
    not parallel speedup), GPUs up to those present."""
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
        out.append(Scenario(scale=scale, controller=controller))
        for mode in CORE_MULTI_MODES:
            out.append(
                Scenario(
                    scale=scale,
                    controller=controller,
                    mode=mode,
                    devices_per_process=VERSION_DEVICES,
                )
            )
    out.append(Scenario(scale=scale, mode="shard", devices_per_process=8))
    return out


def plan(
    scale: str,
    device: str = "auto",
    study: "str | Study" = "scaling",
    full: bool = False,
    sizing: Sizing = THIS_MACHINE,
) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
    """Scenarios to run here, and those that cannot run here with the reason: those of
    `study` (`studies.get_study`: a registered name or `module:Class`).

    - `device`: `"cpu"`, `"gpu"` or `"auto"` (CPU rows, and GPU rows where GPUs exist).
    - `study`: `"scaling"` (the tables), `"explain"` (`explain_scenarios`, CPU),
      `"target"` (`target_scenarios`, its time-to-target rows), `"versions"`
      (`versions_scenarios`, CPU: the rows `make versions` runs under each JAX release),
      `"map"` (`workloads.map_scenarios`, CPU: the workload map), or any other
      registered study.
    - `full`: the whole scaling matrix (1/2/4/8 CPU devices, whatever the cores);
      otherwise the matrix sized to this machine (`sized_limit`), or to `sizing`. The
      seed scale and the explain study are always whole.
    - `sizing`: the devices of the kind `device` to size to, present or not, and the GPUs
      present where the rows run (`studies.Sizing`; `check_sizing`); only a `sized`
      study takes other than this machine's.
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid choices: {', '.join(DEVICES)}")
    the_study = get_study(study)
    check_sizing(device, sizing, the_study)
    return the_study.planned(scale, device, full, sizing)


# The device kinds of `odestudy matrix --device`: "auto" is every kind present here.
DEVICES = ("cpu", "gpu", "auto")
KINDS = {"cpu": ("cpu",), "gpu": ("gpu",), "auto": ("cpu", "gpu")}


def check_sizing(device: str, sizing: Sizing, study: Study) -> None:
    """A one-line ValueError where `sizing` asks what cannot be planned: a device count
    below 1, one for `--device auto` (which kind?), or one for a study not sized to a
    machine."""
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


def gpus_present(sizing: Sizing) -> int:
    """GPUs present where the rows run: `sizing.gpus`, else this machine's."""
    return gpu_count() if sizing.gpus is None else sizing.gpus


def absent(s: Scenario, sizing: Sizing) -> str | None:
    """Why row `s` cannot run where the rows run (its GPUs are not present), or None.
    A row planned for `sizing.devices` devices says so."""
    have = gpus_present(sizing)
    if s.device != "gpu" or s.total_devices <= have:
        return None
    if sizing.devices is None:
        return f"needs {s.total_devices} GPU(s), {have} present"
    return f"planned for {sizing.devices} GPU(s); not present here ({have} present)"


def scaling_plan(
    scale: str, device: str, full: bool, sizing: Sizing = THIS_MACHINE
) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
    """The scaling study's scenarios (`plan`), sized to `sizing` (by default this
    machine) unless `full` or the seed scale; GPU rows on more GPUs than are present
    where they run are listed with why they cannot run. Where no GPU is present, the
    sized GPU matrix is its 1-GPU rows, listed so."""
    runnable: list[Scenario] = []
    not_run: list[tuple[Scenario, str]] = []
    sized = not full and scale != "seed"
    for kind in KINDS[device]:
        limit = sizing.devices if sizing.devices is not None else sized_limit(kind)
        for s in scenarios(scale, kind, max(limit, 1) if sized else None):
            why = absent(s, sizing)
            if why is None:
                runnable.append(s)
            else:
                not_run.append((s, why))
    return runnable, not_run


class Scaling(Study):
    """The scaling tables: every mode and controller on the device counts here."""

    name: ClassVar[str] = "scaling"
    title: ClassVar[str] = "Quick scaling"
    ceiling: ClassVar[bool] = True
    recommendable: ClassVar[bool] = True
    scaling_table: ClassVar[bool] = True
    sized: ClassVar[bool] = True
    page: ClassVar[Page | None] = Page(
        "quick",
        "Quick scaling (`make all`)",
        ("cpu", "gpu", "machines", "projection", "skipped"),
        ("headline_speedup", "cpu_strong_scaling", "cpu_weak_scaling"),
        answer=True,
    )

    def scenarios(self, scale, device="auto", full=False):
        return scaling_plan(scale, device, full)

    def planned(self, scale, device="auto", full=False, sizing=THIS_MACHINE):
        return scaling_plan(scale, device, full, sizing)

    def matrix(self, scale: str) -> list[Scenario]:
        return [s for d in KINDS["auto"] for s in scenarios(scale, d)]

    def current(self, scale: str, problem: str) -> list[Scenario]:
        """Its matrix, the same with the recommended levers (`odestudy matrix
        --recommended`) and the rows over several hosts (`node_scenarios`)."""
        found = for_problem(self.matrix(scale), problem)
        return found + [apply(s) for s in found] + for_problem(node_scenarios(scale), problem)


class Explain(Study):
    """The studies that explain the scaling (`explain_scenarios`, CPU)."""

    name: ClassVar[str] = "explain"
    title: ClassVar[str] = "Explanations"
    page: ClassVar[Page | None] = Page(
        "explain",
        "Explanations (`make explain`)",
        ("explain",),
        ("lockstep_waste", "throughput_vs_batch", "time_to_target"),
    )

    def scenarios(self, scale, device="auto", full=False):
        return explain_scenarios(scale), []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return for_problem(self.matrix(scale), problem)


class Target(Study):
    """The time-to-target rows alone (`target_scenarios`)."""

    name: ClassVar[str] = "target"
    title: ClassVar[str] = "Time to target"

    def scenarios(self, scale, device="auto", full=False):
        return target_scenarios(scale), []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return for_problem(self.matrix(scale), problem)


class Versions(Study):
    """The core rows `make versions` runs under each JAX release (one run each)."""

    name: ClassVar[str] = "versions"
    title: ClassVar[str] = "The core rows across JAX releases"
    repeated: ClassVar[bool] = False
    page: ClassVar[Page | None] = Page(
        "versions", "JAX releases (`make versions`)", ("versions",), ("versions",)
    )

    def scenarios(self, scale, device="auto", full=False):
        return versions_scenarios(scale), []


class Map(Study):
    """The workload map (`workloads.map_scenarios`, CPU), its records apart."""

    name: ClassVar[str] = "map"
    title: ClassVar[str] = "The workload map"
    folder: ClassVar[str | None] = MAP_FOLDER
    page: ClassVar[Page | None] = Page("workloads", "Workload map", ("workloads",), ("workloads",))

    def scenarios(self, scale, device="auto", full=False):
        return map_scenarios(scale), []


# Registered here, after the map, whose records and page it follows (`pages_of`: the
# studies in the order defined).
from .crossover import Crossover  # noqa: E402

# The seed study's scale: the reference's configuration.
SEED_SCALE = "seed"


class Seed(Study):
    """The reference's configuration (`make seed`): the scaling rows of the seed scale
    (`seed_scenarios`) and their time-to-target rows at its batch, one run each; at any
    other scale, none."""

    name: ClassVar[str] = "seed"
    title: ClassVar[str] = "The reference configuration"
    scaling_table: ClassVar[bool] = True
    page: ClassVar[Page | None] = Page(
        "seed",
        "The reference configuration (`make seed`)",
        ("reference", "cpu", "gpu", "explain", "skipped"),
        ("headline_speedup", "time_to_target", "gpu_step_cost"),
        scales=(SEED_SCALE,),
        answer=True,
    )

    def scenarios(self, scale, device="auto", full=False):
        return self.planned(scale, device, full)

    def planned(self, scale, device="auto", full=False, sizing=THIS_MACHINE):
        """Whole at its scale: `sizing` says only which GPUs are present."""
        if scale != SEED_SCALE:
            return [], []
        runnable, not_run = scaling_plan(scale, device, full, sizing)
        if "cpu" in KINDS[device]:
            batch = SCALES[scale]["batch"]
            runnable += [s for s in target_scenarios(scale) if s.batch == batch]
        return runnable, not_run

    def matrix(self, scale: str) -> list[Scenario]:
        return Scaling().matrix(scale) if scale == SEED_SCALE else []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return Scaling().current(scale, problem) if scale == SEED_SCALE else []


# A machine's folder of lever and loss-spread records (`benchmarks/levers.py`).
LEVERS_FOLDER = "levers"
# Its CPU lever records (one per controller) and its loss spreads (one per controller).
LEVER_RECORDS = "cpu-*.json"
LOSS_SPREADS = "loss-spread-*.json"


class Step(Study):
    """What bounds one training step, and the levers on it: no matrix scenarios (its runs
    are `benchmarks/levers.py`'s and `benchmarks/step_cost.py`'s, one machine at a time);
    its records are each machine's lever records."""

    name: ClassVar[str] = "step"
    title: ClassVar[str] = "The step: what bounds it, and the levers"
    page: ClassVar[Page | None] = Page("step", title, ("step",), ("cpu_step_cost",))

    def scenarios(self, scale, device="auto", full=False):
        return [], []

    def lever_records(self, results: str | Path, machine: str) -> list[dict[str, Any]]:
        """`machine`'s CPU lever records under `results`, each with its `path`."""
        paths = records.side_study_paths(Path(results) / machine, LEVERS_FOLDER, LEVER_RECORDS)
        return [{**records.read_json(p), "path": str(p)} for p in paths]

    def loss_spreads(self, results: str | Path, machine: str) -> dict[str, dict[str, Any]]:
        """`machine`'s run-to-run loss spreads of the default, by controller."""
        paths = records.side_study_paths(Path(results) / machine, LEVERS_FOLDER, LOSS_SPREADS)
        return {r["scenario"]["controller"]: r for p in paths if (r := records.read_json(p))}

    def records(self, results: str | Path, scale: str) -> list[dict[str, Any]]:
        """Every machine's CPU lever records under `results` (any scale)."""
        root = Path(results)
        machines = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        return [r for m in machines for r in self.lever_records(results, m)]


class Prediction(Study):
    """The prediction (`odestudy predict --rows`) checked against the measured rows, and
    the machine probes: no matrix scenarios (its runs are `odestudy predict`'s)."""

    name: ClassVar[str] = "prediction"
    title: ClassVar[str] = "The prediction checked"
    page: ClassVar[Page | None] = Page(
        "prediction",
        "The prediction (`odestudy predict`) checked, and the machine probes",
        ("prediction",),
    )

    def scenarios(self, scale, device="auto", full=False):
        return [], []


# The built-in studies' names (`studies.STUDIES` holds every registered one).
BUILT_IN = ("scaling", "explain", "target", "versions", "map", "seed", "step", "prediction")


def parse_selection(text: str) -> dict[str, str]:
    """`"scaling=strong,controller=pid"` -> `{"scaling": "strong", "controller": "pid"}`;
    keys must be `Scenario` fields."""
    import dataclasses

    fields = [f.name for f in dataclasses.fields(Scenario)]
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in fields:
            raise ValueError(
                f"bad selection {part!r}: expected FIELD=VALUE with FIELD "
                f"one of {', '.join(fields)}"
            )
        out[key] = value
    return out


def select(scenarios: Iterable[Scenario], selection: dict[str, str]) -> list[Scenario]:
    """The scenarios whose fields equal every value of `selection` (compared as text)."""
    return [s for s in scenarios if all(str(getattr(s, k)) == v for k, v in selection.items())]


def estimate_s(s: Scenario, results: str | Path, runs: int) -> float:
    """A rough duration in seconds of `runs` runs of `s` here (the first cold): from this
    machine's last record of `s` where there is one (any protocol), else a guess from
    the 2-core machines of the committed records."""
    try:
        old = records.read_record(record_path(s, results))
    except (OSError, ValueError):
        old = {}
    step = old.get("step_time_s")
    cold = old.get("kernel_wall_s")
    if not (cold and step):
        heavy = (s.parallel.one_loop and s.parallel.multi_device) or s.processes > 1
        cold = {"smoke": 15.0, "quick": 45.0, "seed": 900.0}.get(s.scale, 60.0)
        cold *= 1.4 if heavy else 1.0
        step = {"quick": 0.05, "seed": 0.05}.get(s.scale, 0.01) * (3 if heavy else 1)

    repeat = 2.0 + (REPEAT_STEPS + s.warmup_steps) * step + (12.0 if s.processes > 1 else 0.0)
    return cold + (runs - 1) * repeat


def run_matrix(
    scale: str,
    device: str = "auto",
    force: bool = False,
    results: str | Path = DEFAULT_RESULTS,
    show_progress: bool = True,
    only: Iterable[Scenario] | None = None,
    study: "str | Study" = "scaling",
    selection: dict[str, str] | None = None,
    repeats: int | None = None,
    recommended: bool = False,
    full: bool = False,
    step: dict[str, Any] | None = None,
    ceiling: bool | None = None,
    executor: Executor | None = None,
    wait: bool = False,
    problem: "str | AnyProblem" = DEFAULT_PROBLEM,
    device_count: int | None = None,
    dry_run: bool = False,
) -> list[Record]:
    """Run the matrix one scenario at a time in rounds: every scenario's first, cold
    run (a fresh kernel), then every scenario's repeats (`repeats.REPEATS` runs in all
    for the scaling study; `repeats.run_repeat_round`), one round at a time, so that a
    slow spell of the machine hits all configurations alike.

    A scenario with a reusable record (`reusable`: ok, this machine, same versions,
    protocol and measurement environment) is not run again unless `force`; one with
    fewer runs than wanted gets its missing repeats. A failing scenario is recorded as
    failed and the matrix goes on (and runs it again next time). Rows that cannot run
    here get a `not_run` record. `selection` (see `parse_selection`) keeps only the
    scenarios that match it (none matching is an error); `repeats` sets the runs per
    scenario (default `repeats.REPEATS` for the scaling and explain studies, 1 for the
    version study and the seed scale). `recommended` applies `recommended.recommended` to every
    scenario of the scaling study; `step` (a step file of `odestudy tune`, `steps.read_step`)
    applies its levers to the scaling study's rows of its controller and device kind, the
    others left out. `full`: the whole matrix rather than the one sized to
    this machine (`plan`). `ceiling`: in every repeat round, also measure this
    machine's weak-scaling ceiling (`ceiling.run_ceiling`) on the 1-device scenario of
    each controller; by default with the scaling study's CPU rows.

    - `executor`: who makes the runs (`executors.LocalExecutor`, the default, or
      `slurm.SlurmExecutor`).
    - `wait`: where another measurement holds this machine's lock (`lock.measuring`),
      wait for it; otherwise `lock.MachineBusy` is raised before anything is written.
    - `problem`: what every scenario trains (`Scenario.for_problem`; a scenario the
      problem cannot run, such as a spread on a problem without one, is left out): a
      name, `module:object`, or a problem object whose class the kernels can import
      (`problem.problem_spec`). One registered in this process only is refused: the runs
      are processes of their own.
    - `device_count`: size the matrix to this many devices of the kind `device` (`cpu` or
      `gpu`), present or not, instead of to this machine (`check_sizing`): GPU rows on
      more GPUs than are present where the executor runs them cannot run
      (`Executor.gpus`: this machine's, or with SLURM, the partition's as counted).
    - `dry_run`: print the plan, scenario by scenario (`dry_run_lines`), and return the
      records it would reuse: nothing runs, and no record, lock or probe is made.

    Prints the plan (`plan_line`) with an estimate of its duration first, then one
    line per run.
    """
    problem = problem_spec(problem)
    if in_this_process_only(problem):
        raise ValueError(
            f"problem {problem!r} is registered in this process only; the matrix runs each "
            "scenario in a process of its own: define its class in a module they can import "
            "and pass the object or module:object"
        )
    executor = executor or LocalExecutor()
    sizing = Sizing(device_count, executor.gpus(device_count))
    runnable, not_run, wanted, probes = _scenarios_to_run(
        scale,
        device,
        study,
        full,
        only,
        selection,
        repeats,
        recommended,
        ceiling,
        problem,
        sizing,
        step,
    )
    executor.check(runnable)
    results = Path(results)
    name = get_study(study).name
    whole = full or scale == "seed"
    if dry_run:

        def current(s: Scenario) -> CurrentRecord:
            return executor.current(s, results)

        every = [*runnable, *(s for s, _ in not_run)]
        the_plan = make_plan(every, not_run, wanted, current, force=force, probes=probes)
        summary = plan_line(the_plan, scale, name, whole, results, sizing, device)
        print("\n".join(dry_run_lines(the_plan, summary, current, force, sizing)), flush=True)
        return [the_plan.reused[s] for s in runnable if s in the_plan.reused]
    held = measuring(f"{scale} {name} matrix", wait) if executor.needs_lock() else nullcontext()
    with held:
        _write_not_run(not_run, results)
        the_plan = make_plan(
            runnable,
            not_run,
            wanted,
            lambda s: executor.current(s, results),
            force=force,
            probes=probes,
        )
        if show_progress:
            print(plan_line(the_plan, scale, name, whole, results, sizing, device), flush=True)
        todo = sum(max(0, n) for n in the_plan.missing.values())
        probed = (
            session_probe(*probe_devices(runnable), records.machine_folder(results))
            if todo and executor.needs_lock()
            else nullcontext()
        )
        progress = Progress(todo, f"{scale} matrix", show_progress)
        try:
            with probed:
                done = executor.execute(the_plan, results, progress)
        finally:
            progress.close()
    return [done[s] for s in runnable]


def probe_devices(scenarios: list[Scenario]) -> tuple[str, int]:
    """The device kind and count a session of `scenarios` probes: its CPU devices (the
    most in one process) where it has CPU rows, else its GPUs."""
    kind = "cpu" if any(s.device == "cpu" for s in scenarios) or not scenarios else "gpu"
    counts = [s.devices_per_process for s in scenarios if s.device == kind]
    return kind, max(counts, default=1)


def for_problem(found: list, problem: str) -> list:
    """Scenarios (or `(scenario, why)` pairs) of the matrix for `problem`
    (`Scenario.for_problem`), leaving out those the problem cannot run."""
    out = []
    for item in found:
        s, rest = (item[0], item[1:]) if isinstance(item, tuple) else (item, ())
        try:
            moved = s.for_problem(problem)
        except ValueError:  # for example a spread on a problem without one
            continue
        out.append((moved, *rest) if rest else moved)
    return out


def _takes(s: Scenario, step: dict[str, Any]) -> bool:
    """Whether the step file `step` was tuned for `s`'s problem, controller and device."""
    return all(getattr(s, fact) == step[fact] for fact in MATCHED)


def _with_step(found: list[Scenario], step: dict[str, Any]) -> list[Scenario]:
    """The scenarios of `found` that `step` was tuned for, with its levers, once each."""
    out = [apply_step(s.default_step(), step) for s in found if _takes(s, step)]
    return list({s.key(): s for s in out}.values())


def _with_step_pairs(
    found: list[tuple[Scenario, str]], step: dict[str, Any]
) -> list[tuple[Scenario, str]]:
    return [(apply_step(s.default_step(), step), why) for s, why in found]


def _scenarios_to_run(
    scale: str,
    device: str,
    study: "str | Study",
    full: bool,
    only: Iterable[Scenario] | None,
    selection: dict[str, str] | None,
    repeats: int | None,
    recommended: bool,
    ceiling: bool | None,
    problem: str = DEFAULT_PROBLEM,
    sizing: Sizing = THIS_MACHINE,
    step: dict[str, Any] | None = None,
) -> tuple[list[Scenario], list[tuple[Scenario, str]], int, list[Scenario]]:
    """The scenarios a matrix command runs, those it cannot run here (with the reason),
    the runs wanted per scenario and the ceiling probes (see `run_matrix`)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid choices: {', '.join(SCALES)}")
    the_study = get_study(study)
    runnable, not_run = plan(scale, device, the_study, full, sizing)
    if problem != DEFAULT_PROBLEM:
        runnable, not_run = for_problem(runnable, problem), for_problem(not_run, problem)
    if recommended:
        if not the_study.recommendable:
            raise ValueError(
                f"--recommended applies to the scaling study only; got study {the_study.name!r}"
            )

        # The matrix holds both steps; with the recommended one applied they are one row.
        runnable = list({s.key(): s for s in map(apply, runnable)}.values())
        not_run = list(
            {s.key(): (s, why) for s, why in ((apply(s), w) for s, w in not_run)}.values()
        )
    if step is not None:
        if recommended or not the_study.recommendable:
            raise ValueError("--step applies to the scaling study alone, without --recommended")
        runnable = _with_step(runnable, step)
        not_run = [(s, why) for s, why in not_run if _takes(s, step)]
        not_run = list({s.key(): (s, w) for s, w in _with_step_pairs(not_run, step)}.values())
    if only is not None:
        runnable = list(only)
    if selection:
        every = len(runnable) + len(not_run)
        runnable = select(runnable, selection)
        not_run = [(s, why) for s, why in not_run if select([s], selection)]
        if not runnable and not not_run:
            shown = ",".join(f"{k}={v}" for k, v in selection.items())
            raise ValueError(
                f"--select {shown} matches none of the {every} scenarios "
                f"of the {scale} {the_study.name} matrix"
            )
    wanted = repeats or the_study.runs(scale)
    if ceiling is None:
        ceiling = the_study.ceiling and scale != "seed" and wanted > 1
    probes = (
        [
            s
            for s in runnable
            if s.device == "cpu"
            and s.mode == "single"
            and s.scaling == "strong"
            and s.processes == 1
        ]
        if ceiling
        else []
    )
    return runnable, not_run, wanted, probes


def _write_not_run(not_run: list[tuple[Scenario, str]], results: Path) -> None:
    """A `not_run` record for every row that cannot run here (the same one already
    there is left alone, and the checkout with it)."""
    here = environment.machine_id(environment.this_machine())
    for s, reason in not_run:
        path = record_path(s, results)
        try:
            old = records.read_record(path)
            same = (
                old.get("status") == "not_run"
                and old.get("error") == reason
                and old.get("scenario_key") == s.key()
                and old.get("machine_id") == here
            )
        except (OSError, ValueError):
            same = False
        if not same:
            records.write_json_atomic(path, failed_record(s, reason, status="not_run"))


def plan_line(
    p: MatrixPlan,
    scale: str,
    study: str,
    whole: bool,
    results: Path,
    sizing: Sizing = THIS_MACHINE,
    device: str = "auto",
) -> str:
    """The plan of a matrix command in one line: scenarios, reusable records, runs to do
    and an estimate of their duration here; what the matrix is sized to (this machine,
    or `sizing.devices` devices of the kind `device`)."""
    missing = p.missing
    todo = sum(max(0, n) for n in missing.values())
    cold = len(p.cold)
    probes = p.count(CeilingProbe)
    seconds = sum(estimate_s(s, results, n) for s, n in missing.items() if n > 0)
    seconds += 25.0 * probes
    counts = sorted({s.total_devices for s in p.scenarios})
    size = "sized"
    if sizing.devices is not None:
        size = f"sized to {sizing.devices} {device.upper()} devices"
    return (
        f"{scale} {study} matrix ({'whole' if whole else size}"
        f": devices {', '.join(map(str, counts)) or 'none'}): {len(p.scenarios)} "
        f"scenarios, {len(p.scenarios) - cold} reusable; {todo} run(s) to do "
        f"({cold} cold, {todo - cold} repeats"
        f"{', machine ceiling each round' if probes and todo else ''}), "
        f"about {seconds / 60:.0f} min here"
    )


# A scenario's current record, why it cannot stand (None: it can) and its folder
# (`plan.make_plan`'s `current`: the executor's).
CurrentRecord = tuple[Record | None, str | None, Path | None]
Current = Callable[[Scenario], CurrentRecord]


def dry_run_lines(
    p: MatrixPlan,
    summary: str,
    current: Current,
    force: bool,
    sizing: Sizing = THIS_MACHINE,
) -> list[str]:
    """`odestudy matrix --dry-run`: the plan line `summary`, the rows that cannot run
    here counted, then a line per scenario: its name and key, its runs to do (cold,
    repeats), its record (reused, missing, or stale and why: `plan.why_stale`) and, for
    a row that cannot run here, why (`absent`); a CPU row on more devices than this
    machine's physical cores says so (virtual devices: overhead, not speedup)."""
    cannot = dict(p.not_run)
    cores = sized_limit("cpu")
    lines = [summary]
    if cannot:
        lines.append(
            f"{len(cannot)} of these {len(p.scenarios)} scenarios cannot run here (each "
            "says why); their runs are those of a machine where they can"
        )
    lines.append("dry run: nothing runs; no record, lock or probe is made")
    for s in p.scenarios:
        todo = max(0, p.missing[s])
        cold = int(s in p.cold)
        parts = [
            f"{todo} run(s) to do ({cold} cold, {todo - cold} repeats)",
            _record_state(s, p, current, force),
        ]
        if s in cannot:
            parts.append(cannot[s])
        elif s.device == "cpu" and s.total_devices > cores:
            parts.append(f"beyond this machine's {cores} physical cores: overhead, not speedup")
        lines.append(f"  {s.name()} [{s.key()}]: " + "; ".join(parts))
    return lines


def _record_state(
    s: Scenario,
    p: MatrixPlan,
    current: Current,
    force: bool,
) -> str:
    """A scenario's record in a dry run: reused (with its runs), run again (`force`),
    missing, or stale and why (`plan.why_stale`)."""
    if s in p.reused:
        return f"record reused ({runs(p.reused[s])} of {p.wanted} runs)"
    rec, why, _ = current(s)
    if rec is None:
        return "no record"
    if why is None and force:
        return "record run again (--force)"
    return f"record stale: {why}"


def get_study(spec: "str | Study | type[Study]") -> Study:
    """The study `spec` names: a registered name, or `module:Class` (imported, also from
    the working directory) of a `Study` subclass; ValueError naming the choices
    otherwise."""
    if isinstance(spec, Study):
        return spec
    if isinstance(spec, type) and issubclass(spec, Study):
        return spec()
    if spec in STUDIES:
        return STUDIES[spec]()
    if ":" in spec:
        module, _, attr = spec.partition(":")
        found = getattr(import_module(module), attr, None)
        if isinstance(found, type) and issubclass(found, Study):
            return found()
        raise ValueError(f"study {spec!r}: {attr!r} of {module!r} is no Study subclass")
    raise ValueError(
        f"unknown study {spec!r}; valid choices: {', '.join(STUDIES)}, or module:Class"
    )
