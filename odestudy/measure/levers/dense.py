"""The solution evaluated from its dense output, not saved by an inner loop."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike
from .step_bound import StepBound


class Dense(AbstractLever):
    """`saveat="dense"` under PID: the dense output is kept for every possible step, so
    it needs the step bound (`StepBound`)."""

    name: ClassVar[str] = "dense"
    help: ClassVar[str] = "the solution from its dense output (bounded)"
    controllers: ClassVar[tuple[str, ...] | None] = ("pid",)

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        return {"saveat": "dense", **StepBound().fields(s, facts)}
