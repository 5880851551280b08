"""Records as data: every record of a results folder read once, corrupt and stale ones
left out in one place, as `Rec`s (for the report's joins) or as pandas DataFrames (for
exploration: one row per record, per timed step, per evaluation)."""

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..measure import environment
from ..measure.modes import MODES
from ..measure.problem import DEFAULT_PROBLEM, resolve_problem
from ..measure.record import Record, declared
from ..measure.scenario import SCALES, default_config
from ..study import records
from ..study.matrix import for_problem
from ..study.rec import Rec
from ..study.studies import STUDIES
from . import sessions
from .best import attach_best, batch_size, shared_key, step_of
from .ceiling import ceiling_for, ceiling_interval, efficiency_against_ceiling
from .intervals import ratio_interval
from .loss import trained
from .runs import trained_state


class BaselineError(LookupError):
    """No record, or more than one, to join a record with."""


def results_folder(results: str | Path | None = None) -> Path:
    """The folder of records to read: `results` as given where it exists (relative to
    the working directory), else relative to the repository (so that `../results` from
    `notebooks/` and `results` from the repository root both find it); None: the
    repository's `results/`."""
    if results is None:
        return environment.workdir("results")
    path = Path(results)
    if path.exists() or path.is_absolute():
        return path
    for base in (environment.ROOT, environment.ROOT / "notebooks"):
        if (base / path).exists():
            return (base / path).resolve()
    return path


def record_machine_id(rec: Rec) -> str:
    """The machine a record was made on (older records: from their hardware)."""
    if rec.machine_id:
        return rec.machine_id
    hw = rec.hardware
    return environment.machine_id(
        {
            "hostname": None,
            "cpu_model": hw.cpu_model,
            "logical_cpus": hw.logical_cpus,
            "accelerator": rec.device_kind if rec.device == "gpu" else None,
        }
    )


def _problem_known(problem: str) -> bool:
    """Whether `problem` resolves here (else no record of it is current)."""
    try:
        resolve_problem(problem)
    except ValueError:
        return False
    return True


@functools.cache
def current_keys(scale: str, problem: str = DEFAULT_PROBLEM) -> frozenset[str]:
    """Scenario keys at `scale` for `problem` whose records under the results folder are
    current: every registered study's (`Study.current`)."""
    if scale not in SCALES or not _problem_known(problem):
        return frozenset()
    return frozenset(s.key() for c in STUDIES.values() for s in c().current(scale, problem))


@functools.cache
def scaling_keys(scale: str, problem: str = DEFAULT_PROBLEM) -> frozenset[str]:
    """Scenario keys of the scaling tables at `scale` for `problem`: the whole matrix of
    each study whose records are their rows (`Study.scaling_table`)."""
    if scale not in SCALES or not _problem_known(problem):
        return frozenset()
    found = [s for c in STUDIES.values() if c.scaling_table for s in c().matrix(scale)]
    return frozenset(s.key() for s in for_problem(found, problem))


def record_problem(rec: Rec) -> str:
    """The problem a record trained (records before problems: the default)."""
    return rec.fields.problem or DEFAULT_PROBLEM


def in_scaling_matrix(rec: Rec) -> bool:
    """Whether record `rec` is a row of its scale's scaling tables (`scaling_keys`)."""
    return rec.scenario_key in scaling_keys(rec.scale, record_problem(rec))


def read_records(
    results: str | Path,
    scale: str | None = None,
    current: bool = True,
    skipped: list[tuple[str, str]] | None = None,
) -> list[Rec]:
    """Every record under `results` (of `scale`, or of every scale), of every machine,
    as `Rec`s with their `path`, `machine_id` and `session` (`sessions.Session`).

    - `current`: keep only records of a current scenario (`current_keys`); others are
      stale (made for a matrix that changed since).
    - `skipped`: if a list, gets `(path, reason)` for each file left out.
    """
    out: list[Rec] = []
    for path in records.record_paths(results, scale):
        try:
            read = records.read_record(path)
            if not isinstance(read, dict) or "status" not in read:
                raise ValueError("not a scenario record")
        except (OSError, ValueError) as exc:
            if skipped is not None:
                skipped.append((str(path), f"unreadable: {type(exc).__name__}: {exc}"))
            continue
        rec = trained_state(Rec(read))
        rec.setdefault("machine_id", record_machine_id(rec))
        rec.path = str(path)
        if current and rec.scenario_key not in current_keys(rec.scale, record_problem(rec)):
            if skipped is not None:
                skipped.append((str(path), "stale: matches no scenario of the current matrix"))
            continue
        out.append(rec)
    return sessions.reassigned(out)


def is_default(rec: Rec, *free: str) -> bool:
    """Whether record `rec` has the default configuration of its scale
    (`scenario.default_config`), apart from the scenario fields named in `free`."""
    s = rec.fields
    if rec.scale not in SCALES:
        return False
    want = default_config(rec.scale)
    for key, value in want.items():
        if key in free or key not in s:
            continue
        got = s[key]
        if isinstance(value, tuple):  # a list in JSON (length_fractions, added_levers)
            got = tuple(got or ())
        if got != value:
            return False
    return True


# The columns every row of `load_records` has first: the keys of a record marked `flat`.
FLAT_KEYS = tuple(k.key for k in declared(Record) if k.flat)


def flat(rec: Rec) -> dict[str, Any]:
    """One record as a flat row: `FLAT_KEYS`, the scenario's other fields, package
    versions, hardware, runs and solver steps, and what the report derives of it."""
    row = {k: rec.get(k) for k in FLAT_KEYS}
    for key, value in rec.fields.items():
        row.setdefault(key, value)
    for key in ("length_fractions", "added_levers"):  # lists in JSON, hashable here
        row[key] = tuple(row.get(key) or ())
    row.update({k: v for k, v in (rec.versions or {}).items()})
    row.update(
        cpu_model=rec.hardware.cpu_model,
        physical_cores=rec.hardware.physical_cores,
        device_kind=rec.device_kind,
    )
    runs = rec.step_time_runs_s or []
    row.update(runs=len(runs) if rec.ok else 0, step_time_runs_s=runs)
    steps = rec.solver_steps
    row.update(
        solver_steps_mean=steps.mean,
        solver_steps_max=steps.max,
        lockstep_waste=steps.waste.total,
        default=is_default(rec),
        step=step_of(rec) if rec.fields else None,
        scaling_matrix=in_scaling_matrix(rec),
        trained=trained(rec) if rec.ok else None,
        problem=record_problem(rec),
    )
    return row


def load_records(
    results: str | Path = "results", scale: str | None = None, current: bool = True
) -> pd.DataFrame:
    """The records under `results` as a DataFrame, one row per record (`flat`), of
    `scale` or of every scale; `current` leaves stale records out (`read_records`)."""
    rows = [flat(r) for r in read_records(results, scale, current)]
    return pd.DataFrame(rows, columns=None if rows else list(FLAT_KEYS))


# What each row of `load_steps` and `load_runs` says of its record.
RUN_KEYS = (
    "name",
    "machine_id",
    "scale",
    "device",
    "mode",
    "controller",
    "scaling",
    "n_devices",
    "global_batch",
)


def _ok_heads(
    results: str | Path, scale: str | None, current: bool, keys: Sequence[str]
) -> Iterator[tuple[Rec, dict[str, Any]]]:
    """Each ok record under `results` with its values of `keys`."""
    for rec in read_records(results, scale, current):
        if rec.ok:
            yield rec, {k: rec.get(k) for k in keys}


def load_steps(
    results: str | Path = "results", scale: str | None = None, current: bool = True
) -> pd.DataFrame:
    """The timed steps of every ok record, long form: one row per step of the last stage,
    with its run (0 = the cold run), its index in the run, and `RUN_KEYS`."""
    rows = [
        {**head, "run": run, "index": index, "step_time_s": t}
        for rec, head in _ok_heads(results, scale, current, RUN_KEYS)
        for run, times in enumerate(rec.step_times_runs_s or [rec.last_stage.step_times_s or []])
        for index, t in enumerate(times)
    ]
    return pd.DataFrame(rows, columns=[*RUN_KEYS, "run", "index", "step_time_s"])


def load_runs(
    results: str | Path = "results", scale: str | None = None, current: bool = True
) -> pd.DataFrame:
    """Each run's median step time, long form: one row per run of every ok record (run 0
    is the cold run; repeats follow in the order they ran), with `RUN_KEYS`."""
    rows = [
        {**head, "run": run, "step_time_s": t}
        for rec, head in _ok_heads(results, scale, current, RUN_KEYS)
        for run, t in enumerate(rec.step_time_runs_s or [])
    ]
    return pd.DataFrame(rows, columns=[*RUN_KEYS, "run", "step_time_s"])


def load_curves(
    results: str | Path = "results", scale: str | None = None, current: bool = True
) -> pd.DataFrame:
    """Training and evaluation losses of every ok record, long form: one row per optimiser
    step (`kind="train"`) and per evaluation (`"eval"`, with the training time so far)."""
    keys = ("name", "machine_id", "scale", "mode", "controller", "n_devices", "global_batch")
    rows = []
    for rec, head in _ok_heads(results, scale, current, keys):
        rows += [
            dict(head, kind="train", step=step, loss=loss, train_time_s=None)
            for step, loss in enumerate(rec.train_loss or [], start=1)
        ]
        rows += [
            dict(head, kind="eval", step=p.step, loss=p.eval_loss, train_time_s=p.train_time_s)
            for p in rec.curve
        ]
    return pd.DataFrame(rows, columns=[*keys, "kind", "step", "loss", "train_time_s"])


# A baseline shares every scenario field with its row except these; its own batch is
# the row's global batch (strong scaling) or per-device batch (weak scaling).
JOIN_EXCLUDES = ("mode", "devices_per_process", "processes", "scaling", "batch")
MODE_ORDER = {name: i for i, name in enumerate(MODES)}


def join_key(rec: Rec) -> str:
    """What a record must share with its baseline: `shared_key` but `JOIN_EXCLUDES`."""
    return shared_key(rec, JOIN_EXCLUDES)


def baselines(rows: list[Rec], recs: list[Rec], scaling: str) -> list[Rec | BaselineError]:
    """For each record of `rows`, its one ok 1-device record of `recs` under `scaling`,
    or the BaselineError that says why there is none: a many-to-one merge on `join_key`
    and the batch (the row's global batch, or per-device under weak scaling), keys held
    by several records taken out first and named as ambiguous."""

    left = pd.DataFrame(
        {
            "row": range(len(rows)),
            "key": [join_key(r) for r in rows],
            "size": [batch_size(r, scaling) for r in rows],
        }
    )
    ones = [i for i, r in enumerate(recs) if r.ok and r.n_devices == 1]
    right = pd.DataFrame(
        {
            "base": ones,
            "key": [join_key(recs[i]) for i in ones],
            "size": [recs[i].global_batch for i in ones],
        },
        columns=["base", "key", "size"],
    ).astype({"key": object})  # no 1-device record: an empty key column, not floats
    left = left.astype({"key": object})
    shared = right.duplicated(["key", "size"], keep=False)
    ambiguous = right[shared].groupby(["key", "size"])["base"].agg(list)
    joined = left.merge(
        right[~shared], on=["key", "size"], how="left", validate="many_to_one"
    ).sort_values("row")
    out: list[Rec | BaselineError] = []
    for row, key, n, base in joined[["row", "key", "size", "base"]].itertuples(index=False):
        if base == base:  # not NaN: one baseline
            out.append(recs[int(base)])
            continue
        found = ambiguous.get((key, n), [])
        what = f"{len(found)} ambiguous" if found else "no"
        names = f": {', '.join(recs[i].name for i in found)}" if found else ""
        rec = rows[row]
        out.append(
            BaselineError(
                f"{what} 1-device baseline for {rec.name} ({scaling}, "
                f"batch {n}, machine {rec.machine_id}){names}"
            )
        )
    return out


def baseline(rec: Rec, recs: list[Rec], scaling: str) -> Rec:
    """The one ok 1-device record to compare `rec` with under `scaling` (`baselines`);
    BaselineError if there is none or more than one."""
    found = baselines([rec], recs, scaling)[0]
    if isinstance(found, BaselineError):
        raise found
    return found


def _join(row: Rec, rec: Rec, base: Rec, scaling: str) -> None:
    """Fill `row` (ok record `rec` as a point of `scaling`) from its 1-device baseline
    `base`: speedup and efficiency with intervals, or `untrained`."""
    row.baseline_final_loss = base.final_loss
    row.baseline_runs = len(base.step_time_runs_s or [])
    row.baseline_session = base.session
    if not (trained(rec) and trained(base)):
        # An untrained model's speedup is no result: marked, never computed.
        row.untrained = "this row" if not trained(rec) else "its 1-device baseline"
        return
    n = rec.n_devices
    ratio, lo, hi = ratio_interval(base, rec)
    if scaling == "strong":
        row.update(
            speedup=ratio, speedup_ci=(lo, hi), efficiency=ratio / n, efficiency_ci=(lo / n, hi / n)
        )
        return
    row.update(
        speedup=ratio * n, speedup_ci=(lo * n, hi * n), efficiency=ratio, efficiency_ci=(lo, hi)
    )
    machine = ceiling_for(base) if n > 1 and rec.device == "cpu" else None
    if machine is not None:
        row.ceiling = ceiling_interval(machine).get("ceiling")
        row.efficiency_vs_ceiling = efficiency_against_ceiling(base, rec, machine)


def scaling_rows(recs: Sequence[dict[str, Any]], scaling: str | None = None) -> list[Rec]:
    """Records with speedup and efficiency, with 95% intervals, against their 1-device
    baseline (`baselines`), and over the best 1-device step (`best.attach_best`).

    - `scaling`: `None` keeps every record under its own scaling; `"strong"` or
      `"weak"` keeps that scaling's records and those of the other with a baseline
      under this one (at 1 device one run is both a strong and a weak point).

    Strong scaling: speedup `t(1)/t(N)`, efficiency `speedup / N`. Weak scaling:
    efficiency `t(1)/t(N)` at the same per-device batch, speedup `N * t(1)/t(N)`, and
    the efficiency against the machine's ceiling where measured. A record without a
    baseline keeps its `baseline_error`.
    """
    every = [Rec(r) for r in recs]
    found: dict[int, Rec | BaselineError] = {}
    for kind in ("strong", "weak"):
        idx = [i for i, r in enumerate(every) if (scaling or r.scaling) == kind]
        for i, joined in zip(idx, baselines([every[i] for i in idx], every, kind), strict=True):
            found[i] = joined
    rows: list[Rec] = []
    for i, rec in enumerate(every):
        as_scaling = scaling or rec.scaling
        row = Rec(
            rec,
            scaling=as_scaling,
            speedup=None,
            efficiency=None,
            speedup_ci=None,
            efficiency_ci=None,
            baseline_error=None,
            baseline_final_loss=None,
            baseline_runs=None,
            baseline_session=None,
            ceiling=None,
            efficiency_vs_ceiling=None,
            untrained=None,
        )
        base: Rec | BaselineError | None = found[i]
        if isinstance(base, BaselineError):
            if scaling is not None and rec.scaling != scaling:
                continue  # another scaling's run that is no point of this one
            row.baseline_error = str(base)
            base = None
        if rec.ok and base is not None:
            _join(row, rec, base, as_scaling)
        row.step = step_of(rec)
        rows.append(row)
    attach_best(rows, every)
    return sorted(rows, key=_table_order)


def _table_order(r: Rec) -> tuple:
    """The scaling tables' order."""
    return (
        r.device,
        r.scaling,
        r.controller,
        r.n_devices,
        r.processes or 1,
        MODE_ORDER.get(r.mode, 9),
    )
