"""A prediction a user can run: each mode's step time and speedup at N devices (in P
processes, on nodes) for a problem, from a short 1-device step-cost sweep of its trained
model on the device kind present here, and the collective costs of a hardware profile:
this session's machine probe where the N devices are present, or a named profile
(`study.profiles`: this machine's probes, NVLink H100s, PCIe GPUs). Every term says
whether it was measured or profiled, and every time and speedup carries an interval
(the sweep's timed steps resampled, the profile's stated range)."""

import concurrent.futures
import dataclasses
import multiprocessing
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .measure.audit import count_collectives, loop_collective_arrays
from .measure.compat import pmap_implementation, pmap_is_shard_map
from .measure.controllers import CONTROLLERS
from .measure.cost import gradient_allreduce, inside_one_program, step_cost_sweep
from .measure.devices import configure_devices, gpu_count
from .measure.environment import cpu_info, machine_id, now, provenance, this_machine, versions
from .measure.loops import event_counts
from .measure.meeting import loop_meeting
from .measure.modes import MODES
from .measure.probe import allreduce_s, session_probe
from .measure.recommended import recommended
from .measure.scenario import Scenario
from .measure.state import STATE_NAME
from .measure.timing import PROTOCOL, quantiles
from .measure.training import prepare, step_key
from .report import intervals, runs
from .report.crossover import crossing, log_interp
from .report.heldout import made_before
from .report.intervals import RESAMPLES
from .study import records
from .study.plan import expected_env, reusable, why_not_here
from .study.profiles import HardwareProfile, Value, mode_time
from .study.rec import Rec
from .study.workloads import CROSSOVER_BATCHES, CROSSOVER_WORKLOADS, WORKLOADS

# What the prediction assumes, printed with it.
ASSUMPTIONS = (
    "every device's solver loop runs as many iterations as the slowest sample of its "
    "share, and the step ends with the slowest device: the step's iterations are the "
    "expected maximum over the global batch, drawn from the sweep's measured per-sample "
    "solver steps",
    "a solver iteration costs what one device measured at the per-device batch; where the "
    "prediction is made from a recorded 1-device row, the sweep's times are scaled to that "
    "row's step (the sweep gives their ratio over batches, the row the session's level)",
    "on CPU devices of one process, a device's step in a mode where each device runs its "
    "own solver loop (`pmap`, `shard_map`) takes as long as that mode's own program on the "
    "N devices with the per-device batch repeated on each (its gradient all-reduce inside), "
    "as timed, not scaled to the recorded row; "
    "in a mode with one loop, or across processes, as N copies of the 1-device step inside "
    "one program of this process (`measure/cost.py`); each charged per solver iteration of "
    "the sweep at that batch; on GPUs, separate devices, it takes the sweep's step",
    "one gradient all-reduce per step, where not inside a mode's own timed program: on CPU "
    "devices of one process, as timed here (`pmean` of the gradient's pytree over the "
    "devices in one program); otherwise at the profile's latency for the gradient's size",
    "a mode with one loop over the global batch (`shard`, `explicit`) runs, per solver "
    "iteration, its loop collectives as often as a profile of one call of its own compiled "
    "step counts: on CPU devices, once per array of an all-reduce's tuple (they meet once "
    "per array, as their profile's rendezvous count shows), each meeting at its cost timed "
    "here inside a loop on the devices of one process; on GPUs (or across processes) once "
    "per collective, at the latency of a one-float all-reduce",
    "virtual CPU devices share this machine's cores: beyond its physical cores the "
    "prediction is of overhead, not of parallel speedup",
    "an interval covers the sweep's timing noise (and, where its terms were measured in "
    "several processes, the spread between them; a collective timed here is drawn from "
    "its times resampled) and the profile's stated range, not the model's own error "
    "(`docs/results/prediction.md` measures that)",
)
# Simulated steps per draw in the expected maximum of a batch's solver steps.
SIMULATED_STEPS = 20


def loop_collectives(
    s: Scenario, n: int, params: Any = None, mode: str = "shard"
) -> dict[str, Any]:
    """The loop collectives of `s`'s compiled step in one-loop `mode` on `n` devices, from
    `params` (None: the initial model's): `static` (in the program) and `per_iteration`
    (counted in a profile of one call: Tsit5's stages run several times an iteration)."""
    one_loop = dataclasses.replace(s, mode=mode, devices_per_process=n)
    # The program partitioned for N CPU devices where N devices of the kind are absent
    # (one GPU here): the same collectives in its loops.
    present = jax.devices()
    devices = jax.devices("cpu")[:n] if s.device == "cpu" or len(present) < n else present[:n]
    setup = prepare(one_loop, devices)
    placed_params, opt_state = setup.params, setup.opt_state
    if params is not None:
        placed_params, opt_state = setup.step.place_state(params, setup.optimiser.init(params))
    problem = setup.problem
    key = step_key(one_loop, 0) if problem.needs_key else None
    batch = setup.step.place_batch(problem.take(setup.data, np.arange(s.global_batch)), key)
    compiled = setup.step.compile(placed_params, opt_state, batch)
    counts = event_counts(compiled, placed_params, opt_state, batch)
    arrays = loop_collective_arrays(compiled.as_text())
    executed = sum(counts.get(name, 0) for name in arrays)
    # CPU devices meet once per array of an all-reduce (its profile's rendezvous: the
    # fused reverse's tuple of 36 cotangents, 36); on GPUs a collective counts once.
    met = sum(counts.get(name, 0) * (k if s.device == "cpu" else 1) for name, k in arrays.items())
    iterations = max(1, int(np.max(np.asarray(compiled(placed_params, opt_state, batch)[3]))))
    return {
        "static": count_collectives(compiled.as_text()).in_loops,
        "per_iteration": met / n / iterations,
        "collectives_per_iteration": executed / n / iterations,
        "iterations": iterations,
    }


def recorded_state(s: Scenario, results: str | Path) -> tuple[Path, float] | None:
    """The trained state a cold run of `s` saved under `results`, and its final loss, where
    its record may stand for `s` (`plan.reusable`)."""
    path = records.record_path(s, results)
    rec = reusable(s, path)
    state = path.parent / STATE_NAME
    if rec is None or not state.exists():
        return None
    return state, float(rec["final_loss"])


@dataclasses.dataclass(frozen=True)
class Anchor:
    """A recorded 1-device row's timed steps at its `batch` and their `source`: a prediction
    scales the sweep's times to it, to the session of the rows it is checked against."""

    batch: int
    step_times_s: tuple[float, ...]
    source: str

    @classmethod
    def of_record(cls, rec: dict[str, Any], source: str) -> "Anchor":
        """The anchor of a 1-device record: its runs from the trained state (`report.runs`)."""
        pooled_runs = runs.trained_state(Rec(rec)).step_times_runs_s or [[rec["step_time_s"]]]
        times = tuple(float(t) for run in pooled_runs for t in run)
        return cls(int(rec["global_batch"]), times, source)

    @property
    def step_time_s(self) -> float:
        """The median of the pooled steps."""
        return float(np.median(self.step_times_s))

    def to_dict(self) -> dict[str, Any]:
        """What a prediction says of its anchor."""
        return {"batch": self.batch, "step_time_s": self.step_time_s, "source": self.source}


def one_device(target: Scenario) -> Scenario:
    """The 1-device `single` form of `target`: what the sweep measures."""
    return dataclasses.replace(target, mode="single", devices_per_process=1, processes=1, nodes=1)


def step_said(target: Scenario) -> str:
    """Which step a prediction is of, in words: the recommended, the default, or its levers."""
    if recommended(target) == target:
        return "the recommended step"
    if target.default_step() == target:
        return "the default step (the reference's)"
    return "the step of levers " + ", ".join(
        f"{k}={getattr(target, k)}" for k in target.levers()
        if getattr(target, k) != target.default(k)
    )  # fmt: skip


def predicted_modes(target: Scenario) -> tuple[str, ...]:
    """Every multi-device mode the running JAX has for `target`'s placement."""
    several = target.processes > 1
    return tuple(
        name
        for name, m in MODES.items()
        if m.multi_device and (m.multi_process or not several) and m().why_not_here() is None
    )


def one_loop_modes(target: Scenario) -> tuple[str, ...]:
    """The predicted modes with one loop over the global batch: whose loop collectives count."""
    return tuple(m for m in predicted_modes(target) if MODES[m].one_loop)


def own_programs(target: Scenario) -> tuple[str, ...]:
    """The modes whose own program a prediction times on CPU devices of one process: each
    device runs its own solver loop, so that program is what a device pays inside it."""
    if target.device != "cpu" or target.processes > 1:
        return ()
    return tuple(m for m in predicted_modes(target) if not MODES[m].one_loop)


def check_prediction(target: Scenario, profile: HardwareProfile | None = None) -> None:
    """Raise ValueError, saying why, unless every mode can be predicted for `target` with
    `profile` (None: a probe of the devices); before anything compiles."""
    if target.total_devices < 2:
        raise ValueError(f"predict needs --devices >= 2 in all, got {target.total_devices}")
    for mode in predicted_modes(target):
        dataclasses.replace(target, mode=mode)  # validates itself (a batch N divides)
    one_device(target)
    placement = (target.total_devices, target.processes, target.nodes)
    if profile is not None:
        profile.latency(*placement)  # ProfileError names the placements it has
    elif target.processes > 1:
        raise ValueError(
            "a prediction over several processes takes its cross-process all-reduce from a "
            "profile: --profile cpu (this machine's multi-process records) or a profile file"
        )


def session_profile(probe: dict[str, Any], machine: HardwareProfile | None) -> HardwareProfile:
    """A profile of this session's probe: its values central, ranged over `machine`'s."""
    allreduce, per_float = {}, {}
    source = f"measured here by this session's probe ({probe.get('path')})"
    for n in sorted({a["n_devices"] for a in probe.get("allreduce", [])}):
        key = (n, 1, 1)
        one = allreduce_s(probe, n, 1) or 0.0
        sizes = [a["size"] for a in probe["allreduce"] if a["n_devices"] == n]
        slope = (allreduce_s(probe, n, max(sizes)) or one) - one
        slope = max(0.0, slope / max(1, max(sizes) - 1))
        spread = machine.allreduce.get(key) if machine else None
        per = machine.per_float.get(key) if machine else None
        over = " ; range over " + spread.source.removeprefix("measured here: ") if spread else ""
        allreduce[key] = _widened(one, spread, source + over)
        per_float[key] = _widened(slope, per, source)
    return HardwareProfile("probe", probe.get("platform", "cpu"), "this session's probe",
                           allreduce, per_float)  # fmt: skip


def _widened(central: float, over: Value | None, source: str) -> Value:
    """A measured `central` value, its range widened to include `over`'s."""
    low, high = (over.low, over.high) if over else (central, central)
    return Value(central, min(central, low), max(central, high), source, measured=True)


def expected_max(per_sample: np.ndarray, batch: int, rng: np.random.Generator) -> float:
    """The mean largest of `batch` draws from `per_sample` solver steps: a loop's iterations."""
    draws = rng.choice(per_sample, size=(SIMULATED_STEPS, batch), replace=True)
    return float(draws.max(axis=1).mean())


def _bootstrap_median(times: list[float], rng: np.random.Generator) -> float:
    return float(np.median(rng.choice(np.asarray(times), size=len(times), replace=True)))


def _resampled(
    found: dict[str, Any],
    times: str,
    median: str,
    rng: np.random.Generator | None,
    process: int | None,
) -> float:
    """`found[median]`, or with `rng` one draw: one `process`'s `times` resampled, their median."""
    if rng is None:
        return float(found[median])
    return _bootstrap_median(_of_process(found, times, process), rng)


def _draw(v: Value, rng: np.random.Generator) -> float:
    """One draw of `v`: the median of its samples resampled where it keeps them (one
    process's outlier moves the draws no more than the median), else uniform over its range."""
    if v.samples:
        return _bootstrap_median(list(v.samples), rng)
    return float(rng.uniform(v.low, v.high)) if v.high > v.low else v.central


def _terms(
    sweep: dict[str, Any],
    target: Scenario,
    per_sample: np.ndarray,
    rng: np.random.Generator | None,
    anchor: Anchor | None = None,
) -> dict[str, Any]:
    """One draw (with `rng` None, the central values) of the measured terms: the 1-device
    step, the time per solver iteration at the per-device batch (by mode where its own
    program was timed), and the expected iterations of a device's share and of the step."""
    by_batch = {r["batch"]: r for r in sweep["rows"]}
    local, full = (
        by_batch[target.global_batch // target.total_devices],
        by_batch[target.global_batch],
    )
    # A draw resamples one process's times (`pooled`): a ratio of two terms is then of
    # one process, as measured, and the draws spread over the processes.
    process = int(rng.integers(sweep.get("processes", 1))) if rng else None
    swept: dict[int, float] = {}
    for row in [full, local, *([by_batch[anchor.batch]] if anchor else [])]:
        if row["batch"] not in swept:  # the anchor's: one of these, or along a batch axis
            swept[row["batch"]] = _resampled(row, "step_times_s", "step_time_s", rng, process)
    scale = 1.0  # the factor from the sweep's step times to the anchor's session
    if anchor is not None:
        row_s = _bootstrap_median(list(anchor.step_times_s), rng) if rng else anchor.step_time_s
        scale = row_s / swept[anchor.batch]
    # A device's step with its neighbours busy: N copies of the 1-device step inside one
    # program (`cost.inside_one_program`); the sweep's step where not timed (a GPU).
    found = (sweep.get("neighbours") or {}).get(str(local["batch"])) or {}
    device_s = swept[local["batch"]]
    if found:
        device_s = _resampled(found, "together_s", "together_median_s", rng, process)
    # By mode timed as its own program there (`cost.real_steps`), all-reduce included.
    # Not scaled to the anchor (model 18): a 1-device row's process-to-process step
    # (the anchor over the sweep) did not carry over to the N-device program.
    by_mode = {
        mode: _resampled(t, "times_s", "median_s", rng, process) / local["iterations_executed"]
        for mode, t in (found.get("modes") or {}).items()
    }
    steps_rng = rng or np.random.default_rng(0)
    return {
        "one_device_s": swept[full["batch"]] * scale,
        "per_iteration_s": device_s / local["iterations_executed"] * scale,
        "by_mode": by_mode,
        "iterations_device": expected_max(per_sample, local["batch"], steps_rng),
        "iterations_step": expected_max(per_sample, target.global_batch, steps_rng),
    }


def _as_mode(terms: dict[str, Any], mode: str) -> dict[str, Any]:
    """`terms` with a device's time per iteration that of `mode`'s own program, where timed."""
    found = terms["by_mode"].get(mode)
    return terms if found is None else dict(terms, per_iteration_s=found)


def _of_process(found: dict[str, Any], key: str, process: int | None) -> list[float]:
    """The times `key` of `found`, those of one `process` where kept by process (`pooled`)."""
    by_process = found.get(key.removesuffix("_s") + "_by_process_s")
    return found[key] if process is None or not by_process else by_process[process]


@dataclasses.dataclass(frozen=True)
class Measured:
    """The terms a prediction's rows are made from: the 1-device `sweep`, the `gradient`
    and one-float all-reduces, the one-loop modes' `in_loop` collectives per solver
    iteration (by mode, or one for all), and the `anchor` row (None: the sweep's own)."""

    sweep: dict[str, Any]
    gradient: Value
    loop_latency: Value
    in_loop: float | dict[str, float]
    anchor: Anchor | None = None


def predict_rows(m: Measured, target: Scenario, seed: int = 0) -> list[dict[str, Any]]:
    """Each mode's predicted step and speedup for `target`: the medians of `RESAMPLES` draws
    with their intervals, and the terms at their central values."""
    sweep, anchor, in_loop = m.sweep, m.anchor, m.in_loop
    per_sample = np.asarray(
        [n for r in sweep["rows"] for n in r.get("per_sample_steps") or []] or [1]
    )
    rng = np.random.default_rng(seed)
    central = _terms(sweep, target, per_sample, None, anchor)
    draws = [_terms(sweep, target, per_sample, rng, anchor) for _ in range(RESAMPLES)]
    comms = [(_draw(m.gradient, rng), _draw(m.loop_latency, rng)) for _ in range(RESAMPLES)]
    rows = []
    for mode in predicted_modes(target):
        k = in_loop.get(mode, 0.0) if isinstance(in_loop, dict) else in_loop
        inside = mode in central["by_mode"]  # its own program timed: its all-reduce inside
        c = mode_time(mode, _as_mode(central, mode), 0.0 if inside else m.gradient.central,
                      m.loop_latency.central, k)  # fmt: skip
        times = [mode_time(mode, _as_mode(d, mode), 0.0 if inside else g, lat, k)["step_time_s"]
                 for d, (g, lat) in zip(draws, comms, strict=True)]  # fmt: skip
        speedups = [d["one_device_s"] / t for d, t in zip(draws, times, strict=True)]
        # The estimates are the draws' medians, so that each lies inside its interval
        # (the terms at their central values, `c`, can sit off the draws' centre).
        rows.append(dict(
            c,
            step_time_s=float(np.median(times)),
            central_step_time_s=c["step_time_s"],
            mode=mode,
            speedup=float(np.median(speedups)),
            one_device_s=central["one_device_s"],
            step_time_interval_s=list(intervals.central(np.asarray(times))),
            speedup_interval=list(intervals.central(np.asarray(speedups))),
            iterations=central["iterations_step"],
            iterations_per_device=central["iterations_device"],
            own_program=inside,
        ))  # fmt: skip
    return rows


def predict_axis(m: Measured, target: Scenario, axis: Sequence[int]) -> dict[str, Any]:
    """Each mode's predicted speedup along the per-device batches `axis` (strong
    scaling), and where it crosses 1 in the batch and, there, in the per-device work."""
    n = target.total_devices
    work = {int(r["batch"]): float(r["per_iteration_s"]) for r in m.sweep["rows"]}
    found: dict[str, list[dict[str, Any]]] = {}
    for b in axis:
        at = dataclasses.replace(target, batch=n * b, scaling="strong")
        for row in predict_rows(m, at):
            found.setdefault(row["mode"], []).append({
                "per_device_batch": b, "global_batch": n * b, "work_s": work[b],
                "speedup": row["speedup"], "speedup_interval": row["speedup_interval"],
                "step_time_s": row["step_time_s"],
            })  # fmt: skip
    modes = {}
    for mode, pts in found.items():
        speedups = [(p["speedup"], *p["speedup_interval"]) for p in pts]
        batches = [p["per_device_batch"] for p in pts]
        batch = crossing(batches, speedups, "path")
        work_at = None  # the per-device work at the crossing, where there is one
        if batch.at is not None:
            work_at = log_interp(batch.at, batches, [p["work_s"] for p in pts])
        modes[mode] = {"points": pts, "batch": dataclasses.asdict(batch), "work_s": work_at}
    return {"batches": list(axis), "devices": n, "modes": modes}


def neighbours_measured(
    base: Scenario, state: dict[str, Any], n: int, batches: set[int], modes: tuple[str, ...] = ()
) -> dict[str, dict[str, Any]]:
    """By per-device batch (as a JSON key), `cost.inside_one_program` of `base` on `n`
    CPU devices with `modes`' own programs."""
    problem, data = state["problem"], state["data"]
    rng = np.random.default_rng(1)
    key = step_key(base, 0) if problem.needs_key else None
    out = {}
    for b in sorted(batches):
        batch = problem.take(
            data, rng.choice(problem.size(data), b, replace=b > problem.size(data))
        )
        out[str(b)] = inside_one_program(base, batch, n, state, key, modes=modes)
    return out


@dataclasses.dataclass(frozen=True)
class Swept:
    """What a prediction is made from, measured on the devices present (`sweep_terms`):
    the 1-device `sweep` (on CPU devices with the neighbours, all-reduce and loop meeting
    timed), by one-loop mode its `loops` collectives, and the gradient's `floats`."""

    sweep: dict[str, Any]
    loops: dict[str, dict[str, Any]]
    floats: int


def sweep_terms(
    target: Scenario,
    profile: HardwareProfile,
    timed_steps: int = 10,
    trained_state: tuple[str | os.PathLike, float] | None = None,
    axis: Sequence[int] = (),
) -> Swept:
    """Measure, on the device kind present, what `predict_modes` predicts `target` from:
    `timed_steps` per batch, from `trained_state` `(path, final_loss)` instead of training,
    along `axis` too. JAX must see `target.total_devices` CPU devices."""
    check_prediction(target, profile)
    base, n, whole = one_device(target), target.total_devices, target.global_batch
    swept = tuple(sorted({whole // n, whole, *axis, *(n * b for b in axis)}))
    state: dict[str, Any] = {}
    sweep = step_cost_sweep(base, swept, timed_steps=timed_steps,
                            trained_state=trained_state, extras=False, state_out=state)  # fmt: skip
    if profile.device == "cpu" and target.device == "cpu":
        local = {whole // n, *axis}
        sweep["neighbours"] = neighbours_measured(base, state, n, local, own_programs(target))
        if target.processes == 1:
            sweep["allreduce"] = gradient_allreduce(base, n, state)
            sweep["loop_meeting"] = loop_meeting(n)
    loops = {m: loop_collectives(base, n, state["params"], m) for m in one_loop_modes(target)}
    return Swept(sweep, loops, parameter_count(base))


def use_devices(target: Scenario, present: bool) -> None:
    """Set up JAX's devices for a prediction: `target.total_devices` CPU devices (for the
    one-loop programs), and for GPUs one GPU, where `present` (no profile) all of them."""
    n = target.total_devices
    if target.device == "gpu":
        if present and gpu_count() < n:
            raise ValueError(
                f"{n} GPUs are not present here ({gpu_count()}): name a profile "
                "(--profile h100-nvlink, pcie-gpu or a file) to predict them from one"
            )
        configure_devices("gpu", 1)
        jax.config.update("jax_num_cpu_devices", n)
    else:
        configure_devices("cpu", n)


def sweep_in_processes(
    target: Scenario,
    profile: HardwareProfile,
    timed_steps: int,
    trained_state: tuple[str | os.PathLike, float],
    axis: Sequence[int] = (),
    processes: int = 1,
) -> Swept:
    """`sweep_terms` in `processes` fresh processes, one after another, `pooled`: on CPU
    devices one process's terms moved from process to process by more than their timing
    noise. On a GPU (held by this process) `processes` must be 1."""
    if processes > 1 and target.device != "cpu":
        raise ValueError(f"terms in {processes} processes are for CPU devices, not {target.device}")
    if processes == 1:
        return sweep_terms(target, profile, timed_steps, trained_state, axis)

    spawn = multiprocessing.get_context("spawn")
    args = (target, profile, timed_steps, (str(trained_state[0]), trained_state[1]), axis)
    with concurrent.futures.ProcessPoolExecutor(1, spawn, max_tasks_per_child=1) as pool:
        found = [pool.submit(_swept_alone, *args).result() for _ in range(processes)]
    return dataclasses.replace(found[0], sweep=pooled([f.sweep for f in found]))


def _swept_alone(target: Scenario, *args: Any) -> Swept:
    """`sweep_terms` in a process of its own (`sweep_in_processes`)."""
    use_devices(target, present=False)
    return sweep_terms(target, *args)


def pooled(sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    """One sweep of several processes' sweeps from one trained state: each list of times
    pooled and kept by process (`_terms` draws one process), the collectives' medians
    over the processes'; the rest is the first's (the same trained state)."""
    if len(sweeps) == 1:
        return sweeps[0]
    out = dict(sweeps[0], processes=len(sweeps), rows=[dict(r) for r in sweeps[0]["rows"]])
    for i, row in enumerate(out["rows"]):
        groups = [s["rows"][i]["step_times_s"] for s in sweeps]
        times = [t for g in groups for t in g]
        median, p25, p75 = quantiles(times)
        row.update(step_times_s=times, step_times_by_process_s=groups, step_time_s=median,
                   step_time_p25_s=p25, step_time_p75_s=p75,
                   per_iteration_s=median / row["iterations_executed"])  # fmt: skip
    if out.get("neighbours"):
        out["neighbours"] = {b: _pooled_neighbours([s["neighbours"][b] for s in sweeps])
                             for b in out["neighbours"]}  # fmt: skip
    for key in ("allreduce", "loop_meeting"):
        if out.get(key):
            out[key] = _pooled_median([s[key] for s in sweeps])
    return out


def _pooled_neighbours(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Several processes' `cost.inside_one_program` of one batch, pooled (`pooled`)."""
    out = dict(found[0])
    for key in ("alone", "together"):
        out.update(_pooled_times([f[f"{key}_s"] for f in found], key, f"{key}_median_s"))
    out["factor"] = out["together_median_s"] / out["alone_median_s"]
    if out.get("modes"):
        out["modes"] = {m: _pooled_times([f["modes"][m]["times_s"] for f in found])
                        for m in out["modes"]}  # fmt: skip
    return out


def _pooled_times(
    groups: list[list[float]], name: str = "times", median: str = "median_s"
) -> dict[str, Any]:
    """Several processes' times of one program: all of them, their median, by process."""
    times = [t for g in groups for t in g]
    return {f"{name}_s": times, median: float(np.median(times)), f"{name}_by_process_s": groups}


def _pooled_median(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Several processes' timed collective: the median of medians, over their intervals."""
    return dict(
        found[0],
        median_s=float(np.median([f["median_s"] for f in found])),
        interval_s=[min(f["interval_s"][0] for f in found), max(f["interval_s"][1] for f in found)],
        times_s=[t for f in found for t in f["times_s"]],
        processes=len(found),
    )


def predict_modes(
    target: Scenario,
    profile: HardwareProfile,
    swept: Swept,
    anchor: Anchor | None = None,
    axis: Sequence[int] = (),
) -> dict[str, Any]:
    """Predict every multi-device mode's step for `target` (its mode is not read) from
    `swept` and `profile`'s collective costs, scaled to `anchor` (None: the sweep's own),
    along `axis` too; nothing is measured here. Returns the sweep, terms and rows."""
    check_prediction(target, profile)
    sweep, loops, base = swept.sweep, swept.loops, one_device(target)
    placement = (target.total_devices, target.processes, target.nodes)
    gradient = _timed_here(
        sweep.get("allreduce"),
        "measured here: pmean of the gradient's pytree over {n} CPU devices in one program, "
        "median of {times} calls (`measure/cost.py`)",
    ) or profile.gradient(swept.floats, *placement)
    one_float = profile.latency(*placement)
    loop_latency = meeting_measured(sweep) or one_float
    per_iteration = {m: loop["per_iteration"] for m, loop in loops.items()}
    measured = Measured(sweep, gradient, loop_latency, per_iteration, anchor)
    rows = predict_rows(measured, target)
    along = predict_axis(measured, target, axis) if axis else None
    cores = cpu_info().get("physical_cores")
    return {
        "scenario": target.to_dict(),
        "n_devices": target.total_devices,
        "processes": target.processes,
        "nodes": target.nodes,
        "profile": {k: getattr(profile, k) for k in ("name", "device", "description")},
        "one_device_step_s": rows[0]["one_device_s"],
        "swept_step_s": next(
            r["step_time_s"] for r in sweep["rows"] if r["batch"] == target.global_batch
        ),
        "anchor": None if anchor is None else anchor.to_dict(),
        "final_loss": sweep["final_loss"],
        "trained": bool(sweep["final_loss"] <= base.problem_object.trained_loss),
        "trained_loss": base.problem_object.trained_loss,
        "gradient_floats": swept.floats,
        "allreduce_gradient_s": gradient.central,
        "allreduce_one_float_s": one_float.central,
        "loop_meeting_s": loop_latency.central,
        "shard_loop_collectives": loops["shard"]["static"],
        "shard_loop_collectives_per_iteration": loops["shard"]["per_iteration"],
        "loop_collectives": loops,
        "terms": terms_said(sweep, base, gradient, loop_latency, loops, profile, anchor),
        "pmap_implementation": pmap_implementation(),
        "pmap_is_shard_map": pmap_is_shard_map(),
        "exceeds_cores": profile.device == target.device == "cpu"
        and cores is not None
        and target.total_devices > int(cores),
        "rows": rows,
        "step": step_said(target),
        "crossover": along,
        "sweep": sweep,
        "assumptions": list(ASSUMPTIONS),
    }


def terms_said(
    sweep: dict[str, Any],
    base: Scenario,
    gradient: Value,
    loop_latency: Value,
    loops: dict[str, dict[str, Any]],
    profile: HardwareProfile,
    anchor: Anchor | None = None,
) -> list[dict[str, Any]]:
    """Each term of the prediction: what, its value, and whether measured or profiled."""
    kind = sweep.get("device_kind", base.device)
    anchored = [] if anchor is None else [
        {"term": "the 1-device step the speedups are over, the sweep's 1-device times "
         "scaled to it (a mode's own program on the N devices is not)",
         "value_s": anchor.step_time_s, "measured": True,
         "source": f"{anchor.source} ({len(anchor.step_times_s)} timed steps)"}]  # fmt: skip
    return [
        *anchored,
        {"term": "time per solver iteration at the per-device batch", "measured": True,
         "source": f"the 1-device sweep here on {kind} ({len(sweep['rows'])} batch sizes)"
         f"{_in_processes(sweep)}"},
        {"term": "solver iterations of a step (expected maximum over the global batch)",
         "measured": True, "source": "the sweep's per-sample solver steps, resampled"},
        *_neighbours_said(sweep),
        {"term": "gradient all-reduce", "value_s": gradient.central,
         "range_s": [gradient.low, gradient.high], "measured": gradient.measured,
         "source": gradient.source},
        {"term": "a meeting of the devices in a one-loop mode's loop",
         "value_s": loop_latency.central, "range_s": [loop_latency.low, loop_latency.high],
         "measured": loop_latency.measured, "source": loop_latency.source},
        *({"term": f"`{mode}`'s loop collectives per solver iteration",
           "value": loop["per_iteration"], "measured": True,
           "source": "counted in a profile of one call of its own compiled step here "
           f"({loop['static']} in its loops, "
           f"{loop.get('collectives_per_iteration', loop['per_iteration']):.3g} run per "
           "iteration; on CPU devices, an all-reduce once per array)"}
          for mode, loop in loops.items()),
        {"term": "profile", "measured": profile.name == "probe",
         "source": f"{profile.name}: {profile.description} ({profile.device})"},
    ]  # fmt: skip


def _neighbours_said(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The neighbours term, per per-device batch."""
    found = sweep.get("neighbours") or {}
    if not found:
        return []
    swept = {r["batch"]: r["step_time_s"] for r in sweep["rows"]}
    factors = ", ".join(
        f"{b}: {v['together_median_s'] / swept[int(b)]:.2f}" for b, v in found.items()
    )
    n = next(iter(found.values()))["n"]
    said = [{"term": "a device's compute with its neighbours busy, over the sweep's step "
             f"(per-device batch: factor) {factors}", "measured": True,
             "source": f"{n} copies of the 1-device step inside one program on {n} CPU devices "
             "of this process (`measure/cost.py`), over the sweep's step there"
             f"{_in_processes(sweep)}"}]  # fmt: skip
    for mode in next(iter(found.values())).get("modes") or {}:
        own = ", ".join(
            f"{b}: {v['modes'][mode]['median_s'] / swept[int(b)]:.2f}" for b, v in found.items()
        )
        said.append({"term": f"`{mode}`'s own step on {n} devices, the per-device batch "
                     f"repeated, over the sweep's step (per-device batch: factor) {own}",
                     "measured": True, "source": f"its own program on {n} CPU devices of this "
                     "process, timed in the same rounds as the copies (`cost.real_steps`): "
                     "a device's step there, its gradient all-reduce inside"
                     f"{_in_processes(sweep)}"})  # fmt: skip
    return said


def _in_processes(sweep: dict[str, Any]) -> str:
    """How a term says it was measured in several processes (`sweep_in_processes`)."""
    k = sweep.get("processes", 1)
    return f"; in each of {k} processes, one after another, pooled" if k > 1 else ""


def meeting_measured(sweep: dict[str, Any]) -> Value | None:
    """A meeting of the devices inside a loop, timed here (`meeting.loop_meeting`)."""
    return _timed_here(
        sweep.get("loop_meeting"),
        "measured here on {n} CPU devices: {form}, less the same loop without it, per "
        "meeting, median of {times} rounds (`measure/meeting.py`)",
    )


def _timed_here(found: dict[str, Any] | None, source: str) -> Value | None:
    """A collective timed here, its `source` formatted with it; None where not timed."""
    if not found:
        return None
    low, high = found["interval_s"]
    said = source.format(n=found["n"], form=found.get("form"), times=len(found["times_s"]))
    return Value(found["median_s"], low, high, said, True, tuple(found["times_s"]))


def parameter_count(s: Scenario) -> int:
    """Floats in the gradient of `s`'s model: what the gradient all-reduce moves."""
    model = s.ode_problem.make_model(jax.random.PRNGKey(s.seed), s.width)
    return int(sum(np.size(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))))


# Timed steps per swept batch in the map's predictions (the user's command: 10).
MAP_TIMED_STEPS = 20
# The prediction's model, in the map's records: a prediction of another model is made
# again. What each model changed: docs/method.md ("What each prediction model changed").
PREDICTION_MODEL = 18
# Processes a recorded prediction's terms are measured in, on CPU devices.
TERM_PROCESSES = 3


def recorded_prediction_path(
    results: str | Path, target: Scenario, profile: str | None = None
) -> Path:
    """Where `predict --record` writes its prediction of `target`: beside this machine's
    records, named by the target (`row_predictions` reads it back)."""
    return _prediction_path(results, target.name(), profile)


def _prediction_path(results: str | Path, stem: str, profile: str | None) -> Path:
    """This machine's prediction `stem`, its name saying the profile (none: the probe)."""
    tail = f"-profile-{Path(profile).stem}" if profile else ""
    return records.machine_folder(results) / "predict" / f"{stem}{tail}.json"


def why_no_anchor(
    target: Scenario, results: str | Path, rec: dict[str, Any] | None = None
) -> str | None:
    """Why `target`'s 1-device row under `results` (`rec`, else read) cannot anchor a
    prediction here (not recorded, failed, its trained state missing, made elsewhere)."""
    found = _anchor_record(target, results) if rec is None else rec
    return _unusable(found, _state_path(target, results), one_device(target))


def predict_map(
    results: str | Path,
    n: int,
    scale: str = "quick",
    profile: HardwareProfile | None = None,
    show: bool = True,
    machine: HardwareProfile | None = None,
    again: bool = False,
) -> list[dict[str, Any]]:
    """The prediction of every workload and controller of the map on `n` devices
    (`predict_from_row`). Resumable; JAX must see `n` CPU devices."""
    out = []
    for w, controller, target, axis, path in _map_targets(results, n, scale, profile):
        label, extra = f"{w.name} {controller}", {"workload": w.name}
        p = predict_from_row(
            target, results, path, profile, label, show, extra, machine, axis, again=again
        )
        if p is not None:
            out.append(p)
    return out


def _map_targets(
    results: str | Path, n: int, scale: str, profile: HardwareProfile | None
) -> Iterator[tuple[Any, str, Scenario, tuple[int, ...], Path]]:
    """Each workload and controller of the map with its target, axis and path."""
    named = profile.name if profile else None
    for w in WORKLOADS:
        for controller in CONTROLLERS:
            target, axis = map_target(w, controller, n, scale)
            path = _prediction_path(results, f"{w.slug()}-{controller}", named)
            yield w, controller, target, axis, path


def map_target(w: Any, controller: str, n: int, scale: str) -> tuple[Scenario, tuple[int, ...]]:
    """The map's recommended target for `w` and `controller` on `n` devices, and its axis."""
    s = w.scenario(controller=controller, device="cpu", scale=scale)
    target = recommended(dataclasses.replace(s, mode="shard_map", devices_per_process=n))
    return target, CROSSOVER_BATCHES if w.name in CROSSOVER_WORKLOADS else ()


def predict_from_row(
    target: Scenario,
    results: str | Path,
    out: Path,
    profile: HardwareProfile | None,
    label: str,
    show: bool = True,
    extra: dict[str, Any] | None = None,
    machine: HardwareProfile | None = None,
    axis: Sequence[int] = (),
    *,
    again: bool = False,
    processes: int = 1,
) -> dict[str, Any] | None:
    """The prediction of `target` from its trained 1-device row under `results`
    (`Anchor`), written to `out`; one there made from the same, or held out unless `again`,
    is kept. None (said, by `label`) where the row cannot anchor one. `profile` None: this
    session's probe, ranged over `machine`; `processes`: see `sweep_in_processes`."""
    processes = processes if target.device == "cpu" else 1  # a GPU is held by this process
    rec, made_from, kept = _made_from(target, results, out, profile, axis, again, processes)
    if kept is not None:
        return kept
    why = why_no_anchor(target, results, rec)
    used = profile or session_profile(session_probe() or {}, machine)
    if why is None:
        try:
            check_prediction(target, used)
        except ValueError as exc:  # for example a profile without this placement
            why = str(exc)
    if why is not None:
        if show:
            print(f"no prediction for {label}: {why}")
        return None
    row = Anchor.of_record(rec, f"the recorded 1-device row started {rec.get('started')}")
    began = time.perf_counter()
    trained = (_state_path(target, results), float(rec["final_loss"]))
    swept = sweep_in_processes(target, used, MAP_TIMED_STEPS, trained, axis, processes)
    p = predict_modes(target, used, swept, row, axis)
    p.update(made_here(), made_from=made_from, label=label, **(extra or {}))
    p["wall_time_s"] = time.perf_counter() - began  # the sweep and terms, not the probe
    records.keep_earlier(out)  # it was made before the newer row: held out in time
    records.write_json_atomic(out, p)
    if show:
        speedups = ", ".join(f"{r['mode']} {r['speedup']:.2f}x" for r in p["rows"])
        print(f"predicted {label} ({profile.name if profile else 'probe'}): {speedups}", flush=True)
    return p


def made_here() -> dict[str, Any]:
    """Where and when a prediction is made."""
    return {"machine_id": machine_id(this_machine()), "versions": versions(),
            "protocol": PROTOCOL, **provenance(), "finished": now()}  # fmt: skip


def _anchor_record(target: Scenario, results: str | Path) -> dict[str, Any]:
    """The record of `target`'s 1-device form under `results` ({} where none)."""
    path = records.record_path(one_device(target), results)
    return dict(records.read_or(path, {}, records.read_record))


def _state_path(target: Scenario, results: str | Path) -> Path:
    """Where the cold run of `target`'s 1-device form saved its trained state."""
    return records.record_path(one_device(target), results).parent / STATE_NAME


def _unusable(rec: dict[str, Any], state: Path, base: Scenario) -> str | None:
    """Why the 1-device record `rec` of `base` (its state at `state`) cannot anchor here."""
    if rec.get("status") != "ok":
        return f"its 1-device row is {rec.get('status', 'missing')}"
    if not state.exists():
        return f"its 1-device row's trained state is not here ({state})"
    foreign = why_not_here(rec, expected_env(base))
    return None if foreign is None else f"its 1-device row was not made here ({foreign})"


def _made_from(
    target: Scenario,
    results: str | Path,
    out: Path,
    profile: HardwareProfile | None,
    axis: Sequence[int] = (),
    again: bool = False,
    processes: int = 1,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """The 1-device record of `target`, what a prediction is made from, and the one at `out`
    where made from the same or, unless `again`, held out."""
    rec = _anchor_record(target, results)
    made_from: dict[str, Any] = {
        "scenario_key": one_device(target).key(), "started": rec.get("started"),
        "model": PREDICTION_MODEL, "profile": profile.name if profile else None,
        "target_key": target.key(), **({"axis": list(axis)} if axis else {}),
        **({"processes": processes} if processes > 1 else {}),
    }  # fmt: skip
    old = records.read_or(out, {})
    same = old.get("made_from") == made_from
    kept = same or (not again and _held_out(old, made_from, target, results, out))
    return rec, made_from, old if kept else None


def _held_out(
    old: dict[str, Any],
    made_from: dict[str, Any],
    target: Scenario,
    results: str | Path,
    out: Path,
) -> bool:
    """Whether `old`, made as `made_from` would be, was made before every multi-device row
    of `target` under `results` (`heldout.made_before`): one made anew after those rows
    would replace a held-out check by an in-sample one."""
    was = old.get("made_from") or {}
    if any(
        was.get(k) != made_from.get(k)
        for k in ("model", "profile", "processes", "target_key", "axis")
    ):
        return False
    paths = [records.record_path(dataclasses.replace(target, mode=m), results)
             for m in predicted_modes(target)]  # fmt: skip
    rows = [r for p in paths if (r := records.read_or(p, None, records.read_record))]
    return bool(rows) and made_before({**old, "path": str(out)}, rows) is True


def rows_to_predict(
    results: str | Path, profile: HardwareProfile, scale: str = "quick"
) -> list[tuple[Scenario, Path]]:
    """The targets of `predict_recorded_rows` a run would measure, with their paths."""
    out = []
    for target, path in _row_paths(results, profile, scale):
        rec, _, kept = _made_from(target, results, path, profile)
        if kept is None and why_no_anchor(target, results, rec) is None:
            out.append((target, path))
    return out


def map_to_predict(
    results: str | Path, n: int, scale: str, profile: HardwareProfile | None, again: bool
) -> list[tuple[Any, str]]:
    """The workload and controller pairs of `predict_map` not yet predicted."""
    return [
        (w, controller)
        for w, controller, target, axis, path in _map_targets(results, n, scale, profile)
        if _made_from(target, results, path, profile, axis, again)[2] is None
    ]


def row_targets(results: str | Path, scale: str = "quick") -> list[Scenario]:
    """One target per placement and controller of this machine's ok multi-device rows
    of `scale` (strong scaling, the default problem, within the physical cores)."""
    cores = cpu_info().get("physical_cores") or 1
    found: dict[str, Scenario] = {}
    paths = sorted(records.machine_folder(results).glob(f"{scale}/*/{records.RECORD_NAME}"))
    for _, rec in records.readable(paths, records.read_record):
        s = Scenario.from_dict(rec["scenario"])
        kind = (rec.get("status"), s.scaling, s.problem, s.device)
        if kind == ("ok", "strong", "oscillator", "cpu") and 2 <= s.total_devices <= cores:
            target = dataclasses.replace(s, mode="shard_map")
            found.setdefault(target.key(), target)
    return list(found.values())


def predict_recorded_rows(
    results: str | Path, profile: HardwareProfile, scale: str = "quick", show: bool = True
) -> list[dict[str, Any]]:
    """The prediction of every `row_targets` target from its 1-device row and `profile`."""
    made = (
        predict_from_row(target, results, path, profile, target.name(), show)
        for target, path in _row_paths(results, profile, scale)
    )
    return [p for p in made if p is not None]


def _row_paths(
    results: str | Path, profile: HardwareProfile, scale: str
) -> list[tuple[Scenario, Path]]:
    """Each of `row_targets` with where its prediction from `profile` goes."""
    targets = row_targets(results, scale)
    return [(t, recorded_prediction_path(results, t, profile.name)) for t in targets]
