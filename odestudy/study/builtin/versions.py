"""The version study (`make versions`): the core rows under each JAX release
(`grid.versions_scenarios`), one run each."""

from typing import ClassVar

from ..grid import versions_scenarios
from ..studies import Page, Study


class Versions(Study):
    """The core rows `make versions` runs under each JAX release (one run each)."""

    name: ClassVar[str] = "versions"
    title: ClassVar[str] = "The core rows across JAX releases"
    repeated: ClassVar[bool] = False
    page: ClassVar[Page | None] = Page(
        "versions", "JAX releases (`make versions`)", ("versions",), ("versions",)
    )

    def scenarios(self, scale, device="auto", full=False):
        return versions_scenarios(scale), []
