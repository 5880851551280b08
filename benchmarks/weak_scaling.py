"""Weak-scaling efficiency t(1 device) / t(N devices) at a fixed per-device batch, for
each multi-device mode and controller (N = 2 by default).

Runs each scenario one at a time in a fresh kernel through the matrix runner (records
under results/, reused when present for the same code), then prints the ratios of
median step times measured in this run. A benchmark, not a test.

    .venv/bin/python benchmarks/weak_scaling.py [--devices 2] [--scale quick]
"""

import argparse

from odestudy import Scenario
from odestudy.matrix import record_path, run_matrix
from odestudy.report import scaling_rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--scale", default="quick")
    p.add_argument("--batch", type=int, default=8, help="per-device batch")
    a = p.parse_args()
    scenarios = [Scenario(mode="single", controller=c, scaling="weak", scale=a.scale,
                          batch=a.batch) for c in ("pid", "stepto")]
    scenarios += [Scenario(n_devices=a.devices, mode=m, controller=c, scaling="weak",
                           scale=a.scale, batch=a.batch)
                  for c in ("pid", "stepto") for m in ("pmap", "shard", "shard_map")]
    recs = run_matrix(a.scale, "cpu", only=scenarios)
    print(f"weak scaling, {a.batch} samples per device, N = {a.devices}")
    print(f"{'mode':>10} {'controller':>10} {'t(1) s':>10} {'t(N) s':>10} {'t(1)/t(N)':>10}")
    rows = scaling_rows(recs)
    base = {r["controller"]: r for r in rows if r["n_devices"] == 1}
    for r in rows:
        if r["n_devices"] == 1:
            continue
        t1 = base[r["controller"]]["step_time_s"]
        print(f"{r['mode']:>10} {r['controller']:>10} {t1:10.4g} {r['step_time_s']:10.4g} "
              f"{r['efficiency']:10.3f}   ({record_path(Scenario.from_dict(r['scenario']))})")


if __name__ == "__main__":
    main()
