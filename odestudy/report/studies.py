"""A study's own report: its records read once (`Study.records`, as a `ReportInputs`
value), its tables made once from them (`Study.tables`, `Table` values), rendered as markdown under
`figures/tables/` and as its results page under `docs/results/` (between the generated
markers). `odestudy report --study NAME_OR_MODULE:CLASS` writes it."""

from pathlib import Path

from ..study.matrix import get_study
from ..study.studies import ReportInputs, Study, Table
from .pages import GENERATED_END, GENERATED_START
from .tables import escape, render


def render_page(study: Study, tables: list[Table], scale: str) -> str:
    """`study`'s results page: its title and scale, its intro, each table."""
    head = f"# {escape(study.title or study.name)} ({escape(scale)} scale)"
    intro = [study.intro(scale), ""] if study.intro(scale) else []
    return "\n".join([head, "", *intro, *(render(t, 2) for t in tables)])


def write_study_report(
    study: "str | Study",
    results: str | Path,
    scale: str,
    figures: str | Path,
    docs: str | Path | None = None,
) -> list[Path]:
    """Write `study`'s tables (`<figures>/tables/<table>.md`) and, with `docs`, its page
    (`<docs>/results/<study>.md`); returns the paths written. A study whose page the
    whole report writes (`Study.page`) is refused: this would write over it."""
    found = get_study(study)
    if found.page is not None:
        raise ValueError(
            f"the {found.name} study's tables and page ({found.page.name}) are the whole "
            "report's: odestudy report without --study writes them"
        )
    read = tuple(found.records(results, scale))
    tables = found.tables(ReportInputs(Path(results), scale, Path(figures), records=read))
    out = []
    folder = Path(figures) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    for table in tables:
        path = folder / f"{table.name}.md"
        path.write_text(render(table))
        out.append(path)
    if docs is not None:
        page = Path(docs) / "results" / f"{found.name}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        text = render_page(found, tables, scale)
        page.write_text(f"{GENERATED_START}\n\n{text}\n{GENERATED_END}\n")
        out.append(page)
    return out
