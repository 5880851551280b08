"""Each reverse step of the fused solve differentiated by hand for an MLP field
(`measure/mlp_reverse.py`)."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike
from .fused import FusedSolve
from .within_ode import WithinODE


class ByHand(AbstractLever):
    """`mlp_reverse=True` with what it needs: the fused solve's own reverse loop under
    PID, within-ODE batching (a model without an `odestudy.AbstractMLPField` is refused
    before compiling, `training.check_mlp_fields`). Measured faster on a CPU
    (`results/<machine>/levers/cpu-pid.json`); on a GPU not measured yet."""

    name: ClassVar[str] = "mlp_reverse"
    fused_loop: ClassVar[bool] = True
    help: ClassVar[str] = "the fused reverse loop's steps differentiated by hand (MLP fields)"
    faster_on: ClassVar[tuple[str, ...] | None] = ("cpu",)
    controllers: ClassVar[tuple[str, ...] | None] = ("pid",)

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        return {
            **FusedSolve().fields(s, facts),
            **WithinODE().fields(s, facts),
            "mlp_reverse": True,
        }
