"""One `odestudy report` from one read of the records: its tables and figures, its claims
checked, its pages and the README's answer. The report notebook calls it, and renders
what it returns."""

from pathlib import Path

from ..study import records
from .answer import README_SCALE
from .consistency import check
from .document import Report, report_studies, write_report
from .findings import findings
from .pages import update_own_model, update_readme, write_pages
from .reference import REFERENCE_CSV


def publish(
    results: str | Path,
    scale: str,
    figures: str | Path,
    docs: str | Path | None = None,
    readme: str | Path | None = None,
    reference: str | Path = REFERENCE_CSV,
    draw: bool = True,
) -> Report:
    """Write the report of `scale` from the records under `results`, each read once:
    its tables and figures under `figures`, with `docs` its results pages, with `readme`
    the README's answer. Every report study's claims (`stated`) are checked to agree
    (`consistency.check`) before a page or the README is written from them."""
    with records.read_once():
        report = write_report(results, scale, figures, reference, draw)
        stated = [c for study in report_studies() for c in study.claims(report.inputs)]
        check(stated)
        found = findings(results, scale, report.rows)
        report.update(findings=found, claims=list(found.answers), stated=stated)
        if docs is not None:
            report.pages = write_pages(results, scale, figures, docs, found, report["values"])
            update_own_model(Path(docs) / "own_model.md", results)
        if readme is not None:
            at = scale == README_SCALE
            rows, mine = (report.rows, found) if at else (None, None)
            report.readme = update_readme(readme, results, figures, rows, mine)
    return report
