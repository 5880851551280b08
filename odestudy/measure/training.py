"""Run one scenario: data, model, staged training under a parallel mode, timings and
a record."""

import itertools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from . import mlp_reverse
from .activations import FASTER, faster
from .analysis import mean_waste
from .audit import count_collectives
from .checks import ProblemError, call_part, check_data, check_parts
from .compat import pmap_implementation
from .data import DATA_CACHE_ENV, batch_stream, cached_dataset, solver_cost
from .environment import cpu_info, machine_id, now, provenance, this_machine, versions
from .mlp_reverse import AbstractMLPField
from .model import AbstractBatchSolve, Solve, evaluation
from .modes import ParallelStep, to_host
from .probe import GRADIENT_FLOATS, collective_latency, session_probe
from .problem import (
    AbstractODEProblem,
    SeriesProblem,
    check_uniform_grids,
    problem_facts,
    select_series,
    stage_lengths,
)
from .record import REQUIRED_KEYS, Record
from .scenario import Scenario, validate
from .state import load_state, save_executable, save_state
from .step import make_parallel_step
from .timing import (
    PROTOCOL,
    copy_arrays,
    measurement_env,
    program_fingerprint,
    quantiles,
    run_steps,
    time_call,
)


def scenario_devices(s: Scenario) -> list[jax.Device]:
    """The local devices a scenario runs on; raises ValueError if too few exist."""
    platform = "cuda" if s.device == "gpu" else "cpu"
    try:
        devices = jax.local_devices(backend=platform)
    except RuntimeError:
        devices = []
    validate(s, available_devices=len(devices))
    if s.processes > 1:  # a global mesh over every process's devices
        if jax.process_count() != s.processes:
            raise RuntimeError(
                f"scenario wants {s.processes} processes, JAX runs {jax.process_count()}"
                "; start it with odestudy.distributed.launch"
            )
        devices = sorted(jax.devices(platform), key=lambda d: (d.process_index, d.id))
        return devices[: s.total_devices]
    return devices[: s.devices_per_process]


def make_eval_loss(spec: Solve) -> Callable:
    """`evaluate(model, batch)`: `spec`'s evaluation loss, compiled once."""
    spec = spec.as_ode()

    @eqx.filter_jit
    def evaluate(model, batch):
        return evaluation(model, batch, spec)

    return evaluate


# The training keys fold `TRAIN_KEY` into the seed (the data and model keys split it).
TRAIN_KEY = 1


def step_key(s: Scenario, number: int) -> jax.Array:
    """The key of training step `number` (from 0, counted over all stages)."""
    return jr.fold_in(jr.fold_in(jr.PRNGKey(s.seed), TRAIN_KEY), number)


def placed_batches(
    s: Scenario, step: ParallelStep, problem: Any, series: Any, batches: Iterator, start: int
) -> Iterator[Any]:
    """The placed batches of `series` that `batches` draws, keyed from step `start` on."""
    for i in itertools.count(start):
        key = step_key(s, i) if problem.needs_key else None
        yield step.place_batch(problem.take(series, next(batches)), key)


def _steps_summary(per_device: list[np.ndarray], global_loop: bool = False) -> dict[str, Any]:
    """Solver-step statistics from per-step arrays of shape `(n_devices, local_batch)`;
    `global_loop`: one loop spans all devices, so each executes the global maximum."""
    stack = np.stack(per_device)  # (steps, devices, local_batch)
    device_mean = stack.mean(axis=(0, 2))
    device_max = stack.max(axis=2).mean(axis=0)
    loops = stack.reshape(len(stack), 1, -1) if global_loop else stack
    executed = loops.max(axis=2)  # (steps, loops): what each loop runs
    return {
        "per_device_mean": device_mean.tolist(),
        "per_device_max": device_max.tolist(),
        "mean": float(stack.mean()),
        "max": float(stack.max(axis=(1, 2)).mean()),
        "executed_per_device": float(executed.mean()),
        "executed_is": "global maximum" if global_loop else "per-device maximum",
        "lockstep_waste": mean_waste(loops),
        "last_step_per_sample": stack[-1].reshape(-1).astype(int).tolist(),
    }


class Setup(NamedTuple):
    """What a scenario trains with (parameters and optimiser state placed)."""

    problem: AbstractODEProblem
    data: Any
    evalset: Any
    static: Any
    optimiser: optax.GradientTransformation
    step: ParallelStep
    params: Any
    opt_state: Any
    data_cached: bool


def step_model(s: Scenario, problem: AbstractODEProblem, model: Any) -> Any:
    """`model` as `s`'s step trains it: faster activations where `s.fast_activations` (a
    `ProblemError` where it has none to swap), then each added lever's `model`."""
    if s.fast_activations:
        model, swapped = faster(model)
        if not swapped:
            raise ProblemError(
                problem,
                "model",
                "fast_activations: the model holds no activation with a faster equivalent "
                f"(activations.FASTER: {', '.join(f.__name__ for f in FASTER)})",
            )
    for lever in s.added:
        model = lever.model(model)
    return model


def check_mlp_fields(
    problem: AbstractODEProblem,
    model: Any,
    who: str = "mlp_reverse",
    grouped: bool = True,
    inputs: bool = True,
    args: Any = None,
) -> None:
    """A `ProblemError` unless `model` holds an `AbstractMLPField` and each computes its
    MLP (`mlp_reverse.check`), so that `who` is refused before anything compiles;
    `grouped`, `inputs`: whether a field with `groups` > 1, or with `inputs` of the time
    or args, can run; `args`: one series' `args` as the loss hands them the solve."""
    fields = [
        leaf
        for leaf in jax.tree.leaves(model, is_leaf=lambda x: isinstance(x, AbstractMLPField))
        if isinstance(leaf, AbstractMLPField)
    ]
    if not fields:
        raise ProblemError(problem, "model", f"{who}: the model holds no odestudy.AbstractMLPField")
    for field in fields:
        try:
            mlp_reverse.check(field, jr.PRNGKey(0), who=who, args=args)
        except ValueError as error:
            raise ProblemError(problem, "model", str(error)) from None
        name, extra = type(field).__name__, mlp_reverse.extra_inputs(field.mlp)
        if not grouped and field.groups != 1:
            why = f"the whole state (groups 1), got {name} with groups={field.groups}"
        elif not inputs and extra:
            why = f"the state alone, got {name} whose MLP reads {extra} inputs of the time or args"
        else:
            continue
        raise ProblemError(problem, "model", f"{who}: runs an MLP of {why}")


class _ArgsProbe(AbstractBatchSolve):
    """A stand-in solve: it keeps the `args` a loss hands it (one series' shapes)."""

    def __init__(self, spec: Solve):
        super().__init__(spec)
        self.args: list[Any] = []

    def __call__(self, field: Any, ts: Any, y0: Any, args: Any = None) -> Any:
        one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), args)
        self.args.append(one)
        self.calls.append(jnp.zeros(ts.shape[:1], jnp.int32))
        return jnp.zeros((*ts.shape, *y0.shape[1:]), y0.dtype)


def solve_args(s: Scenario, problem: AbstractODEProblem, data: Any, model: Any) -> Any:
    """One series' `args` (shapes) as `problem`'s loss hands them to the solve, traced on
    one sample: the first call's, or None (no args, or a loss that fails here)."""
    probe = _ArgsProbe(s.ode_solve(problem))
    one = problem.take(data, np.arange(1))
    key = jr.PRNGKey(0) if problem.needs_key else None
    try:
        jax.eval_shape(lambda: problem.loss(model, one, key, probe))
    except Exception:  # noqa: BLE001 - the user's loss: check_parts reports it
        return None
    return probe.args[0] if probe.args else None


def _check_mlp_levers(s: Scenario, problem: AbstractODEProblem, data: Any, model: Any) -> None:
    """`check_mlp_fields` for `s.mlp_reverse` and for an integrator of MLP fields."""
    if not (s.mlp_reverse or s.structure.integrator.mlp_field):
        return
    args = solve_args(s, problem, data, model)
    if s.mlp_reverse:
        check_mlp_fields(problem, model, args=args)
    if s.structure.integrator.mlp_field:
        who = f"integrator={s.integrator!r}"
        check_mlp_fields(problem, model, who, grouped=False, inputs=False, args=args)


def prepare(s: Scenario, devices: list[jax.Device], check: bool = True) -> Setup:
    """Data, initial model, optimiser and parallel step of scenario `s` on `devices`,
    checked before anything compiles (a `ProblemError`): the data always, the model and
    loss on one sample where `check` (a repeat of a checked cold run skips it)."""
    problem = s.ode_problem
    data_key, model_key = jr.split(jr.PRNGKey(s.seed), 2)
    # One pool, one compile: the training set, then a fixed evaluation set.
    pool, cached = call_part(
        problem,
        "data",
        "make_data",
        cached_dataset,
        s.dataset_size + s.eval_size,
        data_key,
        s.spread,
        os.environ.get(DATA_CACHE_ENV) or None,
        problem,
    )
    check_data(problem, pool, s.dataset_size + s.eval_size)
    if isinstance(problem, SeriesProblem):
        problem = problem.for_data(pool)
    data = select_series(pool, np.arange(s.dataset_size))
    evalset = select_series(pool, np.arange(s.dataset_size, problem.size(pool)))
    if s.structure.solve_kind.one_ode:  # before anything compiles
        check_uniform_grids(problem, np.asarray(problem.times(data)))
    model = call_part(problem, "model", "make_model", problem.make_model, model_key, s.width)
    model = step_model(s, problem, model)
    _check_mlp_levers(s, problem, data, model)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    if check:
        check_parts(s, problem, data, params, static)
    optimiser = problem.optimiser(s.lr)
    step = make_parallel_step(s, devices, static, optimiser, problem=problem)
    params, opt_state = step.place_state(params, optimiser.init(params))
    return Setup(problem, data, evalset, static, optimiser, step, params, opt_state, cached)


def read_loss(loss: Any) -> float:
    """A step's loss as a host float (also replicated over other processes' devices)."""
    return float(to_host(loss, replicated=True).reshape(-1)[0])


class CompiledStep(NamedTuple):
    """An AOT-compiled step, the `seconds` compiling took (of which `lower_seconds`
    before XLA's compile), and the program's fingerprint (taken off the clock)."""

    compiled: Callable
    seconds: float
    lower_seconds: float
    fingerprint: str


def compile_step(step: ParallelStep, params: Any, opt_state: Any, placed: Any) -> CompiledStep:
    """AOT-compile `step` for these placed arguments, on the clock."""
    t0 = time.perf_counter()
    lowered = step.lower(params, opt_state, placed)
    t1 = time.perf_counter()
    compiled = lowered.compile(step.compiler_options)
    t2 = time.perf_counter()
    return CompiledStep(compiled, t2 - t0, t1 - t0, program_fingerprint(lowered))


def shares_program(s: Scenario) -> bool:
    """Whether the length stages of `s` run one program: one solve per sample, with a
    controller whose steps are not the grid's (PID: padding a series adds no step;
    StepTo would step at every padded time, within-ODE solves on the index)."""
    kind = s.structure.solve_kind
    return not (s.stepsize_controller.on_grid or kind.one_ode or kind.fixed_step)


def serialize_step(compiled: Any) -> bytes | None:
    """The compiled step as bytes, for a repeat to run the very same executable; None
    where the backend cannot (the repeat compiles again). Call it before the executable
    first runs: the CPU backend refuses to serialize some that have run."""
    try:
        from jax.experimental.serialize_executable import serialize

        return serialize(compiled)[0]
    except Exception:  # noqa: BLE001 - optional: the repeat falls back to compiling
        return None


class Progress:
    """Training time, steps and the evaluation curve (off the clock) across stages."""

    def __init__(self, s: Scenario, setup: Setup, report: Callable[[int, int], None] | None):
        self.total = s.steps_per_stage * len(s.length_fractions)
        self.every = s.eval_every
        self.setup = setup
        self.report = report
        self.evaluate = make_eval_loss(s.ode_solve(setup.problem))
        evalset = setup.evalset
        self.batch = setup.problem.take(evalset, np.arange(setup.problem.size(evalset)))
        self.train_time = 0.0
        self.done = 0
        self.curve: list[dict[str, float]] = []

    def loss(self, params: Any) -> float:
        """The evaluation loss of placed parameters `params`."""
        model = eqx.combine(self.setup.step.unplace(params), self.setup.static)
        return float(self.evaluate(model, self.batch))

    def on_step(self, i: int, params: Any, loss: float, seconds: float) -> None:
        self.train_time += seconds
        self.done += 1
        if self.every and (self.done % self.every == 0 or self.done == self.total):
            value = self.loss(params)
            self.curve.append(
                {"step": self.done, "train_time_s": self.train_time, "eval_loss": value}
            )
        if self.report is not None:
            self.report(self.done, self.total)


class Stage(NamedTuple):
    """One length stage's record, program, first batch and end state."""

    record: dict[str, Any]  # the record's `stages` entry
    compiled: Any
    first_batch: Any
    params: Any
    opt_state: Any
    losses: list[float]


def train_stage(
    s: Scenario,
    setup: Setup,
    number: int,
    length: int,
    series: Any,
    batches: Iterator[np.ndarray],
    programs: dict[int, CompiledStep],
    params: Any,
    opt_state: Any,
    progress: Progress,
    executable_out: dict | None,
) -> Stage:
    """Train stage `number` on `series` (`length` observed points each): compile its
    program (once per width, `programs`; serialized into `executable_out`), then time
    `s.steps_per_stage` steps, the first `s.warmup_steps` untimed."""
    step, problem = setup.step, setup.problem
    stream = placed_batches(s, step, problem, series, batches, number * s.steps_per_stage)
    first = next(stream)
    width = np.shape(problem.times(series))[1]
    reused = width in programs
    if not reused:
        programs[width] = compile_step(step, params, opt_state, first)
        if executable_out is not None:  # before it first runs: one that ran may not serialize
            executable_out["executable"] = serialize_step(programs[width].compiled)
    built = programs[width]
    t_run = time.perf_counter()
    run = run_steps(
        built.compiled,
        params,
        opt_state,
        itertools.chain([first], stream),
        s.steps_per_stage,
        s.warmup_steps,
        where=f"stage {number + 1} of {len(s.length_fractions)}, step",
        on_step=progress.on_step,
        read_loss=read_loss,
    )
    run_wall = time.perf_counter() - t_run
    median, p25, p75 = quantiles(run.times)
    record = {
        "length": length,
        "compile_time_s": 0.0 if reused else built.seconds,
        "steps": s.steps_per_stage,
        "timed_steps": len(run.times),
        "step_time_s": median,
        "step_time_p25_s": p25,
        "step_time_p75_s": p75,
        "step_times_s": run.times,
        "program_fingerprint": built.fingerprint,
        "program_reused": reused,
        "points": width,
        "trace_lower_time_s": 0.0 if reused else built.lower_seconds,
        "wall_time_s": run_wall,
        "host": run.host,
        "solver_steps": _steps_summary(
            [step.per_sample(n) for n in run.num_steps], global_loop=s.parallel.one_loop
        ),
    }
    return Stage(record, built.compiled, first, run.params, run.opt_state, run.losses)


def trace_steps(compiled: Any, params: Any, opt_state: Any, placed: Any, trace_dir: str) -> str:
    """A profiler trace of 3 more steps on `placed`, their results discarded."""
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(3):
            # A donating step consumes its state: give it copies.
            time_call(compiled, *copy_arrays((params, opt_state)), placed)
    return str(trace_dir)


def train(
    s: Scenario,
    devices: list[jax.Device] | None = None,
    progress: Callable[[int, int], None] | None = None,
    trace_dir: str | None = None,
    state_out: dict | None = None,
) -> dict[str, Any]:
    """Train one scenario and return its measurements (a `Record` without the scenario
    and environment parts): prepare, train each length stage, trace, evaluate.
    `progress(done_steps, total_steps)` is called after each step; `trace_dir`: where
    `s.trace`'s trace goes; `state_out`, if given, receives what `_keep_state` keeps and
    the last stage's serialized step (`"executable"`), for repeats and benchmarks.
    """
    validate(s)
    if devices is None:
        devices = scenario_devices(s)
    t_prepare = time.perf_counter()
    setup = prepare(s, devices)
    prepare_wall = time.perf_counter() - t_prepare
    times = np.asarray(setup.problem.times(setup.data))
    cost = solver_cost(times) if s.batching == "grouped" else None
    batches = batch_stream(len(times), s.global_batch, s.seed, cost)
    tracker = Progress(s, setup, progress)
    stages = _train_stages(s, setup, times.shape[1], batches, tracker, state_out)
    last_stage = stages[-1]
    params, opt_state = last_stage.params, last_stage.opt_state
    trace_path = None
    if s.trace and trace_dir:
        trace_path = trace_steps(
            last_stage.compiled, params, opt_state, last_stage.first_batch, trace_dir
        )
    audit = count_collectives(last_stage.compiled.as_text())
    t_eval = time.perf_counter()
    final_loss = tracker.loss(params)
    eval_wall = time.perf_counter() - t_eval
    if not np.isfinite(final_loss):
        raise FloatingPointError(f"diverged: the final evaluation loss is {final_loss}")
    if state_out is not None:
        _keep_state(state_out, setup, *setup.step.unplace((params, opt_state)))
    return measurements(
        s,
        setup,
        [st.record for st in stages],
        [loss for st in stages for loss in st.losses],
        tracker.curve,
        final_loss,
        audit,
        {"prepare": prepare_wall, "final_eval": eval_wall},
        devices[0].device_kind,
        trace_path,
    )


def _train_stages(
    s: Scenario,
    setup: Setup,
    points: int,
    batches: Iterator,
    tracker: Progress,
    state_out: dict | None,
) -> list[Stage]:
    """Train each length stage of `s` in turn, each from the last's end state."""
    lengths = stage_lengths(points, s.length_fractions)
    programs: dict[int, CompiledStep] = {}
    stages: list[Stage] = []
    params, opt_state = setup.params, setup.opt_state
    for number, length in enumerate(lengths):
        if number and s.optimiser_state == "fresh":
            host = setup.step.unplace(params)
            params, opt_state = setup.step.place_state(host, setup.optimiser.init(host))
        # Padded to the longest stage's points where the stages share one program
        # (padding leaves loss, gradients and solver steps as they are).
        total = lengths[-1] if shares_program(s) else length
        series = setup.problem.truncate(setup.data, length, total)
        # The last stage's program is kept for repeats (with PID it is the first's).
        keep = state_out if np.shape(setup.problem.times(series))[1] == lengths[-1] else None
        stage = train_stage(
            s, setup, number, length, series, batches, programs, params, opt_state, tracker, keep
        )
        stages.append(stage)
        params, opt_state = stage.params, stage.opt_state
    return stages


def load_trained(
    s: Scenario, devices: list[jax.Device], state_path: str | os.PathLike, state_out: dict
) -> dict[str, Any]:
    """`state_out` filled as `train` fills it from the state saved at `state_path`."""
    validate(s)
    setup = prepare(s, devices)
    host = setup.step.unplace((setup.params, setup.opt_state))
    _keep_state(state_out, setup, *load_state(state_path, *host))
    return {"device_kind": devices[0].device_kind}


def _keep_state(state_out: dict, setup: Setup, params: Any, opt_state: Any) -> None:
    """`state_out` filled as `train` fills it, from host `params` and `opt_state`."""
    state_out.update(
        model=eqx.combine(params, setup.static),
        problem=setup.problem,
        data=setup.data,
        evalset=setup.evalset,
        optimiser=setup.optimiser,
        params=params,
        opt_state=opt_state,
    )


def measurements(
    s: Scenario,
    setup: Setup,
    stages: list[dict[str, Any]],
    losses: list[float],
    curve: list[dict[str, float]],
    final_loss: float,
    audit: Any,
    walls: dict[str, float],
    device_kind: str,
    trace_path: str | None,
) -> dict[str, Any]:
    """The measured part of a scenario's record from its stages and evaluation."""
    last = stages[-1]
    threshold = setup.problem.trained_loss
    return {
        "steps": s.steps_per_stage * len(s.length_fractions),
        "compile_time_s": sum(st["compile_time_s"] for st in stages),
        "compile_time_per_stage_s": [st["compile_time_s"] for st in stages],
        "program_fingerprints": [st["program_fingerprint"] for st in stages],
        # Where the run's time went (wall clock seconds): the setup; per stage tracing and
        # lowering, XLA's compile and training; the final evaluation (with its compile).
        "phase_times_s": {
            "prepare": walls["prepare"],
            "trace_lower": [st["trace_lower_time_s"] for st in stages],
            "xla_compile": [st["compile_time_s"] - st["trace_lower_time_s"] for st in stages],
            "train": [st["wall_time_s"] for st in stages],
            "final_eval": walls["final_eval"],
        },
        "step_time_s": last["step_time_s"],
        "step_time_p25_s": last["step_time_p25_s"],
        "step_time_p75_s": last["step_time_p75_s"],
        # Repeats (repeats.merge_runs) append their runs; the rest stays the cold run's.
        "step_time_runs_s": [last["step_time_s"]],
        "step_times_runs_s": [last["step_times_s"]],
        "host_runs": [last.get("host")],
        # Per run, its timed steps' mean solver steps (a step's cost follows them).
        "solver_steps_runs": [last["solver_steps"]["mean"]],
        "cold_run_fields": [
            "compile_time_s",
            "compile_time_per_stage_s",
            "final_loss",
            "runtime_s",
            "train_loss",
            "eval_curve",
            "solver_steps",
        ],
        "epoch_time_s": last["step_time_s"] * setup.problem.size(setup.data) / s.global_batch,
        "final_loss": final_loss,
        # A row that did not reach its trained loss is marked and enters no speedup.
        "trained": bool(final_loss <= threshold),
        "trained_loss": threshold,
        "train_loss": losses,
        "eval_curve": curve,
        "solver_steps": last["solver_steps"],
        "stages": stages,
        "collectives_total": audit.total,
        "collectives_in_loops": audit.in_loops,
        "collectives": audit._asdict(),
        "trace_dir": trace_path,
        "device_kind": device_kind,
        "data_cached": setup.data_cached,
    }


def environment(s: Scenario) -> dict[str, Any]:
    """Versions, hardware, XLA flags and git commit, for the record."""
    cpu = cpu_info()
    return {
        "versions": versions(),
        "hardware": {
            **cpu,
            "platform": jax.default_backend(),
            "device_count": jax.device_count(),
            "local_device_count": jax.local_device_count(),
            "process_count": jax.process_count(),
            "devices_exceed_cores": s.device == "cpu" and s.total_devices > cpu["physical_cores"],
        },
        "protocol": PROTOCOL,
        "measurement_env": measurement_env(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
        "eqx_on_error": os.environ.get("EQX_ON_ERROR", "raise"),
        "pmap_implementation": pmap_implementation(),
        **provenance(),
        "machine": this_machine(),
        "machine_id": machine_id(this_machine()),
        # The machine probe at the start of this timing session (or None).
        "probe": session_probe(),
    }


def processes_probe(s: Scenario) -> list[dict[str, Any]]:
    """The all-reduce latency of one float and of a gradient over every device of a
    multi-process scenario, before it trains: what the machine probe cannot see."""
    return [
        collective_latency(s.total_devices, iterations=iterations, size=size, repeats=5)
        for size, iterations in ((1, 300), (GRADIENT_FLOATS, 50))
    ]


def base_record(s: Scenario) -> dict[str, Any]:
    """The record's scenario part: identical for ok and failed scenarios."""
    return {
        "scenario": s.to_dict(),
        "scenario_key": s.key(),
        "name": s.name(),
        "device": s.device,
        "n_devices": s.total_devices,
        "processes": s.processes,
        "devices_per_process": s.devices_per_process,
        "mode": s.mode,
        "controller": s.controller,
        "scaling": s.scaling,
        "scale": s.scale,
        "dataset_size": s.dataset_size,
        "global_batch": s.global_batch,
        "per_device_batch": s.global_batch // s.total_devices,
        "learning_rate": s.lr,
        "spread": s.spread,
        "batching": s.batching,
        "solve": s.solve,
        "lr_scaling": s.lr_scaling,
        "optimiser_state": s.optimiser_state,
        "steps": s.steps_per_stage * len(s.length_fractions),
        "training_note": s.training_note(),
        "problem": s.problem,
        "problem_facts": problem_facts(s.problem_object),
    }


def run_scenario(
    s: Scenario,
    progress: Callable[[int, int], None] | None = None,
    trace_dir: str | None = None,
    state_path: str | os.PathLike | None = None,
) -> Record:
    """Run a scenario and return its full record (a ValueError before anything compiles;
    errors during the run: `status="failed"`), saving its trained state at `state_path`."""
    validate(s)
    start = time.perf_counter()
    record: dict[str, Any] = {**base_record(s), "started": now()}
    try:
        record.update(environment(s))
        devices = scenario_devices(s)
        if s.processes > 1:  # what this job's collectives cost across its processes
            record["probe_processes"] = processes_probe(s)
        state: dict[str, Any] = {}
        record.update(train(s, devices, progress, trace_dir, state_out=state))
        if state_path is not None:
            if jax.process_index() == 0:
                save_state(state_path, state["params"], state["opt_state"])
            if state.get("executable"):
                save_executable(state_path, state["executable"], jax.process_index())
        record.update(status="ok", error=None)
    except ProblemError as exc:  # the problem's own one-line error, no traceback
        record.update(status="failed", error=str(exc))
    except ValueError:
        raise
    except Exception as exc:  # a failed scenario is a result, not a crash
        import traceback

        record.update(
            status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()
        )
    for key in REQUIRED_KEYS:
        record.setdefault(key, None)
    record["runtime_s"] = time.perf_counter() - start
    record["finished"] = now()
    return Record(record)
