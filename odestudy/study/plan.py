"""What a matrix run does, computed once from the scenarios and their records: the runs
to make (cold runs, repeat rounds, ceiling probes), each with why, in order. Every run
performs itself (`Run.perform`), so that the local executor and a SLURM job do the same.
"""

import abc
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.record import Record
from ..measure.scenario import Scenario
from ..measure.timing import PROTOCOL
from . import records, runner
from .ceiling import last_ceiling, run_ceiling
from .lock import measuring
from .records import record_path
from .repeats import cache_environment, clear_cache, repeat_processes, run_repeat_round, runs
from .runner import expected_env


def why_stale(s: Scenario, rec: Mapping[str, Any], machine: str | None = None) -> str | None:
    """Why record `rec` cannot stand for scenario `s`, or None if it can: it must be an
    ok record of this very scenario, made here (`why_not_here`; on `machine` if given)."""
    checks = (("scenario", rec.get("scenario_key"), s.key()), ("status", rec.get("status"), "ok"))
    return _differs(checks) or why_not_here(rec, expected_env(s), machine)


def why_not_here(
    rec: Mapping[str, Any], env: Mapping[str, str], machine: str | None = None
) -> str | None:
    """Why record `rec` was not made here, or None: on `machine` (default: this one), with
    these package versions, `timing.PROTOCOL` and the measurement environment `env`."""
    here = machine or environment.machine_id(environment.this_machine())
    return _differs(
        (
            ("machine", rec.get("machine_id"), here),
            ("versions", rec.get("versions"), environment.versions()),
            ("protocol", rec.get("protocol"), PROTOCOL),
            ("measurement environment", rec.get("measurement_env"), dict(env)),
        )
    )


def _differs(checks: Iterable[tuple[str, Any, Any]]) -> str | None:
    """The first `(what, record's, here)` whose values differ, said; None where none do."""
    for what, have, want in checks:
        if have != want:
            return f"{what} differs: record {have!r}, here {want!r}"
    return None


def reusable(s: Scenario, path: Path) -> Record | None:
    """The record at `path` if it may be reused (`why_stale` finds nothing), else None."""
    rec = _read(path)
    return rec if rec is not None and why_stale(s, rec) is None else None


def _read(path: Path) -> Record | None:
    return records.read_or(path, None, records.read_record)


def _ok(path: Path, below: int | None = None) -> bool:
    """Whether the record at `path` is ok (and where `below` is given, has fewer runs)."""
    rec = _read(path)
    return rec is not None and rec.ok and (below is None or runs(rec) < below)


# A scenario's current record, why it cannot stand (None: it can) and its folder (None:
# this machine's): `make_plan`'s `current`, the executor's.
CurrentRecord = tuple[Record | None, str | None, Path | None]
Current = Callable[[Scenario], CurrentRecord]


@dataclasses.dataclass(frozen=True)
class Done:
    """What one run did: the line to report and the scenario's record it left, if any."""

    line: str
    scenario: Scenario | None = None
    record: Record | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run(abc.ABC):
    """One run of a plan: `why` it runs, and each scenario's record folder (`folders`:
    where its cold run left it; empty or None: this machine's)."""

    why: str
    folders: tuple[Path | None, ...] = ()

    @abc.abstractmethod
    def scenarios(self) -> tuple[Scenario, ...]:
        """The scenarios this run times."""

    @abc.abstractmethod
    def label(self) -> str:
        """What it is, in a few words."""

    @abc.abstractmethod
    def perform(self, results: Path) -> list[Done]:
        """Carry the run out here, writing records under `results`; failures are recorded."""

    @property
    def processes(self) -> int:
        """JAX processes the run starts at once (one per SLURM task)."""
        return 1

    def where(self, s: Scenario, results: Path) -> Path:
        """The record file of `s` this run reads and writes."""
        folder = self.folders[self.scenarios().index(s)] if self.folders else None
        if folder is not None:
            return folder / records.RECORD_NAME
        return record_path(s, results)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AbstractScenarioRun(Run):
    """A run of one scenario, in as many JAX processes as it has."""

    scenario: Scenario

    def scenarios(self) -> tuple[Scenario, ...]:
        return (self.scenario,)

    @property
    def processes(self) -> int:
        return self.scenario.processes


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColdRun(AbstractScenarioRun):
    """A scenario's first run: a fresh kernel that compiles from cold, trains, and saves
    the trained state its repeats time from."""

    def label(self) -> str:
        return f"{self.scenario.name()} (run 1)"

    def perform(self, results: Path) -> list[Done]:
        s = self.scenario
        path = self.where(s, results)
        with measuring(f"cold run of {s.name()}"):
            clear_cache(path.parent)
            rec = runner.execute_scenario(s, path.parent, extra_env=cache_environment(path.parent))
        line = f"{s.name()} (run 1, {rec.get('kernel_wall_s') or 0:.0f} s)"
        return [Done(line, s, rec)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RepeatRound(Run):
    """Round `round` of the repeats of one-process scenarios of one device kind and count,
    in one plain process (`repeats.run_repeat_round`); those that need it when it runs."""

    round: int
    group: tuple[Scenario, ...]

    def scenarios(self) -> tuple[Scenario, ...]:
        return self.group

    def label(self) -> str:
        first = self.group[0]
        return (
            f"run {self.round}: {len(self.group)} on {first.devices_per_process} "
            f"{first.device} device(s)"
        )

    def perform(self, results: Path) -> list[Done]:
        due = [s for s in self.group if _ok(self.where(s, results), self.round)]
        items = [(s, self.where(s, results).parent) for s in due]
        merged = run_repeat_round(items)
        return [Done(f"{s.name()} (run {runs(r)})", s, r) for s, r in zip(due, merged, strict=True)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessRepeat(AbstractScenarioRun):
    """Round `round` of a multi-process scenario: its processes joined again
    (`repeats.repeat_processes`)."""

    round: int

    def label(self) -> str:
        return f"{self.scenario.name()} (run {self.round})"

    def perform(self, results: Path) -> list[Done]:
        s = self.scenario
        path = self.where(s, results)
        if not _ok(path, self.round):
            return []
        rec = repeat_processes(s, path.parent)
        return [Done(f"{s.name()} (run {runs(rec)})", s, rec)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CeilingProbe(AbstractScenarioRun):
    """This machine's weak-scaling ceiling (`ceiling.run_ceiling`) in round `round`, on
    the trained 1-device `scenario`, after some repeat of its round ran."""

    round: int

    def label(self) -> str:
        return f"machine ceiling, {self.scenario.controller} (round {self.round})"

    def perform(self, results: Path) -> list[Done]:
        path = self.where(self.scenario, results)
        if not _ok(path):
            return []
        ceiling_rec = run_ceiling(self.scenario, path.parent, path.parent.parent)
        last = ceiling_rec["runs"][-1]
        got = last_ceiling(ceiling_rec)
        text = (
            f"t(alone)/t(paired) {got:.2f} (this run's median)"
            if got is not None
            else last.get("error", "")
        )
        line = (
            f"machine ceiling, {self.scenario.controller} (run {len(ceiling_rec['runs'])})  {text}"
        )
        return [Done(line, None, Record(status=last["status"]))]


@dataclasses.dataclass
class Plan:
    """The runs of one matrix command (cold runs first, then round by round the repeats
    and ceiling probes), for its `scenarios` (and `not_run`: those that cannot run here,
    with why), from the records that stand (`reused`), to `wanted` runs each."""

    scenarios: list[Scenario]
    not_run: list[tuple[Scenario, str]]
    reused: dict[Scenario, Record]
    wanted: int
    runs: list[Run]

    def count(self, kind: type[Run]) -> int:
        """Scenario runs of `kind` (a repeat round counts its scenarios)."""
        return sum(len(r.scenarios()) for r in self.runs if isinstance(r, kind))

    @property
    def cold(self) -> list[Scenario]:
        return [r.scenario for r in self.runs if isinstance(r, ColdRun)]

    @property
    def missing(self) -> dict[Scenario, int]:
        """Runs each scenario lacks."""
        have = {s: runs(rec) for s, rec in self.reused.items()}
        return {s: self.wanted - have.get(s, 0) for s in self.scenarios}


def make_plan(
    scenarios: Sequence[Scenario],
    not_run: Sequence[tuple[Scenario, str]],
    wanted: int,
    current: Current,
    force: bool = False,
    probes: Sequence[Scenario] = (),
) -> Plan:
    """The plan for `scenarios` with `wanted` runs each, from the records `current`
    gives (the executor's); `force` runs every one cold again; `probes` (1-device
    scenarios) measure the machine's ceiling in every round that repeats something."""
    reused: dict[Scenario, Record] = {}
    folders: dict[Scenario, Path | None] = {}
    out: list[Run] = []
    for s in scenarios:
        rec, why, folder = current(s)
        if rec is not None and why is None and not force:
            reused[s], folders[s] = rec, folder
        else:
            why = "--force" if force and why is None else why or "no record"
            out.append(ColdRun(scenario=s, why=why))
            folders[s] = None
    have = {s: runs(reused[s]) if s in reused else 1 for s in scenarios}
    for round_ in range(2, wanted + 1):
        due = [s for s in scenarios if have[s] < round_]
        why = f"run {round_} of {wanted}"
        groups: dict[tuple[str, int, Path | None], list[Scenario]] = {}
        for s in due:
            if s.processes == 1:  # grouped by the machine folder of `<machine>/<scale>/<name>`
                folder = folders[s]
                machine = folder.parent.parent if folder is not None else None
                groups.setdefault((s.device, s.devices_per_process, machine), []).append(s)
        for group in groups.values():
            where = tuple(folders[s] for s in group)
            out.append(RepeatRound(round=round_, group=tuple(group), why=why, folders=where))
        for s in due:
            if s.processes > 1:
                where = (folders[s],)
                out.append(ProcessRepeat(round=round_, scenario=s, why=why, folders=where))
        for s in probes if due else ():
            why = f"machine ceiling, round {round_}"
            out.append(CeilingProbe(round=round_, scenario=s, why=why, folders=(folders[s],)))
    return Plan(list(scenarios), list(not_run), reused, wanted, out)
