"""The SLURM executor: a matrix plan's runs as SLURM jobs (submitted with `submitit`).

Cold runs go first, all at once, each a job with its node to itself; then, round by
round, the repeat rounds and ceiling probes, each on the node that made its scenario's
record (a record's step times all come from one machine). A job performs its run as
the local executor does (`plan.Run.perform`) under the node's measurement lock; records
land in the shared results folder under the machine that made them. A job that is
cancelled, times out or dies is recorded as failed with SLURM's state (sacct).
"""

import dataclasses
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.record import Record
from ..measure.scenario import Scenario
from . import records
from .distributed import LAUNCHER_VARIABLE, die_with_parent
from .executors import Executor, Progress
from .lock import measuring
from .plan import (
    CeilingProbe,
    ColdRun,
    CurrentRecord,
    Done,
    Plan,
    ProcessRepeat,
    RepeatRound,
    Run,
    runs,
    why_stale,
)
from .probing import session_probe
from .records import RECORD_NAME
from .repeats import merge_runs
from .runner import failed_record

JOBS_FOLDER = ".slurm"  # submitit's job files and logs, in the results folder
NODES_FOLDER = "nodes"  # machine id -> SLURM node name, written by every job
JOBS_SEEN = "started"  # job id -> the machine it started on, written by every job
POLL_S = 1.0


@dataclasses.dataclass
class SlurmExecutor(Executor):
    """Runs a plan as SLURM jobs (the options of `odestudy matrix --executor slurm`).
    `sbatch`: more sbatch options, name without dashes to value (`True`: a bare flag);
    `folder`: submitit's job files and logs (None: `<results>/.slurm`); `state_every_s`:
    how often to ask sacct for the unfinished jobs' state (keep it long on a shared
    cluster)."""

    partition: str | None = None
    gpu_partition: str | None = None
    time_min: int = 60
    gpus_per_node: int | None = None
    tasks_per_node: int | None = None
    sbatch: dict[str, Any] = dataclasses.field(default_factory=dict)
    folder: Path | None = None
    state_every_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.state_every_s >= 0:
            raise ValueError(
                f"state_every_s must be a number of seconds >= 0, got {self.state_every_s!r}"
            )

    def needs_lock(self) -> bool:
        return False  # the jobs hold their nodes' locks; nothing is timed here

    def gpus(self, planned: int | None) -> int | None:
        """The partition's nodes': as many as planned (`--device-count`)."""
        return planned

    def current(self, s: Scenario, results: Path) -> CurrentRecord:
        """The best record of `s` of any machine: an ok one with the most runs, else any."""
        found: list[tuple[Record, str | None, Path]] = []
        paths = sorted(Path(results).glob(f"*/{s.scale}/{s.name()}/{RECORD_NAME}"))
        for path, rec in records.readable(paths, records.read_record):
            machine = path.parent.parent.parent.name
            if rec.get("machine_id") == machine:
                found.append((rec, why_stale(s, rec, machine), path.parent))
        ok = [f for f in found if f[1] is None]
        if ok:
            return max(ok, key=lambda f: (runs(f[0]), f[0].get("finished") or ""))
        if found:
            rec, why, _ = found[0]
            return rec, why, None
        return None, None, None

    def execute(self, plan: Plan, results: Path, progress: Progress) -> dict[Scenario, Record]:
        import submitit

        results = Path(results).resolve()
        folder = Path(self.folder or results / JOBS_FOLDER).resolve()
        done: dict[Scenario, Record] = dict(plan.reused)
        where: dict[Scenario, Path] = {}  # record folders known so far
        for s in plan.reused:
            _, _, f = self.current(s, results)
            if f is not None:
                where[s] = f
        cold = [r for r in plan.runs if isinstance(r, ColdRun)]
        self._wave(submitit, cold, results, folder, progress, done, where)
        for round_ in sorted({r.round for r in plan.runs if hasattr(r, "round")}):
            repeats = _of_round(plan, round_, (RepeatRound, ProcessRepeat), where)
            if self._wave(submitit, repeats, results, folder, progress, done, where):
                probes = _of_round(plan, round_, (CeilingProbe,), where)
                self._wave(submitit, probes, results, folder, progress, done, where)
        return done

    def _wave(
        self,
        submitit: Any,
        wave: Sequence[Run],
        results: Path,
        folder: Path,
        progress: Progress,
        done: dict[Scenario, Record],
        where: dict[Scenario, Path],
    ) -> bool:
        """Submit every run of `wave`, report each as its job ends; whether any did something."""
        jobs: list[tuple[Run, Any]] = []
        for run in wave:
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
            executor.update_parameters(**self.parameters(run, folder))
            try:
                # A job over several nodes is several tasks to submitit, but the batch
                # script runs `perform` once, as task 0: its result is the job's.
                jobs.append((run, executor.submit(perform, run, results, folder).task(0)))
            except (submitit.core.utils.FailedJobError, OSError) as exc:
                for _, job in jobs:  # none half-submitted: the command can be rerun
                    job.cancel(check=False)
                raise ValueError(f"sbatch refused the job of {run.label()}: {exc}") from None
        did = False
        last_sacct = time.monotonic()
        pending = list(jobs)
        while pending:
            if time.monotonic() - last_sacct > self.state_every_s:
                pending[0][1].watcher.update()
                last_sacct = time.monotonic()
            for item in [p for p in pending if p[1].done()]:
                pending.remove(item)
                run, job = item
                outcome = _outcome(run, job, results, folder)
                for d in outcome:
                    if d.scenario is not None and d.record is not None:
                        done[d.scenario] = d.record
                        where[d.scenario] = _folder_of(d.scenario, d.record, results)
                    progress.line(d)
                did = did or bool(outcome)
                if not isinstance(run, CeilingProbe):
                    progress.advance(len(run.scenarios()))
            if pending:
                time.sleep(POLL_S)
        return did

    def parameters(self, run: Run, folder: Path) -> dict[str, Any]:
        """submitit's parameters of the job that performs `run`: its node to itself, one
        task (multi-process rows: the batch script starts their srun step), the partition
        and GPUs of its device kind, and the node of its records."""
        first = run.scenarios()[0]
        gpu = first.device == "gpu"
        tasks = run.processes
        per_node = min(tasks, self.tasks_per_node or tasks)
        if tasks > 1 and first.nodes > 1:  # the row says its hosts
            per_node = tasks // first.nodes
        # submitit sees one task (it runs `perform` once, in the batch script); the job
        # holds the tasks of the row's srun step.
        extra: dict[str, Any] = {"exclusive": True, "ntasks_per_node": per_node, **self.sbatch}
        node = _node_of(run, folder)
        if node:
            extra["nodelist"] = node
        params: dict[str, Any] = dict(
            name=f"odestudy-{first.name()}"[:100],
            timeout_min=self.time_min,
            nodes=-(-tasks // per_node),
            tasks_per_node=1,
            slurm_use_srun=False,
            slurm_additional_parameters=extra,
        )
        partition = (self.gpu_partition or self.partition) if gpu else self.partition
        if partition:
            params["slurm_partition"] = partition
        if gpu:
            params["gpus_per_node"] = self.gpus_per_node or first.devices_per_process
        return params


def perform(run: Run, results: Path, folder: Path) -> list[Done]:
    """What a job does on its node: say which machine it is (`NODES_FOLDER`), then
    perform `run` under the node's measurement lock."""
    die_with_parent()
    machine = environment.this_machine()
    here = environment.machine_id(machine)
    node = os.environ.get("SLURMD_NODENAME") or machine["hostname"]
    info = {"node": node, "machine": machine, "machine_id": here}
    records.write_json_atomic(Path(folder, NODES_FOLDER, f"{here}.json"), info)
    job = os.environ.get("SLURM_JOB_ID", "unknown")
    info["hardware"] = environment.cpu_info()
    records.write_json_atomic(Path(folder, JOBS_SEEN, f"{job}.json"), info)
    if run.processes > 1:
        os.environ[LAUNCHER_VARIABLE] = "srun"
    first = run.scenarios()[0]
    with measuring(f"SLURM job: {run.label()}", wait=True):
        with session_probe(
            first.device, first.devices_per_process, records.machine_folder(results), show=False
        ):
            return run.perform(results)


# SLURM's states of a job that it ended by stopping its processes: no result can come.
KILLED_STATES = ("CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE")


def _outcome(run: Run, job: Any, results: Path, folder: Path) -> list[Done]:
    """The runs a finished job reports, or its failure recorded; one SLURM killed at once
    (submitit would wait for its result file, a slow shared filesystem's delay)."""
    if not job.paths.result_pickle.exists():
        state = job.watcher.get_state(job.job_id, mode="force")
        if state.startswith(KILLED_STATES):
            why = f"SLURM job {job.job_id} ended {state}: no result (SLURM stopped it)"
            return _record_failure(run, why, results, folder, job.job_id)
    try:
        return list(job.result())
    except Exception as exc:  # the job failed: SLURM's state says why
        state = job.watcher.get_state(job.job_id, mode="force")
        why = f"SLURM job {job.job_id} ended {state}: {_detail(exc)}"[:500]
        return _record_failure(run, why, results, folder, job.job_id)


def _detail(exc: Exception) -> str:
    """The line of a job's error that says what happened (its traceback's last)."""
    text = str(exc).strip()
    parts = text.split("-" * 22)
    lines = (parts[1] if len(parts) >= 3 else text).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return lines[-1] if len(parts) >= 3 else lines[0]


def _record_failure(run: Run, why: str, results: Path, folder: Path, job_id: str) -> list[Done]:
    """Record a failed job: a cold run's scenario gets a failed record (in its node's
    folder where known); a repeat's scenarios keep theirs, the error in `repeat_errors`."""
    out = []
    if isinstance(run, ColdRun):
        s = run.scenario
        rec = failed_record(s, why, slurm_job_id=job_id)
        node = _node_machine(folder, job_id)
        rec.update(node or {})
        path = _folder_of(s, rec, results) / RECORD_NAME if node else run.where(s, results)
        records.write_json_atomic(path, rec)
        return [Done(f"{s.name()} (run 1)", s, rec)]
    if isinstance(run, CeilingProbe):
        return [Done(f"{run.label()}  {why}", None, Record(status="failed"))]
    for s in run.scenarios():
        path = run.where(s, results)
        rec = records.read_or(path, None, records.read_record)
        if rec is None:
            continue
        if runs(rec) < getattr(run, "round", 0) and rec.get("status") == "ok":
            rec = merge_runs(rec, {"scenario_key": s.key(), "status": "failed", "error": why})
            records.write_json_atomic(path, rec)
            out.append(Done(f"{s.name()} (run {run.round})", s, rec))  # type: ignore[attr-defined]
    return out


def _node_machine(folder: Path, job_id: str) -> dict[str, Any] | None:
    """The machine job `job_id` ran on, as it said when it started; None if it never did."""
    info = records.read_or(Path(folder, JOBS_SEEN, f"{job_id}.json"))
    if info is None:
        return None
    return {k: info[k] for k in ("machine", "machine_id", "hardware")}


def _folder_of(s: Scenario, rec: Record, results: Path) -> Path:
    """The folder a job wrote `s`'s record in: its machine's."""
    return Path(results, rec.get("machine_id") or "", s.scale, s.name())


def _node_of(run: Run, folder: Path) -> str | None:
    """The SLURM node where `run` must go (that of its records), or None (any node)."""
    machines = {f.parent.parent.name for f in run.folders if f is not None}
    if len(machines) != 1:
        return None
    (machine,) = machines
    try:
        return records.read_json(Path(folder, NODES_FOLDER, f"{machine}.json"))["node"]
    except (OSError, ValueError, KeyError):
        return None


def _of_round(
    plan: Plan, round_: int, kinds: tuple[type[Run], ...], where: dict[Scenario, Path]
) -> list[Run]:
    """The runs of `kinds` in round `round_`, placed where their records are (`_place`)."""
    found = [r for r in plan.runs if isinstance(r, kinds) and getattr(r, "round", 0) == round_]
    return [placed for r in found for placed in _place(r, where)]


def _place(run: Run, where: dict[Scenario, Path]) -> Iterable[Run]:
    """`run` with its scenarios' record folders as now known, split by machine."""
    by_machine: dict[Path | None, list[Scenario]] = {}
    for s in run.scenarios():
        f = where.get(s)
        by_machine.setdefault(f.parent.parent if f else None, []).append(s)
    for group in by_machine.values():
        folders = tuple(where.get(s) for s in group)
        if isinstance(run, RepeatRound):
            yield dataclasses.replace(run, group=tuple(group), folders=folders)
        else:
            yield dataclasses.replace(run, folders=folders)


def parse_sbatch(options: Iterable[str]) -> dict[str, Any]:
    """`["account=proj", "--qos=high", "requeue"]` -> `{"account": "proj", "qos":
    "high", "requeue": True}` (`SlurmExecutor.sbatch`)."""
    out: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not key:
            raise ValueError(f"bad sbatch option {option!r}: expected NAME or NAME=VALUE")
        out[key.replace("-", "_")] = value if sep else True
    return out
