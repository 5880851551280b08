"""The shipped levers of the training step, one per module (`lever.AbstractLever`);
importing this package registers them (`lever.LEVERS`)."""

from .all_steps import AllSteps
from .by_hand import ByHand
from .dense import Dense
from .donate import Donate
from .fast_activations import FastActivations
from .fused import FusedSolve
from .save_steps import SaveSteps
from .step_bound import StepBound
from .unrolled_stages import UnrolledStages
from .wide_vectors import WideVectors
from .within_ode import WithinODE

__all__ = [
    "AllSteps",
    "ByHand",
    "Dense",
    "Donate",
    "FastActivations",
    "FusedSolve",
    "SaveSteps",
    "StepBound",
    "UnrolledStages",
    "WideVectors",
    "WithinODE",
]
