"""A lever measured along the workload map (`benchmarks/levers.py --map`): per workload
and controller, the step without and with it, trained and timed in interleaved blocks.
Each studied lever is a `MapLever`; its section of `workloads.md` and its README line
come from its records."""

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..measure.scenario import Scenario
from ..study.rec import LeverRecord, LeverRow
from ..study.studies import Block, Text
from . import sessions
from .floor import (
    elsewhere_said,
    held_elsewhere,
    map_grid,
    map_lever_records,
    ratio_cell,
    variant_row,
)
from .intervals import ratio_interval
from .loss import same


@dataclasses.dataclass(frozen=True)
class MapLever:
    """One lever studied along the map: its records' folder (`results/map/<machine>/<folder>/`,
    `make map-<folder>`), its names (`short` in headings), and the variants without and
    with it on the default step and on the recommended step (the README's line)."""

    folder: str
    name: str
    short: str
    default: tuple[str, str]
    recommended: tuple[str, str]

    @property
    def target(self) -> str:
        return f"map-{self.folder}"

    @property
    def pairs(self) -> tuple[tuple[str, str, str], ...]:
        """Per table column: the variant without the lever, with it, and the heading."""
        return (
            (*self.default, f"{self.short} on the default step"),
            (*self.recommended, f"{self.short} on the recommended step"),
        )

    def records(self, results: str | Path, machine: str) -> list[LeverRecord]:
        """This machine's records of the lever, in the map's order."""
        return map_lever_records(results, machine, self.folder)


MAP_LEVERS = (
    MapLever(
        "levers",
        "Tsit5 without its stage loop (`stages=unrolled`)",
        "Unrolled",
        ("default", "stages=unrolled"),
        ("recommended-unrolled", "recommended-diffrax"),
    ),
    MapLever(
        "vectors",
        "512-bit vectors (`vector_width=512`)",
        "512-bit",
        ("default", "vw512"),
        ("recommended-vw0", "recommended-vw512"),
    ),
)


def _pair(rec: LeverRecord, base: str, lever: str) -> tuple[LeverRow, LeverRow, float] | None:
    """The rows of variants `base` and `lever`, and the evaluation loss their models had
    to reach (their problem's); None where one is missing."""
    a, b = variant_row(rec, base), variant_row(rec, lever)
    if a is None or b is None:
        return None
    return a, b, Scenario.from_dict(rec.fields).problem_object.trained_loss


def lever_cell(rec: LeverRecord, base: str, lever: str) -> str:
    """The lever's speedup over its baseline (unequal losses marked) and both final losses."""
    found = _pair(rec, base, lever)
    if found is None:
        return "–"
    a, b, limit = found
    losses = f"loss {a.final_loss:.2g} → {b.final_loss:.2g}"
    if max(a.final_loss, b.final_loss) > limit:
        losses += f" (above {limit:g}: not trained)"
    return ratio_cell(a, b) + f"; {losses}"


def lever_section(results: str | Path, machine: str, lever: MapLever) -> list[Block]:
    """`workloads.md`'s section on `lever` along the map."""
    held, recs = held_elsewhere(results, machine, lever.folder)
    head = [Text(f"## {lever.name} along the map"), *elsewhere_said(machine, held)]
    if not recs:
        return [*head, Text(f"No records yet: run `make {lever.target}`.")]
    said = (
        "`benchmarks/levers.py --map` on one device: each variant trained from "
        "scratch in its own process (its final loss), then timed from the default's "
        "trained state on the same batches in interleaved blocks; speedup = the step "
        "without the lever over the step with it, 95% bootstrap over blocks and steps. "
        + sessions.sessions_line(recs, recs)
    )
    headings = [heading for _, _, heading in lever.pairs]

    def cells(rec: LeverRecord) -> list[str]:
        return [lever_cell(rec, base, with_it) for base, with_it, _ in lever.pairs]

    return [*head, Text(said), map_grid(recs, headings, cells)]


@dataclasses.dataclass(frozen=True)
class LeverSpeedup:
    """A lever's speedup in one record, and whether both trained the same model."""

    ratio: float
    low: float
    high: float
    equal: bool


def lever_speedups(recs: Sequence[LeverRecord], base: str, lever: str) -> list[LeverSpeedup]:
    """Per record whose two models both trained, the speedup of `lever` over `base`, and
    whether they trained the same model (`loss.same`)."""
    out = []
    for rec in recs:
        if (found := _pair(rec, base, lever)) is None:
            continue
        a, b, limit = found
        if max(a.final_loss, b.final_loss) <= limit:  # else a model that did not train
            out.append(LeverSpeedup(*ratio_interval(a, b), same(a, b)))
    return out


def ratio_range(found: Sequence[LeverSpeedup]) -> str:
    """`0.91x to 1.40x`: the range of `found`'s ratios."""
    return f"{min(f.ratio for f in found):.2f}x to {max(f.ratio for f in found):.2f}x"


def separated(found: Sequence[LeverSpeedup]) -> tuple[int, int]:
    """How many of `found` are faster at equal loss, and how many slower, by intervals."""
    return sum(f.low > 1 and f.equal for f in found), sum(f.high < 1 for f in found)


def lever_summary(recs: Sequence[LeverRecord], lever: MapLever) -> list[str]:
    """The README's line on `lever` on the recommended step, or nothing."""
    found = lever_speedups(recs, *lever.recommended)
    if not found:
        return []
    faster, slower = separated(found)
    session = sessions.sessions_line(recs, recs)
    return [
        f"- {lever.name} on the recommended step, 1 device: {ratio_range(found)} "
        f"over {len(found)} workload and controller pairs whose models trained, "
        f"{faster} of them faster with the whole interval above 1 at equal loss, "
        f"{slower} slower ({session.rstrip('.')})."
    ]
