"""Latency of one all-reduce inside a loop, across N devices of this machine (virtual
CPU devices or GPUs): the per-collective cost of the projection model. A benchmark.

    .venv/bin/python benchmarks/collectives.py --device cpu --devices 2 --out FILE.json
"""

import argparse
import os

from odestudy.measure import environment


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--size", type=int, default=1, help="float32 elements reduced")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.environ.setdefault("EQX_ON_ERROR", "nan")  # as in scenario kernels

    import odestudy

    odestudy.configure_devices(a.device, a.devices)
    from odestudy.measure.probe import collective_latency

    rec = collective_latency(a.devices, a.iterations, a.size)
    rec.update(
        versions=environment.versions(),
        hardware=environment.cpu_info(),
        machine=environment.this_machine(),
        machine_id=environment.machine_id(environment.this_machine()),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        **environment.provenance(),
        finished=environment.now(),
    )
    odestudy.write_json_atomic(a.out, rec)
    print(
        f"{a.device} x{a.devices}: {rec['latency_s'] * 1e6:.2f} us per all-reduce of "
        f"{a.size} float32 (loop {rec['loop_s']:.4g} s, with psum "
        f"{rec['loop_with_psum_s']:.4g} s, {a.iterations} iterations)"
    )


if __name__ == "__main__":
    from odestudy.study.lock import run_measuring

    run_measuring(main, f"benchmarks/{__file__.rsplit('/', 1)[-1]}")
