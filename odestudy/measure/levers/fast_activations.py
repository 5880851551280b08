"""The model's activation functions by their faster equivalents (`activations.py`)."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike


class FastActivations(AbstractLever):
    """`fast_activations=True` (a model with no activation to swap is refused before
    compiling, `training.fast_activations`)."""

    name: ClassVar[str] = "fast_activations"
    help: ClassVar[str] = "the model's activations by their faster equivalents"

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        return {"fast_activations": True}
