"""A tuned step in a researcher's own loop, against the same loop calling diffrax
directly: the example problem written outside the package (`examples/own_problem.py`: a
time-dependent field that is not a plain MLP, irregular grids), trained by a plain loss
with no problem class, `odestudy.make_step`, the same data, initial field and batches.

- `diffrax`: the loss solves each series with `diffrax.diffeqsolve` (Tsit5,
  PIDController at the problem's tolerances, SaveAt(ts)), vmapped over the batch.
- `tuned`: the loss calls `step.solve(...)` from the problem's facts alone, the step
  `odestudy tune` chose for the problem (`--step FILE`), and `make_step(step=step)`.

Both train the same number of steps from the same field; their evaluation losses (mean
squared error on held-out series, each solved by diffrax's default solve) are compared,
and then their steps are timed from the trained states in interleaved blocks (each call
of the loop's step waited for, the host batch's placement inside it for both, as in the
loop; its first call off the clock). One process, one device.

    .venv/bin/python benchmarks/own_loop.py   # make own-loop, after tune

(default `--step`: the step `odestudy tune` recorded here for the example; default
`--out`: results/<machine>/own_loop/cpu-forced_decay-pid.json)
"""

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _diffrax_solve(rtol: float, atol: float) -> Any:
    """The loop's own solve: diffrax's Tsit5 with a PIDController, saved at `ts`."""
    import diffrax
    import jax

    def one(field, ts, y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), ts[0], ts[-1], ts[1] - ts[0], y0,
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            saveat=diffrax.SaveAt(ts=ts),
        )  # fmt: skip
        return sol.ys

    return lambda field, ts, y0: jax.vmap(one, in_axes=(None, 0, 0))(field, ts, y0)


def _train(make, solve, field, data, batches) -> tuple[Any, Any, Any, list[float]]:
    """`len(batches)` steps of the loop with `solve` in its loss (mean absolute error);
    returns the step, the trained field, its optimiser state and the losses."""
    import jax.numpy as jnp
    import optax

    ts, ys = data

    def loss(field, batch, key):
        bts, bys = batch
        return jnp.mean(jnp.abs(solve(field, bts, bys[:, 0]) - bys))

    step = make(loss, optax.adam(1e-2))
    opt_state, losses = step.init(field), []
    for idx in batches:
        field, opt_state, value, _ = step(field, opt_state, (ts[idx], ys[idx]))
        losses.append(float(value))
    return step, field, opt_state, losses


def _timed(step, field, opt_state, batch, steps: int) -> list[float]:
    import jax

    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        jax.block_until_ready(step(field, opt_state, batch))
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--step", help="the step file odestudy tune wrote (default: see above)")
    p.add_argument("--train-steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--steps-per-block", type=int, default=10)
    p.add_argument("--out", help="the record (default: see above)")
    a = p.parse_args()
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as every timing process (recorded)
    sys.path.insert(0, str(ROOT / "examples"))
    import equinox as eqx
    import jax
    import jax.random as jr
    import numpy as np
    import own_problem

    import odestudy

    odestudy.configure_devices("cpu", 1)
    from odestudy.measure.environment import now
    from odestudy.measure.training import environment
    from odestudy.report.intervals import ratio_interval
    from odestudy.study.records import machine_folder
    from odestudy.study.steps import step_path

    started, problem = now(), own_problem.PROBLEM
    where = odestudy.Scenario(problem="own_problem:PROBLEM", scale="quick")
    step = odestudy.load_step(a.step or step_path(where))
    out = Path(a.out or machine_folder() / "own_loop" / "cpu-forced_decay-pid.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    pool = problem.make_data(256 + 64, jr.PRNGKey(0))
    data, held = (pool.ts[:256], pool.ys[:256]), (pool.ts[256:], pool.ys[256:])
    rng = np.random.default_rng(0)
    batches = [rng.choice(256, a.batch, replace=False) for _ in range(a.train_steps)]
    field = problem.make_field(jr.PRNGKey(1), 64)
    facts = {"time_dependent": problem.time_dependent, "uniform_grid": problem.uniform_grid,
             "rtol": problem.rtol, "atol": problem.atol}  # fmt: skip
    loops = {
        "diffrax": (lambda loss, opt: odestudy.make_step(loss, opt, "single",
                                                         jax.devices()[:1]),
                    _diffrax_solve(problem.rtol, problem.atol)),
        "tuned": (lambda loss, opt: odestudy.make_step(loss, opt, step=step),
                  step.solve(**facts)),
    }  # fmt: skip
    evaluate = _diffrax_solve(problem.rtol, problem.atol)
    trained = {}
    for name, (make, solve) in loops.items():
        t0 = time.perf_counter()
        made, f, o, losses = _train(make, solve, step.model(field, problem), data, batches)
        pred = eqx.filter_jit(evaluate)(f, jax.numpy.asarray(held[0]), held[1][:, 0])
        eval_loss = float(np.mean((np.asarray(pred) - held[1]) ** 2))
        trained[name] = dict(step=made, field=f, opt_state=o, losses=losses,
                             eval_loss=eval_loss, train_s=time.perf_counter() - t0)  # fmt: skip
        print(f"{name}: trained in {trained[name]['train_s']:.0f} s, eval loss {eval_loss:.4g}")
    batch = (data[0][batches[0]], data[1][batches[0]])
    blocks: dict[str, list[list[float]]] = {name: [] for name in loops}
    for t in trained.values():  # the first call off the clock
        _timed(t["step"], t["field"], t["opt_state"], batch, 1)
    for b in range(a.blocks):
        for name in list(loops)[b % 2 :] + list(loops)[: b % 2]:
            t = trained[name]
            blocks[name].append(_timed(t["step"], t["field"], t["opt_state"], batch,
                                       a.steps_per_block))  # fmt: skip
    ratio = ratio_interval({"step_times_runs_s": blocks["diffrax"]},
                           {"step_times_runs_s": blocks["tuned"]})  # fmt: skip
    rows = {name: {"step_time_s": float(np.median(np.concatenate(blocks[name]))),
                   "step_times_blocks_s": blocks[name], "eval_loss": t["eval_loss"],
                   "train_losses": t["losses"], "train_s": t["train_s"]}
            for name, t in trained.items()}  # fmt: skip
    print(f"diffrax {rows['diffrax']['step_time_s'] * 1e3:.2f} ms, tuned "
          f"{rows['tuned']['step_time_s'] * 1e3:.2f} ms: speedup {ratio[0]:.2f}x "
          f"[{ratio[1]:.2f}, {ratio[2]:.2f}]; eval loss {rows['diffrax']['eval_loss']:.4g} "
          f"against {rows['tuned']['eval_loss']:.4g}")  # fmt: skip
    s = step.scenario()
    odestudy.write_json_atomic(out, {
        "kind": "own_loop",
        "method": __doc__.split("\n\n")[1],
        "step_file": step.measured,
        "rows": rows,
        "speedup": list(ratio),
        "train_steps": a.train_steps,
        "batch": a.batch,
        "started": started,
        "finished": now(),
        **environment(s),
    })  # fmt: skip


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
