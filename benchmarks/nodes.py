"""The study's row over two hosts: 2 nodes x 1 device `shard_map` with the PID controller,
one JAX process per node, through the SLURM executor, `--runs` runs (a cold run, then
repeats, each a job) into the results folder. Run it inside a cluster of two nodes,
as `make nodes` does on this machine (network namespaces, `tests/slurm_cluster.py`):

    python -m tests.slurm_cluster --nodes 2 FOLDER --run ".venv/bin/python benchmarks/nodes.py"
"""

import argparse
import sys

from odestudy import Scenario
from odestudy.measure import environment
from odestudy.measure.scenario import SCALES
from odestudy.study.grid import node_scenarios
from odestudy.study.matrix import run_matrix
from odestudy.study.slurm import SlurmExecutor


def two_nodes(scale: str) -> Scenario:
    """The 2-node x 1-device `shard_map` PID row at `scale` (`grid.node_scenarios`)."""
    (s,) = node_scenarios(scale)
    return s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=tuple(SCALES), default="quick")
    p.add_argument("--runs", type=int, default=3, help="runs of the row (cold run included)")
    p.add_argument("--results", default=str(environment.workdir("results")))
    p.add_argument("--time-limit", type=int, default=60, help="SLURM time limit per job, minutes")
    p.add_argument(
        "--state-every", type=float, default=5.0, help="ask sacct for job states every S seconds"
    )
    a = p.parse_args(argv)
    s = two_nodes(a.scale)
    (rec,) = run_matrix(
        a.scale,
        "cpu",
        results=a.results,
        only=[s],
        repeats=a.runs,
        ceiling=False,
        executor=SlurmExecutor(time_min=a.time_limit, state_every_s=a.state_every),
    )
    print(f"{rec['status']}: {s.name()}" + (f" ({rec.get('error')})" if rec.get("error") else ""))
    return 0 if rec["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
