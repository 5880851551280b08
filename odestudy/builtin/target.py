"""The time-to-target study: the explanation's time-to-target rows alone
(`grid.target_scenarios`)."""

from typing import ClassVar

from ..measure.scenario import Scenario
from ..study.grid import for_problem, target_scenarios
from ..study.studies import Study


class Target(Study):
    """The time-to-target rows alone (`target_scenarios`)."""

    name: ClassVar[str] = "target"
    order: ClassVar[int] = 3
    title: ClassVar[str] = "Time to target"

    def scenarios(self, scale, device="auto", full=False):
        return target_scenarios(scale), []

    def current(self, scale: str, problem: str) -> list[Scenario]:
        return for_problem(self.matrix(scale), problem)
