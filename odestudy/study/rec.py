"""Records as the report reads them, typed (`measure.record.View`s): `Rec`, one
scenario's record with what the report's reader and joins add to it, and views of the
study's other JSON records (levers, floor counts, rooflines, sweeps, predictions,
probes, ceilings, loss spreads)."""

from collections.abc import Callable
from typing import Any, TypeVar

from ..measure.record import Each, Fields, Hardware, Key, Nested, Record, View
from ..measure.record import EvalPoint as EvalPoint
from ..measure.record import Waste as Waste

V = TypeVar("V", bound=dict[str, Any])


class Rec(Record):
    """One record as the report reads it (`frames.read_records`) and joins it."""

    # Set where the report reads records (`runs.trained_state`, `sessions`, `claims`) and
    # on predicted rows (`exceeds_cores`).
    cold_step_time_s: Key[float | None] = Key()
    contended_runs: Key[list[str] | None] = Key()
    session: Key[Any] = Key()
    newest: Key[Any] = Key()  # of records joined (`runs.merged`), the last alone
    exceeds_cores: Key[bool | None] = Key()
    source: Key[str | None] = Key()
    # Added by the joins (`frames.scaling_rows`).
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
    # Over the best 1-device step (`best.attach_best`; also `best_step_s`,
    # `best_final_loss`, `efficiency_best` and its `_ci`, read as columns).
    best_step: Key[str | None] = Key()
    speedup_best: Key[float | None] = Key()
    speedup_best_ci: Key[tuple[float, float] | None] = Key()
    best_differs: Key[bool | None] = Key()


class Made(View):
    """A study's record: its scenario, where and when it was made, and its `path` and
    `session` where the report set them."""

    scenario: Key[dict[str, Any]] = Key()
    fields: Nested[Fields] = Nested(Fields, "scenario")
    workload: Key[str | None] = Key()
    machine_id: Key[str | None] = Key()
    device_kind: Key[str | None] = Key()
    versions: Key[dict[str, str | None]] = Key()
    git_commit: Key[str | None] = Key()
    started: Key[str | None] = Key()
    finished: Key[str | None] = Key()
    path: Key[str] = Key()
    session: Key[Any] = Key()


class Matmul(View):
    """One matmul timed by a machine probe (`measure.probe`)."""

    flops_per_s: Key[float] = Key()
    batch: Key[int] = Key()
    width: Key[int] = Key()


class AllReduce(View):
    """One measured all-reduce latency of a machine (`benchmarks/collectives.py`)."""

    n_devices: Key[int] = Key()
    size: Key[int] = Key()
    latency_s: Key[float] = Key()


class Probe(Made):
    """A session's probe of its devices (`measure.probe`), as a levers record keeps it."""

    loop_iteration_s: Key[float] = Key()
    allreduce: Each[AllReduce] = Each(AllReduce)
    matmul: Each[Matmul] = Each(Matmul)


class Rates(View):
    """A machine's measured rates (`measure.cost`), as a sweep records them."""

    matmul_flops_per_s: Key[float] = Key()
    memory_bytes_per_s: Key[float] = Key()
    cache_bytes_per_s: Key[float | None] = Key()


class SweepRow(View):
    """One batch of a step-cost sweep (`benchmarks/step_cost.py`)."""

    batch: Key[int] = Key()
    step_time_s: Key[float] = Key()
    step_time_p25_s: Key[float] = Key()
    step_time_p75_s: Key[float] = Key()
    per_iteration_s: Key[float] = Key()
    iterations_executed: Key[float] = Key()
    forward_time_s: Key[float | None] = Key()
    forward_share: Key[float | None] = Key()
    step_times_s: Key[list[float] | None] = Key()


class SweepFit(View):
    """A step-cost sweep's fitted time per solver iteration: `fixed + per_sample * batch`."""

    fixed_per_iteration_s: Key[float] = Key()
    per_sample_iteration_s: Key[float] = Key()
    r2: Key[float | None] = Key()


class Sweep(Made):
    """One step-cost sweep of a machine (`benchmarks/step_cost.py`)."""

    label: Key[str | None] = Key()
    protocol: Key[int | None] = Key()
    machine: Key[str | None] = Key()
    rows: Each[SweepRow] = Each(SweepRow)
    fit: Nested[SweepFit] = Nested(SweepFit)
    hardware: Nested[Hardware] = Nested(Hardware)
    rates: Nested[Rates] = Nested(Rates)
    probe: Nested[Probe] = Nested(Probe)


class Projected(View):
    """One projected multi-GPU row (`projection.project_gpu`)."""

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


class Published(View):
    """One row of the reference study's published tables (`data/reference_tables.csv`;
    every value is the CSV's text)."""

    device: Key[str] = Key()
    n_devices: Key[str] = Key()
    mode: Key[str] = Key()
    controller: Key[str] = Key()
    epoch_time_s: Key[str] = Key()
    final_loss: Key[str] = Key()


class FloorCounts(View):
    """What a step must compute and the rates it is set against (`benchmarks/levers.py`)."""

    per_evaluation: Key[float] = Key()
    rest: Key[float] = Key()
    per_evaluation_transcendentals: Key[float | None] = Key()
    rest_transcendentals: Key[float | None] = Key()
    least_bytes: Key[float | None] = Key()
    matmul_flops_per_s: Key[float] = Key()
    matmul_flops_per_s_rounds: Key[list[float] | None] = Key()
    transcendentals_per_s: Key[float | None] = Key()
    tree_commit: Key[str | None] = Key()


class Loops(View):
    """What one step executes (`measure.loops.count_loops`)."""

    bodies_by: Key[dict[str, int]] = Key()
    conditional_executions: Key[dict[str, int]] = Key()
    instructions: Key[int | None] = Key()


class Found(Key[V | None]):
    """A nested dict read as the view `view`, None where it is missing or empty."""

    def __init__(self, view: Callable[[Any], V]) -> None:
        super().__init__()
        self.view = view

    def read(self, found: Any) -> V | None:
        return self.view(found) if found else None


class LeverRow(View):
    """One variant's row of a levers record (`benchmarks/levers.py`)."""

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
    loops: Found[Loops] = Found(Loops)  # where counted
    floor: Found[FloorCounts] = Found(FloorCounts)  # where the record counted each variant's


class LeverRecord(Made):
    """A levers record (`benchmarks/levers.py`): the variants' rows, the default's first."""

    probe: Nested[Probe] = Nested(Probe)
    rows: Each[LeverRow] = Each(LeverRow)
    floor: Found[FloorCounts] = Found(FloorCounts)  # where it counted them


class Roofline(Made):
    """One roofline reading of a GPU machine (`benchmarks/gpu_session.sh roofline`)."""

    peak_flops_per_s: Key[float] = Key()
    bandwidth_bytes_per_s: Key[float] = Key()
    kernel_s: Key[float | None] = Key()


class PredictedPoint(View):
    """One predicted point of a mode along the per-device batch axis."""

    per_device_batch: Key[int] = Key()
    speedup: Key[float] = Key()
    speedup_interval: Key[list[float]] = Key()


class PredictedMode(View):
    """One mode's prediction along the batch axis: its points, where it crosses 1
    (`crossover.Crossing`'s fields) and the work there."""

    batch: Key[dict[str, Any]] = Key()
    work_s: Key[list[float] | None] = Key()
    points: Each[PredictedPoint] = Each(PredictedPoint)


class PredictedRow(View):
    """One mode's predicted step of a prediction (`odestudy predict`)."""

    mode: Key[str] = Key()
    step_time_s: Key[float] = Key()
    step_time_interval_s: Key[tuple[float, float]] = Key()
    speedup: Key[float] = Key()
    speedup_interval: Key[tuple[float, float]] = Key()
    compute_s: Key[float] = Key()
    allreduce_s: Key[float] = Key()
    in_loop_s: Key[float] = Key()


class MadeFrom(View):
    """What a prediction was made from: its prediction model and profile."""

    model: Key[int | None] = Key()
    profile: Key[str | None] = Key()


class Profile(View):
    """A prediction's profile of collective costs (`predict`)."""

    name: Key[str] = Key()
    description: Key[str] = Key()


class Prediction(Made):
    """A prediction of the map (`odestudy predict --map`): one workload and controller,
    a row per mode, and along the batch axis its `crossover`."""

    n_devices: Key[int] = Key()
    processes: Key[int | None] = Key()
    nodes: Key[int | None] = Key()
    one_device_step_s: Key[float] = Key()
    trained: Key[bool | None] = Key()
    trained_loss: Key[float | None] = Key()
    trained_from: Key[str | None] = Key()
    final_loss: Key[float] = Key()
    machine: Key[str | None] = Key()
    rows: Each[PredictedRow] = Each(PredictedRow)
    made_from: Nested[MadeFrom] = Nested(MadeFrom)
    profile: Nested[Profile] = Nested(Profile)
    sweep: Nested[Sweep] = Nested(Sweep)

    @property
    def crossover(self) -> dict[str, PredictedMode] | None:
        """Along the batch axis, each mode's prediction (None where not made so)."""
        found = self.get("crossover")
        if not found:
            return None
        modes = found["modes"] or {}
        return {mode: PredictedMode(m) for mode, m in modes.items() if m is not None}


class CeilingRun(View):
    """One run of a ceiling record (`study.ceiling`): its phases' blocks of step times."""

    status: Key[str | None] = Key()
    alone: Key[list[list[float]] | None] = Key()
    paired: Key[list[list[float]] | None] = Key()
    one_core: Key[list[list[float]] | None] = Key()


class Ceiling(Made):
    """A machine's weak-scaling ceiling record (`study.ceiling`) of one 1-device scenario."""

    name: Key[str | None] = Key()
    probe_run_id: Key[str | None] = Key()
    runs: Each[CeilingRun] = Each(CeilingRun)


class LossSpread(Made):
    """A run-to-run loss spread record (`study.spread`): one default step over seeds."""

    rows: Key[list[dict[str, Any]]] = Key()
    spread_relative: Key[float] = Key()
