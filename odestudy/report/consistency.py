"""No two claims about one comparison disagree unless their sessions do: two claims
(`study.claim.Claim`) of the same `Comparison` that state different values, intervals,
verdicts or loss flags must each name their sessions, and not the same ones. The
report checks every claim it states (`check`) and writes nothing that fails."""

import itertools
from collections.abc import Sequence

from ..study.claim import Claim, Comparison


class InconsistentClaims(ValueError):
    """Two claims about one comparison disagree without naming sessions that differ."""


def _said(claim: Claim) -> tuple:
    return (claim.stated(), claim.verdict, claim.flagged)


def _where(claim: Claim) -> str:
    value, low, high = claim.stated()
    sessions = "; ".join(claim.sessions) or "no session named"
    return f"{value}x [{low}, {high}] {claim.verdict.value} ({claim.where}: {sessions})"


def _what(c: Comparison) -> str:
    return (
        f"{c.problem} {c.workload}, {c.controller} {c.mode} on {c.devices} devices "
        f"({c.step}) over {c.baseline}, {c.machine}"
    )


def conflicts(claims: Sequence[Claim]) -> list[str]:
    """Every pair of `claims` about one comparison that state it differently (value,
    interval, verdict or loss flag) where either names no session or both name the same
    sessions; and every pair that counts the same sessions' agreement differently."""
    by: dict[Comparison, list[Claim]] = {}
    for claim in claims:
        by.setdefault(claim.comparison, []).append(claim)
    found = []
    for comparison, said in by.items():
        for a, b in itertools.combinations(said, 2):
            same = bool(a.sessions) and set(a.sessions) == set(b.sessions)
            if _said(a) != _said(b) and (same or not a.sessions or not b.sessions):
                found.append(f"{_what(comparison)}: {_where(a)} against {_where(b)}")
            elif same and None not in (a.agreement, b.agreement) and a.agreement != b.agreement:
                found.append(f"{_what(comparison)}: two session counts, {a.where}, {b.where}")
    return found


def check(claims: Sequence[Claim]) -> None:
    """Raise `InconsistentClaims` naming every conflict among `claims` (`conflicts`)."""
    found = conflicts(claims)
    if found:
        raise InconsistentClaims("claims disagree:\n" + "\n".join(found))
