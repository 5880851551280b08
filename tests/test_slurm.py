"""The matrix on a real SLURM: a one-node cluster on localhost (`slurm_cluster`), the
SLURM executor against it. The smoke matrix's 2-process `shard_map` row runs through it
(its kernel in the job, its processes started under `srun` and joined through
`jax.distributed` from SLURM's environment), one run: the whole smoke matrix would take
minutes. A job cancelled mid-run is recorded as failed with SLURM's state, and the rerun
completes it with the record of a local run (`two_process_record`)."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from odestudy import Scenario
from odestudy.study.matrix import run_matrix
from odestudy.study.plan import ColdRun
from odestudy.study.records import read_record, record_path
from odestudy.study.slurm import SlurmExecutor, parse_sbatch

from .cluster_helper import processes_of, start_helper, wait_none_left
from .helpers import TWO_PROCESSES
from .slurm_cluster import STOP_BOUND_S, local_cluster, missing_binaries

ONE = Scenario(scale="smoke")  # 1 device, single, PID, strong
# Fields that differ between two runs of one scenario whoever runs it: times, timestamps
# and ids (and the kernel's start-up time), and whether the data set was read from the
# cache (a test session shares one).
VOLATILE = {
    "run_id",
    "started",
    "finished",
    "runs_finished",
    "kernel_wall_s",
    "runtime_s",
    "compile_time_s",
    "compile_time_per_stage_s",
    "phase_times_s",
    "step_time_s",
    "step_time_p25_s",
    "step_time_p75_s",
    "step_time_runs_s",
    "step_times_runs_s",
    "epoch_time_s",
    "eval_curve",
    "data_cached",
    "probe",  # each session's machine probe
    "probe_processes",
    "host_runs",  # what the host was doing around each timed block
}

_installed = pytest.mark.skipif(
    bool(missing_binaries()) and not os.environ.get("CI"),
    reason=f"not installed: {', '.join(missing_binaries())} (apt-get install -y slurm-wlm "
    "munge; CI installs them, .ci/run)",
)


def needs_slurm(test):
    """A test on a local SLURM cluster: skipped where SLURM is not installed (outside
    CI), and marked `long`: `make test-long` runs it, `make test` leaves it out."""
    return pytest.mark.long(_installed(test))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


# A job that ends without a result is noticed within this (the executor asks sacct).
STATE_EVERY_S = 2.0


def _matrix(results: Path, scenarios: list[Scenario], executor) -> list[dict]:
    return run_matrix(
        "smoke",
        "cpu",
        results=results,
        show_progress=False,
        only=scenarios,
        repeats=1,
        ceiling=False,
        executor=executor,
    )


def _running_job() -> str | None:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True).stdout
    running = [line.split()[0] for line in out.splitlines() if line.endswith("RUNNING")]
    return running[0] if running else None


def test_sbatch_options_and_job_parameters():
    assert parse_sbatch(["account=proj", "--qos=high", "requeue"]) == {
        "account": "proj",
        "qos": "high",
        "requeue": True,
    }
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_sbatch(["=x"])
    with pytest.raises(ValueError, match="state_every_s must be"):
        SlurmExecutor(state_every_s=-1)
    ex = SlurmExecutor(partition="cpu", gpu_partition="gpu", time_min=30, sbatch={"qos": "x"})
    two = ex.parameters(ColdRun(scenario=TWO_PROCESSES, why="test"), Path("/nowhere"))
    assert two["slurm_additional_parameters"] == {
        "exclusive": True,
        "ntasks_per_node": 2,
        "qos": "x",
    }
    assert (two["nodes"], two["timeout_min"], two["slurm_partition"]) == (1, 30, "cpu")
    gpu = ex.parameters(
        ColdRun(scenario=Scenario(device="gpu", devices_per_process=2, mode="shard"), why="t"),
        Path("/x"),
    )
    assert (gpu["gpus_per_node"], gpu["slurm_partition"]) == (2, "gpu")
    spread = SlurmExecutor(tasks_per_node=1).parameters(
        ColdRun(scenario=TWO_PROCESSES, why="test"), Path("/nowhere")
    )
    assert spread["nodes"] == 2 and spread["slurm_additional_parameters"]["ntasks_per_node"] == 1


@needs_slurm
def test_a_partition_the_cluster_lacks_is_a_clear_error(cluster, tmp_path):
    with pytest.raises(ValueError, match="sbatch refused the job of .*invalid partition"):
        _matrix(tmp_path, [ONE], SlurmExecutor(partition="nosuchpartition"))
    assert not list(tmp_path.glob(f"*/smoke/{ONE.name()}"))  # nothing recorded


@needs_slurm
def test_a_cancelled_job_is_recorded_failed_with_its_reason(cluster, tmp_path_factory):
    results = tmp_path_factory.getbasetemp() / "slurm-results"
    out: list = []
    run = threading.Thread(
        target=lambda: out.append(
            _matrix(
                results, [TWO_PROCESSES], SlurmExecutor(time_min=10, state_every_s=STATE_EVERY_S)
            )
        )
    )
    run.start()
    deadline = time.monotonic() + 120
    while (job := _running_job()) is None:
        assert time.monotonic() < deadline and run.is_alive(), "the job never ran"
        time.sleep(0.2)
    time.sleep(3.0)  # mid-run: the kernel has started
    subprocess.run(["scancel", job], check=True)
    run.join(timeout=180)
    (rec,) = out[0]
    assert rec["status"] == "failed"
    assert f"SLURM job {job} ended CANCELLED" in rec["error"]
    assert read_record(record_path(TWO_PROCESSES, results))["error"] == rec["error"]


@needs_slurm
def test_the_rerun_completes_the_row_as_a_local_run_does(
    cluster, tmp_path_factory, two_process_record
):
    """Runs after the cancellation: its rerun completes the cancelled row."""
    results = tmp_path_factory.getbasetemp() / "slurm-results"
    (rec,) = _matrix(results, [TWO_PROCESSES], SlurmExecutor(time_min=10))
    assert rec["status"] == "ok", (rec.get("error"), rec.get("worker_logs"))
    # The row ran as the two tasks of an srun step, joined by jax.distributed.
    assert rec["hardware"]["process_count"] == 2 and len(rec["per_process_hardware"]) == 2
    assert (Path(record_path(TWO_PROCESSES, results).parent) / "scenario.ipynb").exists()
    # The same record as the local run's but for times, timestamps and ids.
    local = two_process_record
    assert set(rec) == set(local)
    a, b = _steady(rec), _steady(local)
    differ = {k for k in a if a[k] != b[k]}
    assert not differ, {k: (a[k], b[k]) for k in differ}


def _steady(rec: dict) -> dict:
    """A record without `VOLATILE` fields (its stages without their times and host
    state)."""
    out = {k: v for k, v in rec.items() if k not in VOLATILE}
    out["stages"] = [
        {k: v for k, v in st.items() if "time" not in k and k != "host"} for st in rec["stages"]
    ]
    return out


@needs_slurm
@pytest.mark.long
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_the_daemons_stop_however_the_helper_is_stopped(how, tmp_path):
    """SIGTERM and SIGHUP stop the helper script as Ctrl-C does (it stops its daemons);
    killed outright, its daemons die with it (`PR_SET_PDEATHSIG`)."""
    folder = tmp_path / "cluster"
    helper = start_helper(folder)
    try:
        assert len(processes_of(folder)) >= 3  # munged, slurmctld, slurmd
        helper.send_signal(how)
        helper.wait(timeout=STOP_BOUND_S + 30)  # its bound, and time to exit
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()
    assert not wait_none_left(folder)
