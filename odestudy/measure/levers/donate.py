"""The step reuses the parameters' and optimiser state's buffers."""

from typing import Any, ClassVar

from ..lever import AbstractLever


class Donate(AbstractLever):
    """`donate=True`."""

    name: ClassVar[str] = "donate"
    help: ClassVar[str] = "the step reuses its state's buffers"
    sets: ClassVar[dict[str, Any]] = {"donate": True}
