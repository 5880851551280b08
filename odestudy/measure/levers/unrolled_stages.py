"""Tsit5's stages as straight-line code (`tsit5.StraightTsit5`): no stage loop."""

from typing import Any, ClassVar

from ..lever import AbstractLever


class UnrolledStages(AbstractLever):
    """`stages="unrolled"`: the same arithmetic as diffrax's stage loop, without the
    loop; safe (it cannot make a step slower)."""

    name: ClassVar[str] = "unrolled_stages"
    help: ClassVar[str] = "Tsit5's stages as straight-line code"
    safe: ClassVar[bool] = True
    sets: ClassVar[dict[str, Any]] = {"stages": "unrolled"}
