"""When splitting the batch pays (`make crossover`): the recommended step along a
per-device batch axis (`workloads.crossover_scenarios`), its records beside the map's;
its table and figure (`report.crossover`)."""

from typing import ClassVar

from ..report.crossover import crossover_claims, crossover_tables
from ..study.claim import Claim
from ..study.studies import Page, ReportInputs, Study, Table
from ..study.workloads import MAP_FOLDER, crossover_scenarios


class Crossover(Study):
    """The per-device batch axis of the workload map (CPU), its records in the map's
    folder: the report reads both to find where splitting starts to pay."""

    name: ClassVar[str] = "crossover"
    order: ClassVar[int] = 6
    title: ClassVar[str] = "When splitting the batch pays"
    folder: ClassVar[str | None] = MAP_FOLDER
    page: ClassVar[Page | None] = Page(
        "crossover", title, ("crossover",), ("crossover",), readme="crossover"
    )

    def scenarios(self, scale, device="auto", full=False):
        return crossover_scenarios(scale), []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table and figure (at another scale than quick, only where it has rows)."""
        return crossover_tables(inputs.results, inputs.figures, inputs.scale)

    def claims(self, inputs: ReportInputs) -> list[Claim]:
        """Every point of the axis (`crossover.crossover_claims`)."""
        return crossover_claims(inputs.results, inputs.scale)
