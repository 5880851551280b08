"""Weak-scaling efficiency t(1 device) / t(N devices) at a fixed per-device batch, for
each multi-device mode and controller (N = 2 by default).

Runs each scenario one at a time in a fresh kernel through the matrix runner (3 runs
each, interleaved; records under this machine's results folder, reused when present for
the same machine, versions and code), then prints the efficiency with its 95% interval
and whether the interval supports "efficiency below 1". A benchmark, not a test.

    .venv/bin/python benchmarks/weak_scaling.py [--devices 2] [--scale quick]
"""

import argparse

from odestudy import CONTROLLERS, Scenario
from odestudy.report.frames import scaling_rows
from odestudy.report.intervals import fmt_interval
from odestudy.study.grid import weak_batch
from odestudy.study.matrix import record_path, run_matrix


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--scale", default="quick")
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        help="per-device batch (default: the matrix's weak-scaling batch)",
    )
    a = p.parse_args()
    a.batch = a.batch or weak_batch(a.scale)
    scenarios = [
        Scenario(mode="single", controller=c, scaling="strong", scale=a.scale, batch=a.batch)
        for c in CONTROLLERS
    ]
    scenarios += [
        Scenario(
            devices_per_process=a.devices,
            mode=m,
            controller=c,
            scaling="weak",
            scale=a.scale,
            batch=a.batch,
        )
        for c in CONTROLLERS
        for m in ("pmap", "shard", "shard_map")
    ]
    recs = run_matrix(a.scale, "cpu", only=scenarios)
    print(f"weak scaling, {a.batch} samples per device, N = {a.devices}")
    print(f"{'mode':>10} {'controller':>10} {'t(N) s':>10}  t(1)/t(N) [95% CI]")
    for r in scaling_rows(recs, "weak"):
        if r["n_devices"] == 1:
            continue
        if r["efficiency"] is None:
            print(
                f"{r['mode']:>10} {r['controller']:>10}  {r['status']}: "
                f"{r.get('error') or r.get('baseline_error')}"
            )
            continue
        lo, hi = r["efficiency_ci"]
        verdict = (
            "below 1 (supported)"
            if hi < 1
            else "above 1 (supported)"
            if lo > 1
            else "not distinguishable from 1"
        )
        print(
            f"{r['mode']:>10} {r['controller']:>10} {r['step_time_s']:10.4g}  "
            f"{fmt_interval(r['efficiency'], lo, hi)}: {verdict}   "
            f"({record_path(Scenario.from_dict(r['scenario'])).parent.name})"
        )


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
