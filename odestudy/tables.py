"""Table helpers shared by the report, the explanation study and the projection: number
formatting and markdown from a DataFrame. Nothing here reads records or measures."""

from collections.abc import Sequence
from typing import Any

import pandas as pd


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: floats to `digits` significant digits (large ones whole), None as
    an en dash, anything else as text."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def frame(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """A DataFrame of table cells with the columns `header`."""
    return pd.DataFrame([list(r) for r in rows], columns=list(header))


def markdown(table: pd.DataFrame) -> str:
    """A GitHub markdown table of `table`'s cells as they are (text is not re-parsed
    as numbers; a `|` inside a cell becomes `/`)."""
    cells = table.astype(str).apply(lambda col: col.str.replace("|", "/", regex=False))
    return cells.to_markdown(index=False, disable_numparse=True)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`markdown(frame(header, rows))`: a markdown table from a header and rows."""
    return markdown(frame(header, rows))
