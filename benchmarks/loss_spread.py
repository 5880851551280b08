"""The default's run-to-run spread of the final loss: the trained quick model (1 device)
trained from other seeds (data, initial model and batches), one process each, one at a
time. The levers benchmark compares a lever's final loss with it: a lever qualifies for
the recommended configuration where its loss is no higher than the default's plus this
spread. A benchmark of losses, not of time.

    .venv/bin/python benchmarks/loss_spread.py --controller pid \\
        --out results/<machine>/levers/loss-spread-pid.json
"""

import argparse
import json
import os
import subprocess
import sys


def _fields(workload: str | None) -> dict:
    """The scenario fields of the map's workload named `workload` (None: the default)."""
    if workload is None:
        return {}
    from odestudy.study.workloads import WORKLOADS

    by_slug = {w.slug(): w for w in WORKLOADS}
    if workload not in by_slug:
        raise SystemExit(f"unknown workload {workload!r}; valid: {', '.join(by_slug)}")
    return by_slug[workload].fields()


def _scenario(controller: str, scale: str, workload: str | None, step: bool, **more):
    """The scenario trained: the workload's default step, or its recommended step."""
    import odestudy
    from odestudy.measure.recommended import recommended

    s = odestudy.Scenario(controller=controller, scale=scale, **_fields(workload), **more)
    return recommended(s) if step else s


def _worker(controller: str, scale: str, seed: int, workload: str | None, step: bool) -> None:
    import odestudy

    odestudy.configure_devices("cpu", 1)
    from odestudy.measure.training import scenario_devices, train

    s = _scenario(controller, scale, workload, step, seed=seed)
    trained = train(s, scenario_devices(s))
    print(json.dumps({"seed": seed, "final_loss": trained["final_loss"]}), flush=True)


def main() -> None:
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels (recorded)
    from odestudy.measure.controllers import CONTROLLERS

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--controller", choices=tuple(CONTROLLERS), default="pid")
    p.add_argument("--scale", default="quick")
    p.add_argument("--seeds", default="5678,1,2,3", help="comma-separated seeds")
    p.add_argument(
        "--workload", help="a workload of the map (`study.workloads.WORKLOADS`; default: none)"
    )
    p.add_argument(
        "--recommended",
        action="store_true",
        help="train the recommended step from the same seeds (paired with the default's "
        "record: the loss rule's non-inferiority check, `report.loss.non_inferior`)",
    )
    p.add_argument("--out", help="output JSON file (required unless --worker)")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        return _worker(a.controller, a.scale, a.worker, a.workload, a.recommended)
    if not a.out:
        p.error("--out is required")
    seeds = [int(x) for x in a.seeds.split(",")]
    rows = []
    for seed in seeds:  # one process at a time
        cmd = [sys.executable, __file__, "--controller", a.controller, "--scale", a.scale]
        cmd += ["--workload", a.workload] if a.workload else []
        cmd += ["--recommended"] if a.recommended else []
        out = subprocess.run(
            [*cmd, "--worker", str(seed)], check=True, capture_output=True, text=True
        ).stdout
        rows.append(json.loads(next(x for x in out.splitlines() if x.startswith("{"))))
        print(f"seed {seed}: final loss {rows[-1]['final_loss']:.4g}", flush=True)
    import numpy as np

    import odestudy
    from odestudy.measure.training import environment

    losses = np.asarray([r["final_loss"] for r in rows])
    odestudy.configure_devices("cpu", 1)
    s = _scenario(a.controller, a.scale, a.workload, a.recommended)
    odestudy.write_json_atomic(
        a.out,
        {
            "scenario": s.to_dict(),
            "kind": "loss_spread",
            "method": "the scenario trained from each seed in its own process; "
            "spread = (max - min) / median of the final evaluation losses",
            "step": "recommended" if a.recommended else "default",
            "rows": rows,
            "median_loss": float(np.median(losses)),
            "spread_relative": float(np.ptp(losses) / np.median(losses)),
            "workload": a.workload,
            **environment(s),
        },
    )


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
