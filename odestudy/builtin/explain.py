"""The explanation study (`make explain`): the studies that explain the scaling
(`grid.explain_scenarios`, CPU), its table and figures (`report.explain`)."""

from typing import ClassVar

from ..measure.scenario import Scenario
from ..report.explain import explain_table
from ..study.grid import explain_scenarios, for_problem
from ..study.studies import Page, ReportInputs, Study, Table


class Explain(Study):
    """The studies that explain the scaling (`explain_scenarios`, CPU)."""

    name: ClassVar[str] = "explain"
    order: ClassVar[int] = 2
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

    def tables(self, inputs: ReportInputs) -> list[Table]:
        """Its sections from the CPU table's machine's records, each from another
        machine's where that one holds none of it, with their figures."""
        return [explain_table(list(inputs.records), inputs.figures, inputs.machines["cpu"])]
