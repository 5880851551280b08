"""What one report states (`Findings`, holding `Claim` values), made once from one read
of the records and checked to agree (`consistency.check`); the pages, the README and the
report notebook render it."""

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..study import records
from ..study.claim import Answer, Claim
from ..study.rec import Rec
from .answer import README_SCALE, ControllerAnswer, controller_answers, readme_claims
from .by_session import SESSIONS_WHERE, session_rows
from .claims import device_answer, scale_records, verdict_stated
from .comparisons import own_claim
from .consistency import check


@dataclasses.dataclass(frozen=True)
class Findings:
    """One report's statements (`findings`): the answer per device kind, the verdict's
    claims, the `shard` PID row per session, the README's answer (its scale only)."""

    answers: tuple[Answer, ...]
    verdict: tuple[Claim, ...]
    by_session: tuple[tuple[Any, Rec], ...]
    readme: tuple[ControllerAnswer, ...] = ()

    def claims(self) -> list[Claim]:
        """Every claim it states."""
        found = [c for a in self.answers for c in a.claims] + list(self.verdict)
        found += [own_claim(row, SESSIONS_WHERE) for _, row in self.by_session]
        return found + readme_claims(self.readme)


def findings(
    results: str | Path, scale: str, rows: Sequence[Rec], scaling: str = "strong"
) -> Findings:
    """The statements of the report of `scale` from its scaling `rows` and every ok
    record of the scale (`claims.scale_records`), checked (`consistency.check`). Made
    once per `records.read_once`: the scaling study's claims and the pages share them."""
    key = ("findings", os.path.abspath(results), scale, scaling, tuple(map(id, rows)))
    # The rows are kept beside what is made, so that no other object takes their ids.
    kept = records.made_once(key, lambda: (tuple(rows), _findings(results, scale, rows, scaling)))
    return kept[1]


def _findings(results: str | Path, scale: str, rows: Sequence[Rec], scaling: str) -> Findings:
    every = scale_records(results, scale)
    found = Findings(
        answers=tuple(device_answer(rows, every, scaling, d, scale) for d in ("cpu", "gpu")),
        verdict=tuple(verdict_stated(rows)),
        by_session=tuple(session_rows(every)),
        readme=controller_answers(rows, "cpu", every) if scale == README_SCALE else (),
    )
    check(found.claims())
    return found
