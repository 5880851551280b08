"""The step reuses the parameters' and optimiser state's buffers."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts
from ..scenario import Scenario


class Donate(AbstractLever):
    """`donate=True`."""

    name: ClassVar[str] = "donate"
    help: ClassVar[str] = "the step reuses its state's buffers"

    def fields(self, s: Scenario, facts: Facts) -> dict[str, Any]:
        return {"donate": True}
