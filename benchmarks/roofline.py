"""This device's roofline (`odestudy.measure.roofline`): its float32 matmul peak, its
memory bandwidth and the time one more kernel adds to a program, with the machine,
versions and commit, written as JSON (atomically). A benchmark, not a test.

    .venv/bin/python benchmarks/roofline.py --device gpu --out results/<machine>/roofline/gpu.json
"""

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    import odestudy

    odestudy.configure_devices(a.device, 1)
    from odestudy.measure.probe import record_probe
    from odestudy.measure.roofline import roofline_probe
    from odestudy.study.records import write_json_atomic

    rec = record_probe(roofline_probe())
    write_json_atomic(a.out, rec)
    keys = ("peak_flops_per_s", "bandwidth_bytes_per_s", "kernel_s")
    print(json.dumps({k: rec[k] for k in keys}))
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
