"""`odestudy tune`: the fastest training step for a problem, measured on this machine.

It trains the problem's model once with the default step, then times from that state
every lever that applies alone against the default, then the winners combined greedily
(and the study's step, for a problem it measured), in interleaved blocks (a slow spell
of the machine hits all alike), each step AOT-compiled apart (`METHOD`). A step is kept
where its whole 95% interval lies above 1 and it trains to an equal loss (within the
default's run-to-run spread measured here). With `--devices N`, the chosen step is then
timed split over N devices in every multi-device mode (`split_phase`). All candidates
run in one process: every lever is a scenario field or a compile option, none a process
setting.
"""

import contextlib
import dataclasses
import itertools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .measure import levers as _shipped  # noqa: F401 - registers the shipped levers
from .measure.lever import LEVERS, AbstractLever, Facts, combine
from .measure.recommended import recommended, study_measured
from .measure.resume import REPEAT_STEPS
from .measure.scenario import Scenario

# Interleaved blocks per phase and timed steps per block (a block is one of `run`'s
# repeats: its warm-up, then its timed steps carried from the trained state on the
# repeat's batches), and the carried steps of the equal-loss check: sized so that a
# quick-scale problem tunes in a few minutes on 2 cores.
BLOCKS = 5
STEPS_PER_BLOCK = REPEAT_STEPS
CHECK_STEPS = 20
# The label of the study's step among the combinations (a problem the study measured).
STUDY_STEP = "study_step"
# Wall seconds a tune may take (the quick scale on a 2-core machine: 15 minutes): the
# combinations are left out where the levers alone took more than half of it.
BUDGET_S = 900.0
METHOD = (
    "one process; the default trained once; every candidate compiled apart, run one untimed "
    "block, then timed in interleaved blocks, each as run times a repeat: warm-up steps, "
    "then steps carried from the trained state on the repeat's batches "
    "(resume.repeat_batches), a round in which the host contended a block (measure.host: "
    "steal, probes) left out where two rounds remain; speedup = "
    "default median step / candidate median step, 95% bootstrap over blocks and steps; "
    "equal loss: the evaluation loss after CHECK_STEPS carried steps from the trained "
    "state within the default's run-to-run spread of the default's"
)


class Candidate(NamedTuple):
    """A step tried: its label, its levers' names and the scenario it runs."""

    label: str
    levers: tuple[str, ...]
    scenario: Scenario


class Trial(NamedTuple):
    """A candidate compiled on the trained state, ready for timed blocks."""

    candidate: Candidate
    step: Any  # the `modes.ParallelStep`
    compiled: Callable
    params: Any
    opt_state: Any
    placed: list  # the equal-loss check's batches
    repeat: list  # a timed block's batches: warm-up, then timed (`resume.repeat_batches`)
    compile_s: float


def applicable(s: Scenario, facts: Facts) -> tuple[list[AbstractLever], dict[str, str]]:
    """The registered levers that apply to `s`, and the refused ones with why."""
    ok, refused = [], {}
    for cls in LEVERS.values():
        lever = cls()
        why = lever.refusal(s, facts)
        if why is None:
            ok.append(lever)
        else:
            refused[lever.name] = why
    return ok, refused


def _candidate(s: Scenario, levers: list[AbstractLever], facts: Facts) -> Candidate:
    fields = combine(s, levers, facts)
    names = tuple(lever.name for lever in levers)
    return Candidate("+".join(names) or "default", names, dataclasses.replace(s, **fields))


class Tuner:
    """The trained state of `s`'s default step, and what times candidates from it."""

    def __init__(self, s: Scenario, blocks: int, steps_per_block: int, log: Callable):
        from .measure.problem import stage_lengths
        from .measure.training import make_eval_loss, scenario_devices, train

        self.s, self.blocks, self.steps, self.log = s, blocks, steps_per_block, log
        self.host_blocks: dict[str, list[Any]] = {}
        self.solver_steps: dict[str, list[float]] = {}
        self.devices = scenario_devices(s)
        state: dict = {}
        t0 = time.perf_counter()
        self.record = train(s, self.devices, state_out=state)
        self.train_s = time.perf_counter() - t0
        self.state = state
        problem = self.problem = state["problem"]
        n_times = np.shape(problem.times(state["data"]))[1]
        last = stage_lengths(n_times, s.length_fractions)[-1]
        self.data = problem.truncate(state["data"], last, last)
        rng = np.random.default_rng(0)
        self.batches = [
            rng.choice(s.dataset_size, s.global_batch, replace=False) for _ in range(CHECK_STEPS)
        ]
        self.evaluate = make_eval_loss(s.ode_solve(problem))
        evalset = state["evalset"]
        self.evalset = problem.take(evalset, np.arange(problem.size(evalset)))
        self.static = None

    def compile(self, c: Candidate) -> Trial:
        """`c`'s step compiled on the trained state (a one-line error where refused)."""
        from .measure.resume import repeat_batches
        from .measure.training import prepare, scenario_devices, step_key

        setup = prepare(c.scenario, scenario_devices(c.scenario), check=False)
        if self.static is None:
            self.static = setup.static
        step = setup.step
        params, opt_state = step.place_state(self.state["params"], self.state["opt_state"])
        keyed = self.problem.needs_key
        placed = [
            step.place_batch(
                self.problem.take(self.data, idx), step_key(self.s, i) if keyed else None
            )
            for i, idx in enumerate(self.batches)
        ]
        repeat = repeat_batches(c.scenario, step, self.problem, self.state["data"])
        block = list(itertools.islice(repeat, c.scenario.warmup_steps + self.steps))
        t0 = time.perf_counter()
        compiled = step.compile(params, opt_state, placed[0])
        elapsed = time.perf_counter() - t0
        return Trial(c, step, compiled, params, opt_state, placed, block, elapsed)

    def check(self, t: Trial) -> dict[str, Any]:
        """Off the clock: `t`'s first loss, the most solver steps a sample took over
        `CHECK_STEPS` carried steps, and the evaluation loss after them."""
        import equinox as eqx

        from .measure.modes import to_host
        from .measure.timing import copy_arrays, run_steps

        first = t.compiled(*copy_arrays((t.params, t.opt_state)), t.placed[0])
        steps = np.asarray(to_host(first[3]))
        params, opt_state = copy_arrays((t.params, t.opt_state))
        run = run_steps(
            t.compiled,
            params,
            opt_state,
            itertools.islice(itertools.cycle(t.placed), CHECK_STEPS),
            CHECK_STEPS,
            where=f"{t.candidate.label}: check step",
            copy_state=t.candidate.scenario.donate,
        )
        model = eqx.combine(t.step.unplace(run.params), self.static)
        most = max([int(steps.max()), *(int(np.max(to_host(n))) for n in run.num_steps)])
        return {
            "first_loss": float(np.asarray(to_host(first[2])).reshape(-1)[0]),
            "solver_steps_max": most,
            "check_loss": float(self.evaluate(model, self.evalset)),
        }

    def time(self, trials: list[Trial]) -> dict[str, list[list[float]]]:
        """Each trial's step times, in `self.blocks` interleaved blocks, each timed as a
        repeat is (`resume.time_repeat`: warm-up, then `self.steps` steps carried from a
        copy of the trained state), so that both commands time a model alike."""
        from .measure.timing import copy_arrays, run_steps

        runs: dict[str, list[list[float]]] = {t.candidate.label: [] for t in trials}
        # What the host did around each block (`measure.host`), kept in the step file,
        # and each block's mean per-sample solver steps.
        self.host_blocks = {t.candidate.label: [] for t in trials}
        self.solver_steps = {t.candidate.label: [] for t in trials}
        # One untimed round first, a block of each: right after the candidates compiled,
        # the first blocks ran slower than the rest in every tune of the session that
        # timed blocks as repeats (the records of 2026-11-29 01:03-01:17 UTC).
        for t in trials:
            p, o = copy_arrays((t.params, t.opt_state))
            run_steps(t.compiled, p, o, t.repeat, len(t.repeat), where=f"{t.candidate.label}: step")
        for _ in range(self.blocks):
            for t in trials:
                params, opt_state = copy_arrays((t.params, t.opt_state))  # off the clock
                run = run_steps(
                    t.compiled,
                    params,
                    opt_state,
                    t.repeat,
                    len(t.repeat),
                    len(t.repeat) - self.steps,
                    where=f"{t.candidate.label}: timed step",
                )
                runs[t.candidate.label].append(run.times)
                self.host_blocks[t.candidate.label].append(run.host)
                steps = [np.mean(t.step.per_sample(n)) for n in run.num_steps]
                self.solver_steps[t.candidate.label].append(float(np.mean(steps)))
        return runs

    def contended(self) -> dict[int, str]:
        """The rounds of the last `time` the host contended, with why, where two remain."""
        from .measure import host

        why: dict[int, str] = {}
        for label, samples in self.host_blocks.items():
            for k, sample in enumerate(samples):
                if k not in why and (said := host.contended(sample)):
                    why[k] = f"block {k + 1} ({label}): {said}"
        return why if len(self.host_blocks) and self.blocks - len(why) >= 2 else {}


def measure_phase(
    tuner: Tuner, candidates: list[Candidate], phase: str, loss_factor: float
) -> list[dict[str, Any]]:
    """Compile, check and time `candidates` (the first the default) interleaved; a row
    each: its levers, step time, speedup with its interval, losses and verdict."""
    from .measure.checks import ProblemError
    from .report.intervals import ratio_interval

    trials: list[Trial] = []
    rows: list[dict[str, Any]] = []
    for c in candidates:
        row = {"label": c.label, "levers": list(c.levers), "phase": phase}
        try:
            trial = tuner.compile(c)
            checked = tuner.check(trial)
        except (ProblemError, ValueError, FloatingPointError) as exc:
            line = str(exc).splitlines()[0]
            rows.append({**row, "verdict": f"refused: {line}"})
            tuner.log(f"  {c.label}: refused: {line}")
            continue
        trials.append(trial)
        checked.update(fields=_fields(c.scenario), compile_time_s=trial.compile_s)
        rows.append({**row, **checked})
        tuner.log(f"  {c.label}: compiled in {trial.compile_s:.1f} s")
    runs = tuner.time(trials)
    left_out = tuner.contended()
    for said in left_out.values():
        tuner.log(f"  left out, host contended: {said}")
    kept = {label: [b for k, b in enumerate(r) if k not in left_out] for label, r in runs.items()}
    default = next(r for r in rows if r["label"] == candidates[0].label)
    base = {"step_times_runs_s": kept[default["label"]]}
    for r in rows:
        if r["label"] not in runs:
            continue
        ratio, lo, hi = ratio_interval(base, {"step_times_runs_s": kept[r["label"]]})
        r.update(
            step_time_s=float(np.median(np.concatenate(kept[r["label"]]))),
            speedup=ratio,
            speedup_ci=[lo, hi],
            step_times_runs_s=runs[r["label"]],
            left_out_blocks=list(left_out.values()),
            left_out_rounds=sorted(left_out),
            host_blocks=tuner.host_blocks[r["label"]],
            solver_steps_blocks=tuner.solver_steps[r["label"]],
        )
        equal = np.isfinite(r["check_loss"]) and r["check_loss"] <= (
            default["check_loss"] * loss_factor
        )
        r["equal_loss"] = bool(equal)
        if r is default:
            r["verdict"] = "baseline"
        elif not equal:
            r["verdict"] = "not kept: a higher loss"
        elif lo > 1:
            r["verdict"] = "faster"
        else:
            r["verdict"] = "not kept: not faster with its interval"
    return rows


def split_phase(tuner: Tuner, step: Scenario, devices: int, loss_factor: float) -> dict[str, Any]:
    """`step` on one device and split over `devices` devices in every multi-device mode
    here, at the same global batch, in interleaved blocks; the fastest mode whose
    interval lies wholly above 1 at an equal loss is chosen, else one device."""
    from .measure.modes import modes_here

    log = tuner.log
    here = modes_here(multi_device=True)
    one = Candidate("single", (), dataclasses.replace(step, mode="single", devices_per_process=1))
    split = [
        Candidate(m, (), dataclasses.replace(step, mode=m, devices_per_process=devices))
        for m in here
    ]
    log(f"split: the chosen step on {devices} devices in {len(split)} modes")
    rows = measure_phase(tuner, [one, *split], "split", loss_factor)
    base = "the chosen step on one device"
    if "step_time_s" in rows[0]:
        base += f", {rows[0]['step_time_s'] * 1e3:.3g} ms"
    timed = [r for r in rows[1:] if "speedup" in r]
    pays = [r for r in timed if r.get("verdict") == "faster"]
    best = max(pays, key=lambda r: r["speedup"]) if pays else None
    fastest = best or (max(timed, key=lambda r: r["speedup"]) if timed else None)
    said = f"one device: no mode was timed on {devices} devices"
    if fastest:
        lo, hi = fastest["speedup_ci"]
        ratio = f"{fastest['label']} {fastest['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]"
        said = (
            f"{ratio} on {devices} devices over {base}"
            if best
            else f"one device: no mode on {devices} devices is faster with its whole "
            f"interval (the fastest, {ratio} over {base})"
        )
    log(f"split: {said}")
    return {
        "mode": best["label"] if best else "single",
        "devices": devices if best else 1,
        "tried_devices": devices,
        "speedup": best["speedup"] if best else 1.0,
        "speedup_ci": best["speedup_ci"] if best else None,
        "said": said,
        "rows": rows,
    }


def _fields(s: Scenario) -> dict[str, Any]:
    """The levers `s` sets away from their defaults, as scenario fields."""
    return {k: getattr(s, k) for k in Scenario.levers() if getattr(s, k) != s.default(k)}


def greedy(s: Scenario, winners: list[AbstractLever], facts: Facts) -> list[list[AbstractLever]]:
    """The winners combined greedily, fastest first: from each winner in turn, the
    others added in order where each combines and changes the step; every growing
    combination of two or more, once each (combinations that exclude each other, such
    as the fused solve and diffrax's levers, each start from one of them)."""
    out: list[list[AbstractLever]] = []
    seen = {json.dumps(combine(s, [w], facts), sort_keys=True) for w in winners}
    for seed in winners:
        current = [seed]
        for lever in winners:
            if lever in current:
                continue
            try:
                before = combine(s, current, facts)
                after = combine(s, [*current, lever], facts)
            except ValueError:
                continue
            if after == before:
                continue
            current = [*current, lever]
            key = json.dumps(after, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(list(current))
    return out


def _loss_factor(s: Scenario, final: float, folder: Path, log: Callable[[str], None]) -> float:
    """How far apart two check losses may be: 1 plus the run-to-run spread of `s`'s
    problem here (`report.loss.spread_limit`), measured and recorded where none was."""
    from .measure.environment import machine_id, this_machine
    from .report.loss import spread_limit
    from .study.records import write_json_atomic
    from .study.spread import SEEDS, measure_spread, spread_path

    model = {"machine_id": machine_id(this_machine()), "scenario": s.to_dict()}
    limit = spread_limit(folder.parent, model)
    if limit is not None:
        log(f"equal loss: within the loss spread measured here ({limit - 1:.0%})")
        return limit
    log(f"no loss spread of this problem here: training it from {len(SEEDS) - 1} more seeds")
    record = measure_spread(s, final, log)
    write_json_atomic(spread_path(folder, s), record)
    log(f"equal loss: within the loss spread just measured ({record['spread_relative']:.0%})")
    return 1.0 + record["spread_relative"]


def tune(
    s: Scenario,
    blocks: int = BLOCKS,
    steps_per_block: int = STEPS_PER_BLOCK,
    log: Callable[[str], None] = print,
    results: str | Path | None = None,
    devices: int = 1,
    loss_factor: float | None = None,
) -> dict[str, Any]:
    """Tune `s`'s step (see the module's docstring): the step file's content. With
    `devices` of 2 or more, the chosen step is then timed split over them; `loss_factor`:
    the equal-loss bound over the default's loss (None: `_loss_factor`)."""
    from .measure.environment import now
    from .measure.training import environment
    from .study.records import DEFAULT_RESULTS, machine_folder
    from .study.steps import KIND

    s = s.default_step()
    started, t0 = now(), time.perf_counter()
    folder = machine_folder(results or DEFAULT_RESULTS)
    with _data_cache():
        log(f"training {s.problem_object.name} with the default step ...")
        tuner = Tuner(s, blocks, steps_per_block, log)
        trained_loss = float(s.ode_problem.trained_loss)
        final = float(tuner.record["final_loss"])
        log(f"trained to {final:.4g} (trained at {trained_loss:g}) in {tuner.train_s:.0f} s")
        if loss_factor is None:
            loss_factor = _loss_factor(s, final, folder, log)
        first = tuner.check(tuner.compile(Candidate("default", (), s)))
        facts = Facts(solver_steps=first["solver_steps_max"])
        levers, refused = applicable(s, facts)
        for name, why in refused.items():
            log(f"  {name}: refused: {why}")
        rows, final_rows = _phases(tuner, levers, facts, loss_factor, t0)
        kept = [r for r in final_rows if r.get("verdict") == "faster"]
        chosen = max(kept, key=lambda r: r["speedup"]) if kept else None
        base = next(r for r in final_rows if r["label"] == "default")
        split = None
        if devices > 1:
            step = dataclasses.replace(s, **(chosen["fields"] if chosen else {}))
            split = split_phase(tuner, step, devices, loss_factor)
    tried = [*rows, *(final_rows if final_rows is not rows else [])]
    for name, why in refused.items():
        tried.append({"label": name, "levers": [name], "phase": "alone",
                      "verdict": f"refused: {why}"})  # fmt: skip
    losses = {"trained": final, "trained_loss": trained_loss, "trained_ok": final <= trained_loss,
              "equal_factor": loss_factor, "check_steps": CHECK_STEPS}  # fmt: skip
    return {
        "kind": KIND,
        **{k: getattr(s, k) for k in ("problem", "controller", "device", "scale")},
        **_chosen(chosen, base, losses),
        "facts": facts._asdict(),
        "tried": tried,
        "mode": split["mode"] if split else "single",
        "devices": split["devices"] if split else 1,
        "split": split,
        "blocks": blocks,
        "steps_per_block": steps_per_block,
        "method": METHOD,
        "scenario": s.to_dict(),
        "train_time_s": tuner.train_s,
        "started": started,
        "finished": now(),
        "wall_time_s": time.perf_counter() - t0,
        **environment(s),
    }


def _chosen(chosen: dict | None, base: dict, losses: dict[str, Any]) -> dict[str, Any]:
    """The step file's fields of the chosen row (none kept: the default's)."""
    row = chosen or base
    return {
        "levers": row["levers"] if chosen else [],
        "fields": row["fields"] if chosen else {},
        "speedup": row["speedup"] if chosen else 1.0,
        "speedup_ci": row["speedup_ci"],
        "step_time_s": row["step_time_s"],
        "default_step_time_s": base["step_time_s"],
        "losses": {
            **losses,
            "default_check": base["check_loss"],
            "chosen_check": row["check_loss"],
        },
    }


@contextlib.contextmanager
def _data_cache() -> Iterator[None]:
    """The data sets generated under a temporary folder, unless a cache is set."""
    cache = os.environ.get("ODESTUDY_DATA_CACHE")
    with tempfile.TemporaryDirectory(prefix="odestudy-tune-") as tmp:
        os.environ.setdefault("ODESTUDY_DATA_CACHE", tmp)
        try:
            yield
        finally:
            if cache is None:
                os.environ.pop("ODESTUDY_DATA_CACHE", None)


def _phases(
    tuner: Tuner, levers: list, facts: Facts, loss_factor: float, t0: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of phase 1 (each lever alone) and of the last phase run (phase 2, the
    faster levers combined, where the levers alone took at most half of `BUDGET_S`)."""
    s, log = tuner.s, tuner.log
    default = Candidate("default", (), s)
    log(f"phase 1: {len(levers)} levers one at a time")
    alone = [default, *(_candidate(s, [lever], facts) for lever in levers)]
    rows = measure_phase(tuner, alone, "alone", loss_factor)
    faster = {r["label"]: r for r in rows if r.get("verdict") == "faster"}
    winners = sorted(
        (lever for lever in levers if lever.name in faster),
        key=lambda lever: -faster[lever.name]["speedup"],
    )
    combos = [_candidate(s, c, facts) for c in greedy(s, winners, facts)]
    # The study's step for a problem it measured, beside them: a tune never chooses a
    # step slower than it (`recommended.recommended`).
    if study_measured(s) and recommended(s) != s:
        combos.append(Candidate(STUDY_STEP, (STUDY_STEP,), recommended(s)))
    spent = time.perf_counter() - t0
    if not combos or spent > BUDGET_S / 2:
        if combos:
            log(f"no combinations: the levers alone took {spent:.0f} s of {BUDGET_S:.0f}")
        return rows, rows
    log(f"phase 2: {len(combos)} combinations of the {len(winners)} faster levers")
    best = [_candidate(s, winners[:1], facts)] if winners else []
    return rows, measure_phase(tuner, [default, *best, *combos], "combined", loss_factor)


def print_tune(out: dict[str, Any], print_line: Callable[[str], None] = print) -> None:
    """The table of what `tune` tried, and what it chose (`report.tuned.tune_lines`)."""
    from .report.tuned import tune_lines

    for line in tune_lines(out):
        print_line(line)
