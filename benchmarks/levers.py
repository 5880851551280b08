"""Levers on one training step of the trained quick model (1 device): `max_steps` of the
solve (4096 by default, which also sizes the checkpointing of diffrax's
`RecursiveCheckpointAdjoint`) against smaller bounds that the trained field never hits.
A benchmark, not a test: it trains the scenario once, then times every variant's step
on the same trained parameters and batches, in interleaved blocks (A B C A B C ...), and
checks that each variant computes the default's loss and gradients.

    .venv/bin/python benchmarks/levers.py --controller pid \
        --out results/<machine>/levers/cpu-pid.json

The variants change `odestudy.model.MAX_STEPS` while their step is traced; the package
itself is unchanged (a scenario option would come with a recommended configuration).
"""

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--controller", choices=("pid", "stepto"), default="pid")
    p.add_argument("--scale", default="quick")
    p.add_argument("--max-steps", default="4096,256,64",
                   help="comma-separated bounds; the first is the default")
    p.add_argument("--blocks", type=int, default=6, help="interleaved blocks per variant")
    p.add_argument("--steps-per-block", type=int, default=15)
    p.add_argument("--out", required=True, help="output JSON file")
    a = p.parse_args()
    import os

    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels (recorded)
    import odestudy

    odestudy.configure_devices("cpu", 1)
    import time

    import equinox as eqx
    import jax
    import numpy as np

    import odestudy.model as model_module
    from odestudy.data import N_TIMES
    from odestudy.intervals import ratio_interval
    from odestudy.parallel import make_parallel_step, tree_max_rel_diff
    from odestudy.training import environment, scenario_devices, train

    s = odestudy.Scenario(controller=a.controller, scale=a.scale)
    devices = scenario_devices(s)
    state: dict = {}
    trained = train(s, devices, state_out=state)
    params, static = eqx.partition(state["model"], eqx.is_array)
    optimiser = state["optimiser"]
    data = state["data"].truncate(max(2, int(N_TIMES * s.length_fractions[-1])))
    rng = np.random.default_rng(0)
    batches = [rng.choice(len(data), s.global_batch, replace=False)
               for _ in range(a.steps_per_block)]
    bounds = [int(x) for x in a.max_steps.split(",")]
    variants = {}
    for bound in bounds:
        model_module.MAX_STEPS = bound  # read by model.solve when the step is traced
        step = make_parallel_step("single", devices, static, optimiser, s.controller)
        p0, o0 = step.place_state(params, optimiser.init(params))
        placed = [step.place_batch(data.ts[i], data.ys[i]) for i in batches]
        t0 = time.perf_counter()
        compiled = step.compile(p0, o0, *placed[0])
        compile_s = time.perf_counter() - t0
        out = jax.block_until_ready(compiled(p0, o0, *placed[0]))
        variants[bound] = {"compiled": compiled, "state": (p0, o0), "placed": placed,
                           "compile_time_s": compile_s, "first": out, "runs": []}
    base = variants[bounds[0]]["first"]
    for _ in range(a.blocks):
        for bound in bounds:  # interleaved: a slow spell hits every variant alike
            v = variants[bound]
            times = []
            for placed in v["placed"]:
                t0 = time.perf_counter()
                jax.block_until_ready(v["compiled"](*v["state"], *placed))
                times.append(time.perf_counter() - t0)
            v["runs"].append(times)
    rows = []
    for bound in bounds:
        v = variants[bound]
        record = {"step_time_runs_s": [float(np.median(t)) for t in v["runs"]],
                  "step_times_runs_s": v["runs"]}
        default = {"step_time_runs_s": [float(np.median(t)) for t in
                                        variants[bounds[0]]["runs"]],
                   "step_times_runs_s": variants[bounds[0]]["runs"]}
        ratio, lo, hi = ratio_interval(default, record)
        rows.append({
            "max_steps": bound, "compile_time_s": v["compile_time_s"],
            "step_time_s": float(np.median(np.concatenate(v["runs"]))),
            "speedup_vs_default": ratio, "speedup_ci": [lo, hi],
            "loss": float(np.asarray(v["first"][2]).reshape(-1)[0]),
            "params_rel_diff_vs_default": tree_max_rel_diff(v["first"][0], base[0]),
            "solver_steps_max": int(np.max(np.asarray(v["first"][3]))),
            **record,
        })
        print(f"max_steps {bound:5d}: step {rows[-1]['step_time_s'] * 1e3:.2f} ms, "
              f"speedup {ratio:.2f} [{lo:.2f}, {hi:.2f}], loss {rows[-1]['loss']:.6g}, "
              f"params rel. diff {rows[-1]['params_rel_diff_vs_default']:.1e}")
    odestudy.write_json_atomic(a.out, {"scenario": s.to_dict(),
                                       "final_loss": trained["final_loss"],
                                       "rows": rows, **environment(s)})


if __name__ == "__main__":
    main()
