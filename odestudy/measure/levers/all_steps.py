"""One checkpoint per solver step: no recomputation, no conditional in the backward
pass."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike
from .step_bound import StepBound


class AllSteps(AbstractLever):
    """`adjoint="all_steps"`. Its checkpoints are as many as the solve's bound: under
    PID it needs the step bound (`StepBound`), never the default's 4096 (a checkpoint
    for each possible step made a latent ODE twice as slow); StepTo's solve is bounded
    by its grid, where it is safe."""

    name: ClassVar[str] = "all_steps"
    help: ClassVar[str] = "a checkpoint per solver step (bounded)"

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        out: dict[str, Any] = {"adjoint": "all_steps"}
        if not s.stepsize_controller.on_grid:
            out.update(StepBound().fields(s, facts))
        return out

    def safe_on(self, s: ScenarioLike) -> bool:
        return s.stepsize_controller.on_grid
