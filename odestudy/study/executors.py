"""Executors carry a matrix plan (`plan.Plan`) out and report one line per run as it
ends: `LocalExecutor` on this machine, one run after another; `slurm.SlurmExecutor` as
SLURM jobs."""

import abc
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..measure.record import Record
from ..measure.scenario import Scenario
from . import records
from .plan import CeilingProbe, CurrentRecord, Done, Plan, Run, why_stale
from .records import record_path


class Progress:
    """One line per finished run on stdout (flushed, so that a log file has it as it
    happens), and a bar of `total` runs on a terminal; nothing unless `show`."""

    def __init__(self, total: int, desc: str, show: bool = True):
        from tqdm.auto import tqdm

        self.show = show
        self.bar = tqdm(total=total, desc=desc, unit="run", disable=None if show else True)

    def line(self, done: Done) -> None:
        """Report one finished run."""
        if not self.show:
            return
        rec: Mapping[str, Any] = done.record or {}
        if done.scenario is None:  # a probe: its line says what it measured
            text = f"{rec.get('status', '?'):7s} {done.line}"
        else:
            # A repeat's record pools every run so far: the line gives the run's own steps.
            runs = rec.get("step_times_runs_s") or []
            step = float(np.median(runs[-1])) if runs else rec.get("step_time_s")
            timing = (
                f"this run's median step {step * 1e3:.2f} ms" if step else rec.get("error") or ""
            )
            text = f"{rec.get('status', '?'):7s} {done.line}  {timing}"
        self.bar.write(text[:200], file=sys.stdout)
        sys.stdout.flush()

    def started(self, run: Run) -> None:
        self.bar.set_postfix_str(run.label())

    def advance(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


class Executor(abc.ABC):
    """Carries out a plan, writing records under a results folder."""

    @abc.abstractmethod
    def execute(self, plan: Plan, results: Path, progress: Progress) -> dict[Scenario, Record]:
        """Make every run of `plan`; returns each scenario's last record (failures recorded)."""

    def current(self, s: Scenario, results: Path) -> CurrentRecord:
        """The record a plan starts from for `s` (see `plan.make_plan`): this machine's."""
        rec = records.read_or(record_path(s, results), None, records.read_record)
        return (None, None, None) if rec is None else (rec, why_stale(s, rec), None)

    def needs_lock(self) -> bool:
        """Whether the command holds this machine's measurement lock (it times here)."""
        return True

    def check(self, scenarios: Iterable[Scenario]) -> None:
        """A one-line ValueError where it cannot run one of `scenarios`, before anything runs."""
        return None

    def gpus(self, planned: int | None) -> int | None:
        """GPUs present where it runs the rows, for a matrix planned for `planned` devices
        (`--device-count`); None: this machine's, by default."""
        return None


def needs_cluster(s: Scenario) -> str | None:
    """Why `s` cannot run on this machine alone (its processes on several hosts), or None."""
    if s.nodes > 1:
        return f"{s.name()} spreads its processes over {s.nodes} nodes: it needs --executor slurm"
    return None


class LocalExecutor(Executor):
    """Every run on this machine, one after another, in the plan's order."""

    def check(self, scenarios: Iterable[Scenario]) -> None:
        for s in scenarios:
            if why := needs_cluster(s):
                raise ValueError(why)

    def execute(self, plan: Plan, results: Path, progress: Progress) -> dict[Scenario, Record]:
        self.check(plan.scenarios)
        done: dict[Scenario, Record] = dict(plan.reused)
        ran: set[int] = set()  # rounds in which some repeat ran
        for run in plan.runs:
            if isinstance(run, CeilingProbe) and run.round not in ran:
                continue
            progress.started(run)
            outcome = run.perform(results)
            for d in outcome:
                if d.scenario is not None and d.record is not None:
                    done[d.scenario] = d.record
                progress.line(d)
            if outcome and not isinstance(run, CeilingProbe):
                ran.add(getattr(run, "round", 1))
            if not isinstance(run, CeilingProbe):
                progress.advance(len(run.scenarios()))
        return done
