"""The study's scenario matrix: which scenarios, where records go, resumable runs."""

import functools
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TypeVar

from ..measure import environment
from ..measure.problem import DEFAULT_PROBLEM, AnyProblem, in_this_process_only, problem_spec
from ..measure.problem import _import as import_module
from ..measure.recommended import recommended as apply
from ..measure.record import Record
from ..measure.scenario import SCALES, Scenario
from . import records
from .executors import Executor, LocalExecutor, Progress
from .grid import DEVICES, check_sizing, for_problem, sized_limit
from .lock import measuring
from .plan import CeilingProbe, Current, make_plan, runs
from .plan import Plan as MatrixPlan
from .probing import session_probe
from .records import DEFAULT_RESULTS, record_path
from .repeats import REPEAT_STEPS
from .runner import failed_record
from .steps import MATCHED, apply_step
from .studies import STUDIES, THIS_MACHINE, Sizing, Study

T = TypeVar("T", Scenario, tuple[Scenario, str])


def plan(
    scale: str,
    device: str = "auto",
    study: "str | Study" = "scaling",
    full: bool = False,
    sizing: Sizing = THIS_MACHINE,
) -> tuple[list[Scenario], list[tuple[Scenario, str]]]:
    """The scenarios of `study` to run here, and those that cannot with why; `device`
    `"auto"`: CPU rows, and GPU rows where GPUs exist; `full`: the whole matrix, not the
    one sized to this machine or to `sizing`."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid choices: {', '.join(DEVICES)}")
    the_study = get_study(study)
    check_sizing(device, sizing, the_study)
    return the_study.planned(scale, device, full, sizing)


def parse_selection(text: str) -> dict[str, str]:
    """`"scaling=strong,controller=pid"` -> `{"scaling": "strong", "controller": "pid"}`."""
    fields = [f.name for f in Scenario.fields()]
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
    """The scenarios whose fields equal a value of every entry of `selection` (compared
    as text; `a|b` allows either)."""
    return [
        s
        for s in scenarios
        if all(str(getattr(s, k)) in v.split("|") for k, v in selection.items())
    ]


def estimate_s(s: Scenario, results: str | Path, runs: int) -> float:
    """A rough duration in seconds of `runs` runs of `s` here (the first cold): from this
    machine's last record of `s`, else a guess from the committed 2-core records."""
    old = records.read_or(record_path(s, results), Record(), records.read_record)
    step = old.get("step_time_s")
    cold = old.get("kernel_wall_s")
    if not (cold and step):
        heavy = (s.parallel.one_loop and s.parallel.multi_device) or s.processes > 1
        cold = {"smoke": 12.0, "quick": 18.0, "seed": 900.0}.get(s.scale, 60.0)
        cold *= 1.3 if heavy else 1.0
        step = {"quick": 0.03, "seed": 0.05}.get(s.scale, 0.01) * (3 if heavy else 1)

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
    """Run the matrix in rounds: every scenario's cold run (a fresh kernel), then its
    repeats round by round, so that a slow spell of the machine hits all configurations
    alike; print the plan (`plan_line`), then a line per run. Returns each scenario's
    last record.

    A reusable record (`plan.reusable`) stands unless `force`; one with fewer runs than
    `repeats` (default: the study's) gets its missing repeats; a failing scenario is
    recorded as failed, a row that cannot run here as `not_run`. `only`, `selection`,
    `full`, `recommended`, `step`, `problem` and `device_count` choose the scenarios
    (`_scenarios_to_run`); `ceiling`: also measure the machine's weak-scaling ceiling
    each repeat round; `wait`: wait for another measurement's lock rather than raise
    `lock.MachineBusy`; `dry_run`: print the plan scenario by scenario and return the
    records it would reuse, running and writing nothing.
    """
    problem = _spawnable(problem)
    executor = executor or LocalExecutor()
    sizing = Sizing(device_count, executor.gpus(device_count))
    runnable, not_run, wanted, probes = _scenarios_to_run(
        scale, device, study, full, only, selection, repeats, recommended, ceiling, problem,
        sizing, step,
    )  # fmt: skip
    executor.check(runnable)
    results = Path(results)
    name = get_study(study).name
    whole = full or scale == "seed"
    current = functools.partial(executor.current, results=results)
    if dry_run:
        every = [*runnable, *(s for s, _ in not_run)]
        the_plan = make_plan(every, not_run, wanted, current, force=force, probes=probes)
        summary = plan_line(the_plan, scale, name, whole, results, sizing, device)
        print("\n".join(dry_run_lines(the_plan, summary, current, force)), flush=True)
        return [the_plan.reused[s] for s in runnable if s in the_plan.reused]
    held = measuring(f"{scale} {name} matrix", wait) if executor.needs_lock() else nullcontext()
    with held:
        _write_not_run(not_run, results)
        the_plan = make_plan(runnable, not_run, wanted, current, force=force, probes=probes)
        if force and executor.needs_lock():  # keep this machine's records measured again
            when = environment.now().replace(":", "").replace("-", "")[:13]
            for s in runnable:
                records.keep_replaced(record_path(s, results), results, when)
        if show_progress:
            print(plan_line(the_plan, scale, name, whole, results, sizing, device), flush=True)
        done = _execute(the_plan, executor, results, f"{scale} matrix", show_progress)
    return [done[s] for s in runnable]


def _spawnable(problem: "str | AnyProblem") -> str:
    """`problem` as the runs' own processes import it; one of this process only is refused."""
    problem = problem_spec(problem)
    if in_this_process_only(problem):
        raise ValueError(
            f"problem {problem!r} is registered in this process only; the matrix runs each "
            "scenario in a process of its own: define its class in a module they can import "
            "and pass the object or module:object"
        )
    return problem


def _execute(
    the_plan: MatrixPlan, executor: Executor, results: Path, label: str, show_progress: bool
) -> dict[Scenario, Record]:
    """Carry `the_plan` out with `executor`, in a session probe where it times here."""
    todo = sum(max(0, n) for n in the_plan.missing.values())
    probed = (
        session_probe(*probe_devices(list(the_plan.scenarios)), records.machine_folder(results))
        if todo and executor.needs_lock()
        else nullcontext()
    )
    progress = Progress(todo, label, show_progress)
    try:
        with probed:
            return executor.execute(the_plan, results, progress)
    finally:
        progress.close()


def probe_devices(scenarios: list[Scenario]) -> tuple[str, int]:
    """The device kind and count a session of `scenarios` probes: its CPU devices (the
    most in one process) where it has CPU rows, else its GPUs."""
    kind = "cpu" if any(s.device == "cpu" for s in scenarios) or not scenarios else "gpu"
    counts = [s.devices_per_process for s in scenarios if s.device == kind]
    return kind, max(counts, default=1)


def _takes(s: Scenario, step: dict[str, Any]) -> bool:
    """Whether the step file `step` was tuned for `s`'s problem, controller and device."""
    return all(getattr(s, fact) == step[fact] for fact in MATCHED)


def _once(found: list[T]) -> list[T]:
    """Scenarios, or `(scenario, why)` pairs, once per scenario key (the last kept)."""
    return list({(x[0] if isinstance(x, tuple) else x).key(): x for x in found}.values())


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
    """The scenarios a matrix command runs, those it cannot run here (with why), the runs
    wanted per scenario and the ceiling probes (see `run_matrix`): `selection`
    (`parse_selection`; none matching is an error), `recommended`
    (`recommended.recommended` on every row), `step` (a step file, on the rows it was
    tuned for), `problem` (a name or `module:object`) and `sizing`."""
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
        runnable = _once([apply(s) for s in runnable])
        not_run = _once([(apply(s), why) for s, why in not_run])
    if step is not None:
        if recommended or not the_study.recommendable:
            raise ValueError("--step applies to the scaling study alone, without --recommended")
        runnable = _once([apply_step(s.default_step(), step) for s in runnable if _takes(s, step)])
        not_run = [(apply_step(s.default_step(), step), w) for s, w in not_run if _takes(s, step)]
        not_run = _once(not_run)
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
    # The ceiling's probes: the 1-device strong-scaling CPU rows in one process.
    one = {"device": "cpu", "mode": "single", "scaling": "strong", "processes": "1"}
    probes = select(runnable, one) if ceiling else []
    return runnable, not_run, wanted, probes


def _write_not_run(not_run: list[tuple[Scenario, str]], results: Path) -> None:
    """A `not_run` record for every row that cannot run here (an equal one is left)."""
    here = environment.machine_id(environment.this_machine())
    for s, reason in not_run:
        path = record_path(s, results)
        old = records.read_or(path, {}, records.read_record)
        wanted = {"status": "not_run", "error": reason, "scenario_key": s.key(), "machine_id": here}
        if any(old.get(k) != v for k, v in wanted.items()):
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
    """The plan of a matrix command in one line: what it is sized to, scenarios, reusable
    records, runs to do and an estimate of their duration here."""
    missing = p.missing
    todo = sum(max(0, n) for n in missing.values())
    cold = len(p.cold)
    probes = p.count(CeilingProbe)
    elsewhere = {s for s, _ in p.not_run}  # their runs are another machine's
    seconds = sum(
        estimate_s(s, results, n) for s, n in missing.items() if n > 0 and s not in elsewhere
    )
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


def dry_run_lines(p: MatrixPlan, summary: str, current: Current, force: bool) -> list[str]:
    """`odestudy matrix --dry-run`: the plan line `summary`, the rows that cannot run
    here counted, then a line per scenario: its name and key, its runs to do, its record
    (`_record_state`), and why it cannot run here or runs beyond the physical cores."""
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


def _record_state(s: Scenario, p: MatrixPlan, current: Current, force: bool) -> str:
    """A scenario's record in a dry run: reused, run again, missing, or stale and why."""
    if s in p.reused:
        return f"record reused ({runs(p.reused[s])} of {p.wanted} runs)"
    rec, why, _ = current(s)
    if rec is None:
        return "no record"
    if why is None and force:
        return "record run again (--force)"
    return f"record stale: {why}"


def get_study(spec: "str | Study | type[Study]") -> Study:
    """The study `spec` names: a registered name, or `module:Class` of a `Study` subclass
    (imported, also from the working directory); ValueError naming the choices otherwise."""
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
