"""The version study (`make versions`): the core rows under each JAX release
(`grid.versions_scenarios`), one run each, and their table (`report.versions`)."""

from typing import ClassVar

from ..report.versions import version_rows, versions_table
from ..study.grid import versions_scenarios
from ..study.studies import Page, ReportInputs, Study, Table
from ..study.versions import FOLDER


class Versions(Study):
    """The core rows `make versions` runs under each JAX release (one run each)."""

    name: ClassVar[str] = "versions"
    order: ClassVar[int] = 4
    title: ClassVar[str] = "The core rows across JAX releases"
    repeated: ClassVar[bool] = False
    page: ClassVar[Page | None] = Page(
        "versions", "JAX releases (`make versions`)", ("versions",), ("versions",)
    )

    def scenarios(self, scale, device="auto", full=False):
        return versions_scenarios(scale), []

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its table where its page is one of the scale's (none at another scale)."""
        if self.page is None or inputs.scale not in self.page.scales:
            return []
        return [versions_table(version_rows(inputs.results / FOLDER, inputs.scale))]
