"""The scaling study: every mode and controller on the device counts of a machine
(`grid.scaling_plan`), its records the rows of the scaling tables and the quick page."""

from typing import ClassVar

from ...measure.recommended import recommended as apply
from ...measure.scenario import Scenario
from ..grid import KINDS, for_problem, node_scenarios, scaling_plan, scenarios
from ..studies import THIS_MACHINE, Page, Study


class Scaling(Study):
    """The scaling tables: every mode and controller on the device counts here."""

    name: ClassVar[str] = "scaling"
    title: ClassVar[str] = "Quick scaling"
    ceiling: ClassVar[bool] = True
    recommendable: ClassVar[bool] = True
    scaling_table: ClassVar[bool] = True
    sized: ClassVar[bool] = True
    page: ClassVar[Page | None] = Page(
        "quick",
        "Quick scaling (`make all`)",
        ("cpu", "gpu", "machines", "projection", "skipped", "provenance"),
        ("headline_speedup", "cpu_strong_scaling", "cpu_weak_scaling"),
        answer=True,
    )

    def scenarios(self, scale, device="auto", full=False):
        return scaling_plan(scale, device, full)

    def planned(self, scale, device="auto", full=False, sizing=THIS_MACHINE):
        return scaling_plan(scale, device, full, sizing)

    def matrix(self, scale: str) -> list[Scenario]:
        return [s for d in KINDS["auto"] for s in scenarios(scale, d)]

    def current(self, scale: str, problem: str) -> list[Scenario]:
        """Its matrix, the same with the recommended levers (`odestudy matrix
        --recommended`) and the rows over several hosts (`node_scenarios`)."""
        found = for_problem(self.matrix(scale), problem)
        return found + [apply(s) for s in found] + for_problem(node_scenarios(scale), problem)
