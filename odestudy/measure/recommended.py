"""The recommended configuration: the fastest measured lever on the training step that
trains the same model (`benchmarks/levers.py`, records in `results/<machine>/levers/`).

Measured on the trained quick model, 1 device, last-stage step, interleaved blocks from
the same trained state (AMD EPYC, 2 cores): within-ODE batching (the batch solved as one
ODE with one shared step size, `solve="within_ode"`) runs the step 1.21x [1.10, 1.38]
as fast as the default with PID (training ends at evaluation loss 0.00394 against
0.00399) and 1.18x [1.08, 1.27] with StepTo (the same loss: StepTo's steps do not
depend on the batch). No other lever measured was faster: `max_steps` 64 (slower: the
default adjoint then keeps 10 checkpoints for ~22 steps and recomputes), `max_steps` 64
with 32 checkpoints, XLA's legacy CPU runtime, single-threaded Eigen, XNNPACK, bfloat16
matmul precision. None reaches 1.5x.
"""

import dataclasses
from typing import Any

from .scenario import Scenario

RECOMMENDED: dict[str, Any] = {"solve": "within_ode"}


def recommended(s: Scenario) -> Scenario:
    """Scenario `s` with the recommended levers (`RECOMMENDED`) applied."""
    return dataclasses.replace(s, **RECOMMENDED)
