"""Table helpers shared by the report, the explanation study and the projection: number
formatting and markdown from a DataFrame. Nothing here reads records or measures."""

import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..study.rec import Rec
from ..study.studies import Table
from .loss import trained, trained_limit

# Markdown that text could start: emphasis, code, table cells, links and images (a `]`
# right before `(`), `_` only where it can open or close emphasis (not in `shard_map`).
_MARKDOWN = re.compile(r"[\\`*|]|\](?=\()|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def escape(value: Any) -> str:
    """Text from a record (an error, a name, a version, a machine) as inert text for
    markdown that is rendered to HTML: markdown's special characters are
    backslash-escaped and HTML's become entities, so that no record can put markup (a
    script, an image, a link, emphasis, a table cell) into a table, the report or the
    README."""
    text = _MARKDOWN.sub(lambda m: "\\" + m.group(0), str(value))
    return html.escape(text, quote=False)


def loss_cell(r: dict[str, Any]) -> str:
    """A row's final loss, marked where its model did not reach its trained loss
    (`frames.trained`)."""
    rec = Rec(r)  # any record-like dict (the explanation studies' rows too)
    text = fmt(rec.final_loss)
    if ("status" not in rec or rec.ok) and rec.final_loss is not None and not trained(r):
        limit = trained_limit(r)
        text += f" (above {limit:g}: not trained)" if limit is not None else " (not trained)"
    return text


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
    """A GitHub markdown table of `table`'s cells and headers, each escaped (`escape`:
    they hold record text) and not re-parsed as numbers."""
    cells = table.astype(str).apply(lambda col: col.map(escape))
    cells.columns = [escape(c) for c in cells.columns]
    return cells.to_markdown(index=False, disable_numparse=True)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`markdown(frame(header, rows))`: a markdown table from a header and rows."""
    return markdown(frame(header, rows))


def table_value(name: str, markdown: str, figures: Sequence[Path] = ()) -> Table:
    """A table a report module rendered as `markdown` (its `# title` line, a blank line,
    then its body), as a value: `name`, the title, the body as rendered (`Table.text`,
    which the pages render) and the `figures` drawn with it."""
    head, _, body = markdown.partition("\n")
    return Table(
        name, head.lstrip("#").strip(), text=body.removeprefix("\n"), figures=tuple(figures)
    )


def table_markdown(table: Table) -> str:
    """`table` as its file `figures/tables/<name>.md` holds it: its `# title`, then the
    markdown its report module rendered (the same text `table_value` was given), or its
    rows and notes."""
    body = table.text if table.text else render_body(table)
    return f"# {table.title}\n\n{body}"


def render_body(table: Table) -> str:
    """`table` below its title, as markdown: the text its report module rendered
    (`Table.text`, without its blank lines around), else its rows (cells escaped) and
    notes, or one line where it has no rows."""
    if table.text:
        return table.text.strip() + "\n"
    body = markdown_table(table.header, table.rows) if table.rows else "No rows yet."
    return "\n".join([body, ""] + ([table.notes, ""] if table.notes else []))
