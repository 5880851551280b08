"""The built-in studies, one file each: what each runs and what its report shows. The
top layer (it imports `study` and `report`, neither imports it): importing it imports
every module here, each registering its study, then orders them by `order`."""

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
