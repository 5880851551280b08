"""The pages a person opens: one results page per study under `docs/results/` (markdown,
answer first) and its HTML rendering, and the README's generated answer. Every page and
region written here lies between `GENERATED_START` and `GENERATED_END`: a line outside
such a region is hand-written and holds no measured number (`tests/test_docs_claims.py`).
"""

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..study.rec import Rec
from ..study.studies import Figure, Page, Table, pages_of
from . import loss
from .answer import README_SCALE, gpu_bound_line, readme_answer, session_table
from .by_session import render_sessions
from .claims import render_claims
from .document import report_rows, write_text
from .findings import Findings, findings
from .predicted import predict_sample
from .tables import render
from .tuned import tune_sample

GENERATED_START = "<!-- generated:start (odestudy report writes this from the records) -->"
GENERATED_END = "<!-- generated:end -->"
# A markdown image: `![alt](path)`.
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def generated(body: str) -> str:
    """`body` between the generated-region markers."""
    return f"{GENERATED_START}\n\n{body.strip()}\n\n{GENERATED_END}"


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()


def page_figures(spec: Page, figures: Path) -> list[Figure]:
    """The figures of page `spec` drawn into `figures` (`<name>.png`), in its order."""
    found = [Figure(f, figures / f"{f}.png", f) for f in spec.figures]
    return [f for f in found if f.path.exists()]


def render_figure(figure: Figure, base: Path) -> str:
    """`figure` as a markdown image, its path relative to `base` (the page's folder)."""
    return f"![{figure.alt}]({_rel(figure.path, base)})"


def page(
    spec: Page,
    figures: Path,
    docs: Path,
    lead: Sequence[str] = (),
    tables: Mapping[str, Table] | None = None,
) -> str:
    """The markdown of page `spec`: its title, `lead` (the answer, or a study's intro),
    figures, then its tables among `tables`, or one line where it has no rows yet."""
    out = docs / "results"
    found = tables or {}
    shown = [found[t] for t in spec.tables if t in found]
    parts = [f"# {spec.title}", ""]
    if not shown and not lead:
        first = figures / "tables" / f"{next(iter(spec.tables), spec.name)}.md"
        parts += [
            f"No rows yet: no record of this study has been measured "
            f"(`{_rel(first, docs.parent)}` is written from its records).",
        ]
        return generated("\n".join(parts))
    parts += [*lead, ""] if lead else []
    parts += [render_figure(f, out) + "\n" for f in page_figures(spec, figures)]
    for t in shown:
        parts += [render(t, 2).strip() + "\n", ""]
    # Every mark the page uses is defined on it.
    marks = [n for n in loss.notes("\n".join(parts)) if n not in "\n".join(parts)]
    parts += [*(line for n in marks for line in (n, "")),
        "How to read the tables, and how the runs and intervals are made: "
        f"[the method]({_rel(docs / 'method.md', out)}).",
    ]  # fmt: skip
    return generated("\n".join(parts))


def render_html(markdown: str, html: Path, base: Path) -> Path:
    """`markdown` as an HTML page (`study.runner.html_exporter`), its images (paths
    relative to `base`) embedded, written atomically to `html`."""
    import nbformat  # nbconvert and nbformat are slow to import: only when rendering

    from ..study.runner import html_exporter  # the exporter pulls in nbconvert

    images = [(base / m.group(2)).resolve() for m in IMAGE.finditer(markdown)]
    # nbconvert embeds only files under the path it is given: their common folder.
    root = Path(os.path.commonpath([base.resolve(), *images]))
    markdown = IMAGE.sub(lambda m: f"![{m.group(1)}]({_rel(base / m.group(2), root)})", markdown)
    nb = nbformat.v4.new_notebook()
    # A fixed cell id: the page is the same file whenever its markdown is the same.
    nb.cells = [nbformat.v4.new_markdown_cell(markdown, id="page")]
    exporter = html_exporter()
    exporter.embed_images = True
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"path": str(root)}})
    return write_text(html, body)


def write_pages(
    results: str | Path,
    scale: str,
    figures: str | Path,
    docs: str | Path,
    found: Findings | None = None,
    tables: Mapping[str, Table] | None = None,
) -> dict[str, Path]:
    """Write the results pages of `scale` (`studies.pages_of`) under `docs/results/` and
    their HTML under `figures/pages/`, from the report's `tables` by name and its
    statements (`found`: made here where None); returns the pages."""
    figures, docs = Path(figures), Path(docs)
    rows = report_rows(results, scale)[2]
    found = findings(results, scale, rows) if found is None else found
    written = {}
    for spec in pages_of(scale):
        answer = []
        if spec.answer:
            answer = ["## The answer", ""]
            if scale == README_SCALE:  # the README's answer, against the best 1-device step
                crossover = figures / "crossover.png"
                answer += readme_answer(results, rows, crossover, docs / "results", found.readme)
                answer += session_table(found.readme) + gpu_bound_line(results)
            # The `shard` PID row session by session, with each session's probe.
            by_session = render_sessions(found.by_session, "shard", "pid", 2)
            answer += [DEFAULT_HEAD, "", *render_claims(found.answers), *by_session]
        text = page(spec, figures, docs, answer, tables)
        md = write_text(docs / "results" / f"{spec.name}.md", text)
        render_html(text, figures / "pages" / f"{spec.name}.html", md.parent)
        written[spec.name] = md
    return written


# The heading of a page's claims about the default step, each mode against its own
# 1-device row: the reference's comparison, kept beside the answer.
DEFAULT_HEAD = "**With the default step (the reference's), each mode over its own 1-device row**"


def fill(text: str, region: str, body: str) -> str:
    """`text` with the generated region named `region` (`<!-- region:NAME -->` then the
    generated markers) holding `body`."""
    anchor = f"<!-- region:{region} -->"
    if anchor not in text:
        raise ValueError(f"no {anchor!r} in the file to fill")
    start = text.index(anchor) + len(anchor)
    if text[start:].lstrip().startswith(GENERATED_START):
        end = text.index(GENERATED_END, start) + len(GENERATED_END)
    else:
        end = start
    return text[:start] + "\n" + generated(body) + text[end:]


def update_readme(
    readme: str | Path,
    results: str | Path,
    figures: str | Path,
    rows: Sequence[Rec] | None = None,
    found: Findings | None = None,
) -> Path:
    """Write the README's answer (`<!-- region:answer -->`, `answer.readme_answer`) from
    the `README_SCALE` rows and statements (`rows`, `found`: made here where None)."""
    readme, figures = Path(readme), Path(figures)
    rows = report_rows(results, README_SCALE)[2] if rows is None else rows
    found = findings(results, README_SCALE, rows) if found is None else found
    body = readme_answer(results, rows, figures / "crossover.png", readme.parent, found.readme)
    linked = [f"[{p.readme}](docs/results/{p.name}.md)" for p in pages_of(README_SCALE) if p.readme]
    body += [f"Written by `make report` from the committed records. Pages: {', '.join(linked)}."]
    text = fill(readme.read_text(), "answer", "\n".join(body))
    return write_text(readme, text)


def update_own_model(page: str | Path, results: str | Path) -> Path | None:
    """Write `docs/own_model.md`'s samples of `odestudy tune` and `odestudy predict`
    (`<!-- region:tune-sample -->`, `tuned.tune_sample`; `<!-- region:predict-sample -->`,
    `predicted.predict_sample`) from the records; nothing where the docs have no such page."""
    page = Path(page)
    if not page.exists():
        return None
    text = fill(page.read_text(), "tune-sample", "\n".join(tune_sample(results)))
    return write_text(page, fill(text, "predict-sample", "\n".join(predict_sample(results))))
