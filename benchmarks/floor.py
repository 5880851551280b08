"""The compute floor of a levers record made before `benchmarks/levers.py` counted it (the
GPU machine's, for one): its FLOPs counted here (`measure.floor.evaluation_flops`, XLA's
CPU cost analysis of the same programs: the counts are of the program, not of the
device), its rate the record's own probe at the step's shapes. Written beside the
record as `<name>.floor.json` (`report.floor.SIDECAR`), which the report reads.

    .venv/bin/python benchmarks/floor.py results/<machine>/levers/gpu-pid-quick.json
"""

import argparse
import json
from pathlib import Path


def sidecar(path: Path, tree_commit: str | None) -> dict:
    """The floor counts of the record at `path`, with where each part comes from."""
    import odestudy

    odestudy.configure_devices("cpu", 1)
    from odestudy.measure.environment import machine_id, this_machine, versions
    from odestudy.measure.floor import evaluation_flops

    rec = json.loads(path.read_text())
    fields = {**rec["scenario"], "device": "cpu"}  # counted on this machine's CPU
    s = odestudy.Scenario.from_dict(fields)
    flops = evaluation_flops(s)
    rates = [
        m["flops_per_s"]
        for m in (rec.get("probe") or {}).get("matmul", [])
        if m["batch"] == flops["batch"] and m["width"] == s.width
    ]
    if not rates:
        raise SystemExit(f"{path}: its probe measured no matmul rate at the step's shapes")
    return {
        **flops,
        "width": s.width,
        "matmul_flops_per_s": rates[0],
        "counted_on": machine_id(this_machine()),
        "counted_with": versions(),
        "rate_from": f"the record's probe ({rec['probe'].get('device_kind')})",
        "tree_commit": tree_commit,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument(
        "--tree-commit",
        help="the commit whose tree made the records, where their git_commit is not it "
        "(a device machine's copy of the checkout can carry stale git metadata)",
    )
    a = p.parse_args()
    from odestudy.report.floor import SIDECAR
    from odestudy.study.records import write_json_atomic

    for path in a.records:
        out = path.with_suffix(SIDECAR)
        write_json_atomic(out, sidecar(path, a.tree_commit))
        print(f"-> {out}")


if __name__ == "__main__":
    main()
