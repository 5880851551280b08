"""Whether two records trained the same model, and whether one trained at all: the rules
every table applies to the final losses behind a ratio."""

import enum
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..measure.problem import DEFAULT_PROBLEM
from ..study import records
from ..study.rec import LeverRow, LossSpread, Rec
from . import sessions
from .intervals import fmt_interval

# The evaluation loss a row must reach to count as a trained model, per scale, where a
# record does not say itself (`trained`): rows above it are marked and not cited.
TRAINED_LOSS = {"quick": 0.02}
# The fewest training seeds a loss spread is measured over to count.
MIN_SEEDS = 4
# The mark of a ratio between two rows trained to different losses, and its note.
MARK = "‡"
NOTE = (
    f"{MARK}: the two rows' final losses differ by more than the run-to-run spread of the "
    "final loss measured for their workload on their machine (`benchmarks/loss_spread.py`, "
    f"at least {MIN_SEEDS} seeds): the ratio compares different models."
)
# The mark of a ratio whose workload's loss spread was not measured on its machine.
UNMEASURED = "°"
UNMEASURED_NOTE = (
    f"{UNMEASURED}: the run-to-run spread of the final loss was not measured for this "
    f"workload on this machine (at least {MIN_SEEDS} seeds): whether the two rows trained "
    "the same model is not known, so the ratio is not said to be at equal loss."
)


class Verdict(enum.Enum):
    """Whether two rows trained the same model: their final losses within the spread
    measured for their workload on their machine, outside it, or no spread measured."""

    SAME = "same"
    DIFFERENT = "different"
    UNMEASURED = "not measured"


def trained(r: dict[str, Any]) -> bool:
    """Whether record `r` trained: its own `trained` field where it has one, else a
    final loss at or below its scale's `TRAINED_LOSS` (scales without one: always)."""
    if r.get("trained") is not None:
        return bool(r["trained"])
    limit = TRAINED_LOSS.get(r.get("scale") or "")
    return limit is None or (r.get("final_loss") is not None and r["final_loss"] <= limit)


def trained_limit(r: dict[str, Any]) -> float | None:
    """The evaluation loss record `r` had to reach (`trained`): its own `trained_loss`,
    else its scale's `TRAINED_LOSS` (None where there is none)."""
    if r.get("trained_loss") is not None:
        return float(r["trained_loss"])
    return TRAINED_LOSS.get(r.get("scale") or "")


def model_of(r: dict[str, Any]) -> tuple:
    """What a loss spread is measured for: the machine, scale, controller, problem and
    field width of record (or flat row) `r`."""
    scenario = r.get("scenario") or {}

    def get(key: str) -> Any:
        return r.get(key) if r.get(key) is not None else scenario.get(key)

    return (
        r.get("machine_id"),
        get("scale"),
        get("controller"),
        get("problem") or DEFAULT_PROBLEM,
        get("width"),
    )


def _spread_records(folder: Path, step: str = "default") -> list[LossSpread]:
    """The loss-spread records of machine folder `folder` of `step` (the default step's
    spread, or the recommended step trained from the same seeds) measured over at least
    `MIN_SEEDS` seeds."""
    out = []
    for path in sorted(Path(folder, "levers").glob("loss-spread-*.json")):
        try:
            rec = LossSpread(records.read_json(path))
            if (rec.get("step") or "default") != step:
                continue
            if len(rec.rows) >= MIN_SEEDS and "spread_relative" in rec:
                out.append(rec)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def results_root(rec: Mapping[str, Any]) -> Path | None:
    """The results tree the record `rec` lies in (`sessions.results_tree` of its `path`)."""
    return sessions.results_tree(rec["path"]) if rec.get("path") else None


def _spread_folders(root: str) -> list[Path]:
    """The machine folders under `root` with loss spreads (the map's machines included)."""
    return sorted({p.parent.parent for p in Path(root).glob("**/levers/loss-spread-*.json")})


@functools.cache
def _tree_spreads(root: str) -> dict[tuple, float]:
    """Every loss spread measured under `root`, by what it was measured for (`model_of`)."""
    return {
        model_of(rec): float(rec.spread_relative)
        for folder in _spread_folders(root)
        for rec in _spread_records(folder)
    }


def limit_for(rec: dict[str, Any]) -> float | None:
    """How far apart `rec`'s final loss and another's may be for one model: 1 plus the
    run-to-run spread measured for its workload on its machine (`model_of`) in its
    results tree (`results_root`); None where none was measured."""
    root = results_root(rec)
    return None if root is None else spread_limit(root, rec)


def spread_limit(root: str | Path, r: dict[str, Any]) -> float | None:
    """1 plus the spread measured under results tree `root` for what record (or row)
    `r` trains (`model_of`), or None where none was measured."""
    spread = _tree_spreads(str(root)).get(model_of(r))
    return None if spread is None else 1.0 + spread


def in_record(rec: Mapping[str, Any], row: Mapping[str, Any]) -> LeverRow:
    """A variant's row of a levers record with the record's machine, scenario and path:
    what `verdict` needs to find the spread for it."""
    context = {k: rec.get(k) for k in ("machine_id", "scenario", "path")}
    return LeverRow({**context, **row})


def _measured(
    a: dict[str, Any], b: dict[str, Any] | float | None
) -> tuple[float, float, float] | None:
    """`a`'s and `b`'s final losses and how far apart they may be (`limit_for`); None
    where a loss or the spread is unknown."""
    limit = limit_for(a)
    la, lb = (x.get("final_loss") if isinstance(x, dict) else x for x in (a, b))
    return None if limit is None or not la or not lb else (la, lb, limit)


def verdict(a: dict[str, Any], b: dict[str, Any] | float | None) -> Verdict:
    """THE test of equal losses, used by every table, range and claim: whether record
    (or row) `a` and record `b` (or a bare final loss) trained the same model, by the
    spread measured for `a`'s workload on its machine (`limit_for`)."""
    found = _measured(a, b)
    if found is None:
        return Verdict.UNMEASURED
    la, lb, limit = found
    return Verdict.DIFFERENT if max(la, lb) / min(la, lb) > limit else Verdict.SAME


def differs(a: dict[str, Any], b: dict[str, Any] | float | None) -> bool:
    """Whether `a` and `b` trained different models (`verdict`)."""
    return verdict(a, b) is Verdict.DIFFERENT


# The loss rule's margin: a step is not worse than the default where its final loss,
# seed for seed, is at most this much above the default's (`non_inferior`).
MARGIN = 0.10


def non_inferior(variant: LossSpread, default: LossSpread) -> bool | None:
    """Whether a step trains a model not worse than the default's: both trained from the
    same seeds (at least `MIN_SEEDS` pairs), the one-sided 95% upper bound of the mean
    log ratio of their final losses at most `log(1 + MARGIN)`. A step that trains better
    passes. None with fewer pairs."""
    by_seed = {r["seed"]: r["final_loss"] for r in default.rows}
    pairs = [(r["final_loss"], by_seed[r["seed"]]) for r in variant.rows if r["seed"] in by_seed]
    if len(pairs) < MIN_SEEDS:
        return None
    import scipy.stats  # here, not at the top: about a quarter of the package's import time

    logs = np.log([v / d for v, d in pairs])
    t95 = scipy.stats.t.ppf(0.95, len(logs) - 1)  # one-sided 95%
    upper = logs.mean() + t95 * logs.std(ddof=1) / np.sqrt(len(logs))
    return bool(upper <= np.log1p(MARGIN))


@functools.cache
def _paired(root: str) -> dict[tuple, bool | None]:
    """Every non-inferiority verdict measured under `root`: by what the default was
    measured for (`model_of`), the recommended step against the default from the same
    seeds."""
    out: dict[tuple, bool | None] = {}
    for folder in _spread_folders(root):
        defaults = {model_of(r): r for r in _spread_records(folder)}
        for rec in _spread_records(folder, "recommended"):
            found = defaults.get(model_of(rec))
            if found is not None:
                out[model_of(rec)] = non_inferior(rec, found)
    return out


def paired_verdict(rec: dict[str, Any]) -> bool | None:
    """The non-inferiority verdict (`non_inferior`) measured for `rec`'s workload and
    its recommended step on its machine, in its results tree; None where not measured."""
    root = results_root(rec)
    return None if root is None else _paired(str(root)).get(model_of(rec))


def worse(a: dict[str, Any], b: dict[str, Any] | float | None) -> bool:
    """Whether `a` trained a worse model than `b`: its final loss above `b`'s by more
    than the spread measured for `a`'s workload (`limit_for`). One-sided: a variant that
    trains better is never worse; where no spread was measured, not known (False)."""
    found = _measured(a, b)
    return found is not None and found[0] / found[1] > found[2]


def same(a: dict[str, Any], b: dict[str, Any] | float | None) -> bool:
    """Whether `a` and `b` trained the same model by the measured spread (`verdict`):
    only then may a ratio of the two be said to be at equal loss."""
    return verdict(a, b) is Verdict.SAME


def flag(text: str, a: dict[str, Any], b: dict[str, Any] | float | None) -> str:
    """`text` (a ratio of `a` and `b`) with `MARK` where they trained different models,
    `UNMEASURED` where no spread says (`verdict`)."""
    v = verdict(a, b)
    if v is Verdict.DIFFERENT:
        return f"{text} {MARK}"
    return f"{text} {UNMEASURED}" if v is Verdict.UNMEASURED else text


def baseline_flag(text: str, row: dict[str, Any]) -> str:
    """`text` (a scaling row's speedup) flagged (`flag`) against its 1-device baseline's
    final loss."""
    return flag(text, row, row.get("baseline_final_loss"))


def speedup_cell(row: Rec) -> str:
    """A scaling row's speedup with its interval, flagged (`baseline_flag`)."""
    return baseline_flag(fmt_interval(row.speedup, *(row.speedup_ci or (None, None))), row)


# A ratio of two records, flagged (`flag`).
pair_mark = flag


def notes(text: str) -> list[str]:
    """The notes of the marks `text` holds (`NOTE`, `UNMEASURED_NOTE`)."""
    return [n for m, n in ((MARK, NOTE), (UNMEASURED, UNMEASURED_NOTE)) if m in text]
