"""Tables as markdown: number formatting, cells escaped, and the one renderer of a
`Table` (`render`), for its file, the pages and the report notebook. Nothing here reads
records or measures."""

import html
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..study.rec import Rec
from ..study.studies import Block, Interval, Table, Text
from .intervals import fmt_interval
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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table of `rows` under `header`, each cell escaped (`escape`: they
    hold record text) and not re-parsed as numbers; an `Interval` as `1.80 [1.62, 1.95]`."""
    cells = pd.DataFrame([[_cell(c) for c in r] for r in rows], columns=list(header))
    cells = cells.astype(str).apply(lambda col: col.map(escape))
    cells.columns = [escape(c) for c in cells.columns]
    return cells.to_markdown(index=False, disable_numparse=True)


def _cell(value: Any) -> Any:
    if isinstance(value, Interval):
        return fmt_interval(value.value, value.low, value.high, value.decimals)
    return value


def render_blocks(blocks: Sequence[Block]) -> str:
    """Blocks as markdown, a blank line between them, ending with a newline."""
    md = (b.markdown if isinstance(b, Text) else markdown_table(b.header, b.rows) for b in blocks)
    text = "\n\n".join(md)
    return text if text.endswith("\n") else text + "\n"


def render_body(table: Table) -> str:
    """`table`'s blocks as markdown (`render_blocks`)."""
    return render_blocks(table.body)


def render(table: Table, level: int = 1) -> str:
    """`table` as markdown (its file `<name>.md`, or a page's section at `level`): its
    title as a heading, then its body."""
    return f"{'#' * level} {escape(table.title)}\n\n{render_body(table)}"
