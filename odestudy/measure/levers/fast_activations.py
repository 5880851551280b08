"""The model's activation functions by their faster equivalents (`activations.py`)."""

from typing import Any, ClassVar

from ..lever import AbstractLever


class FastActivations(AbstractLever):
    """`fast_activations=True` (a model with no activation to swap is refused before
    compiling, `training.fast_activations`). Measured faster on a CPU; on a GPU
    transcendentals are cheap and the small step is bound by kernel launches: on the
    H100 the reference configuration's recommended step was no faster with them
    (`results/*h100*/levers/gpu-pid-seed.json`)."""

    name: ClassVar[str] = "fast_activations"
    help: ClassVar[str] = "the model's activations by their faster equivalents"
    faster_on: ClassVar[tuple[str, ...] | None] = ("cpu",)
    sets: ClassVar[dict[str, Any]] = {"fast_activations": True}
