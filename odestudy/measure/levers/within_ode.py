"""Within-ODE batching: the batch solved as one ODE with one shared step size."""

from typing import Any, ClassVar

from ..lever import AbstractLever


class WithinODE(AbstractLever):
    """`solve="within_ode"`: one solve for the local batch (evenly spaced grids only:
    `Scenario` refuses it on a problem with `uniform_grid=False`)."""

    name: ClassVar[str] = "within_ode"
    help: ClassVar[str] = "the batch solved as one ODE (one shared step size)"
    sets: ClassVar[dict[str, Any]] = {"solve": "within_ode"}
