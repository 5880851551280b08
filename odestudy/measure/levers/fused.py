"""The package's fused solve (`fused.py`): Tsit5 and the controller as one loop."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike
from .step_bound import StepBound


class FusedSolve(AbstractLever):
    """`integrator="fused"` with the controller's reverse mode
    (`AbstractController.fused_adjoint`: under PID its own reverse loop over the
    accepted steps, bounded by `StepBound`)."""

    name: ClassVar[str] = "fused"
    fused_loop: ClassVar[bool] = True
    help: ClassVar[str] = "the fused solve with the controller's reverse mode"

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        adjoint = s.stepsize_controller.fused_adjoint
        if adjoint is None:
            raise ValueError(f"the fused solve does not run controller {s.controller!r}")
        out: dict[str, Any] = {"integrator": "fused", "adjoint": adjoint}
        if not s.stepsize_controller.on_grid:
            out.update(StepBound().fields(s, facts))
        return out
