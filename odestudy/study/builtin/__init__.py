# ruff: noqa: I001 (the order of import is the order of registration)
"""The built-in studies, one file each, registered (`studies.STUDIES`) in the order
imported here: the order of the report's pages (`studies.pages_of`)."""

from .scaling import Scaling
from .explain import Explain
from .target import Target
from .versions import Versions
from .map import Map
from .crossover import Crossover
from .seed import SEED_SCALE, Seed
from .step import LEVER_RECORDS, LEVERS_FOLDER, LOSS_SPREADS, Step
from .prediction import Prediction

# The built-in studies' names (`studies.STUDIES` holds every registered one).
BUILT_IN = ("scaling", "explain", "target", "versions", "map", "seed", "step", "prediction")

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
