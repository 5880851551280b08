"""Whether a prediction was held out: made before the measured rows it is checked
against (their first run started after it was written), or in-sample (made after them,
from rows of the same session). Every checked error names its prediction model and says
which."""

import datetime
from collections.abc import Iterable, Sequence
from typing import Any


def _time(text: Any) -> datetime.datetime | None:
    try:
        t = datetime.datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def made_before(prediction: dict[str, Any], rows: Iterable[dict[str, Any]]) -> bool | None:
    """Whether `prediction` (its `finished`) was written before every record of `rows`
    started; None where a time is unknown."""
    made = _time(prediction.get("finished"))
    starts = [_time(r.get("started")) for r in rows]
    if made is None or not starts or any(s is None for s in starts):
        return None
    return all(made < s for s in starts if s is not None)


def said(checked: Sequence[dict[str, Any]]) -> str:
    """How a set of checked errors (each with `model` and `before`) was made: `prediction
    model 5; made before the rows`, `...; in-sample (made after the rows)`, or how many
    of each (those of unknown model or time said so)."""
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
