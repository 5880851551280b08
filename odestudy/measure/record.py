"""What one scenario's record holds: the `Record` type.

A record is one JSON file per scenario (`study.records` writes and reads it, and knows
where it lives). `n_devices` in a record is every device the scenario ran on, over all
processes (`Scenario.total_devices`); the scenario's own field is `devices_per_process`.
"""

from typing import Any, Literal, TypedDict

from .scenario import LEGACY_NAMES, Scenario


class Record(TypedDict, total=False):
    """One scenario's record. Timings are seconds; losses are mean squared errors."""

    # What ran: the scenario (`Scenario.to_dict`), its key and name, and the fields the
    # tables group by.
    scenario: dict[str, Any]
    scenario_key: str
    name: str
    device: str
    n_devices: int  # all devices, over every process
    processes: int
    devices_per_process: int
    mode: str
    controller: str
    scaling: str
    scale: str
    dataset_size: int
    global_batch: int
    per_device_batch: int
    learning_rate: float
    spread: float
    batching: str
    solve: str
    lr_scaling: str
    optimiser_state: str
    steps: int
    training_note: str | None  # why it trains unlike its scale's default, if it does
    problem: str  # what was trained (`Scenario.problem`)
    problem_facts: dict[str, Any]  # `problem.problem_facts`
    # How it went.
    status: Literal["ok", "failed", "not_run"]
    error: str | None
    traceback: str
    started: str
    finished: str
    run_id: str | None
    runtime_s: float
    kernel_wall_s: float
    phase_times_s: dict[str, Any]  # per phase: seconds, or a list per stage
    # What was measured: compile apart from steps; step times waited for, per run.
    compile_time_s: float
    compile_time_per_stage_s: list[float]
    step_time_s: float
    step_time_p25_s: float
    step_time_p75_s: float
    step_time_runs_s: list[float]
    step_times_runs_s: list[list[float]]
    host_runs: list[dict[str, Any] | None]  # per run: `measure.host.Watch`'s sample
    solver_steps_runs: list[float | None]  # per run: mean per-sample solver steps timed
    epoch_time_s: float
    final_loss: float
    trained: bool  # final_loss reached the problem's trained_loss
    trained_loss: float
    train_loss: list[float]
    eval_curve: list[dict[str, float]]
    stages: list[dict[str, Any]]
    solver_steps: dict[str, Any]
    collectives: dict[str, Any]
    collectives_total: int
    collectives_in_loops: int
    program_fingerprints: list[str]
    # Repeats (`study.repeats.merge_runs`).
    runs_finished: list[str]
    repeat_compile_time_s: list[float]
    repeat_how: str
    repeat_errors: list[str]
    cold_run_fields: list[str]
    # Where and with what: what a record's reuse is keyed by (machine, versions,
    # protocol, measurement environment) and its provenance.
    machine: dict[str, Any]
    machine_id: str
    versions: dict[str, str | None]
    protocol: int
    measurement_env: dict[str, str]
    code_fingerprint: str
    hardware: dict[str, Any]
    device_kind: str
    xla_flags: str
    jax_platforms: str
    eqx_on_error: str
    pmap_implementation: str
    git_commit: str | None
    source_trees: dict[str, str]  # `environment.source_trees`
    data_cached: bool
    trace_dir: str | None
    per_process_hardware: list[dict[str, Any]]  # multi-process runs
    # Added by the report's reader (`report.frames.read_records`): the file.
    path: str


# Every record has these keys, None where a failed scenario has no value.
REQUIRED_KEYS = (
    "status",
    "error",
    "device",
    "n_devices",
    "mode",
    "controller",
    "scaling",
    "dataset_size",
    "global_batch",
    "steps",
    "compile_time_s",
    "step_time_s",
    "step_time_p25_s",
    "step_time_p75_s",
    "epoch_time_s",
    "runtime_s",
    "final_loss",
    "solver_steps",
    "collectives_total",
    "collectives_in_loops",
    "versions",
    "hardware",
    "xla_flags",
    "git_commit",
)


def upgrade(data: dict[str, Any]) -> Record:
    """A record as read from disk, in today's terms: scenario fields renamed since it was
    made (`scenario.LEGACY_NAMES`) under their new names, and fields added since at
    their defaults (which the record ran with). Its measured values are unchanged."""
    rec: dict[str, Any] = dict(data)
    scenario = rec.get("scenario")
    if isinstance(scenario, dict):
        scenario = {LEGACY_NAMES.get(k, k): v for k, v in scenario.items()}
        for field in Scenario.fields():
            if field.name not in scenario and field.default is not None:
                scenario[field.name] = field.default
        rec["scenario"] = scenario
    return Record(**rec)  # type: ignore[typeddict-item]
