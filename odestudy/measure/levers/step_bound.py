"""A bound on the adaptive solve's steps, from the steps the trained field takes."""

import math
from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike
from ..solvers import MAX_STEPS

# The smallest bound the lever sets, and its margin over the measured steps.
SMALLEST = 16
MARGIN = 2


def bound(solver_steps: int) -> int:
    """The bound for a field measured at `solver_steps` steps: a power of two at least
    `MARGIN` times them (at least `SMALLEST`, at most `MAX_STEPS`). A solve that needs
    more fails loudly (a non-finite loss), never silently."""
    wanted = max(SMALLEST, MARGIN * solver_steps)
    return min(MAX_STEPS, 2 ** math.ceil(math.log2(wanted)))


class StepBound(AbstractLever):
    """`max_steps`: the PID solve bounded at `bound(facts.solver_steps)` (or at the
    bound the study measured, `facts.max_steps`), which also sizes diffrax's
    checkpoints; needs the trained field's steps (`tune` measures them)."""

    name: ClassVar[str] = "step_bound"
    help: ClassVar[str] = "the PID solve bounded near the trained field's steps"
    controllers: ClassVar[tuple[str, ...] | None] = ("pid",)

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        if facts.max_steps is not None:
            return {"max_steps": facts.max_steps}
        if facts.solver_steps is None:
            raise ValueError("needs the trained field's solver steps (odestudy tune measures them)")
        return {"max_steps": bound(facts.solver_steps)}
