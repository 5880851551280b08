"""Step time against batch size on a trained model, one device: the fixed cost of a
solver-loop iteration and the cost per sample-iteration (a line fitted to step time /
executed iterations against the batch). A benchmark, not a test.

    .venv/bin/python benchmarks/step_cost.py --device gpu --controller pid \
        --out results/quick/step_cost/gpu-pid.json

Set XLA_FLAGS before starting it to compare compiler options (recorded in the output).
`--recommended` sweeps the recommended step (`odestudy.recommended`) instead of the
default, `--levers` a step with the levers it names (as a variant of
`benchmarks/levers.py` names them: the kernel solve's, say); `--results` starts from the
trained model of the scenario's 1-device row recorded there (`odestudy matrix`,
`odestudy run`), where it may stand for it, instead of training.
"""

import argparse


def main() -> None:
    import os

    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels (recorded)
    from odestudy.measure.controllers import CONTROLLERS

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--controller", choices=tuple(CONTROLLERS), default="pid")
    p.add_argument("--scale", default="quick")
    p.add_argument("--batches", default="1,4,16,64,256", help="comma-separated batch sizes")
    p.add_argument("--timed-steps", type=int, default=20)
    p.add_argument("--solve", default=None, help="the scenario's solve (per_sample, within_ode)")
    p.add_argument(
        "--recommended",
        action="store_true",
        help="the recommended step of the controller (its levers set the solve)",
    )
    p.add_argument(
        "--results",
        default=None,
        help="start from the trained state of the scenario's 1-device row recorded here, "
        "where it may stand for it (same machine, versions, protocol); else train",
    )
    p.add_argument(
        "--levers",
        default=None,
        help="Scenario fields of the step as JSON, as a variant of benchmarks/levers.py "
        'gives them (the kernel solve: {"integrator": "kernel", "adjoint": '
        '"accepted_steps", "max_steps": 64})',
    )
    p.add_argument("--label", default="", help="a name for this variant (e.g. XLA flags)")
    p.add_argument("--out", required=True, help="output JSON file")
    a = p.parse_args()
    if a.recommended and a.solve is not None:
        p.error("--recommended sets the solve; give either --recommended or --solve")
    if a.recommended and a.levers is not None:
        p.error("--recommended sets the levers; give either --recommended or --levers")
    import datetime
    import json

    import odestudy

    odestudy.configure_devices(a.device, 1)
    from odestudy.measure.cost import step_cost_sweep
    from odestudy.predict import recorded_state

    levers = json.loads(a.levers) if a.levers else {}
    if a.solve is not None:
        levers["solve"] = a.solve
    s = odestudy.Scenario(device=a.device, controller=a.controller, scale=a.scale, **levers)
    if a.recommended:
        s = odestudy.recommended(s)
    state = recorded_state(s, a.results) if a.results else None
    print(f"from the trained state {state[0]}" if state else f"training {s.name()}")
    batches = tuple(int(b) for b in a.batches.split(","))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record = step_cost_sweep(s, batches, timed_steps=a.timed_steps, trained_state=state)
    record["label"] = a.label
    # When it was swept: the session a page names beside its numbers.
    record["started"] = started
    record["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record["trained_from"] = str(state[0].parent) if state else None
    odestudy.write_json_atomic(a.out, record)
    from odestudy.report.step import verdict
    from odestudy.study.rec import Sweep

    sweep = Sweep(record)
    fit = sweep.fit
    print(f"{a.device} {a.controller} {a.label}: final loss {record['final_loss']:.4g}")
    for r in sweep.rows:
        print(
            f"  batch {r.batch:4d}: step {r.step_time_s:.4g} s "
            f"(forward {r.forward_share:.0%}), "
            f"{r.iterations_executed:.1f} iterations, "
            f"{r.per_iteration_s * 1e6:.1f} us/iteration"
        )
    print(
        f"  fit: {fit.fixed_per_iteration_s * 1e6:.1f} us fixed per iteration + "
        f"{fit.per_sample_iteration_s * 1e9:.1f} ns per sample-iteration "
        f"(r2 {fit.r2:.3f})"
    )
    v, rates = verdict(sweep), sweep.rates
    shares = [x for x in v.forward_share if x is not None]
    # No crossover where the fitted cost per sample-iteration is not positive.
    crossover = "none" if v.crossover_batch is None else f"{v.crossover_batch:.1f}"
    print(
        f"  forward share {min(shares):.2f}-{max(shares):.2f}; "
        f"crossover batch {crossover}; per-sample work "
        f"{(v.flops_per_s or 0) / 1e9:.2f} GFLOP/s (matmul "
        f"{rates.matmul_flops_per_s / 1e9:.1f}), {(v.bytes_per_s or 0) / 1e9:.2f} "
        f"GB/s (cache {rates.cache_bytes_per_s / 1e9:.1f}, memory "
        f"{rates.memory_bytes_per_s / 1e9:.1f}): {v.bound}-bound"
    )


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
