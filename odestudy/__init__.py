"""odestudy: data-parallel training of neural ODEs, measured honestly."""

# The built-in studies (`builtin`: the top layer, above `study` and `report`, which ask the
# registry for them) register themselves as imported (`studies.STUDIES`).
from . import builtin  # noqa: F401
from .filterstep import FilterStep, make_step
from .measure.activations import FASTER, tanh_softplus
from .measure.audit import CollectiveCount, count_collectives
from .measure.checks import ProblemError
from .measure.compat import closure_convert_ignores_manual_sharding, make_data_mesh
from .measure.controllers import CONTROLLERS, PID, AbstractController, StepTo
from .measure.data import Dataset, batch_stream, epoch_batches, make_dataset, solver_cost
from .measure.devices import configure_devices
from .measure.lever import LEVERS, AbstractAddedLever, AbstractLever, Facts
from .measure.loops import control_flow, count_loops
from .measure.loss import Mean
from .measure.mlp_reverse import AbstractMLPField
from .measure.model import (
    BatchSolve,
    Solve,
    VectorField,
    batch_loss,
    batch_loss_within_ode,
    solve,
    solve_scan,
    solve_within_ode,
)
from .measure.modes import MODES, AbstractMode, ParallelStep
from .measure.problem import (
    PROBLEMS,
    AbstractODEProblem,
    AbstractProblem,
    Oscillator,
    OscillatorBank,
    SeriesProblem,
    observed,
    register_problem,
    resolve_problem,
    stage_lengths,
)
from .measure.recommended import (
    diffrax_levers,
    fused_levers,
    recommended,
    recommended_levers,
    safe_levers,
)
from .measure.scenario import SCALES, Scenario, validate
from .measure.solvers import INTEGRATORS, AbstractIntegrator, Diffrax, Fused, Kernel, Structure
from .measure.step import make_local_step, make_parallel_step
from .measure.training import run_scenario, train
from .measure.tsit5 import StraightTsit5
from .plain import LossProblem, loss_problem, predict_loss, tune_loss
from .report.document import write_report
from .report.frames import load_curves, load_records, load_runs, load_steps, results_folder
from .report.plots import plot_scenario, summary
from .study.claim import Agreement, Answer, Claim, Comparison, Verdict
from .study.distributed import launch, run_scenario_any
from .study.records import read_record, save_record, write_json_atomic
from .study.steps import Step, load_step
from .study.studies import Figure, Page, Study, Table
from .timemodes import ModeTimes, time_modes

__all__ = [
    "AbstractAddedLever",
    "AbstractLever",
    "Facts",
    "LEVERS",
    "safe_levers",
    "AbstractController",
    "AbstractIntegrator",
    "AbstractMode",
    "AbstractODEProblem",
    "AbstractProblem",
    "BatchSolve",
    "PID",
    "Solve",
    "StepTo",
    "Mean",
    "OscillatorBank",
    "ProblemError",
    "SeriesProblem",
    "observed",
    "register_problem",
    "ModeTimes",
    "time_modes",
    "tune_loss",
    "predict_loss",
    "loss_problem",
    "LossProblem",
    "Oscillator",
    "PROBLEMS",
    "make_step",
    "FilterStep",
    "recommended_levers",
    "diffrax_levers",
    "fused_levers",
    "resolve_problem",
    "stage_lengths",
    "CONTROLLERS",
    "INTEGRATORS",
    "Diffrax",
    "Fused",
    "Kernel",
    "MODES",
    "SCALES",
    "CollectiveCount",
    "Dataset",
    "ParallelStep",
    "Scenario",
    "StraightTsit5",
    "VectorField",
    "batch_loss",
    "batch_loss_within_ode",
    "batch_stream",
    "closure_convert_ignores_manual_sharding",
    "count_collectives",
    "epoch_batches",
    "make_data_mesh",
    "make_dataset",
    "make_local_step",
    "make_parallel_step",
    "read_record",
    "run_scenario",
    "solve",
    "solve_within_ode",
    "solver_cost",
    "train",
    "validate",
    "write_json_atomic",
    "configure_devices",
    "launch",
    "run_scenario_any",
    "plot_scenario",
    "summary",
    "save_record",
    "write_report",
    "load_records",
    "load_runs",
    "load_steps",
    "load_step",
    "Step",
    "load_curves",
    "results_folder",
    "recommended",
    "Structure",
    "solve_scan",
    "count_loops",
    "control_flow",
    "FASTER",
    "tanh_softplus",
    "AbstractMLPField",
    "Agreement",
    "Answer",
    "Claim",
    "Comparison",
    "Verdict",
    "Figure",
    "Page",
    "Study",
    "Table",
]
