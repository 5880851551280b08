"""Whether two records trained the same model, and whether one trained at all: the rules
every table applies to the final losses behind a ratio."""

import functools
from pathlib import Path
from typing import Any

from ..study import records

# The evaluation loss a row must reach to count as a trained model, per scale, where a
# record does not say itself (`trained`): rows above it are marked and not cited.
TRAINED_LOSS = {"quick": 0.02}
# Final losses further apart than this factor are not "the same model" where the
# default's run-to-run spread over training seeds was not measured.
LOSS_FACTOR = 2.0
# The mark of a ratio between two rows trained to different losses, and its note.
MARK = "‡"
NOTE = (
    f"{MARK}: the two rows' final losses differ by more than the run-to-run spread of the "
    "final loss (`benchmarks/loss_spread.py`, or a factor `LOSS_FACTOR` where it was not "
    "measured): the ratio compares different models."
)


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


def spreads(folder: str | Path | None, scale: str) -> dict[str, float]:
    """Per controller, the default's relative run-to-run spread of the final loss at
    `scale` on one machine (`<machine>/levers/loss-spread-*.json`); empty where not
    measured."""
    if folder is None:
        return {}
    out = {}
    for path in sorted(Path(folder, "levers").glob("loss-spread-*.json")):
        try:
            rec = records.read_json(path)
            if rec["scenario"].get("scale") != scale:
                continue
            out[rec["scenario"]["controller"]] = float(rec["spread_relative"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def factor(controller: str | None, spread: dict[str, float] | None = None) -> float:
    """How far apart two final losses may be for one model: `1 + spread` of the
    controller where measured (and the scale is the one it was measured at), else
    `LOSS_FACTOR`."""
    if spread and controller in spread:
        return 1.0 + spread[controller]
    return LOSS_FACTOR


def results_root(path: str | Path) -> Path | None:
    """The results tree a record at `path` lies in: its nearest folder named `results`,
    else its machine's folder's parent (`<root>/<machine>/<scale>/<scenario>/x.json`);
    None where the path is too short."""
    p = Path(path)
    for parent in p.parents:
        if parent.name == "results":
            return parent
    return p.parents[3] if len(p.parents) > 3 else None


@functools.cache
def _tree_spreads(root: str, scale: str) -> dict[str, float]:
    """Per controller, the largest run-to-run spread of the final loss measured at
    `scale` on any machine under `root` (`*/levers/loss-spread-*.json`, the map's and the
    version sets' machines included): one value for every table and claim, whichever
    machine a row comes from."""
    out: dict[str, float] = {}
    folders = {p.parent.parent for p in Path(root).glob("**/levers/loss-spread-*.json")}
    for folder in sorted(folders):
        for controller, value in spreads(folder, scale).items():
            out[controller] = max(value, out.get(controller, 0.0))
    return out


def limit_for(rec: dict[str, Any]) -> float:
    """How far apart `rec`'s final loss and another's may be for one model: the factor
    (`factor`) of its controller from the largest loss spread measured at its scale on
    any machine of its results tree (`results_root`), else `LOSS_FACTOR`."""
    root = results_root(rec["path"]) if rec.get("path") else None
    if root is None:
        return LOSS_FACTOR
    spread = _tree_spreads(str(root), rec.get("scale") or "")
    return factor(rec.get("controller"), spread)


def _loss(x: dict[str, Any] | float | None) -> float | None:
    return x.get("final_loss") if isinstance(x, dict) else x


def differs(a: dict[str, Any], b: dict[str, Any] | float | None) -> bool:
    """THE test of unequal losses, used by every table and claim: whether record (or
    row) `a` and record `b` (or a bare final loss) trained to final losses further apart
    than `limit_for(a)`, so that a ratio of the two compares different models."""
    return unequal(_loss(a), _loss(b), limit_for(a))


def flag(text: str, a: dict[str, Any], b: dict[str, Any] | float | None) -> str:
    """`text` (a ratio of `a` and `b`) with `MARK` where they differ (`differs`)."""
    return f"{text} {MARK}" if differs(a, b) else text


def baseline_flag(text: str, row: dict[str, Any]) -> str:
    """`text` (a scaling row's speedup) with `MARK` where the row and its 1-device
    baseline trained to different losses (`differs`)."""
    return flag(text, row, row.get("baseline_final_loss"))


def pair_mark(text: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    """`text` (a ratio of records `a` and `b`), flagged as `flag` does."""
    return flag(text, a, b)


def unequal(a: float | None, b: float | None, limit: float = LOSS_FACTOR) -> bool:
    """Whether final losses `a` and `b` are more than `limit` times apart."""
    if not a or not b:
        return False
    return max(a, b) / min(a, b) > limit


def mark(text: str, a: float | None, b: float | None, limit: float = LOSS_FACTOR) -> str:
    """`text` with `MARK` where losses `a` and `b` are more than `limit` apart."""
    return f"{text} {MARK}" if unequal(a, b, limit) else text
