"""A prediction a user can run: each mode's step time and speedup at N devices for a
problem, from a short 1-device step-cost sweep of its trained model on this machine, the
all-reduce latency measured here, and the collectives the compiled `shard` step runs in
its loops (the projection model, `report.projection.predict`)."""

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from .measure.audit import count_collectives, loop_collective_names
from .measure.scenario import Scenario

# What the prediction assumes, printed with it.
ASSUMPTIONS = (
    "devices run in lock-step: each device's solver loop runs as many iterations as the "
    "slowest sample of the global batch (measured per batch size by the sweep)",
    "a solver iteration costs what one device measured at the per-device batch "
    "(interpolated on log2 batch between the swept sizes)",
    "one gradient all-reduce per step at the latency measured here for the gradient's size",
    "`shard` runs one loop over the global batch; per solver iteration it runs its loop "
    "collectives as often as a profile of one call of its compiled step counts, each at "
    "the latency of a one-float all-reduce",
    "virtual CPU devices share this machine's cores: beyond its physical cores the "
    "prediction is of overhead, not of parallel speedup",
)


def _sweep_batches(global_batch: int, n: int) -> tuple[int, ...]:
    """The batches to sweep: the per-device batch and the global batch."""
    return (global_batch // n, global_batch)


def shard_loop_collectives(s: Scenario, n: int, params: Any = None) -> dict[str, Any]:
    """The collectives inside the loop bodies of the compiled `shard` step of `s`'s
    problem and controller on `n` devices: `static` (instructions in the program) and
    `per_iteration` (executions per solver iteration on one device, counted in a
    profile of one untimed call on the first global batch of the data: a collective in
    a loop nested in the solver loop, such as Tsit5's stages, runs several times per
    iteration), with the batch's `iterations`.

    - `params`: the trained parameters (host arrays) to run it with; None: the initial
      model (its iterations differ from a trained one's).
    """
    import jax

    from .measure.loops import event_counts
    from .measure.training import prepare, step_key

    shard = dataclasses.replace(s, mode="shard", devices_per_process=n)
    setup = prepare(shard, jax.devices("cpu")[:n] if s.device == "cpu" else jax.devices()[:n])
    placed_params, opt_state = setup.params, setup.opt_state
    if params is not None:
        placed_params, opt_state = setup.step.place_state(params, setup.optimiser.init(params))
    problem = setup.problem
    key = step_key(shard, 0) if problem.needs_key else None
    batch = setup.step.place_batch(problem.take(setup.data, np.arange(s.global_batch)), key)
    compiled = setup.step.compile(placed_params, opt_state, batch)
    counts = event_counts(compiled, placed_params, opt_state, batch)
    executed = sum(counts.get(name, 0) for name in loop_collective_names(compiled.as_text()))
    iterations = int(np.max(np.asarray(compiled(placed_params, opt_state, batch)[3])))
    return {
        "static": count_collectives(compiled.as_text()).in_loops,
        "per_iteration": executed / n / max(1, iterations),
        "iterations": iterations,
    }


def recorded_state(s: Scenario, results: str | Path) -> tuple[Path, float] | None:
    """The trained state that a cold run of `s` (`odestudy run`, or the matrix) saved
    under `results` on this machine, with its final loss, where its record may stand
    for `s` (`plan.reusable`: ok, and made here with the same versions, protocol and
    measurement environment); None otherwise."""
    from .measure.state import STATE_NAME
    from .study import records
    from .study.plan import reusable

    path = records.record_path(s, results)
    rec = reusable(s, path)
    state = path.parent / STATE_NAME
    if rec is None or not state.exists():
        return None
    return state, float(rec["final_loss"])


def check_prediction(s: Scenario, n: int) -> None:
    """Raise ValueError, saying why, unless `s` is a 1-device `single` scenario whose
    multi-device form on `n >= 2` devices is valid (`scenario.validate`: for example a
    global batch that `n` divides)."""
    if s.mode != "single" or s.total_devices != 1:
        raise ValueError(f"predict starts from the 1-device 'single' scenario, got {s.mode!r}")
    if n < 2:
        raise ValueError(f"predict needs --devices >= 2, got {n}")
    dataclasses.replace(s, mode="shard_map", devices_per_process=n)  # validates itself


def predict_modes(
    s: Scenario,
    n: int,
    timed_steps: int = 10,
    trained_state: tuple[str | os.PathLike, float] | None = None,
) -> dict[str, Any]:
    """Predict every multi-device mode's step time for scenario `s` (its problem,
    controller, scale and global batch) on `n` devices of this machine.

    - `s`: a 1-device `single` scenario; JAX must see at least `n` devices of its kind
      (`configure_devices`).
    - `timed_steps`: timed steps per batch size of the sweep.
    - `trained_state`: `(path, final_loss)` of the state a cold run of `s` saved, to
      start from instead of training (the workload map's predictions).

    Returns the sweep, the latencies, the loop collectives and one row per mode.
    """
    from .measure.cost import step_cost_sweep
    from .measure.environment import cpu_info
    from .report.projection import MULTI_DEVICE, collective_latency, predict

    check_prediction(s, n)
    state: dict[str, Any] = {}
    sweep = step_cost_sweep(
        s,
        _sweep_batches(s.global_batch, n),
        timed_steps=timed_steps,
        trained_state=trained_state,
        extras=False,
        state_out=state,
    )
    params = parameter_count(s)
    gradient = collective_latency(n, iterations=200, size=max(1, params))["latency_s"]
    one_float = collective_latency(n)["latency_s"]
    loop = shard_loop_collectives(s, n, state["params"])
    in_loop = loop["per_iteration"]
    base_row = next(r for r in sweep["rows"] if r["batch"] == s.global_batch)
    base = {"step_time_s": base_row["step_time_s"], "global_batch": s.global_batch}
    rows = []
    for mode in MULTI_DEVICE:
        p = predict(
            sweep,
            base,
            mode,
            n,
            s.global_batch,
            gradient,
            in_loop if mode == "shard" else 0,
            one_float,
        )
        rows.append(dict(p, mode=mode, speedup=base["step_time_s"] / p["step_time_s"]))
    cores = cpu_info().get("physical_cores")
    return {
        "scenario": s.to_dict(),
        "n_devices": n,
        "one_device_step_s": base["step_time_s"],
        "final_loss": sweep["final_loss"],
        "trained": bool(sweep["final_loss"] <= s.problem_object.trained_loss),
        "trained_loss": s.problem_object.trained_loss,
        "gradient_floats": params,
        "allreduce_gradient_s": gradient,
        "allreduce_one_float_s": one_float,
        "shard_loop_collectives": loop["static"],
        "shard_loop_collectives_per_iteration": in_loop,
        "exceeds_cores": s.device == "cpu" and cores is not None and n > int(cores),
        "rows": rows,
        "sweep": sweep,
        "assumptions": list(ASSUMPTIONS),
    }


def parameter_count(s: Scenario) -> int:
    """Floats in the gradient of `s`'s model: what the gradient all-reduce moves."""
    import equinox as eqx
    import jax
    import jax.random as jr

    model = s.ode_problem.make_model(jr.PRNGKey(s.seed), s.width)
    return int(sum(np.size(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))))


# Timed steps per swept batch in the map's predictions (the user's command: 10).
MAP_TIMED_STEPS = 20
# The prediction's model, in the map's records: a prediction of another model is made
# again. 2: `shard`'s loop collectives counted as executed (a profile of one call).
PREDICTION_MODEL = 2


def map_prediction_path(results: str | Path, workload: Any, controller: str) -> Path:
    """Where this machine's prediction of one workload and controller of the map lives:
    `<map results>/<machine>/predict/<workload>-<controller>.json`."""
    from .study.records import machine_folder

    return machine_folder(results) / "predict" / f"{workload.slug()}-{controller}.json"


def predict_map(
    results: str | Path, n: int, scale: str = "quick", show: bool = True
) -> list[dict[str, Any]]:
    """The prediction of every workload and controller of the map (`study.workloads`) on
    `n` devices, each from its trained 1-device row (the state its cold run saved), so
    that it can be checked against the map's measured rows of the same session.

    - `results`: the map's results folder (`<results>/map`); `scale`: the map's scale.

    Resumable: a prediction made from the same 1-device record (its run) is kept. A
    workload whose 1-device row is missing or failed gets no prediction (a line says
    so); one of an untrained row says `trained: false`, and the report checks none.
    JAX must see `n` CPU devices. Returns the predictions.
    """
    from .measure.environment import git_commit, machine_id, now, this_machine, versions
    from .measure.state import STATE_NAME
    from .measure.timing import PROTOCOL
    from .study import records
    from .study.workloads import CONTROLLERS, WORKLOADS

    out = []
    for w in WORKLOADS:
        for controller in CONTROLLERS:
            s = w.scenario(controller=controller, device="cpu", scale=scale)
            path = records.record_path(s, results)
            target = map_prediction_path(results, w, controller)
            try:
                rec = records.read_record(path)
            except (OSError, ValueError):
                rec = {}
            state = path.parent / STATE_NAME
            made_from = {
                "scenario_key": s.key(),
                "started": rec.get("started"),
                "model": PREDICTION_MODEL,
            }
            if rec.get("status") != "ok" or not state.exists():
                if show:
                    print(
                        f"no prediction for {w.name} {controller}: its 1-device row is "
                        f"{rec.get('status', 'missing')}"
                    )
                continue
            try:
                old = records.read_json(target)
                if old.get("made_from") == made_from:
                    out.append(old)
                    continue
            except (OSError, ValueError):
                pass
            p = predict_modes(s, n, MAP_TIMED_STEPS, (state, float(rec["final_loss"])))
            p.update(
                workload=w.name,
                made_from=made_from,
                machine_id=machine_id(this_machine()),
                versions=versions(),
                protocol=PROTOCOL,
                git_commit=git_commit(),
                finished=now(),
            )
            records.write_json_atomic(target, p)
            if show:
                speedups = ", ".join(f"{r['mode']} {r['speedup']:.2f}x" for r in p["rows"])
                print(f"predicted {w.name} {controller}: {speedups}", flush=True)
            out.append(p)
    return out
