"""The `odestudy` command: run one scenario, the matrix, or the report."""

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import tempfile
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from . import builtin, predict, tune  # noqa: F401  (builtin registers the built-in studies)
from .builtin.versions import write_versions
from .measure import devices, environment, probe
from .measure.controllers import CONTROLLERS
from .measure.lever import resolve_lever
from .measure.problem import resolve_problem
from .measure.scenario import SCALES, Scenario, validate
from .report.document import settle_report
from .report.predicted import prediction_lines
from .report.runs import trained_state
from .report.studies import write_study_report
from .study import lock, matrix, probing, profiles, repeats, runner, steps
from .study.executors import LocalExecutor, needs_cluster
from .study.rec import Rec
from .study.records import RECORD_NAME, machine_folder, record_path, write_json_atomic
from .study.slurm import SlurmExecutor, parse_sbatch
from .study.studies import Sizing, pages_of
from .study.versions import RESULTS, VERSION_SETS, run_versions
from .study.workloads import CROSSOVER_BATCHES, MAP_FOLDER

# `predict`'s per-device batch axis unless one is given: the crossover study's.
CROSSOVER_DEFAULT = ",".join(map(str, CROSSOVER_BATCHES))

Option = Callable[[argparse.ArgumentParser], object]
# Each command by name: its help, its options and what it runs (its exit status).
COMMANDS: dict[str, tuple[str, tuple[Option, ...], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, *options: Option):
    """Declare the command `name` with its help and options; the decorated function runs it."""

    def declare(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, options, run)
        return run

    return declare


def option(flag: str, help: str | None = None, **kw: typing.Any) -> Option:
    """The option `flag` (`add_argument`'s keywords)."""
    return lambda p: p.add_argument(flag, help=help, **kw)


def flag(name: str, help: str) -> Option:
    """The on/off option `name` (`store_true`)."""
    return option(name, help, action="store_true")


def folder(name: str, help: str | None = None) -> Option:
    """`--NAME`, by default the study's folder (`environment.workdir`, when the parser is built)."""
    return lambda p: p.add_argument(f"--{name}", default=str(environment.workdir(name)), help=help)


def add_scenario_options(p: argparse.ArgumentParser) -> None:
    """One option per `Scenario` field (`--<field-with-dashes>` unless the field names
    another), with the field's type, choices and help; unset, the scenario's default."""
    for field in Scenario.fields():
        meta = field.metadata
        flag = meta["option"] or "--" + field.name.replace("_", "-")
        kind = field.type
        if type(None) in typing.get_args(kind):  # `X | None`: the option takes an X
            kind = next(k for k in typing.get_args(kind) if k is not type(None))
        extra: dict = {"dest": field.name, "default": None, "help": meta["help"]}
        if kind is bool:
            extra.update(action="store_true")
        elif typing.get_origin(kind) is tuple:  # tuple[float, ...], tuple[str, ...]
            extra.update(type=typing.get_args(kind)[0], nargs="+")
        else:
            extra.update(type=kind, choices=meta["choices"])
        p.add_argument(flag, **extra)


SCALE = option("--scale", choices=tuple(SCALES), default="quick")
RESULTS_FOLDER, FIGURES_FOLDER = folder("results"), folder("figures")
STEP = option("--step", "run the step odestudy tune wrote to FILE (its levers)", metavar="FILE")
WAIT = flag(
    "--wait",
    "where another measurement runs on this machine (it holds the lock), wait for it to "
    "finish; by default refuse at once, naming it",
)
# `--executor` and the options of the SLURM executor (`study.slurm`).
SLURM = (
    option(
        "--executor",
        "run here one after another, or submit every run as a SLURM job",
        choices=("local", "slurm"),
        default="local",
    ),
    option("--partition", "SLURM partition of the CPU rows"),
    option("--gpu-partition", "SLURM partition of the GPU rows"),
    option("--time-limit", "SLURM time limit of each job, minutes", type=int, default=60),
    option("--gpus-per-node", "GPUs per GPU job (default: its rows')", type=int),
    option(
        "--tasks-per-node",
        "JAX processes per node of a multi-process row (default: all on one node)",
        type=int,
    ),
    option(
        "--sbatch",
        "another sbatch option for every job, e.g. --sbatch account=proj (repeatable)",
        action="append",
        default=[],
        metavar="OPTION[=VALUE]",
    ),
    option(
        "--state-every",
        "ask SLURM's accounting for unfinished jobs' states every S seconds: a job that "
        "ends without a result is noticed within S (default 30)",
        type=float,
        default=30.0,
        metavar="S",
    ),
)


def check_writable(folder: str | Path) -> None:
    """A ValueError (exit code 2) unless records can be written under `folder` (made if missing)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to output folder {folder}: {exc.strerror or exc}") from None


def scenario_from_args(a: argparse.Namespace) -> Scenario:
    """The scenario the options of `add_scenario_options` give (defaults for unset)."""
    given = {f.name: getattr(a, f.name) for f in Scenario.fields()}
    return Scenario(**{k: v for k, v in given.items() if v is not None and v is not False})


def step_of(s: Scenario, a: argparse.Namespace) -> Scenario:
    """`s` with the step the options name, said on a line: `--step FILE` (a step file of
    `odestudy tune`), `--recommended` (`steps.recommended_step`), or neither (`s`). A
    lever given by hand beside either is a one-line error."""
    step, recommended = getattr(a, "step", None), getattr(a, "recommended", False)
    if step and recommended:
        raise ValueError("give one of --step FILE and --recommended")
    if not (step or recommended):
        return s
    given = [k for k in Scenario.levers() if getattr(a, k, None) not in (None, False)]
    if given:
        which = "--step" if step else "--recommended"
        raise ValueError(
            f"{which} sets the step's levers; give either {which} or --{given[0].replace('_', '-')}"
        )
    if step:
        found = steps.read_step(step)
        chosen = steps.apply_step(s, found, step)
        if getattr(a, "mode", None) is None and getattr(a, "devices_per_process", None) is None:
            placed = steps.step_of_tune(found, step)  # the mode and devices it names
            chosen = dataclasses.replace(
                chosen, mode=placed.mode, devices_per_process=placed.devices
            )
        print(f"step: {step}: {chosen.step_tag() or 'the default step'}, {chosen.mode} on "
              f"{chosen.devices_per_process} device(s)")  # fmt: skip
        return chosen
    chosen, why = steps.recommended_step(s, a.results)
    print(f"recommended: {chosen.step_tag() or 'the default step'} ({why})")
    return chosen


@command(
    "run",
    "run one scenario in a fresh kernel",
    add_scenario_options,
    STEP,
    flag(
        "--recommended",
        "the step odestudy tune recorded for the problem, controller and device kind on "
        "this machine where there is one (the default where nothing measured was faster); "
        "before any tune, only the levers that cannot slow it down",
    ),
    option(
        "--out",
        "output folder (default: the scenario's folder under --results, where `odestudy "
        "report` reads it)",
    ),
    RESULTS_FOLDER,
    option(
        "--runs",
        "runs: the cold run (it trains) and runs-1 repeats timing the trained model's step "
        "from its saved state, the step time shown and reported (default 2)",
        type=int,
        default=2,
    ),
    WAIT,
)
def _run(a: argparse.Namespace) -> int:
    s = step_of(scenario_from_args(a), a)
    if why := needs_cluster(s):
        raise ValueError(f"{why}; odestudy run runs on this machine only (see make nodes)")
    # CPU devices are virtual and made to order; GPUs must exist.
    validate(s, available_devices=devices.gpu_count() if s.device == "gpu" else None)
    out = Path(a.out) if a.out else record_path(s, a.results).parent
    check_writable(out)
    with lock.measuring(f"odestudy run {s.name()}", a.wait):
        repeats.clear_cache(out)
        record = runner.execute_scenario(s, out, extra_env=repeats.cache_environment(out))
    print(f"{record['status']}: {s.name()} -> {out / RECORD_NAME}")
    if record["status"] != "ok":
        print(record.get("error"), file=sys.stderr)
        return 1
    # `runs - 1` repeats merged: more steps timed from the trained state the cold run
    # saved in `out` (`repeats`), the quantity `tune` and the report time.
    merged = record
    for _ in range(max(0, a.runs - 1)):
        if s.processes > 1:
            merged = repeats.repeat_processes(s, out)
        else:
            merged = repeats.run_repeat_round([(s, out)])[0]
    shown = trained_state(Rec(dict(merged)))
    timed = (
        f"the trained model's step {shown.step_time_s:.4g} s (median of "
        f"{len(shown.step_times_runs_s or [])} run(s) from its trained state; "
        f"{shown.cold_step_time_s:.4g} s while it trained)"
        if shown.cold_step_time_s is not None
        else f"step time {shown.step_time_s:.4g} s (median while it trained: one run)"
    )
    print(
        f"{timed}, compile {record['compile_time_s']:.3g} s, final loss "
        f"{record['final_loss']:.4g}"
        + ("" if record.get("trained") else f" (above {record['trained_loss']:g}: not trained)")
    )
    return 0


@command(
    "matrix",
    "run every scenario of a scale, resumably",
    SCALE,
    option(
        "--problem",
        "what every scenario trains: a problem's name or module:object",
        default="oscillator",
    ),
    option("--device", choices=("cpu", "gpu", "auto"), default="auto"),
    option(
        "--device-count",
        "size the matrix to N devices of the kind --device names (cpu or gpu), present or "
        "not (a SLURM partition's, say), instead of to this machine; GPU rows on more GPUs "
        "than are present where they run are listed as not run",
        type=int,
        metavar="N",
    ),
    flag(
        "--dry-run",
        "print the plan, scenario by scenario (runs to do, record reused or why not, why a "
        "row cannot run here), and run, write, lock and probe nothing",
    ),
    flag("--force", "rerun finished scenarios"),
    flag(
        "--full",
        "the whole matrix (1/2/4/8 CPU devices: rows with more devices than physical cores "
        "measure overhead); default: the matrix sized to this machine",
    ),
    option(
        "--study",
        "a registered study: scaling (the tables), explain (the studies that explain them), "
        "target (their time-to-target rows alone; `make seed` runs them at the seed scale), "
        "versions (the core rows `make versions` runs under each JAX release), map (the "
        "workload map; records under RESULTS/map), seed (`make seed`: the seed scale's "
        "scaling rows and their time-to-target rows at its batch), step and prediction (no "
        "matrix runs: benchmarks/levers.py and odestudy predict make their records); or "
        "module:Class, a study defined outside the package (odestudy.study.studies.Study)",
        default="scaling",
    ),
    RESULTS_FOLDER,
    flag(
        "--recommended",
        "the scaling matrix with the recommended levers applied (records beside the "
        "default ones, named by their levers)",
    ),
    STEP,
    option(
        "--runs",
        "runs per scenario (default: 3 for the quick scaling study, else 1); a scenario "
        "with fewer runs gets its missing repeats",
        type=int,
    ),
    option(
        "--select",
        "only scenarios with these fields, e.g. scaling=strong,devices_per_process=2",
        default="",
    ),
    WAIT,
    *SLURM,
)
def _matrix(a: argparse.Namespace) -> int:
    # A study says where its records go (the map keeps its own apart, so that all its
    # rows come from one `make map`).
    study = matrix.get_study(a.study)
    matrix.check_sizing(a.device, Sizing(a.device_count), study)  # before anything else
    results = study.results(a.results)
    if not a.dry_run:  # a dry run writes nothing, there or anywhere
        check_writable(results)
    resolve_problem(a.problem)  # a clear error before anything runs
    step = None
    if a.step:
        step = steps.read_step(a.step)
        if a.problem != step["problem"]:
            raise ValueError(
                f"{a.step} was tuned for problem {step['problem']!r}; give --problem "
                f"{step['problem']} (or tune {a.problem})"
            )
        if a.device not in ("auto", step["device"]):
            raise ValueError(f"{a.step} was tuned for device {step['device']!r}, not {a.device!r}")
        print(
            f"step: {a.step}: {', '.join(step['levers']) or 'the default step'} on the "
            f"{step['controller']} rows on {step['device']}"
        )
    recs = matrix.run_matrix(
        a.scale,
        a.device,
        force=a.force,
        results=results,
        study=study,
        selection=matrix.parse_selection(a.select),
        recommended=a.recommended,
        repeats=a.runs,
        full=a.full,
        executor=_executor(a),
        wait=a.wait,
        problem=a.problem,
        device_count=a.device_count,
        dry_run=a.dry_run,
        step=step,
    )
    if a.dry_run:
        return 0
    failed = [r["name"] for r in recs if r["status"] != "ok"]
    print(
        f"{len(recs) - len(failed)} of {len(recs)} scenarios ok"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _executor(a: argparse.Namespace) -> LocalExecutor | SlurmExecutor:
    """The executor the options of `odestudy matrix` name."""
    if a.executor == "local":
        return LocalExecutor()
    return SlurmExecutor(
        partition=a.partition,
        gpu_partition=a.gpu_partition,
        time_min=a.time_limit,
        gpus_per_node=a.gpus_per_node,
        tasks_per_node=a.tasks_per_node,
        sbatch=parse_sbatch(a.sbatch),
        state_every_s=a.state_every,
    )


@command(
    "report",
    "tables, figures and the HTML report",
    SCALE,
    RESULTS_FOLDER,
    FIGURES_FOLDER,
    option("--readme", "also refresh the answer in this README"),
    option("--docs", "also write the results pages under DOCS/results/"),
    option(
        "--study",
        "only this study's tables and results page (a registered name or module:Class); "
        "default: the whole report",
    ),
)
def _report(a: argparse.Namespace) -> int:
    if a.study:  # one study's own tables and page, nothing else
        for path in write_study_report(a.study, a.results, a.scale, a.figures, a.docs):
            print(f"wrote {path}")
        return 0
    # One read of the records, in the report notebook, writes the tables and figures,
    # the pages (`--docs`) and the README's answer (`--readme`) (`report.publish`).
    html = settle_report(runner.execute_report(a.results, a.scale, a.figures, a.docs, a.readme))
    print(f"report: {html}")
    if a.docs:
        for page in pages_of(a.scale):
            print(f"page: {Path(a.docs) / 'results' / f'{page.name}.md'}")
    if a.readme:
        print(f"updated the answer in {a.readme}")
    return 0


@command(
    "steps",
    "derive data/measured_steps.json (the study's step per shipped problem) from the tune records",
    RESULTS_FOLDER,
)
def _steps(a: argparse.Namespace) -> int:
    from . import measured_steps

    print(f"wrote {measured_steps.write(a.results)}")
    return 0


@command(
    "predict",
    "each mode's step time at N devices for a problem, from a short 1-device sweep",
    add_scenario_options,  # --devices N and --processes P: the placement predicted
    flag(
        "--recommended",
        "predict the recommended step (the default): the step odestudy tune recorded for "
        "the problem here, else the study's step for a problem it measured, else the "
        "levers that cannot slow a step down",
    ),
    STEP,
    flag(
        "--default-step",
        "predict the default step (the reference's) instead of the recommended one",
    ),
    option(
        "--crossover-batches",
        "per-device batches to predict each mode along, for where splitting starts to pay "
        "(comma-separated; empty: none)",
        default=CROSSOVER_DEFAULT,
    ),
    option(
        "--profile",
        "the collective costs: cpu (this machine's recorded probes), a shipped profile "
        "(h100-nvlink, pcie-gpu) or a profile file; default: a probe of the N devices here",
    ),
    option("--timed-steps", "timed steps per swept batch", type=int, default=10),
    option("--out", "also write the prediction as JSON here"),
    flag(
        "--map",
        "predict every workload of the map (`make map`) from its trained 1-device row, to "
        "check against the map's measured rows (records under RESULTS/map)",
    ),
    flag(
        "--record",
        "predict from the problem's trained 1-device row recorded under RESULTS (`odestudy "
        "matrix --select devices_per_process=1` first) and write the prediction beside the "
        "records, where the report checks it against the multi-device rows measured after it",
    ),
    flag(
        "--rows",
        "predict every measured multi-device row of this machine's matrix of the scale "
        "(one, several processes, several nodes) from its 1-device row and --profile, for "
        "the report to check",
    ),
    folder(
        "results",
        "where records live: a trained 1-device row of the problem recorded here (`odestudy "
        "run`) is swept instead of training again",
    ),
    flag("--retrain", "train the model anew even where its trained 1-device row is recorded"),
    flag(
        "--again",
        "with --map or --record: predict anew from a 1-device row measured again, where the "
        "prediction kept was made before the multi-device rows (it moves to earlier/, where "
        "the report still checks it against the rows after it): a new session's prediction, "
        "made before that session measures its rows",
    ),
    WAIT,
)
def _predict(a: argparse.Namespace) -> int:
    if a.again and not (a.map or a.record):
        raise ValueError("--again makes recorded predictions anew: give it with --map or --record")
    if a.map:
        return _predict_map(a)
    if a.rows:
        return _predict_rows(a)
    if a.mode is not None:
        raise ValueError("predict predicts every multi-device mode; leave out --mode")
    if (a.devices_per_process or 1) * (a.processes or 1) < 2:
        raise ValueError("predict needs --devices N (and --processes P) for 2 or more devices")
    a.mode = "shard_map"  # the placement is read from it; every mode is predicted
    target = scenario_from_args(a)
    if sum(map(bool, (a.recommended, a.default_step, a.step))) > 1:
        raise ValueError("give one of --step FILE, --recommended and --default-step")
    if a.step:
        target = steps.apply_step(target.default_step(), steps.read_step(a.step), a.step)
        print(f"step: {a.step}: {target.step_tag() or 'the default step'}")
    # The recommended step (`steps.recommended_step`) unless the reference's is asked for.
    elif not a.default_step:
        target, why = steps.recommended_step(target, a.results)
        print(f"recommended: {target.step_tag() or 'the default step'} ({why})")
    axis = _held(_axis(a.crossover_batches), target, a.crossover_batches == CROSSOVER_DEFAULT)
    profile = profiles.load_profile(a.profile, a.results) if a.profile else None
    predict.check_prediction(target, profile)  # before JAX starts or anything compiles
    if a.record:
        return _predict_recorded(a, target, profile, axis)
    predict.use_devices(target, profile is None)
    state = None if a.retrain else predict.recorded_state(predict.one_device(target), a.results)
    if state:
        print(f"from the trained 1-device row recorded at {state[0].parent} (no training)")
    # In a timing session: its probe of the devices of `target` where no profile is given
    # (its values then the collective costs), else of one device.
    n = target.total_devices if profile is None else 1
    with (
        lock.measuring(f"odestudy predict {target.problem_object.name}", a.wait),
        probing.session_probe(target.device, n, machine_folder(a.results)) as found,
    ):
        if profile is None:
            machine = profiles.machine_profile_if_any(a.results)
            # No session probe (`ODESTUDY_PROBE=off`): the probe runs here, in-process.
            profile = predict.session_profile(
                probe.read_probe(found) if found else probe.probe(), machine
            )
        swept = predict.sweep_terms(target, profile, a.timed_steps, state, axis)
        out = predict.predict_modes(target, profile, swept, axis=axis)
    out["trained_from"] = str(state[0].parent) if state else None
    out.update(predict.made_here())
    print("\n".join(prediction_lines(out, target)))
    if a.out:
        write_json_atomic(a.out, out)
        print(f"-> {a.out}")
    return 0


def _predict_recorded(
    a: argparse.Namespace, target: Scenario, profile, axis: tuple[int, ...]
) -> int:
    """`odestudy predict --record`: the prediction of `target` from its trained 1-device
    row under RESULTS (`predict.predict_from_row`), written beside the records
    (`predict.recorded_prediction_path`); one made there from the same row is kept."""
    why = predict.why_no_anchor(target, a.results)
    if why is not None:
        raise ValueError(
            f"--record predicts from the trained 1-device row under {a.results}, but {why}: "
            "run `odestudy matrix --select devices_per_process=1` (or `odestudy run`) first"
        )
    predict.use_devices(target, profile is None)
    path = predict.recorded_prediction_path(a.results, target, profile.name if profile else None)
    machine = None if profile else profiles.machine_profile_if_any(a.results)
    n = 1 if profile else target.total_devices
    with _predicting("--record", a.wait, a.results, n, [target]):
        out = predict.predict_from_row(
            target,
            a.results,
            path,
            profile,
            target.name(),
            machine=machine,
            axis=axis,
            again=a.again,
            processes=predict.TERM_PROCESSES,
        )
    if out is None:  # its row was checked above; `predict_from_row` said why
        return 1
    print("\n".join(prediction_lines(out, target)))
    print(f"-> {path}")
    if a.out:
        write_json_atomic(a.out, out)
    return 0


def _predict_map(a: argparse.Namespace) -> int:
    """`odestudy predict --map`: the prediction of every workload of the map, from this
    session's probe of its devices, or with `--profile` in place of the probe."""
    n, results = a.devices_per_process or 2, Path(a.results) / MAP_FOLDER
    profile = profiles.load_profile(a.profile, a.results) if a.profile else None
    # A prediction from this session's probe is ranged over this machine's probes.
    machine = None if profile else profiles.machine_profile_if_any(a.results)
    devices.configure_devices("cpu", n)
    todo = predict.map_to_predict(results, n, a.scale or "quick", profile, a.again)
    with _predicting("--map", a.wait, results, 1 if profile else n, todo):
        done = predict.predict_map(
            results, n, a.scale or "quick", profile, machine=machine, again=a.again
        )
    print(f"{len(done)} prediction(s) of the workload map")
    return 0


def _predict_rows(a: argparse.Namespace) -> int:
    """`odestudy predict --rows --profile P`: every measured multi-device row of this
    machine's matrix of the scale, predicted from its 1-device row and the profile."""
    if not a.profile:
        raise ValueError("--rows predicts from a profile, not a probe: give --profile")
    profile = profiles.load_profile(a.profile, a.results)
    devices.configure_devices("cpu", max(2, max((p[0] for p in profile.placements()), default=2)))
    todo = predict.rows_to_predict(a.results, profile, a.scale or "quick")
    with _predicting("--rows", a.wait, a.results, 1, todo):
        done = predict.predict_recorded_rows(a.results, profile, a.scale or "quick")
    print(f"{len(done)} prediction(s) of the measured rows")
    return 0


@contextlib.contextmanager
def _predicting(
    what: str, wait: bool, results: str | Path, n: int, todo: Sequence[object]
) -> Iterator[None]:
    """`odestudy predict WHAT` under the lock, in a timing session (its probe of `n` CPU
    devices) only where a prediction is to be made (`todo`)."""
    probed = probing.session_probe("cpu", n, machine_folder(results)) if todo else None
    with lock.measuring(f"odestudy predict {what}", wait), probed or contextlib.nullcontext():
        yield


def _axis(text: str) -> tuple[int, ...]:
    """`--crossover-batches` as per-device batches (`""`: none), whole numbers >= 1."""
    try:
        found = tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        found = (0,)
    if any(b < 1 for b in found):
        raise ValueError(
            f"--crossover-batches takes whole numbers >= 1, comma-separated; got {text!r}"
        )
    return found


def _held(axis: tuple[int, ...], target: Scenario, default: bool) -> tuple[int, ...]:
    """The per-device batches of `axis` whose global batch `target`'s data set holds: the
    default axis is cut to them; a batch given by hand that it does not hold is a
    ValueError naming the rule."""
    n, size = target.total_devices, target.dataset_size
    over = [b for b in axis if n * b > size]
    if over and not default:
        raise ValueError(
            f"--crossover-batches {over[0]} on {n} devices is a global batch of {n * over[0]}, "
            f"more than the data set's {size} series"
        )
    return tuple(b for b in axis if n * b <= size)


@command(
    "tune",
    "the fastest step for a problem on this machine: its levers timed from the trained "
    "model, alone then combined, kept where faster at equal loss",
    option(
        "--problem",
        "a problem's name or module:object (as odestudy run --problem)",
        default="oscillator",
    ),
    SCALE,
    option("--controller", choices=tuple(CONTROLLERS), default="pid"),
    option("--device", choices=("cpu", "gpu"), default="cpu"),
    option("--width", "the field's hidden units", type=int, default=64),
    option(
        "--out",
        "the step file (JSON); default: where --recommended finds it, "
        "RESULTS/<machine>/tune/<device>-<problem>-<controller>-<scale>.json",
    ),
    option(
        "--added-levers",
        "also try these levers of your own (module:Class naming an odestudy.AbstractAddedLever)",
        nargs="+",
        default=[],
        metavar="SPEC",
    ),
    option("--blocks", "interleaved blocks per phase", type=int, default=tune.BLOCKS),
    option(
        "--steps-per-block",
        "timed steps per block, after the warm-up (a block is one of run's repeats)",
        type=int,
        default=tune.STEPS_PER_BLOCK,
    ),
    option(
        "--devices",
        "then time the chosen step split over this many devices in every multi-device "
        "mode, against one device, and write the mode and device count that pay (or one "
        "device) into the step file (CPU: virtual devices)",
        type=int,
        default=1,
    ),
    RESULTS_FOLDER,
    WAIT,
)
def _tune(a: argparse.Namespace) -> int:
    for spec in a.added_levers:  # importing a lever's module registers it
        resolve_lever(spec)
    s = Scenario(
        problem=a.problem, scale=a.scale, controller=a.controller, device=a.device, width=a.width
    )
    validate(s, available_devices=devices.gpu_count() if s.device == "gpu" else None)
    if a.devices < 1:
        raise ValueError(f"--devices takes a whole number >= 1, got {a.devices}")
    if s.device == "gpu" and a.devices > devices.gpu_count():
        raise ValueError(f"--devices {a.devices}: {devices.gpu_count()} GPU(s) present")
    out = Path(a.out) if a.out else steps.step_path(s, a.results)
    check_writable(out.parent)
    devices.configure_devices(s.device, a.devices)
    with lock.measuring(f"odestudy tune {s.problem_object.name}", a.wait):
        found = tune.tune(s, blocks=a.blocks, steps_per_block=a.steps_per_block,
                     results=a.results, devices=a.devices)  # fmt: skip
    write_json_atomic(out, found)
    tune.print_tune(found)
    print(f"-> {out}")
    return 0


@command(
    "versions",
    "the core rows under each JAX release (own environments), and their table",
    option("--runs", "runs per row and release", type=int, default=3),
    option(
        "--sets",
        "the version sets to measure (default: all)",
        nargs="+",
        choices=VERSION_SETS,
        default=list(VERSION_SETS),
    ),
    flag("--table-only", "only write the table and figure"),
    WAIT,
    FIGURES_FOLDER,
)
def _versions(a: argparse.Namespace) -> int:
    status = 0 if a.table_only else run_versions("quick", a.runs, tuple(a.sets), a.wait)
    out = write_versions(RESULTS, a.figures, "quick")
    print(f"versions: {out['rows']} rows of {', '.join(out['sets'])} -> {out['table']}")
    return status


def parser() -> argparse.ArgumentParser:
    """The command line, built from each command's own declaration (`COMMANDS`)."""
    p = argparse.ArgumentParser(prog="odestudy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for name, (help_text, options, run) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        for add in options:
            add(command)
        command.set_defaults(func=run)
    return p


def _interrupt(signum, frame):
    """SIGTERM as Ctrl-C, so that a killed matrix shuts its kernel and any worker
    processes down instead of leaving them running."""
    raise KeyboardInterrupt(f"signal {signum}")


def _import_from_workdir() -> None:
    """Make modules of the working directory importable here and in the kernels and
    workers this command starts (they inherit `PYTHONPATH`), as `python -m` would: a
    user's `--problem own_problem:PROBLEM` lives there."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


# The commands that time steps in their own process (the others time in the kernels and
# workers they start, with `devices.child_environment`).
TIMED_HERE = ("tune", "predict")


def _timed_as_kernels(argv: list[str]) -> None:
    """Start a command that times steps in its own process (`TIMED_HERE`) again with
    `EQX_ON_ERROR=nan` where it is unset, as every scenario kernel runs
    (`devices.child_environment`): equinox reads the variable once, at import, and its
    default (`raise`) puts a host callback in every diffrax solve, so that the step
    timed would not be the step `run` and `matrix` time (benchmarks/rising_cost.py)."""
    if argv[:1] and argv[0] in TIMED_HERE and "EQX_ON_ERROR" not in os.environ:
        env = {**os.environ, "EQX_ON_ERROR": "nan"}
        os.execve(sys.executable, [sys.executable, "-m", "odestudy.cli", *argv], env)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the console command (a test's call stays in its process)
        _timed_as_kernels(sys.argv[1:])
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    _import_from_workdir()
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"odestudy: error: {exc}", file=sys.stderr)
        return 2
    except lock.MachineBusy as exc:
        print(f"odestudy: {exc}", file=sys.stderr)
        return lock.BUSY_STATUS


if __name__ == "__main__":
    sys.exit(main())
