"""Claims as code: the answer's sentences that state a measured number, from the records.
A claim names its machine and session, weakens its wording where its 95% interval does
not support it ("not separable from one device"), flags rows trained to different
losses, and says in how many sessions with such records it holds."""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..measure.controllers import CONTROLLERS
from ..measure.modes import MODES
from ..measure.timing import PROTOCOL
from ..study import records
from ..study.claim import Agreement, Answer, Claim, Verdict
from ..study.rec import Rec
from ..study.workloads import MAP_FOLDER
from . import loss, sessions
from .comparisons import own_claim, render_x
from .frames import in_scaling_matrix, read_records, scaling_rows
from .tables import escape
from .verdict import ONE_RUN, Compared, compare, exceeds_cores, one_run

T = TypeVar("T")


def mode_label(mode: str) -> str:
    """A mode as the answer names it: its class's `label`, else its name as code."""
    found = MODES.get(mode)
    return found.label if found is not None else f"`{escape(mode)}`"


def controller_label(controller: str) -> str:
    """A controller as the answer names it: its class's `label`, else its name."""
    found = CONTROLLERS.get(controller)
    return found.label if found is not None else escape(controller)


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The rows of one comparison (`verdict.compare`, fastest first) by their interval
    against one device (`KINDS`); `separable`: whether a `use` row's misses the fastest's."""

    use: list[Rec]
    avoid: list[Rec]
    none: list[Rec]
    one_run: list[Rec]
    separable: bool

    def of(self, kind: str) -> list[Rec]:
        """Its rows of `kind` (one of `KINDS`)."""
        return getattr(self, kind)


# Per session, its judgement per controller (`judged_sessions`).
BySession = dict[Any, dict[str, Judgement]]


# How a session judged one mode (`judge`'s kinds), as a verdict.
KINDS = {
    "use": Verdict.FASTER,
    "avoid": Verdict.SLOWER,
    "none": Verdict.LEVEL,
    "one_run": Verdict.ONE_RUN,
}


def judge(found: Compared) -> Judgement:
    """`found`'s rows judged against one device (`Judgement`)."""
    kinds: dict[str, list[Rec]] = {k: [] for k in KINDS}
    for r in found.ranked:
        assert r.speedup_ci is not None  # `compare` ranks rows with an interval only
        low, high = r.speedup_ci
        kind = "one_run" if one_run(r) else "use" if low > 1 else "avoid" if high < 1 else "none"
        kinds[kind].append(r)
    close = [found.ranked[0], *found.close] if found.ranked else []
    separable = any(all(r is not c for c in close) for r in kinds["use"])
    return Judgement(kinds["use"], kinds["avoid"], kinds["none"], kinds["one_run"], separable)


def _apart(per: dict[str, tuple[Compared, Judgement]]) -> str:
    """Whether the intervals separate the modes faster than one device."""
    seps = {c: j.separable for c, (_, j) in per.items() if j.use}
    if not any(seps.values()):
        return " (not separable from each other)"
    if all(seps.values()):
        return " (fastest first; the intervals separate them)"
    said = ", ".join(
        f"{'separated' if sep else 'not separable'} with {controller_label(c)}"
        for c, sep in seps.items()
    )
    return f" (fastest first; {said})"


def _why(slow: Rec) -> str:
    loops = slow.collectives_in_loops
    return f": {escape(loops)} collective(s) inside its solver loops" if loops else ""


def groups(rows: Sequence[dict[str, Any]], device: str = "cpu") -> dict[Any, list[Rec]]:
    """The ok scaling-matrix records of `rows` of one device kind, by session (a record's
    own, else its session among them: records made a second apart are one session)."""
    found = [r for r in map(Rec, rows) if r.device == device and r.ok and in_scaling_matrix(r)]
    return grouped(found, found)


def grouped(items: Sequence[T], recs: Sequence[Rec]) -> dict[sessions.Session, list[T]]:
    """`items` by the session of their records `recs` (else their session among `recs`)."""
    by: dict[sessions.Session, list[T]] = {}
    for item, session in zip(items, sessions.sessions_of(recs), strict=True):
        by.setdefault(session, []).append(item)
    return by


def judged_sessions(session_rows: dict[Any, list[Rec]], scaling: str, n: int) -> BySession:
    """Per session with `scaling` rows on `n` devices, its judgement per controller."""
    out = {}
    for session, recs in session_rows.items():
        rows = scaling_rows(recs, scaling)
        per = {}
        for controller in sorted({r.controller for r in rows}):
            found = compare(rows, controller, scaling)
            judged = judge(found) if found.n == n else None
            if judged and len(judged.one_run) < len(found.ranked):
                per[controller] = judged
        if per:
            out[session] = per
    return out


def holds(judged: BySession, test: Any) -> tuple[int, int]:
    """`(holds, answered)`: in how many sessions judged (`judged_sessions`) `test(judged
    per controller)` holds. A session where `test` gives None (no rows of its comparison)
    is not counted: "k of n" counts only sessions that could answer."""
    said = [v for per in judged.values() if (v := test(per)) is not None]
    return sum(map(bool, said)), len(said)


def agreement(judged: BySession, c: str, mode: str, verdict: Verdict) -> Agreement:
    """How the sessions judged with rows of `mode` under controller `c` judged it: how
    many found `verdict`, of how many, and the others by what they found."""
    found: dict[Verdict, list[str]] = {}
    for session, per in judged.items():
        kind = next((k for k in KINDS if c in per and mode in [r.mode for r in per[c].of(k)]), None)
        if kind is not None:
            found.setdefault(KINDS[kind], []).append(escape(session.when))
    others = tuple((v, tuple(sorted(w))) for v, w in found.items() if v != verdict)
    return Agreement(len(found.get(verdict, [])), sum(map(len, found.values())), others)


@dataclasses.dataclass(frozen=True)
class Judged:
    """What one machine and session's scaling rows answer (`answer`): per controller its
    comparison and judgement, every session judged (`judged`), and each judged row's
    claim (`claims`, by controller and mode)."""

    per: dict[str, tuple[Compared, Judgement]]
    n: int
    label: str
    what: str
    judged: BySession
    claims: dict[tuple[str, str], Claim] = dataclasses.field(default_factory=dict)

    def x(self, c: str, row: Rec) -> str:
        """The claim of `row` (under `c`) as `1.57x [1.49, 2.16]` (`render_x`)."""
        return render_x(self.claims[(c, row.mode)])

    def shown(self, rows: dict[str, list[Rec]]) -> str:
        """`PID mode 1.57x [1.49, 2.16], ...; ...`: the claims of `rows` per controller."""
        return "; ".join(
            f"{controller_label(c)} "
            + ", ".join(f"{mode_label(r.mode)} {self.x(c, r)}" for r in rs)
            for c, rs in rows.items()
        )

    def said(self, c: str, row: Rec) -> str:
        """How the sessions with rows of `row`'s comparison judged it (`Agreement.said`)."""
        claim = self.claims[(c, row.mode)]
        assert claim.agreement is not None
        return claim.agreement.said(claim.verdict)


# Where the answer's claims are stated (`Claim.where`).
ANSWER_WHERE = "the answer with the default step"


def _claims(
    per: dict[str, tuple[Compared, Judgement]],
    judged: BySession,
) -> dict[tuple[str, str], Claim]:
    """Each judged row's claim, with how the sessions with such rows judged it."""
    out = {}
    for c, (found, _) in per.items():
        for r in found.ranked:
            claim = own_claim(r, ANSWER_WHERE)
            agreed = agreement(judged, c, r.mode, claim.verdict)
            out[(c, r.mode)] = dataclasses.replace(claim, agreement=agreed)
    return out


def answer(rows: Sequence[Rec], every: Sequence[Rec], scaling: str, device: str) -> Judged | None:
    """The comparisons of `rows` (one machine and session), or None."""
    ok = [r for r in rows if r.ok and r.device == device]
    per = {}
    for controller in dict.fromkeys(r.controller for r in ok):
        found = compare(ok, controller, scaling)
        if found.n is not None:
            per[controller] = (found, judge(found))
    if not per:
        return None
    n = next(iter(per.values()))[0].n
    assert n is not None
    where = {s for r, s in zip(ok, sessions.sessions_of(ok), strict=True) if r.n_devices == n}
    judged = judged_sessions(groups(every, device), scaling, n)
    return Judged(
        per=per,
        n=n,
        label="; ".join(sorted(escape(s.label) for s in where)),
        what="a fixed global batch" if scaling == "strong" else "a fixed per-device batch",
        judged=judged,
        claims=_claims(per, judged),
    )


def _not_held(a: Judged, test: Any) -> str:
    """`; not in 1 (2026-11-26 11:12–12:04 UTC)`: the sessions where `test` fails."""
    when = sorted(escape(s.when) for s, per in a.judged.items() if test(per) is False)
    return f"; not in {len(when)} ({', '.join(when)})" if when else ""


def _use(a: Judged) -> list[str]:
    """The bullet naming the modes faster than one device with every controller."""
    use = {c: [r.mode for r in j.use] for c, (_, j) in a.per.items()}
    modes = [m for m in next(iter(use.values())) if all(m in ms for ms in use.values())]
    if not modes:
        return []
    shown = a.shown({c: j.use for c, (_, j) in a.per.items() if j.use})
    apart = _apart(a.per) if len(modes) > 1 else ""

    def test(p: dict[str, Judgement]) -> bool | None:
        present = [c for c in use if c in p]  # a session without them does not answer
        if not present:
            return None
        return all(mode in [r.mode for r in p[c].use] for c in present for mode in modes)

    k, m = holds(a.judged, test)
    return [
        f"- **Use {' or '.join(mode_label(x) for x in modes)}**{apart}: faster than one "
        f"device within their 95% intervals on {escape(a.n)} devices at {a.what} (every "
        f"mode that is, per controller: {shown}). "
        f"Measured on {a.label}; holds in {k} of {m} sessions with such rows"
        f"{_not_held(a, test)}."
    ]


def _avoid_and_level(a: Judged) -> list[str]:
    """A bullet per mode slower than one device, and per mode not separable from it."""
    lines = []
    for c, (_, j) in a.per.items():
        for avoid, rows in ((True, j.avoid), (False, j.none)):
            for r in rows:
                what = f"{mode_label(r.mode)} with {controller_label(c)}"
                said = (
                    f"**Avoid {what}**: {a.x(c, r)} of one device's speed{_why(r)}"
                    if avoid
                    else f"{what} gains nothing measurable: {a.x(c, r)}, not separable "
                    "from one device"
                )
                lines.append(f"- {said}. Measured on {a.label}; {a.said(c, r)}.")
    return lines


def _one_run(a: Judged) -> list[str]:
    """The bullet listing rows timed in one run, which back no verdict."""
    single = {c: j.one_run for c, (_, j) in a.per.items() if j.one_run}
    if not single:
        return []
    return [
        f"- One run each on {escape(a.n)} devices at {a.what} ({a.shown(single)}): {ONE_RUN}, so "
        f"these rows call no mode faster or slower than one device, nor separate two "
        f"modes. Measured on {a.label}."
    ]


def device_answer(
    rows: Sequence[Rec],
    every: Sequence[Rec],
    scaling: str = "strong",
    device: str = "cpu",
    scale: str = "",
) -> Answer:
    """The answer for one device kind from the scaling rows of one machine and session:
    each judged row's claim and its bullets, each saying in how many sessions of `every`
    it holds; without multi-device rows, why not (`missing`)."""
    found = answer(rows, every, scaling, device)
    if found is None:
        missing = (
            f"no multi-device {device.upper()} row of the current protocol at the "
            f"{escape(scale)} scale."
        )
        return Answer(device, missing=missing)
    lines = _use(found) + _avoid_and_level(found) + _one_run(found)
    ok = [r for r in rows if r.ok and r.device == device]
    beyond = sorted({r.n_devices for r in ok if exceeds_cores(r)})
    if beyond:
        lines.append(
            f"- Rows with more virtual devices than physical cores "
            f"({escape(', '.join(map(str, beyond)))} devices) "
            "measure overhead and are left out of this answer."
        )
    lines += [f"- {n}" for n in loss.notes("\n".join(lines))]
    return Answer(device, tuple(lines), claims=tuple(found.claims.values()))


# Where the verdict states its claims (`Claim.where`, `verdict.verdict_body`).
VERDICT_WHERE = "the verdict"


def verdict_stated(rows: Sequence[Rec]) -> list[Claim]:
    """The claims the verdict (`verdict.verdict_body`) states of `rows`."""
    ok = [r for r in rows if r.ok]
    found = []
    for device in ("cpu", "gpu"):
        mine = [r for r in ok if r.device == device]
        for scaling in ("strong", "weak"):
            for controller in dict.fromkeys(r.controller for r in mine):
                ranked = compare(mine, controller, scaling).ranked
                found += [own_claim(r, VERDICT_WHERE) for r in ranked]
    return found


def scale_records(results: str | Path, scale: str) -> list[Rec]:
    """Every ok record of `scale` under the current `timing.PROTOCOL`, and those that repeat
    them elsewhere: the sessions a claim counts in (an older protocol measured otherwise)."""
    found = read_records(results, scale, current=True)
    every = [r for r in found if r.ok and r.protocol == PROTOCOL]
    return sessions.reassigned(every + related_records(results, scale, every))


def render_claims(answers: Sequence[Answer]) -> list[str]:
    """`answers` as markdown lines."""
    lines = []
    for found in answers:
        name = found.device.upper()
        if found.bullets:
            lines += [f"**{name}**", "", *found.bullets, ""]
        else:
            lines += [f"**{name}**: {found.missing}", ""]
    return lines


def scale_claims(
    results: str | Path, scale: str, rows: Sequence[Rec], scaling: str = "strong"
) -> list[str]:
    """The answer per device kind of `rows`, against every ok record of `scale`."""
    every = scale_records(results, scale)
    return render_claims([device_answer(rows, every, scaling, d, scale) for d in ("cpu", "gpu")])


def related_records(results: str | Path, scale: str, rows: Sequence[Rec]) -> list[Rec]:
    """The ok records of the map's, the version sets' and the replaced sessions' folders
    that repeat a scenario of `rows` under the same protocol and JAX release."""
    same = {(r.scenario_key, r.protocol, _jax(r)) for r in rows}
    folders = [Path(results) / MAP_FOLDER]
    for kept in ("versions", records.REPLACED):  # version sets; sessions measured again
        folders += records.subfolders(Path(results) / kept)
    out = []
    for folder in folders:
        for r in read_records(folder, scale, current=False):
            if r.ok and (r.scenario_key, r.protocol, _jax(r)) in same:
                out.append(Rec(r, source=folder.name))
    return out


def _jax(rec: Rec) -> str | None:
    return (rec.versions or {}).get("jax")
