"""The built-in studies, one file each: what each runs (its scenarios, from
`study.grid`), and what its report shows (its tables and claims, made by the report's
modules). The top layer: it may import `study` and `report`, and neither imports it; the
package (`odestudy/__init__.py`) imports it, which imports every module here, each
defining a study that registers itself (`studies.STUDIES`); they are then registered in
their `order`: the order of the report's pages (`studies.pages_of`) and tables
(`document.write_report`)."""

import importlib
import pkgutil

from ..study.studies import STUDIES

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# The built-in studies' names, in their order (`studies.STUDIES` holds every registered
# one, a user's too).
BUILT_IN = tuple(
    sorted(
        (name for name, cls in STUDIES.items() if cls.__module__.startswith(f"{__name__}.")),
        key=lambda name: STUDIES[name].order,
    )
)
for _name in BUILT_IN:  # registered again in that order, before any study defined later
    STUDIES[_name] = STUDIES.pop(_name)

__all__ = ["BUILT_IN"]
