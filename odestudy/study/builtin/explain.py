"""The explanation study (`make explain`): the studies that explain the scaling
(`grid.explain_scenarios`, CPU)."""

from typing import ClassVar

from ...measure.scenario import Scenario
from ..grid import explain_scenarios, for_problem
from ..studies import Page, Study


class Explain(Study):
    """The studies that explain the scaling (`explain_scenarios`, CPU)."""

    name: ClassVar[str] = "explain"
    title: ClassVar[str] = "Explanations"
    page: ClassVar[Page | None] = Page(
        "explain",
        "Explanations (`make explain`)",
        ("explain",),
        ("lockstep_waste", "throughput_vs_batch", "time_to_target"),
    )

    def scenarios(self, scale, device="auto", full=False):
        return explain_scenarios(scale), []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return for_problem(self.matrix(scale), problem)
