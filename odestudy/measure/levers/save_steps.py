"""StepTo saving at its own steps: every step ends at a saved time, no save loop."""

from typing import Any, ClassVar

from ..lever import AbstractLever


class SaveSteps(AbstractLever):
    """`saveat="steps"` (StepTo only); safe: the steps are the grid's, saved as taken."""

    name: ClassVar[str] = "save_steps"
    help: ClassVar[str] = "StepTo saves at its steps (no save loop)"
    controllers: ClassVar[tuple[str, ...] | None] = ("stepto",)
    safe: ClassVar[bool] = True
    sets: ClassVar[dict[str, Any]] = {"saveat": "steps"}
