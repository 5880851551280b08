"""Records as the report reads them, typed: `Rec`, one scenario's JSON record
(`measure.record.Record`) and what the report's reader and joins add to it (its file,
machine and session; speedups over its 1-device baseline and over the best 1-device
step), with an attribute per field the report reads; typed views of what a record
nests (its scenario `Fields`, solver `Steps`, `Hardware`, stages, evaluation curve) and
of the study's other JSON records (levers records and their rows, floor counts,
rooflines, step-cost sweeps, predictions, probes, ceilings, loss spreads).

A field is named once, here, as an attribute: `rec.step_time_s` reads the record's
`step_time_s` (None where the record lacks it) and `rec.speedup = x` writes it. The
views are dicts, so a record still goes to JSON and into a DataFrame as it is. The
report (`report/`) reads records through them; the study layer's `ReportInputs` holds
them.
"""

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Key(Generic[T]):
    """A dict's key read and written as an attribute of the same name (None where the
    dict lacks it), typed `T`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, view: None, owner: type) -> "Key[T]": ...

    @overload
    def __get__(self, view: dict[str, Any], owner: type) -> T: ...

    def __get__(self, view: dict[str, Any] | None, owner: type) -> "T | Key[T]":
        return self if view is None else view.get(self.key)  # type: ignore[return-value]

    def __set__(self, view: dict[str, Any], value: T) -> None:
        view[self.key] = value


class Fields(dict[str, Any]):
    """A record's scenario (`Scenario.to_dict`), the fields the report reads."""

    __slots__ = ()  # a field not named here is no attribute

    problem: Key[str | None] = Key()
    batch: Key[int | None] = Key()
    width: Key[int | None] = Key()
    spread: Key[float | None] = Key()
    batching: Key[str | None] = Key()
    solve: Key[str | None] = Key()
    saveat: Key[str | None] = Key()
    adjoint: Key[str | None] = Key()
    max_steps: Key[int | None] = Key()
    stages: Key[str | None] = Key()
    integrator: Key[str | None] = Key()
    mlp_reverse: Key[bool | None] = Key()
    fast_activations: Key[bool | None] = Key()
    vector_width: Key[int | None] = Key()
    donate: Key[bool | None] = Key()
    unroll: Key[int | None] = Key()
    added_levers: Key[list[str] | None] = Key()
    nodes: Key[int | None] = Key()
    seed: Key[int | None] = Key()
    learning_rate: Key[float | None] = Key()
    device: Key[str | None] = Key()
    controller: Key[str | None] = Key()
    length_fractions: Key[list[float] | None] = Key()
    steps_per_stage: Key[int | None] = Key()
    eval_every: Key[int | None] = Key()
    scale: Key[str | None] = Key()


class Steps(dict[str, Any]):
    """A record's solver steps (`training._steps_summary`)."""

    __slots__ = ()  # a field not named here is no attribute

    mean: Key[float | None] = Key()
    max: Key[int | None] = Key()
    lockstep_waste: Key[dict[str, Any] | None] = Key()
    executed_per_device: Key[float | None] = Key()
    last_step_per_sample: Key[list[int] | None] = Key()

    @property
    def waste(self) -> "Waste":
        """Its lock-step waste (empty where not measured)."""
        return Waste(self.lockstep_waste or {})


class Hardware(dict[str, Any]):
    """A record's hardware (`environment.hardware`)."""

    __slots__ = ()  # a field not named here is no attribute

    cpu_model: Key[str | None] = Key()
    physical_cores: Key[int | None] = Key()
    logical_cpus: Key[int | None] = Key()


class Rec(dict[str, Any]):
    """One record as the report reads it (`frames.read_records`); its joined rows
    (`frames.scaling_rows`, `best.attach_best`) are `Rec`s with more fields set."""

    __slots__ = ()  # a field not named here is no attribute

    # What ran.
    name: Key[str] = Key()
    scenario_key: Key[str | None] = Key()
    device: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    n_devices: Key[int] = Key()
    processes: Key[int | None] = Key()
    devices_per_process: Key[int | None] = Key()
    mode: Key[str] = Key()
    controller: Key[str] = Key()
    scaling: Key[str] = Key()
    scale: Key[str | None] = Key()
    global_batch: Key[int] = Key()
    per_device_batch: Key[int | None] = Key()
    # How it went and what was measured.
    status: Key[str | None] = Key()
    error: Key[str | None] = Key()
    started: Key[str | None] = Key()
    finished: Key[str | None] = Key()
    compile_time_s: Key[float | None] = Key()
    step_time_s: Key[float | None] = Key()
    step_time_p25_s: Key[float | None] = Key()
    step_time_p75_s: Key[float | None] = Key()
    step_time_runs_s: Key[list[float] | None] = Key()
    step_times_runs_s: Key[list[list[float]] | None] = Key()
    host_runs: Key[list[dict[str, Any] | None] | None] = Key()
    # Set by the report's reader (`report.runs.trained_state`).
    cold_step_time_s: Key[float | None] = Key()
    contended_runs: Key[list[str] | None] = Key()
    epoch_time_s: Key[float | None] = Key()
    runtime_s: Key[float | None] = Key()
    final_loss: Key[float | None] = Key()
    trained: Key[bool | None] = Key()
    trained_loss: Key[float | None] = Key()
    train_loss: Key[list[float] | None] = Key()
    eval_curve: Key[list[dict[str, float]] | None] = Key()
    stages: Key[list[dict[str, Any]] | None] = Key()
    collectives_total: Key[int | None] = Key()
    collectives_in_loops: Key[int | None] = Key()
    probe: Key[dict[str, Any] | None] = Key()
    # Where and with what.
    machine_id: Key[str | None] = Key()
    versions: Key[dict[str, str | None] | None] = Key()
    protocol: Key[int | None] = Key()
    measurement_env: Key[dict[str, str] | None] = Key()
    git_commit: Key[str | None] = Key()
    source_trees: Key[dict[str, str] | None] = Key()
    # Added by the reader: the file and the machine's session it was measured in.
    path: Key[str | None] = Key()
    session: Key[Any] = Key()
    # Added by the joins (`frames.scaling_rows`, `best.attach_best`).
    step: Key[str | None] = Key()
    speedup: Key[float | None] = Key()
    speedup_ci: Key[tuple[float, float] | None] = Key()
    efficiency: Key[float | None] = Key()
    efficiency_ci: Key[tuple[float, float] | None] = Key()
    untrained: Key[str | None] = Key()
    baseline_error: Key[str | None] = Key()
    baseline_final_loss: Key[float | None] = Key()
    baseline_runs: Key[int | None] = Key()
    baseline_session: Key[Any] = Key()
    ceiling: Key[Any] = Key()
    efficiency_vs_ceiling: Key[Any] = Key()
    best_step: Key[str | None] = Key()
    best_step_s: Key[float | None] = Key()
    best_final_loss: Key[float | None] = Key()
    speedup_best: Key[float | None] = Key()
    speedup_best_ci: Key[tuple[float, float] | None] = Key()
    efficiency_best: Key[float | None] = Key()
    efficiency_best_ci: Key[tuple[float, float] | None] = Key()
    best_differs: Key[bool | None] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields (empty for a record made before scenarios)."""
        return Fields(self.get("scenario") or {})

    @property
    def solver_steps(self) -> Steps:
        """Its solver steps (empty where none were counted)."""
        return Steps(self.get("solver_steps") or {})

    @property
    def hardware(self) -> Hardware:
        """Its hardware (empty where not recorded)."""
        return Hardware(self.get("hardware") or {})

    @property
    def ok(self) -> bool:
        """It ran to the end (`status` is "ok")."""
        return self.get("status") == "ok"

    learning_rate: Key[float | None] = Key()
    lr_scaling: Key[str | None] = Key()
    steps: Key[int | None] = Key()
    pmap_implementation: Key[str | None] = Key()
    runs_finished: Key[list[str] | None] = Key()

    @property
    def collectives(self) -> "Collectives":
        """Its compiled program's collectives (empty where not audited)."""
        return Collectives(self.get("collectives") or {})

    @property
    def curve(self) -> list["EvalPoint"]:
        """Its evaluation curve's points (none where it has no curve)."""
        return [EvalPoint(c) for c in self.eval_curve or []]

    @property
    def stage_times(self) -> list["Stage"]:
        """Its training stages' timings (none where not recorded)."""
        return [Stage(s) for s in self.stages or []]

    run_id: Key[str | None] = Key()
    problem: Key[str | None] = Key()
    problem_facts: Key[dict[str, Any] | None] = Key()
    exceeds_cores: Key[bool | None] = Key()
    source: Key[str | None] = Key()

    @property
    def last_stage(self) -> "Stage":
        """Its last (full-length) stage (empty where it has none)."""
        return Stage((self.stages or [{}])[-1])


class Waste(dict[str, Any]):
    """A record's lock-step waste (`analysis.lockstep_waste`): shares of the executed
    solver steps no sample needed."""

    __slots__ = ()  # a field not named here is no attribute

    within_device: Key[float | None] = Key()
    across_devices: Key[float | None] = Key()
    total: Key[float | None] = Key()


class Collectives(dict[str, Any]):
    """A record's collectives in its compiled program (`audit.CollectiveAudit`)."""

    __slots__ = ()  # a field not named here is no attribute

    total: Key[int] = Key()
    in_loops: Key[int] = Key()
    bytes_in_loops: Key[int | None] = Key()


class EvalPoint(dict[str, Any]):
    """One point of a record's evaluation curve."""

    __slots__ = ()  # a field not named here is no attribute

    step: Key[int] = Key()
    train_time_s: Key[float] = Key()
    eval_loss: Key[float] = Key()


class Stage(dict[str, Any]):
    """One training stage of a record: its step times."""

    __slots__ = ()  # a field not named here is no attribute

    step_time_s: Key[float] = Key()
    step_times_s: Key[list[float] | None] = Key()


class SweepRow(dict[str, Any]):
    """One batch of a step-cost sweep (`benchmarks/step_cost.py`)."""

    __slots__ = ()  # a field not named here is no attribute

    batch: Key[int] = Key()
    step_time_s: Key[float] = Key()
    step_time_p25_s: Key[float] = Key()
    step_time_p75_s: Key[float] = Key()
    per_iteration_s: Key[float] = Key()
    iterations_executed: Key[float] = Key()
    forward_time_s: Key[float | None] = Key()
    forward_share: Key[float | None] = Key()
    step_times_s: Key[list[float] | None] = Key()


class SweepFit(dict[str, Any]):
    """A step-cost sweep's fitted time per solver iteration: `fixed + per_sample * batch`."""

    __slots__ = ()  # a field not named here is no attribute

    fixed_per_iteration_s: Key[float] = Key()
    per_sample_iteration_s: Key[float] = Key()
    r2: Key[float | None] = Key()


class Sweep(dict[str, Any]):
    """One step-cost sweep of a machine (`benchmarks/step_cost.py`), with its `path` and
    its `session` where the report set them."""

    __slots__ = ()  # a field not named here is no attribute

    label: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    machine_id: Key[str | None] = Key()
    git_commit: Key[str | None] = Key()
    path: Key[str | None] = Key()
    session: Key[Any] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields."""
        return Fields(self.get("scenario") or {})

    @property
    def rows(self) -> list[SweepRow]:
        """Its rows, one per batch."""
        return [SweepRow(r) for r in self.get("rows") or []]

    @property
    def fit(self) -> SweepFit:
        """Its fitted time per solver iteration."""
        return SweepFit(self.get("fit") or {})

    @property
    def hardware(self) -> Hardware:
        """Its hardware (empty where not recorded)."""
        return Hardware(self.get("hardware") or {})

    @property
    def rates(self) -> "Rates":
        """The machine's rates (empty where not recorded)."""
        return Rates(self.get("rates") or {})

    scenario: Key[dict[str, Any] | None] = Key()
    versions: Key[dict[str, str | None] | None] = Key()
    protocol: Key[int | None] = Key()
    machine: Key[str | None] = Key()

    @property
    def probe(self) -> "Probe":
        """Its session's machine probe (empty where none)."""
        return Probe(self.get("probe") or {})


class AllReduce(dict[str, Any]):
    """One measured all-reduce latency of a machine (`benchmarks/collectives.py`)."""

    __slots__ = ()  # a field not named here is no attribute

    n_devices: Key[int] = Key()
    size: Key[int] = Key()
    latency_s: Key[float] = Key()


class Projected(dict[str, Any]):
    """One projected multi-GPU row (`projection.project_gpu`)."""

    __slots__ = ()  # a field not named here is no attribute

    scale: Key[str] = Key()
    mode: Key[str] = Key()
    n_devices: Key[int] = Key()
    controller: Key[str] = Key()
    global_batch: Key[int] = Key()
    step_time_s: Key[float] = Key()
    low_s: Key[float] = Key()
    high_s: Key[float] = Key()
    one_gpu_s: Key[float] = Key()
    speedup: Key[float] = Key()
    in_loop: Key[int] = Key()


class Published(dict[str, Any]):
    """One row of the reference study's published tables (`data/reference_tables.csv`;
    every value is the CSV's text)."""

    __slots__ = ()  # a field not named here is no attribute

    device: Key[str] = Key()
    n_devices: Key[str] = Key()
    mode: Key[str] = Key()
    controller: Key[str] = Key()
    epoch_time_s: Key[str] = Key()
    final_loss: Key[str] = Key()


class FloorCounts(dict[str, Any]):
    """What a step must compute and the rates it is set against (`benchmarks/levers.py`'s
    `floor_of`, in a levers record, one of its rows or its sidecar)."""

    __slots__ = ()  # a field not named here is no attribute

    per_evaluation: Key[float] = Key()
    rest: Key[float] = Key()
    per_evaluation_transcendentals: Key[float | None] = Key()
    rest_transcendentals: Key[float | None] = Key()
    least_bytes: Key[float | None] = Key()
    matmul_flops_per_s: Key[float] = Key()
    matmul_flops_per_s_rounds: Key[list[float] | None] = Key()
    transcendentals_per_s: Key[float | None] = Key()
    tree_commit: Key[str | None] = Key()


class Loops(dict[str, Any]):
    """What one step executes (`measure.loops.count_loops`)."""

    __slots__ = ()  # a field not named here is no attribute

    bodies_by: Key[dict[str, int]] = Key()
    conditional_executions: Key[dict[str, int]] = Key()
    instructions: Key[int | None] = Key()


class LeverRow(dict[str, Any]):
    """One variant's row of a levers record (`benchmarks/levers.py`); with the record's
    machine, scenario and path where `loss.in_record` gave them."""

    __slots__ = ()  # a field not named here is no attribute

    label: Key[str] = Key()
    levers: Key[dict[str, Any]] = Key()
    step_time_s: Key[float] = Key()
    step_times_runs_s: Key[list[list[float]] | None] = Key()
    speedup_vs_default: Key[float] = Key()
    speedup_ci: Key[tuple[float, float]] = Key()
    final_loss: Key[float] = Key()
    solver_steps_max: Key[int | None] = Key()
    solver_steps_reversed_max: Key[int | None] = Key()
    machine_id: Key[str | None] = Key()
    path: Key[str | None] = Key()

    @property
    def loops(self) -> Loops | None:
        """What one step executes, where counted."""
        found = self.get("loops")
        return None if not found else Loops(found)

    @property
    def floor(self) -> FloorCounts | None:
        """Its own floor counts, where the record counted each variant's."""
        found = self.get("floor")
        return None if not found else FloorCounts(found)


class LeverRecord(dict[str, Any]):
    """A levers record (`benchmarks/levers.py`, its `--map` form included): the variants'
    rows of one scenario, with the `path` it was read from (and its `session`, where
    `sessions.index` gave it one)."""

    __slots__ = ()  # a field not named here is no attribute

    workload: Key[str | None] = Key()
    machine_id: Key[str | None] = Key()
    versions: Key[dict[str, str | None]] = Key()
    started: Key[str | None] = Key()
    finished: Key[str | None] = Key()
    git_commit: Key[str | None] = Key()
    path: Key[str | None] = Key()
    session: Key[Any] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields."""
        return Fields(self.get("scenario") or {})

    @property
    def probe(self) -> "Probe":
        """Its session's probe of the devices (empty where not recorded)."""
        return Probe(self.get("probe") or {})

    @property
    def rows(self) -> list[LeverRow]:
        """Its variants' rows, the default's first."""
        return [LeverRow(r) for r in self.get("rows") or []]

    @property
    def floor(self) -> FloorCounts | None:
        """Its floor counts, where it counted them."""
        found = self.get("floor")
        return None if not found else FloorCounts(found)


class Roofline(dict[str, Any]):
    """One roofline reading of a GPU machine (`benchmarks/gpu_session.sh roofline`)."""

    __slots__ = ()  # a field not named here is no attribute

    peak_flops_per_s: Key[float] = Key()
    bandwidth_bytes_per_s: Key[float] = Key()
    kernel_s: Key[float | None] = Key()
    machine_id: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    versions: Key[dict[str, str | None] | None] = Key()
    finished: Key[str | None] = Key()


class Rates(dict[str, Any]):
    """A machine's measured rates (`measure.cost`), as a sweep records them."""

    __slots__ = ()  # a field not named here is no attribute

    matmul_flops_per_s: Key[float] = Key()
    memory_bytes_per_s: Key[float] = Key()
    cache_bytes_per_s: Key[float | None] = Key()


class PredictedPoint(dict[str, Any]):
    """One predicted point of a mode along the batch axis: its per-device batch and its
    speedup with its interval."""

    __slots__ = ()  # a field not named here is no attribute

    per_device_batch: Key[int] = Key()
    speedup: Key[float] = Key()
    speedup_interval: Key[list[float]] = Key()


class PredictedMode(dict[str, Any]):
    """One mode's prediction along the batch axis: its points, where it crosses 1 in the
    per-device batch (`crossover.Crossing`'s fields) and the work there."""

    __slots__ = ()  # a field not named here is no attribute

    batch: Key[dict[str, Any]] = Key()
    work_s: Key[list[float] | None] = Key()

    @property
    def points(self) -> list[PredictedPoint]:
        """Its predicted points."""
        return [PredictedPoint(p) for p in self.get("points", [])]


class PredictedRow(dict[str, Any]):
    """One mode's predicted step of a prediction (`odestudy predict`)."""

    __slots__ = ()  # a field not named here is no attribute

    mode: Key[str] = Key()
    step_time_s: Key[float] = Key()
    step_time_interval_s: Key[tuple[float, float]] = Key()
    speedup: Key[float] = Key()
    speedup_interval: Key[tuple[float, float]] = Key()
    compute_s: Key[float] = Key()
    allreduce_s: Key[float] = Key()
    in_loop_s: Key[float] = Key()


class MadeFrom(dict[str, Any]):
    """What a prediction was made from: its prediction model and profile."""

    __slots__ = ()  # a field not named here is no attribute

    model: Key[int | None] = Key()
    profile: Key[str | None] = Key()


class Prediction(dict[str, Any]):
    """A prediction of the map (`odestudy predict --map`): one workload and controller,
    a row per mode, and where made along the batch axis, its `crossover`."""

    __slots__ = ()  # a field not named here is no attribute

    workload: Key[str | None] = Key()
    n_devices: Key[int] = Key()
    finished: Key[str | None] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields."""
        return Fields(self.get("scenario") or {})

    @property
    def rows(self) -> list[PredictedRow]:
        """Its modes' predicted steps."""
        return [PredictedRow(r) for r in self.get("rows") or []]

    @property
    def made_from(self) -> MadeFrom:
        """What it was made from (empty where not said)."""
        return MadeFrom(self.get("made_from") or {})

    @property
    def crossover(self) -> dict[str, PredictedMode] | None:
        """Along the batch axis, each mode's prediction (None where not made so)."""
        found = self.get("crossover")
        if not found:
            return None
        modes = found["modes"] or {}
        return {mode: PredictedMode(m) for mode, m in modes.items() if m is not None}

    scenario: Key[dict[str, Any]] = Key()
    processes: Key[int | None] = Key()
    nodes: Key[int | None] = Key()
    one_device_step_s: Key[float] = Key()
    trained: Key[bool | None] = Key()
    trained_loss: Key[float | None] = Key()
    trained_from: Key[str | None] = Key()
    final_loss: Key[float] = Key()
    machine_id: Key[str | None] = Key()
    # Added where read: its file and the machine folder it is in.
    path: Key[str] = Key()
    machine: Key[str | None] = Key()

    @property
    def profile(self) -> "Profile":
        """Its profile (empty where not recorded)."""
        return Profile(self.get("profile") or {})

    @property
    def sweep(self) -> Sweep:
        """Its 1-device sweep (empty where not recorded)."""
        return Sweep(self.get("sweep") or {})


class Probe(dict[str, Any]):
    """A session's probe of its devices (`measure.probe`), as a levers record keeps it."""

    __slots__ = ()  # a field not named here is no attribute

    device_kind: Key[str | None] = Key()
    finished: Key[str | None] = Key()
    loop_iteration_s: Key[float] = Key()

    @property
    def allreduce(self) -> list[AllReduce]:
        """Its all-reduces (none where it timed none)."""
        return [AllReduce(a) for a in self.get("allreduce") or []]

    @property
    def matmul(self) -> list["Matmul"]:
        """Its matmuls (none where it timed none)."""
        return [Matmul(m) for m in self.get("matmul") or []]


class CeilingRun(dict[str, Any]):
    """One process's run of a ceiling record (`study.ceiling`): its phases' blocks of
    step times."""

    __slots__ = ()  # a field not named here is no attribute

    status: Key[str | None] = Key()
    alone: Key[list[list[float]] | None] = Key()
    paired: Key[list[list[float]] | None] = Key()
    one_core: Key[list[list[float]] | None] = Key()


class Ceiling(dict[str, Any]):
    """A machine's weak-scaling ceiling record (`study.ceiling`) of one 1-device
    scenario: its runs, and the cold run of the probe it was made on."""

    __slots__ = ()  # a field not named here is no attribute

    name: Key[str | None] = Key()
    probe_run_id: Key[str | None] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields (empty for a record without one)."""
        return Fields(self.get("scenario") or {})

    @property
    def runs(self) -> list[CeilingRun]:
        """Its processes' runs."""
        return [CeilingRun(r) for r in self.get("runs", [])]


class LossSpread(dict[str, Any]):
    """A run-to-run loss spread record (`benchmarks/loss_spread.py`): the final losses of
    one workload's default trained over several seeds."""

    __slots__ = ()  # a field not named here is no attribute

    workload: Key[str | None] = Key()
    machine_id: Key[str | None] = Key()
    rows: Key[list[dict[str, Any]]] = Key()
    spread_relative: Key[float] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields."""
        return Fields(self.get("scenario") or {})


class Matmul(dict[str, Any]):
    """One matmul timed by a machine probe (`measure.probe`)."""

    __slots__ = ()

    flops_per_s: Key[float] = Key()
    batch: Key[int] = Key()
    width: Key[int] = Key()


class Profile(dict[str, Any]):
    """A prediction's profile of collective costs (`predict`)."""

    __slots__ = ()

    name: Key[str] = Key()
    description: Key[str] = Key()
