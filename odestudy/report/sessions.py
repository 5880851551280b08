"""Sessions: which records were measured together.

A VM's speed drifts between sessions by more than the intervals of one session hold,
so a ratio of two records is only as good as the session they share. A **session** is
the records of one machine whose times fall in one contiguous window: sorted by time,
a gap of more than `SESSION_GAP_HOURS` between one record's window and the next starts
a new session. A record that carries no time (the benchmarks' side studies) is placed at
its commit's time, the closest the repository knows; with neither it is a session of its
own.
"""

import datetime
import functools
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.rec import Rec

# Records further apart than this (hours) are not of one session: a session is one
# block of measurements without a gap of more than an hour.
SESSION_GAP_HOURS = 1.0


@dataclass(frozen=True)
class Session:
    """One machine's records of one time window (None for a session known only by its
    commit), with the short commits they were measured at."""

    machine: str
    start: datetime.datetime | None
    end: datetime.datetime | None
    commits: tuple[str, ...]
    protocols: tuple[int, ...] = ()  # the measurement protocols its records name

    @property
    def older(self) -> str:
        """`, measurement protocol 2 (now 3)` where a record of it was measured under an
        older `timing.PROTOCOL` than this checkout's, else empty."""
        text = older_than_now(self.protocols)
        return f", {text}" if text else ""

    @property
    def when(self) -> str:
        """`2026-11-24 19:11–20:03 UTC`, or `commit 70db496` without a time."""
        if self.start is None or self.end is None:
            return f"commit {', '.join(self.commits) or 'unknown'}"
        day = self.start.strftime("%Y-%m-%d")
        end = self.end.strftime("%H:%M" if self.end.date() == self.start.date() else "%m-%d %H:%M")
        return f"{day} {self.start:%H:%M}–{end} UTC"

    @property
    def label(self) -> str:
        """The machine and `when`: `amd-epyc-2cpu-1a6ba1, 2026-11-24 19:11–20:03 UTC`."""
        return f"{self.machine}, {self.when}"


def parse_time(text: Any) -> datetime.datetime | None:
    """An ISO time, UTC where it names no zone; None where it is none."""
    try:
        t = datetime.datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


@functools.cache
def commit_time(commit: str) -> datetime.datetime | None:
    """The committer time of `commit` here; None without git or the commit."""
    commit = commit.removesuffix("-dirty")
    if not commit:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(environment.ROOT), "log", "-1", "--format=%cI", commit, "--"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_time(out.stdout.strip()) if out.returncode == 0 else None


# The mark of a record's commit that this repository does not hold (a record made from
# a copied tree with stale metadata, or from a branch never merged).
UNKNOWN = " (not in this repository)"


def short_commit(rec: Mapping[str, Any]) -> str:
    """A record's commit, short, with `-dirty` where the record says so, marked
    `UNKNOWN` where this repository's history does not hold it (`commit_time`)."""
    commit = rec.get("git_commit") or ""
    short = commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
    if commit and commit_time(commit) is None and (environment.ROOT / ".git").exists():
        return short + UNKNOWN
    return short


def window(rec: Mapping[str, Any]) -> tuple[datetime.datetime, datetime.datetime] | None:
    """`(first, last)`: when `rec` was measured, else its commit's time, else None."""
    stamps = [rec.get("started"), *(rec.get("runs_finished") or []), rec.get("finished")]
    times = [t for t in map(parse_time, stamps) if t is not None]
    if not times:
        at = commit_time(rec.get("git_commit") or "")
        return (at, at) if at else None
    return min(times), max(times)


def protocols_of(recs: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
    """The measurement protocols of `recs` (`timing.PROTOCOL`), sorted; 0 for a record
    that names none (made before records named theirs)."""
    return tuple(sorted({int(r.get("protocol") or 0) for r in recs}))


def protocol_names(protocols: Sequence[int]) -> str:
    """`measurement protocol 2, 3` (`none recorded` for 0, `unknown` for none)."""
    names = [str(p) if p else "none recorded" for p in protocols] or ["unknown"]
    return f"measurement protocol {', '.join(names)}"


def older_than_now(protocols: Iterable[int]) -> str:
    """`measurement protocol 2 (now 3)` for those of `protocols` older than the current
    `timing.PROTOCOL`, else empty."""
    old = sorted({p for p in protocols if p < PROTOCOL})
    return f"{protocol_names(old)} (now {PROTOCOL})" if old else ""


def assign(recs: Sequence[Mapping[str, Any]]) -> list[Session]:
    """Each record's session, in the order of `recs` (`SESSION_GAP_HOURS`)."""
    gap = datetime.timedelta(hours=SESSION_GAP_HOURS)
    by_machine: dict[str, list[int]] = {}
    for i, r in enumerate(recs):
        by_machine.setdefault(str(r.get("machine_id") or "unknown machine"), []).append(i)
    out: dict[int, Session] = {}
    for machine, idx in by_machine.items():
        windows = {i: w for i in idx if (w := window(recs[i])) is not None}
        groups: list[list[int]] = []
        for i in sorted(windows, key=windows.__getitem__):
            if groups and windows[i][0] - max(windows[j][1] for j in groups[-1]) <= gap:
                groups[-1].append(i)
            else:
                groups.append([i])
        groups += [[i] for i in idx if i not in windows]  # no time: a session of its own
        for group in groups:
            timed = [windows[i] for i in group if i in windows]
            session = Session(
                machine,
                min((w[0] for w in timed), default=None),
                max((w[1] for w in timed), default=None),
                tuple(sorted({short_commit(recs[i]) for i in group})),
                protocols_of(recs[i] for i in group),
            )
            out.update(dict.fromkeys(group, session))
    return [out[i] for i in range(len(recs))]


def reassigned(recs: Sequence[Rec]) -> list[Rec]:
    """`recs`, each with its `session` among every record of its results tree (`index`),
    whichever folder holds them; one outside any tree, its session among `recs`."""
    found: dict[str, Session] = {}
    paths = [Path(r.path).resolve() for r in recs if r.path]
    for root in {results_tree(p) or p.parent for p in paths}:
        found.update(index(root))
    for rec, session in zip(recs, assign(recs), strict=True):
        rec.session = found.get(str(Path(rec.path).resolve()), session) if rec.path else session
    return list(recs)


def results_tree(path: Any) -> Path | None:
    """The results tree a record's file lies in: its nearest folder named `results`, else
    the folder four levels up (`<root>/<machine>/<scale>/<scenario>/metrics.json`) or None."""
    p = Path(path)
    for parent in p.parents:
        if parent.name == "results":
            return parent
    return p.parents[3] if len(p.parents) > 3 else None


SIDE_STUDIES = ("step_cost", "levers", "collectives")
# Side-study records that time nothing (losses over seeds): they neither make nor bridge
# a session of measurements.
UNTIMED = ("loss_spread",)


def index(results: str | Path) -> dict[str, Session]:
    """The session of every scenario and side-study record (`SIDE_STUDIES`) of the results
    tree, by resolved path, whatever page shows them; made again only when a file changes
    (within `records.read_once`, once)."""
    root = Path(results).resolve()
    return records.made_once(("sessions.index", root), lambda: _index(_stamp(root)))


def _stamp(root: Path) -> tuple[tuple[str, int], ...]:
    """Every scenario and side-study record file under `root` (resolved) with its mtime,
    found by one walk of the tree, its paths resolved through `root` alone."""
    found = []
    for folder, _, names in os.walk(root):
        here = Path(folder)
        side = here.name in SIDE_STUDIES and here.parent.parent == root
        found += [
            here / name
            for name in names
            if name == records.RECORD_NAME or (side and name.endswith(".json"))
        ]
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in found))


@functools.lru_cache(maxsize=8)
def _index(stamp: tuple[tuple[str, int], ...]) -> dict[str, Session]:
    def read(path: Path) -> Any:
        return (records.read_record if path.name == records.RECORD_NAME else records.read_json)(
            path
        )

    found: list[Rec] = []
    for path, rec in records.readable([Path(name) for name, _ in stamp], read):
        if not isinstance(rec, dict) or rec.get("kind") in UNTIMED:
            continue
        if path.name != records.RECORD_NAME:  # a side study's record: its machine is its folder's
            rec = {"machine_id": path.parent.parent.name, **rec}
        found.append(Rec(rec, path=str(path)))
    return {str(r.path): s for r, s in zip(found, assign(found), strict=True)}


def sessions_of(recs: Sequence[Mapping[str, Any]]) -> list[Session]:
    """Each record's session: the one `frames.read_records` gave it, else `assign`'s."""
    among = assign(recs)
    return [
        found if isinstance(found := r.get("session"), Session) else s
        for r, s in zip(recs, among, strict=True)
    ]


def session_of(rec: Mapping[str, Any], recs: Sequence[Mapping[str, Any]] = ()) -> Session:
    """The session of `rec`: the one `frames.read_records` gave it (`session`), else its
    session among `recs` (`rec` itself counted where it is not there)."""
    if isinstance(found := rec.get("session"), Session):
        return found
    pool_ = list(recs) if any(r is rec for r in recs) else [*recs, rec]
    at = next(i for i, r in enumerate(pool_) if r is rec)
    return assign(pool_)[at]


def joined(
    a: Mapping[str, Any], b: Mapping[str, Any] | None, recs: Sequence[Mapping[str, Any]]
) -> str:
    """The session a ratio of `a` and `b` (or `a` alone) joins, or both, hours apart."""
    sa = session_of(a, recs)
    if b is None or (sb := session_of(b, recs)) == sa:
        return sa.label
    wa, wb = window(a), window(b)  # the hours between their starts, where both have a time
    apart = f", {abs((wa[0] - wb[0]).total_seconds()) / 3600:.1f} h apart" if wa and wb else ""
    return f"two sessions ({sa.label}; {sb.label}{apart})"


def sessions_line(rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]]) -> str:
    """ "Session: ..." or "Sessions (N): ..." of `rows` among `recs`, with the commits."""
    found = list(dict.fromkeys(session_of(r, recs) for r in rows))
    if not found:
        return ""
    text = "; ".join(f"{s.label} (commit {', '.join(s.commits)}{s.older})" for s in found)
    return ("Session: " if len(found) == 1 else f"Sessions ({len(found)}): ") + text + "."
