"""A prediction's row checked against its measured row (`checked`), whether it was held
out (made before the rows) or in-sample, and the recommended step measured again
(`recommended_again`)."""

import datetime
import functools
import math
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..measure import environment
from ..study import records
from ..study.rec import Key, LeverRecord, PredictedRow, Prediction, Rec
from . import loss, sessions
from .sessions import parse_time


class Checked(dict[str, Any]):
    """A measured row against one mode row of a prediction (`checked`): a dict (as `said`
    reads it) with an attribute per field."""

    __slots__ = ()  # a field not named here is no attribute

    model: Key[Any] = Key()
    before: Key[bool | None] = Key()
    name: Key[str | None] = Key()
    workload: Key[str | None] = Key()
    mode: Key[str] = Key()
    controller: Key[str | None] = Key()
    placement: Key[tuple[int, int, int]] = Key()
    predicted_s: Key[float] = Key()
    low_s: Key[float] = Key()
    high_s: Key[float] = Key()
    measured_s: Key[float] = Key()
    error: Key[float] = Key()
    inside: Key[bool] = Key()
    compute_s: Key[float] = Key()
    allreduce_s: Key[float] = Key()
    in_loop_s: Key[float] = Key()
    profile: Key[str | None] = Key()
    session: Key[Any] = Key()
    made: Key[str | None] = Key()
    predicted_speedup: Key[tuple[float, float, float] | None] = Key()
    measured_speedup: Key[tuple[float, float, float] | None] = Key()


def checked(p: Prediction, pr: PredictedRow, r: Rec) -> Checked:
    """Measured row `r` against mode row `pr` of prediction `p`."""
    # No interval in a map prediction of model 1 or 2: NaN, inside none.
    lo, hi = pr.get("step_time_interval_s") or (math.nan, math.nan)
    assert r.step_time_s is not None
    measured = float(r.step_time_s)
    return Checked(
        model=p.made_from.model, before=made_before(p, [r]), name=r.name,
        workload=p.workload, mode=pr.mode, controller=p.fields.controller,
        placement=(p.n_devices, p.processes or 1, p.nodes or 1),
        predicted_s=pr.step_time_s, low_s=lo, high_s=hi,
        measured_s=measured, error=pr.step_time_s / measured - 1, inside=lo <= measured <= hi,
        compute_s=pr.compute_s, allreduce_s=pr.allreduce_s, in_loop_s=pr.in_loop_s,
        profile=p.profile.name, session=r.session, made=p.finished,
        predicted_speedup=(pr.speedup, *pr.speedup_interval) if pr.speedup_interval else None,
        measured_speedup=(r.speedup, *r.speedup_ci) if r.speedup and r.speedup_ci else None,
    )  # fmt: skip


def made_before(prediction: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> bool | None:
    """Whether `prediction` was held out from `rows`: finished before every row started,
    made from code committed before them (`git_commit`, not dirty) and, where its file
    is in this repository (`path`), itself committed before them. None where a time is
    unknown."""
    made = parse_time(prediction.get("finished"))
    starts = [parse_time(r.get("started")) for r in rows]
    if made is None or not starts or any(s is None for s in starts):
        return None
    first = min(s for s in starts if s is not None)
    if not made < first:
        return False
    commit = str(prediction.get("git_commit") or "")
    if commit:
        code = None if commit.endswith("-dirty") else sessions.commit_time(commit)
        if code is None or not code < first:
            return False
    added = file_commit_time(prediction.get("path"))
    return added is None or added < first


def file_commit_time(path: Any) -> datetime.datetime | None:
    """When the file at `path` was first committed (under any name), or None."""
    if not path:
        return None
    try:
        rel = Path(path).resolve().relative_to(environment.ROOT.resolve())
    except ValueError:
        return None
    return _added_times().get(rel.as_posix())


@functools.cache
def _added_times() -> dict[str, datetime.datetime]:
    """Each indexed file under `results/` by when its content was first committed at any
    path (a file moved keeps its time); empty without git."""
    try:
        log = subprocess.run(
            ["git", "-C", str(environment.ROOT), "log", "--reverse", "--raw", "--no-abbrev",
             "--no-renames", "--format=@%cI", "--", "results"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        index = subprocess.run(
            ["git", "-C", str(environment.ROOT), "ls-files", "-s", "--", "results"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    first: dict[str, datetime.datetime] = {}
    when = None
    for line in log.stdout.splitlines() if log.returncode == 0 else []:
        if line.startswith("@"):
            when = parse_time(line[1:])
        elif line.startswith(":") and when is not None:
            blob = line.split("\t")[0].split()[3]
            first.setdefault(blob, when)
    out = {}
    for line in index.stdout.splitlines() if index.returncode == 0 else []:
        meta, _, path = line.partition("\t")
        if (at := first.get(meta.split()[1])) is not None:
            out[path] = at
    return out


def held_out_said(errors: Sequence[dict[str, Any]], unit: str = "points") -> str:
    """Where errors (each with `error`, `model`, `before`) mix predictions made before
    their rows with others: the sentence on those made before alone; else ""."""
    held = [e for e in errors if e.get("before") is True]
    if not held or len(held) == len(errors):
        return ""
    signed = float(np.median([e["error"] for e in held]))
    size = float(np.median([abs(e["error"]) for e in held]))
    return (
        f" Made before the rows alone: median |error| {size * 100:.0f} % at {len(held)} "
        f"{unit}, median signed error {signed * 100:+.0f} % ({said(held)})."
    )


def said(checked: Sequence[dict[str, Any]]) -> str:
    """How checked errors (each with `model` and `before`) were made: `prediction model 5;
    made before the rows`, `...; in-sample ...`, or how many of each."""
    if not checked:
        return ""
    known = sorted({str(c["model"]) for c in checked if c.get("model") is not None})
    models = f"prediction model {', '.join(known)}" if known else "prediction model unknown"
    counts = {
        "made before the rows": sum(c.get("before") is True for c in checked),
        "in-sample": sum(c.get("before") is False for c in checked),
        "of unknown time": sum(c.get("before") is None for c in checked),
    }
    if counts["made before the rows"] == len(checked):
        return f"{models}; made before the rows"
    if counts["in-sample"] == len(checked):
        return f"{models}; in-sample: made after the rows, from their session's 1-device rows"
    return f"{models}; " + ", ".join(f"{n} {what}" for what, n in counts.items() if n)


def choice_records(results: str | Path) -> list[LeverRecord]:
    """The records the recommended step was chosen on: every machine's levers and tune
    records and the map's lever, fused-solve and vector-width records."""
    machines = [(results, "levers"), (results, "tune")]
    maps = [(Path(results) / "map", study) for study in ("levers", "fused", "vectors")]
    paths = [p for where, study in machines + maps for p in records.every_machines(where, study)]
    kept = [p for p in sorted(paths) if not p.name.startswith("loss-spread")
            and not p.name.endswith(".floor.json")]  # fmt: skip
    return [LeverRecord(r) for _, r in records.readable(kept)]


def recommended_again(rows: Sequence[Any], chosen: Sequence[LeverRecord]) -> str:
    """The map's recommended step (`workloads.MapRow`s) measured again after the records
    it was chosen on: its speedups over the default, and how many are faster at equal
    loss or slower; empty without such rows or records."""
    found = [
        (r, r.speedup)
        for r in rows
        if r.step == "recommended" and r.n_devices == 1 and r.speedup is not None
    ]
    # Only records made before the rows could have informed the step they measured (a
    # row is "recommended" only where its levers are today's recommended step's).
    starts = [parse_time(r.record.started) for r, _ in found]
    first = min((t for t in starts if t is not None), default=None)
    final = max((t for t in starts if t is not None), default=None)
    times = [t for rec in chosen if (t := parse_time(rec.finished)) is not None]
    last = max((t for t in times if first is not None and t < first), default=None)
    latest = max((t for t in times if final is not None and t < final), default=None)
    # With `last` (a record before the first row), `found` and `latest` are not empty.
    measured = [r.record for r, _ in found]
    if last is None or not made_before({"finished": last.isoformat()}, measured):
        return ""
    up_to = f"made up to {last:%Y-%m-%d %H:%M} UTC"
    if latest != last:
        up_to += (
            f" before the first of these rows, up to {latest:%Y-%m-%d %H:%M} UTC before the last"
        )
    ratios = [speedup for _, speedup in found]
    above = [r for r, speedup in found if speedup[1] > 1]
    verdicts = [loss.verdict(r.record, r.base) for r in above]
    faster = verdicts.count(loss.Verdict.SAME)
    unmeasured = verdicts.count(loss.Verdict.UNMEASURED)
    slower = sum(hi < 1 for _, _, hi in ratios)
    return (
        f"- Held out in time: the recommended step was chosen on levers and tune records "
        f"{up_to}; the map measured it again against the default, 1 device: "
        f"{min(x for x, _, _ in ratios):.2f}x to "
        f"{max(x for x, _, _ in ratios):.2f}x over {len(found)} workload and controller "
        f"pairs whose models trained, {faster} faster with the whole interval above 1 at "
        f"equal loss"
        + (
            f" ({unmeasured} more above 1 where the loss spread was not measured)"
            if unmeasured
            else ""
        )
        + f", {slower} slower."
    )
