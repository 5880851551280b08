"""Sessions as the unit of replication: one comparison measured in several sessions.

A virtual machine's speed moves between sessions by more than one session's runs show,
and a reader who reruns the study meets a new session. So a claim the README states is
made from every session that measured its comparison (the same machine, scale,
controller, mode, device count and base step), each session's ratio from its own rows
(its row against its own best 1-device step), and:

- its **value** is the median of the sessions' ratios;
- its **interval** is where a new session's ratio is expected: each of `RESAMPLES`
  draws picks one session at random, then that session's runs with replacement and the
  steps within each drawn run (`intervals.bootstrap_medians`), and the interval is the
  draws' 2.5th to 97.5th percentile. It holds the spread between sessions, not only
  within one, and covers every session's ratio up to its own noise;
- its **verdict** is "faster" or "slower" only where that interval lies wholly above or
  below 1 and at least `MIN_SESSIONS` sessions measured it; with fewer, the claim says
  how many.

Every session's own ratio and interval stay in the claim (`SessionRatio`), so that a page
lists them and names the sessions that disagree.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..study.claim import Verdict
from ..study.rec import Rec
from .intervals import RESAMPLES, bootstrap_medians, central, ratio_interval, step_time_runs

# The fewest sessions a verdict of the README rests on.
MIN_SESSIONS = 3


@dataclasses.dataclass(frozen=True)
class SessionRatio:
    """One session's ratio: `when` (the session's window), `value` and 95% `interval`
    within that session, the base step's time there (`base_s`, seconds), the runs left
    out as contended (`left_out`, `report.runs.trained_state`) and whether either side
    kept one run only (`one_run`: its interval backs no verdict of its own)."""

    when: str
    value: float
    interval: tuple[float, float]
    base_s: float
    left_out: tuple[str, ...] = ()
    one_run: bool = False

    @property
    def short(self) -> str:
        """The session by its start, `11-27 17:42` (from `when`)."""
        day, _, rest = self.when.partition(" ")
        return f"{day[5:]} {rest[:5]}" if rest else self.when

    @property
    def verdict(self) -> Verdict:
        """What this session's own interval says ("one run" where it backs none)."""
        return Verdict.of(*self.interval, self.one_run)


@dataclasses.dataclass(frozen=True)
class Replicated:
    """A comparison over sessions: the median of its sessions' ratios (`value`), the
    interval a new session is expected in (`interval`), the `verdict` and the sessions'
    own ratios (`sessions`, oldest first)."""

    value: float
    interval: tuple[float, float]
    verdict: Verdict
    sessions: tuple[SessionRatio, ...]
    before: tuple[float, float] | None = None

    @property
    def held_out(self) -> bool | None:
        """Whether the newest session's ratio lies inside the interval the sessions
        before it gave (`before`): the answer checked against its own rerun; None with
        fewer than `MIN_SESSIONS` sessions before it."""
        if self.before is None:
            return None
        return self.before[0] <= self.sessions[-1].value <= self.before[1]

    def disagree(self) -> tuple[SessionRatio, ...]:
        """The sessions whose own interval says otherwise than the claim's verdict (one
        that kept one run says nothing of its own)."""
        return tuple(s for s in self.sessions if s.verdict not in (self.verdict, Verdict.ONE_RUN))


def replicate(
    pairs: Sequence[tuple[str, Rec, Rec]], scale: float = 1.0, seed: int = 0
) -> Replicated | None:
    """The claim of `pairs` (`(when, base, row)`, one per session, oldest first): the
    speedup `scale * t(base) / t(row)` over sessions (module docstring); None without
    pairs."""
    if not pairs:
        return None
    rng = np.random.default_rng(seed)
    per, draws = [], []
    for when, base, row in pairs:
        value, low, high = ratio_interval(base, row, scale)
        left_out = tuple(
            f"{side} {why}"
            for side, rec in (("base", base), ("row", row))
            for why in rec.get("contended_runs") or []
        )
        one = min(len(step_time_runs(base)), len(step_time_runs(row))) <= 1
        per.append(SessionRatio(when, value, (low, high), float(base.step_time_s or 0.0),
                                left_out, one))  # fmt: skip
        # Bootstrap draws of `scale * t(base) / t(row)` within this session.
        a, b = step_time_runs(base), step_time_runs(row)
        draws.append(scale * bootstrap_medians(a, rng) / bootstrap_medians(b, rng))
    pick = rng.integers(0, len(draws), RESAMPLES)
    mixed = np.stack(draws)[pick, np.arange(RESAMPLES)]
    low, high = central(mixed)
    value = float(np.median([s.value for s in per]))
    low, high = min(low, value), max(high, value)
    verdict = Verdict.of(low, high) if len(per) >= MIN_SESSIONS else Verdict.FEW_SESSIONS
    before = None
    if len(pairs) > MIN_SESSIONS:
        earlier = replicate(pairs[:-1], scale, seed)
        before = earlier.interval if earlier is not None else None
    return Replicated(value, (low, high), verdict, tuple(per), before)


def _disagreeing(verdict: Verdict, sessions: list[str]) -> str:
    """`faster alone in 11-30 13:37`: one disagreeing session named; several counted
    (the quick page names each)."""
    if len(sessions) == 1:
        return f"{verdict.value} alone in {sessions[0]}"
    return f"{len(sessions)} {verdict.value} alone"


def sessions_said(found: Replicated) -> str:
    """`3 sessions: 0.95–1.27x`, the range of the sessions' own ratios (each session's is
    on the quick page), with the disagreeing sessions named (or, several, counted)."""
    values = [f"{s.value:.2f}" for s in found.sessions]
    low, high = min(values, key=float), max(values, key=float)
    n = len(found.sessions)
    if n == 1:
        return "1 session"  # its ratio is the claim's own
    text = f"{n} sessions: {low if low == high else f'{low}–{high}'}x"
    others = found.disagree()
    if others and n >= MIN_SESSIONS:
        by: dict[Verdict, list[str]] = {}
        for s in others:
            by.setdefault(s.verdict, []).append(s.short)
        text += "; " + "; ".join(_disagreeing(v, w) for v, w in by.items())
    return text
