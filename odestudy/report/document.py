"""One read of the records (`read_inputs`, a `ReportInputs` value), and the tables and
figures of every registered study with a page made from it and written
(`write_report`)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..measure import environment
from ..measure.timing import PROTOCOL
from ..study.rec import Key, Rec
from ..study.runner import html_exporter
from ..study.studies import STUDIES, ReportInputs, Study, Table
from .device_tables import _protocol, pick_machine
from .frames import in_scaling_matrix, read_records, scaling_rows
from .reference import REFERENCE_CSV
from .tables import render, render_body


def report_rows(
    results: str | Path, scale: str
) -> tuple[list[Rec], dict[str, str], list[Rec], list[tuple[str, str]]]:
    """Every current record of `scale`, the machine chosen per device kind, the scaling
    rows of the chosen machines under the current protocol, and the records left out."""
    skipped: list[tuple[str, str]] = []
    every = read_records(results, scale, current=True, skipped=skipped)
    here = environment.machine_id(environment.this_machine())
    chosen = {d: pick_machine(every, d) or here for d in ("cpu", "gpu")}
    mine = [r for r in every if chosen[str(r.device)] == r.machine_id]
    # The scaling tables hold one protocol, the current one: a record of an older one
    # (`timing.PROTOCOL`) is listed as skipped, not set beside today's rows.
    older = [r for r in mine if in_scaling_matrix(r) and r.protocol != PROTOCOL]
    skipped += [
        (str(r.path), f"older measurement protocol ({_protocol([r])}; now {PROTOCOL})")
        for r in older
    ]
    rows = scaling_rows([r for r in mine if in_scaling_matrix(r) and r not in older])
    return every, chosen, rows, skipped


def read_inputs(
    results: str | Path,
    scale: str,
    figures: str | Path,
    reference: str | Path = REFERENCE_CSV,
    draw: bool = True,
) -> ReportInputs:
    """What the report of `scale` reads, as one value (`report_rows`)."""
    every, chosen, rows, skipped = report_rows(results, scale)
    return ReportInputs(
        results=Path(results),
        scale=scale,
        figures=Path(figures),
        records=tuple(every),
        machines=chosen,
        rows=tuple(rows),
        skipped=tuple(skipped),
        reference=Path(reference),
        draw=draw,
    )


def report_studies() -> list[Study]:
    """Every registered study with a page, in the order registered."""
    return [c() for c in STUDIES.values() if c.page is not None]


def study_tables(inputs: ReportInputs) -> dict[str, Table]:
    """Each report study's tables, by name; ValueError where two make the same table."""
    out: dict[str, Table] = {}
    for study in report_studies():
        for table in study.tables(inputs):
            if table.name in out:
                raise ValueError(f"two studies make the table {table.name!r}")
            out[table.name] = table
    return out


def write_tables(tables: Sequence[Table], figures: Path) -> dict[str, Path]:
    """Write each table's markdown to `figures/tables/<name>.md`; the paths by name."""
    folder = figures / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    for table in tables:
        (folder / f"{table.name}.md").write_text(render(table))
    return {t.name: folder / f"{t.name}.md" for t in tables}


class Report(dict[str, Any]):
    """What `write_report` made: a dict, as the report notebook reads it."""

    __slots__ = ()

    rows: Key[list[Rec]] = Key()
    verdict: Key[str] = Key()
    headline: Key[Path | None] = Key()
    tables: Key[dict[str, Path]] = Key()
    figures: Key[list[Path]] = Key()
    skipped: Key[list[tuple[str, str]]] = Key()
    machines: Key[dict[str, str]] = Key()
    inputs: Key[ReportInputs] = Key()
    # Added by `publish.publish`.
    findings: Key[Any] = Key()
    claims: Key[list[Any]] = Key()
    stated: Key[list[Any]] = Key()
    pages: Key[Any] = Key()
    readme: Key[Path | None] = Key()


def write_report(
    results: str | Path,
    scale: str,
    figures: str | Path,
    reference: str | Path = REFERENCE_CSV,
    draw: bool = True,
) -> Report:
    """Read the records once, make every report study's tables and write them
    (`write_tables`); `draw`: also draw the figures (False: much faster)."""
    inputs = read_inputs(results, scale, figures, reference, draw)
    made = study_tables(inputs)
    written = write_tables(list(made.values()), inputs.figures)
    verdict = made.get("verdict", Table("verdict", "Verdict"))
    return Report(
        rows=list(inputs.rows),
        verdict=render_body(verdict),
        headline=next(iter(verdict.figures), None),
        tables=written,
        values=made,
        figures=[p for t in made.values() if t is not verdict for p in t.figures],
        skipped=list(inputs.skipped),
        machines=dict(inputs.machines),
        inputs=inputs,
    )


def settle_report(html: str | Path) -> Path:
    """Drop the run's clock times and the checkout's path from the executed report
    notebook beside `html` and render `html` again, so that rerunning the report on the
    same records, here or in a clone elsewhere, leaves both files unchanged."""
    import nbformat

    html = Path(html)
    executed = html.with_suffix(".ipynb")
    nb = nbformat.read(executed, 4)
    for number, cell in enumerate(nb.cells):
        cell.id = f"cell-{number:02d}"  # papermill gives its injected cell a random id
    for node in [nb, *nb.cells]:
        node.metadata.pop("execution", None)
        for key in ("start_time", "end_time", "duration"):
            node.metadata.get("papermill", {}).pop(key, None)
    # Paths inside this checkout relative to it: a clone elsewhere writes the same files.
    nb = nbformat.reads(nbformat.writes(nb).replace(f"{environment.ROOT}/", ""), 4)
    nbformat.write(nb, executed)

    body, _ = html_exporter().from_notebook_node(nb)
    return write_text(html, body)


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, ending with one newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text.rstrip() + "\n")
    tmp.replace(path)
    return path
