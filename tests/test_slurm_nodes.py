"""A row over two hosts: the 2-node x 1-device `shard_map` smoke row through the SLURM
executor on a two-node cluster of network namespaces on this machine (`slurm_cluster`,
`nodes=2`): one process per node, joined by jax.distributed over the namespaces'
addresses. Needs root (namespaces, veths, a bridge): marked `long`, left out of
`make test` and run by `make test-long`. The job parameters and the local executor's
refusal are checked everywhere."""

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from odestudy import Scenario
from odestudy.study.executors import LocalExecutor
from odestudy.study.matrix import run_matrix
from odestudy.study.plan import ColdRun
from odestudy.study.slurm import JOBS_FOLDER, JOBS_SEEN, SlurmExecutor

from .cluster_helper import processes_of, start_helper, wait_none_left
from .slurm_cluster import local_cluster, missing_binaries

TWO_NODES = Scenario(
    mode="shard_map",
    processes=2,
    devices_per_process=1,
    nodes=2,
    device="cpu",
    scale="smoke",
    controller="pid",
)


def _why_not() -> str | None:
    """Why a multi-node cluster cannot start here, or None."""
    missing = missing_binaries() + [
        b
        for b in ("ip", "nsenter", "unshare")
        if shutil.which(b, path="/usr/sbin:/sbin:/usr/bin:/bin") is None
    ]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install -y slurm-wlm munge iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root (make test-long; CI runs it with sudo)"
    return None


needs_nodes = pytest.mark.skipif(
    _why_not() is not None and not os.environ.get("CI"), reason=str(_why_not())
)


def _matrix(results: Path, executor) -> list[dict]:
    return run_matrix(
        "smoke",
        "cpu",
        results=results,
        show_progress=False,
        only=[TWO_NODES],
        repeats=1,
        ceiling=False,
        executor=executor,
    )


def test_the_job_asks_for_the_rows_nodes():
    for executor in (SlurmExecutor(), SlurmExecutor(tasks_per_node=2)):
        params = executor.parameters(ColdRun(scenario=TWO_NODES, why="test"), Path("/nowhere"))
        assert params["nodes"] == 2
        assert params["slurm_additional_parameters"]["ntasks_per_node"] == 1


def test_the_local_executor_refuses_a_row_over_nodes(tmp_path):
    with pytest.raises(ValueError, match="over 2 nodes: it needs --executor slurm"):
        _matrix(tmp_path, LocalExecutor())
    assert not list(tmp_path.iterdir())  # nothing written


def _our_network(pid: int) -> list[str]:
    """The namespaces and links of the helper with PID `pid` still there."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(rf"odestudy-{pid}-\d+|od(?:br)?{pid}(?:h\d+)?\b", names + links)


@pytest.mark.long
@needs_nodes
def test_the_two_node_helper_leaves_nothing_when_stopped(tmp_path):
    folder = tmp_path / "cluster"
    helper = start_helper(folder, "--nodes", "2")
    try:
        assert len(_our_network(helper.pid)) >= 3  # 2 namespaces, a bridge, veths
        helper.send_signal(signal.SIGTERM)
        helper.wait(timeout=90)
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()
    assert not wait_none_left(folder) and not processes_of(folder)
    assert not _our_network(helper.pid)


@pytest.mark.long
@needs_nodes
def test_a_row_over_two_nodes_runs_one_process_in_each(tmp_path):
    folder, results = tmp_path / "cluster", tmp_path / "results"
    with local_cluster(folder, nodes=2):
        (rec,) = _matrix(results, SlurmExecutor(time_min=10, state_every_s=2.0))
    assert rec["status"] == "ok", (rec.get("error"), rec.get("worker_logs"))
    assert rec["final_loss"] == rec["final_loss"]  # finite loss, not NaN
    assert rec["trained"] is (rec["final_loss"] <= rec["trained_loss"])
    assert rec["hardware"]["process_count"] == 2 and len(rec["per_process_hardware"]) == 2
    (started,) = (results / JOBS_FOLDER / JOBS_SEEN).glob("*.json")
    job = started.stem
    jobs = (folder / "jobcomp.log").read_text()
    assert re.search(rf"JobId={job} .*NodeList=node\[1-2\] NodeCnt=2", jobs), jobs
    # The srun step of the job put one task on each node, each in its namespace.
    for node in ("node1", "node2"):
        log = (folder / f"slurmd-{node}.log").read_text()
        assert f"launch task StepId={job}.0 " in log, (node, log[-2000:])
