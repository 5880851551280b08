"""What one scenario's record holds: `Record`, each field declared once as a `Key`.

A record is a dict (so it goes to JSON as it is) read and written through attributes.
"""

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from .scenario import LEGACY_NAMES, Scenario

T = TypeVar("T")
V = TypeVar("V", bound=dict[str, Any])


class Key(Generic[T]):
    """A dict's key read and written as an attribute (None where the dict lacks it).
    `required`: every record has it; `flat`: a column of `report.frames.flat`."""

    def __init__(self, key: str = "", *, required: bool = False, flat: bool = False) -> None:
        self.key, self.required, self.flat = key, required, flat

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = self.key or name

    @overload
    def __get__(self, view: None, owner: type) -> "Key[T]": ...

    @overload
    def __get__(self, view: dict[str, Any], owner: type) -> T: ...

    def __get__(self, view: dict[str, Any] | None, owner: type) -> "T | Key[T]":
        return self if view is None else self.read(view.get(self.key))

    def __set__(self, view: dict[str, Any], value: T) -> None:
        view[self.key] = value

    def read(self, found: Any) -> T:
        """The attribute's value for the dict's value `found`."""
        return found


class Nested(Key[V]):
    """A nested dict read as the view `view` (empty where the dict lacks it)."""

    def __init__(self, view: Callable[[Any], V], key: str = "", **flags: bool) -> None:
        super().__init__(key, **flags)
        self.view = view

    def read(self, found: Any) -> V:
        return self.view(found or {})


class Each(Key[list[V]]):
    """A nested list of dicts, each read as the view `view` (none where the dict lacks it)."""

    def __init__(self, view: Callable[[Any], V], key: str = "") -> None:
        super().__init__(key)
        self.view = view

    def read(self, found: Any) -> list[V]:
        return [self.view(x) for x in found or []]


class View(dict[str, Any]):
    """A dict read through its class's `Key`s: a name that is no `Key` is no attribute."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if not isinstance(getattr(type(self), name, None), Key):
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        super().__setattr__(name, value)


def declared(view: type[View]) -> list[Key[Any]]:
    """The `Key`s of `view`, in the order declared (its bases' first)."""
    return [k for c in reversed(view.__mro__) for k in vars(c).values() if isinstance(k, Key)]


SCENARIO_FIELDS = frozenset(f.name for f in Scenario.fields())


class Fields(View):
    """A record's scenario, each field of `Scenario` an attribute (untyped: the type
    checker cannot make a class's attributes from a dataclass's)."""

    def __getattr__(self, name: str) -> Any:
        if name not in SCENARIO_FIELDS:
            raise AttributeError(f"Scenario has no field {name!r}")
        return self.get(name)


class Waste(View):
    """A record's lock-step waste (`analysis.lockstep_waste`): shares of the executed
    solver steps no sample needed."""

    within_device: Key[float | None] = Key()
    across_devices: Key[float | None] = Key()
    total: Key[float | None] = Key()


class Steps(View):
    """A record's solver steps (`training._steps_summary`)."""

    mean: Key[float | None] = Key()
    max: Key[int | None] = Key()
    waste: Nested[Waste] = Nested(Waste, "lockstep_waste")
    executed_per_device: Key[float | None] = Key()
    last_step_per_sample: Key[list[int] | None] = Key()


class Hardware(View):
    """A record's hardware (`environment.hardware`)."""

    cpu_model: Key[str | None] = Key()
    physical_cores: Key[int | None] = Key()
    logical_cpus: Key[int | None] = Key()


class Collectives(View):
    """A record's collectives in its compiled program (`audit.CollectiveAudit`)."""

    total: Key[int] = Key()
    in_loops: Key[int] = Key()
    bytes_in_loops: Key[int | None] = Key()


class EvalPoint(View):
    """One point of a record's evaluation curve."""

    step: Key[int] = Key()
    train_time_s: Key[float] = Key()
    eval_loss: Key[float] = Key()


class Stage(View):
    """One training stage of a record: its step times."""

    step_time_s: Key[float] = Key()
    step_times_s: Key[list[float] | None] = Key()


class Record(View):
    """One scenario's record. Timings are seconds; losses are mean squared errors."""

    # What ran, and how it went ("ok", "failed" or "not_run").
    name: Key[str] = Key(flat=True)
    status: Key[str | None] = Key(flat=True, required=True)
    error: Key[str | None] = Key(flat=True, required=True)
    traceback: Key[str | None] = Key()
    fields: Nested[Fields] = Nested(Fields, "scenario")  # `Scenario.to_dict`
    device: Key[str | None] = Key(flat=True, required=True)
    n_devices: Key[int] = Key(flat=True, required=True)  # all devices, over every process
    processes: Key[int | None] = Key(flat=True)
    devices_per_process: Key[int | None] = Key(flat=True)
    mode: Key[str] = Key(flat=True, required=True)
    controller: Key[str] = Key(flat=True, required=True)
    scaling: Key[str] = Key(flat=True, required=True)
    scale: Key[str | None] = Key(flat=True)
    dataset_size: Key[int | None] = Key(required=True)
    global_batch: Key[int] = Key(flat=True, required=True)
    per_device_batch: Key[int | None] = Key(flat=True)
    learning_rate: Key[float | None] = Key(flat=True)
    spread: Key[float | None] = Key(flat=True)
    batching: Key[str | None] = Key(flat=True)
    solve: Key[str | None] = Key(flat=True)
    lr_scaling: Key[str | None] = Key(flat=True)
    optimiser_state: Key[str | None] = Key(flat=True)
    steps: Key[int | None] = Key(flat=True, required=True)
    training_note: Key[str | None] = Key()  # why it trains unlike its scale's default
    problem: Key[str | None] = Key()  # what was trained (`Scenario.problem`)
    problem_facts: Key[dict[str, Any] | None] = Key()  # `problem.problem_facts`
    # What was measured: compile apart from steps; step times waited for, per run.
    started: Key[str | None] = Key()
    run_id: Key[str | None] = Key()
    compile_time_s: Key[float | None] = Key(flat=True, required=True)
    compile_time_per_stage_s: Key[list[float] | None] = Key()
    step_time_s: Key[float | None] = Key(flat=True, required=True)
    step_time_p25_s: Key[float | None] = Key(flat=True, required=True)
    step_time_p75_s: Key[float | None] = Key(flat=True, required=True)
    step_time_runs_s: Key[list[float] | None] = Key()
    step_times_runs_s: Key[list[list[float]] | None] = Key()
    host_runs: Key[list[dict[str, Any] | None] | None] = Key()  # per run: `host.Watch`'s
    solver_steps_runs: Key[list[float | None] | None] = Key()  # per run: mean per sample
    epoch_time_s: Key[float | None] = Key(flat=True, required=True)
    runtime_s: Key[float | None] = Key(flat=True, required=True)
    kernel_wall_s: Key[float | None] = Key(flat=True)
    phase_times_s: Key[dict[str, Any] | None] = Key()  # per phase: seconds, or per stage
    final_loss: Key[float | None] = Key(flat=True, required=True)
    trained: Key[bool | None] = Key()  # final_loss reached the problem's trained_loss
    trained_loss: Key[float | None] = Key()
    train_loss: Key[list[float] | None] = Key()
    eval_curve: Key[list[dict[str, float]] | None] = Key()
    curve: Each[EvalPoint] = Each(EvalPoint, "eval_curve")
    stage_times: Each[Stage] = Each(Stage, "stages")
    solver_steps: Nested[Steps] = Nested(Steps, required=True)
    collectives: Nested[Collectives] = Nested(Collectives)
    collectives_total: Key[int | None] = Key(flat=True, required=True)
    collectives_in_loops: Key[int | None] = Key(flat=True, required=True)
    program_fingerprints: Key[list[str] | None] = Key()
    # Repeats (`study.repeats.merge_runs`).
    runs_finished: Key[list[str] | None] = Key()
    repeat_compile_time_s: Key[list[float] | None] = Key()
    repeat_how: Key[str | None] = Key()
    repeat_errors: Key[list[str] | None] = Key()
    cold_run_fields: Key[list[str] | None] = Key()
    # Where and with what: what its reuse is keyed by (machine, versions, protocol,
    # measurement environment), and its provenance.
    versions: Key[dict[str, str | None] | None] = Key(required=True)
    hardware: Nested[Hardware] = Nested(Hardware, required=True)
    xla_flags: Key[str | None] = Key(required=True)
    machine: Key[dict[str, Any] | None] = Key()
    machine_id: Key[str | None] = Key(flat=True)
    git_commit: Key[str | None] = Key(flat=True, required=True)
    protocol: Key[int | None] = Key(flat=True)
    measurement_env: Key[dict[str, str] | None] = Key()
    code_fingerprint: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    jax_platforms: Key[str | None] = Key()
    eqx_on_error: Key[str | None] = Key()
    pmap_implementation: Key[str | None] = Key()
    source_trees: Key[dict[str, str] | None] = Key()  # `environment.source_trees`
    data_cached: Key[bool | None] = Key()
    trace_dir: Key[str | None] = Key()
    per_process_hardware: Key[list[dict[str, Any]] | None] = Key()  # several processes
    probe: Key[dict[str, Any] | None] = Key()  # the session's (`measure.probe`)
    probe_processes: Key[list[Any] | None] = Key()  # collectives across its processes
    finished: Key[str | None] = Key(flat=True)
    scenario_key: Key[str | None] = Key(flat=True)
    path: Key[str | None] = Key(flat=True)  # its file, where the report read it

    @property
    def ok(self) -> bool:
        """It ran to the end (`status` is "ok")."""
        return self.status == "ok"

    @property
    def last_stage(self) -> Stage:
        """Its last (full-length) stage (empty where it has none)."""
        return (self.stage_times or [Stage()])[-1]


REQUIRED_KEYS = tuple(k.key for k in declared(Record) if k.required)


def upgrade(data: dict[str, Any]) -> Record:
    """A record as read from disk, in today's terms: renamed scenario fields under their
    new names, fields added since at their defaults (which the record ran with)."""
    rec = Record(data)
    scenario = rec.get("scenario")
    if isinstance(scenario, dict):
        scenario = {LEGACY_NAMES.get(k, k): v for k, v in scenario.items()}
        for field in Scenario.fields():
            if field.name not in scenario and field.default is not None:
                scenario[field.name] = field.default
        rec["scenario"] = scenario
    return rec
