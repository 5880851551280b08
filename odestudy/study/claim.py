"""A claim is a value: one measured comparison, what it found and how many sessions agree.

A `Comparison` names what is compared (problem, workload, controller, mode, devices,
the step timed, the baseline, machine and scaling); a `Claim` holds its value and 95%
interval, its `Verdict`, the sessions its rows come from and how many of the sessions
that hold rows of the comparison agree (`Agreement`). The report makes claims once
from the records, renders them into the pages, the README and the report notebook,
and checks that no two claims about one comparison disagree without naming the
sessions that differ (`report.consistency`). An `Answer` is one device kind's claims
and the bullets rendered from them."""

import dataclasses
import enum


class Verdict(enum.Enum):
    """What a ratio's 95% interval says against its baseline: `FASTER` (above 1),
    `SLOWER` (below 1), `LEVEL` (holds 1: not separable), `ONE_RUN` (timed in one run:
    its interval backs no verdict), `FEW_SESSIONS` (measured in fewer sessions than a
    verdict over sessions needs: `report.replication.MIN_SESSIONS`)."""

    FASTER = "faster"
    SLOWER = "slower"
    LEVEL = "not separable"
    ONE_RUN = "one run"
    FEW_SESSIONS = "too few sessions"

    @classmethod
    def of(cls, low: float, high: float, one_run: bool = False) -> "Verdict":
        """The verdict of an interval `[low, high]` of a ratio over its baseline."""
        if one_run:
            return cls.ONE_RUN
        if low > 1:
            return cls.FASTER
        if high < 1:
            return cls.SLOWER
        return cls.LEVEL


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What one claim compares: a `mode` on `devices` devices against `baseline`.

    - `problem`, `workload`: the problem and what else fixes the model and its data
      (scale, width, batch: the 1-device default scenario's key and its words).
    - `controller`, `mode`, `devices`, `scaling`: the multi-device row's placement.
    - `step`: the step the row times (`best.step_of`); `baseline`: what it is set
      against (the default step on one device, the best 1-device step, ...).
    - `machine`: the machine id both were measured on.
    """

    problem: str
    workload: str
    controller: str
    mode: str
    devices: int
    step: str
    baseline: str
    machine: str
    scaling: str = "strong"


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How the sessions that hold rows of a claim's comparison judged it: `agree` of
    `answered` found the claim's verdict; `others` the sessions (their `when`) that found
    another, by verdict. The sessions are those of every machine whose records repeat the
    comparison's scenarios (its placement, controller and step at the same scale); a
    session without such rows is not counted."""

    agree: int
    answered: int
    others: tuple[tuple[Verdict, tuple[str, ...]], ...] = ()

    def said(self, verdict: Verdict) -> str:
        """`faster in 5 of 6 sessions with such rows, slower in 1 (2026-11-26 ...)`."""
        text = f"{verdict.value} in {self.agree} of {self.answered} sessions with such rows"
        for other, when in self.others:
            text += f"; {other.value} in {len(when)} ({', '.join(when)})"
        return text


@dataclasses.dataclass(frozen=True)
class Claim:
    """One measured claim: its `comparison`, `value` and 95% `interval`, its `verdict`,
    the `sessions` (labels) its rows come from, and where counted, how the sessions
    holding rows of the comparison judged it (`agreement`).

    - `flagged`: the row and its baseline trained to different final losses
      (`loss.MARK`).
    - `where`: the page or block that states it (for the consistency check's message).
    """

    comparison: Comparison
    value: float
    interval: tuple[float, float]
    verdict: Verdict
    sessions: tuple[str, ...]
    agreement: Agreement | None = None
    flagged: bool = False
    where: str = ""

    def stated(self) -> tuple[float, float, float]:
        """Its value and interval, as rendered (two decimals)."""
        return (round(self.value, 2), round(self.interval[0], 2), round(self.interval[1], 2))


@dataclasses.dataclass(frozen=True)
class Answer:
    """The answer of a study's report for one device kind, made once from the records:
    `device` (its kind), `claims` (the values it states), `bullets` (markdown rendered
    from them, each with its numbers, intervals, machine and sessions), or where there
    are none, `missing` (why, in a sentence)."""

    device: str
    bullets: tuple[str, ...] = ()
    missing: str = ""
    claims: tuple[Claim, ...] = ()
