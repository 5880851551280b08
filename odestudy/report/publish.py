"""One `odestudy report`, from one read of the records (`records.read_once`): the
report's tables and figures (`document.write_report`), its answer (`claims.answer_claims`:
`Claim` values, made once), the results pages that show them (`pages.write_pages`) and the README's
answer (`pages.update_readme`). The report notebook calls it, and renders what it
returns."""

from pathlib import Path
from typing import Any

from ..study import records
from ..study.claim import Answer, Claim
from .answer import readme_claims
from .claims import answer_claims, scale_records, session_claims, verdict_stated
from .consistency import check
from .document import write_report
from .pages import README_SCALE, update_readme, write_pages
from .reference import REFERENCE_CSV


def publish(
    results: str | Path,
    scale: str,
    figures: str | Path,
    docs: str | Path | None = None,
    readme: str | Path | None = None,
    reference: str | Path = REFERENCE_CSV,
    draw: bool = True,
) -> dict[str, Any]:
    """Write the report of `scale` from the records under `results`, each read once.

    - `figures`: the folder of its tables (`tables/`) and figures.
    - `docs`: the documentation folder whose results pages (`docs/results/`) it writes;
      None: no pages.
    - `readme`: the README whose answer it writes (the `README_SCALE` claims); None:
      none.
    - `reference`, `draw`: as `document.write_report`.

    Returns `write_report`'s values, with `claims` (the answer per device kind,
    `Answer` values, rendered by `claims.render_claims`), `stated` (every `Claim` the
    pages and the README state, checked by `consistency.check` before anything is
    written from them), and `pages` (by name) and `readme` (its path) where written.
    """
    with records.read_once():
        report = write_report(results, scale, figures, reference, draw)
        report["claims"] = answer_claims(results, scale, report["rows"])
        report["stated"] = stated_claims(results, scale, report["rows"], report["claims"])
        check(report["stated"])
        if docs is not None:
            report["pages"] = write_pages(
                results, scale, figures, docs, report["claims"], report["values"]
            )
        if readme is not None:
            rows = report["rows"] if scale == README_SCALE else None
            report["readme"] = update_readme(readme, results, figures, rows)
    return report


def stated_claims(
    results: str | Path, scale: str, rows: list[dict[str, Any]], answers: list[Answer]
) -> list[Claim]:
    """Every claim the report of `scale` states: the answer's (`answers`), the verdict's
    (`claims.verdict_stated`), the `shard` PID row session by session
    (`claims.session_claims`) and, at the README's scale, the README's answer
    (`answer.readme_claims`)."""
    found = [c for a in answers for c in a.claims] + verdict_stated(rows)
    found += session_claims(scale_records(results, scale))
    if scale == README_SCALE:
        found += [c for d in ("cpu", "gpu") for c in readme_claims(rows, d)]
    return found
