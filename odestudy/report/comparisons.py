"""Claims from scaling rows (`frames.scaling_rows`): a multi-device row against a baseline
as a `Claim` value (`study.claim`), its `Comparison` named by what the row and its
baseline share, and its text rendered from the value alone."""

import hashlib
import json
from typing import Any

from ..measure.scenario import Scenario
from ..study.claim import Agreement, Claim, Comparison, Verdict
from ..study.rec import Rec
from . import loss, sessions
from .best import step_of
from .frames import JOIN_EXCLUDES, record_problem
from .verdict import one_run

# What a comparison's baseline is, in words.
OWN_STEP = "its own step on one device"
BEST_STEP = "the best 1-device step"
REFERENCE_STEP = "the reference's step on one device"

# Scenario fields that place a row or choose its step: not part of its workload.
FREE = frozenset((*JOIN_EXCLUDES, "nodes", "controller", *Scenario.levers()))


def workload(row: Rec) -> str:
    """What fixes a row's model and data besides its controller, placement and step: its
    scale, width and global batch in words, and a short hash of every other scenario
    field (`FREE` aside)."""
    fields = {k: v for k, v in row.fields.items() if k not in FREE}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()
    width = row.fields.width or Scenario.__dataclass_fields__["width"].default
    return f"{row.scale} scale, width {width}, batch {row.global_batch} ({digest[:8]})"


def comparison(row: Rec, baseline: str) -> Comparison:
    """The comparison of multi-device `row` against `baseline` (`OWN_STEP`, ...)."""
    return Comparison(
        problem=record_problem(row),
        workload=workload(row),
        controller=str(row.controller),
        mode=str(row.mode),
        devices=int(row.n_devices),
        step=str(row.step or step_of(row)),
        baseline=baseline,
        machine=str(row.machine_id),
        scaling=str(row.scaling or "strong"),
    )


def row_sessions(row: Rec, *others: dict[str, Any] | None) -> tuple[str, ...]:
    """The labels of the sessions a ratio of `row` draws on: its own, its 1-device
    baseline's (`baseline_session`) and those of `others` (another baseline record)."""
    found = [sessions.session_of(row), row.baseline_session]
    found += [sessions.session_of(o) for o in others if o is not None]
    return tuple(dict.fromkeys(s.label for s in found if isinstance(s, sessions.Session)))


def own_claim(row: Rec, where: str, agreement: Agreement | None = None) -> Claim:
    """`row`'s speedup over its own step's 1-device row as a claim."""
    assert row.speedup is not None and row.speedup_ci is not None
    ratio = (row.speedup, *row.speedup_ci)
    flagged = loss.differs(row, row.baseline_final_loss)
    return ratio_claim(row, None, OWN_STEP, ratio, where, flagged, agreement)


def ratio_claim(
    row: Rec,
    base: dict[str, Any] | None,
    baseline: str,
    ratio: tuple[float, float, float],
    where: str,
    flagged: bool,
    agreement: Agreement | None = None,
) -> Claim:
    """`row` against another 1-device record `base` (`baseline` in words): `ratio` is
    the speedup and its interval."""
    value, low, high = ratio
    return Claim(
        comparison(row, baseline),
        float(value),
        (float(low), float(high)),
        Verdict.of(low, high, one_run(row)),
        row_sessions(row, base),
        agreement,
        flagged,
        where,
    )


def render_x(claim: Claim) -> str:
    """`1.57x [1.49, 2.16]`, with `loss.MARK` where the claim is flagged."""
    value, low, high = claim.stated()
    text = f"{value:.2f}x [{low:.2f}, {high:.2f}]"
    return f"{text} {loss.MARK}" if claim.flagged else text
