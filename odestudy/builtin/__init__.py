# ruff: noqa: I001 (the order of import is the order of registration)
"""The built-in studies, one file each: what each runs (its scenarios, from
`study.grid`), and what its report shows (its tables and claims, made by the report's
modules). The top layer: it may import `study` and `report`, and neither imports it; the
package (`odestudy/__init__.py`) imports it, which registers each study
(`studies.STUDIES`) in the order imported here: the order of the report's pages
(`studies.pages_of`) and tables (`document.write_report`)."""

from .scaling import Scaling
from .explain import Explain
from .target import Target
from .versions import Versions
from .map import Map
from .crossover import Crossover
from .seed import SEED_SCALE, Seed
from .step import LEVER_RECORDS, LEVERS_FOLDER, LOSS_SPREADS, Step
from .prediction import Prediction
from ..study.studies import STUDIES

# The built-in studies' names, as registered above (`studies.STUDIES` holds every
# registered one, a user's too).
BUILT_IN = tuple(name for name, cls in STUDIES.items() if cls.__module__.startswith(__name__))

__all__ = [
    "BUILT_IN",
    "LEVERS_FOLDER",
    "LEVER_RECORDS",
    "LOSS_SPREADS",
    "SEED_SCALE",
    "Crossover",
    "Explain",
    "Map",
    "Prediction",
    "Scaling",
    "Seed",
    "Step",
    "Target",
    "Versions",
]
