"""The step reuses the parameters' and optimiser state's buffers."""

from typing import Any, ClassVar

from ..lever import AbstractLever, Facts, ScenarioLike


class Donate(AbstractLever):
    """`donate=True`."""

    name: ClassVar[str] = "donate"
    help: ClassVar[str] = "the step reuses its state's buffers"

    def fields(self, s: ScenarioLike, facts: Facts) -> dict[str, Any]:
        return {"donate": True}
