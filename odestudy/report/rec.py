"""Records as the report reads them, typed: `Rec`, one JSON record
(`measure.record.Record`) and what the report's reader and joins add to it (its file,
machine and session; speedups over its 1-device baseline and over the best 1-device
step), with an attribute per field the report reads. Its scenario, solver steps and
hardware are typed views too (`Fields`, `Steps`, `Hardware`).

A field is named once, here, as an attribute: `rec.step_time_s` reads the record's
`step_time_s` (None where the record lacks it) and `rec.speedup = x` writes it. The
views are dicts, so a record still goes to JSON and into a DataFrame as it is.
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
    # frames, gpu, device_tables, claims, verdict, prediction, answer, comparisons,
    # by_session, provenance, publish, document, intervals, tables
    scale: Key[str | None] = Key()
    device: Key[str | None] = Key()
    controller: Key[str | None] = Key()


class Steps(dict[str, Any]):
    """A record's solver steps (`training._steps_summary`)."""

    __slots__ = ()  # a field not named here is no attribute

    mean: Key[float | None] = Key()
    max: Key[int | None] = Key()
    lockstep_waste: Key[dict[str, Any] | None] = Key()
    # frames, gpu, device_tables, claims, verdict, prediction, answer, comparisons,
    # by_session, provenance, publish, document, intervals, tables
    executed_per_device: Key[Any] = Key()


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

    # frames, gpu, device_tables, claims, verdict, prediction, answer, comparisons,
    # by_session, provenance, publish, document, intervals, tables
    problem: Key[str | None] = Key()
    problem_facts: Key[dict[str, Any] | None] = Key()
    pmap_implementation: Key[str | None] = Key()
    exceeds_cores: Key[bool | None] = Key()
    source: Key[str | None] = Key()

    @property
    def last_stage(self) -> "Stage":
        """Its last (full-length) stage (empty where it has none)."""
        return Stage((self.stages or [{}])[-1])


# frames, gpu, device_tables, claims, verdict, prediction, answer, comparisons,
# by_session, provenance, publish, document, intervals, tables


class Stage(dict[str, Any]):
    """One length stage of a record's training (`Rec.stages`)."""

    __slots__ = ()

    step_times_s: Key[list[float] | None] = Key()


class EvalPoint(dict[str, Any]):
    """One evaluation during training (`Rec.eval_curve`)."""

    __slots__ = ()

    step: Key[int] = Key()
    eval_loss: Key[float] = Key()
    train_time_s: Key[float] = Key()


class AllReduce(dict[str, Any]):
    """One all-reduce timed by a machine probe (`measure.probe`)."""

    __slots__ = ()

    n_devices: Key[int] = Key()
    size: Key[int] = Key()
    latency_s: Key[float] = Key()


class Matmul(dict[str, Any]):
    """One matmul timed by a machine probe (`measure.probe`)."""

    __slots__ = ()

    flops_per_s: Key[float] = Key()
    batch: Key[int] = Key()
    width: Key[int] = Key()


class Probe(dict[str, Any]):
    """A machine probe (`measure.probe`): its all-reduces, matmuls and empty loop."""

    __slots__ = ()

    finished: Key[str | None] = Key()
    loop_iteration_s: Key[float] = Key()

    @property
    def allreduce(self) -> list[AllReduce]:
        """Its all-reduces (none where it timed none)."""
        return [AllReduce(a) for a in self.get("allreduce") or []]

    @property
    def matmul(self) -> list[Matmul]:
        """Its matmuls (none where it timed none)."""
        return [Matmul(m) for m in self.get("matmul") or []]


class Profile(dict[str, Any]):
    """A prediction's profile of collective costs (`predict`)."""

    __slots__ = ()

    name: Key[str] = Key()
    description: Key[str] = Key()


class PredictedMode(dict[str, Any]):
    """One mode's row of a prediction (`predict`): its step and speedup, with intervals."""

    __slots__ = ()

    mode: Key[str] = Key()
    step_time_s: Key[float] = Key()
    step_time_interval_s: Key[tuple[float, float]] = Key()
    speedup: Key[float] = Key()
    speedup_interval: Key[tuple[float, float]] = Key()


class SweepRow(dict[str, Any]):
    """One batch of a 1-device sweep (`predict`, `benchmarks/step_cost.py`)."""

    __slots__ = ()

    batch: Key[int] = Key()
    step_time_s: Key[float] = Key()
    step_times_s: Key[list[float] | None] = Key()


class Sweep(dict[str, Any]):
    """A 1-device sweep of batches (a prediction's, or a step-cost sweep's record)."""

    __slots__ = ()

    scenario: Key[dict[str, Any] | None] = Key()
    machine_id: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    versions: Key[dict[str, str | None] | None] = Key()
    protocol: Key[int | None] = Key()
    label: Key[str | None] = Key()
    machine: Key[str | None] = Key()
    path: Key[str | None] = Key()

    @property
    def fields(self) -> Fields:
        """Its scenario's fields."""
        return Fields(self.scenario or {})

    @property
    def rows(self) -> list[SweepRow]:
        """Its batches (none where it has none)."""
        return [SweepRow(r) for r in self.get("rows") or []]

    @property
    def probe(self) -> Probe:
        """Its session's machine probe (empty where none)."""
        return Probe(self.get("probe") or {})


class Prediction(dict[str, Any]):
    """A prediction of several devices from one (`odestudy predict`): its target
    scenario, each mode's predicted row, the profile and the 1-device sweep."""

    __slots__ = ()

    scenario: Key[dict[str, Any]] = Key()
    n_devices: Key[int] = Key()
    processes: Key[int | None] = Key()
    nodes: Key[int | None] = Key()
    one_device_step_s: Key[float] = Key()
    trained: Key[bool | None] = Key()
    trained_loss: Key[float | None] = Key()
    trained_from: Key[str | None] = Key()
    final_loss: Key[float] = Key()
    finished: Key[str | None] = Key()
    made_from: Key[dict[str, Any] | None] = Key()
    machine_id: Key[str | None] = Key()
    # Added where read: its file and the machine folder it is in.
    path: Key[str] = Key()
    machine: Key[str | None] = Key()

    @property
    def fields(self) -> Fields:
        """Its target scenario's fields."""
        return Fields(self.scenario or {})

    @property
    def rows(self) -> list[PredictedMode]:
        """Each mode's predicted row (none where it has none)."""
        return [PredictedMode(r) for r in self.get("rows") or []]

    @property
    def profile(self) -> Profile:
        """Its profile (empty where not recorded)."""
        return Profile(self.get("profile") or {})

    @property
    def sweep(self) -> Sweep:
        """Its 1-device sweep (empty where not recorded)."""
        return Sweep(self.get("sweep") or {})
