"""The workload map (`make map`): the workloads of `workloads.map_scenarios` (CPU),
its records in a folder of their own, its table and figure (`report.workloads`)."""

from typing import ClassVar

from ..report.workloads import map_claims, workloads_tables
from ..study.claim import Claim
from ..study.studies import Page, ReportInputs, Study, Table
from ..study.workloads import MAP_FOLDER, map_scenarios


class Map(Study):
    """The workload map (`workloads.map_scenarios`, CPU), its records apart."""

    name: ClassVar[str] = "map"
    order: ClassVar[int] = 5
    title: ClassVar[str] = "The workload map"
    folder: ClassVar[str | None] = MAP_FOLDER
    page: ClassVar[Page | None] = Page(
        "workloads", "Workload map", ("workloads",), ("workloads",), readme="workload map"
    )

    def scenarios(self, scale, device="auto", full=False):
        return map_scenarios(scale), []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table and figure (at another scale than quick, only where it has rows)."""
        return workloads_tables(inputs.results, inputs.figures, inputs.scale)

    def claims(self, inputs: ReportInputs) -> list[Claim]:
        """Its answer (`workloads.map_claims`)."""
        return map_claims(inputs.results, inputs.scale)
