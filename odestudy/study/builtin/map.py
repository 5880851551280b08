"""The workload map (`make map`): the workloads of `workloads.map_scenarios` (CPU),
its records in a folder of their own."""

from typing import ClassVar

from ..studies import Page, Study
from ..workloads import MAP_FOLDER, map_scenarios


class Map(Study):
    """The workload map (`workloads.map_scenarios`, CPU), its records apart."""

    name: ClassVar[str] = "map"
    title: ClassVar[str] = "The workload map"
    folder: ClassVar[str | None] = MAP_FOLDER
    page: ClassVar[Page | None] = Page("workloads", "Workload map", ("workloads",), ("workloads",))

    def scenarios(self, scale, device="auto", full=False):
        return map_scenarios(scale), []
