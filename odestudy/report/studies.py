"""A study's own report (`odestudy report --study NAME_OR_MODULE:CLASS`): its tables
under `figures/tables/` and its page under `docs/results/`, from its records read once."""

from pathlib import Path

from ..study.matrix import get_study
from ..study.studies import Page, ReportInputs, Study
from .document import write_tables, write_text
from .pages import page
from .tables import escape


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
    out = list(write_tables(tables, Path(figures)).values())
    if docs is not None:
        title = f"{escape(found.title or found.name)} ({escape(scale)} scale)"
        spec = Page(found.name, title, tuple(t.name for t in tables))
        intro = [found.intro(scale)] if found.intro(scale) else []
        text = page(spec, Path(figures), Path(docs), intro, {t.name: t for t in tables})
        out.append(write_text(Path(docs) / "results" / f"{found.name}.md", text))
    return out
