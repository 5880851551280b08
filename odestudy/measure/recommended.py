"""The recommended configuration, per controller: the fastest combination of levers on
the training step that trains the default's model (`benchmarks/levers.py`, records in
`results/<machine>/levers/`; the step table, `figures/tables/step.md`, shows them all).

Measured on the trained quick model, 1 device, last-stage step, interleaved blocks from
the same trained state (AMD EPYC, 2 cores; speedups over the default, 95% intervals):

- PID: within-ODE batching (the batch solved as one ODE with one shared step size),
  the solution evaluated from its dense output instead of an inner loop over the saved
  times, and one checkpoint per solver step with the solve bounded at 64 steps (no
  recomputation, no conditional in the backward pass; a trained field takes about 25):
  1.29x [1.24, 1.32] (final loss 0.0035 against 0.0040).
- StepTo: within-ODE batching, `SaveAt(steps=True)` (every StepTo step ends at a saved
  time: no save loop) and one checkpoint per step: 1.17x [1.16, 1.18] (the same loss).

None reaches 1.5x: most of what is left is diffrax's solver loop and Tsit5's stage loop
inside each step (`measure.loops`). For StepTo, the same arithmetic as a `lax.scan`
(`solve="scan"`) runs 1.91x [1.88, 1.96] as fast as the default: the floor, not
recommended (no adaptive steps, no adjoint choice).

Each trains to a final loss within the default's run-to-run spread over training seeds
(`benchmarks/loss_spread.py`). A PID solve that needs more than `max_steps` steps fails
loudly (a non-finite loss, recorded as a failed run), never silently.
"""

import dataclasses
from typing import Any

from .scenario import Scenario

# controller -> the `Scenario` fields to set.
RECOMMENDED: dict[str, dict[str, Any]] = {
    "pid": {"solve": "within_ode", "saveat": "dense", "adjoint": "all_steps", "max_steps": 64},
    "stepto": {"solve": "within_ode", "saveat": "steps", "adjoint": "all_steps"},
}


def recommended_levers(s: Scenario) -> dict[str, Any]:
    """The levers of `RECOMMENDED` for `s`'s controller that are valid for its problem:
    within-ODE batching only on evenly spaced grids (else one solve per sample), and the
    PID bound `max_steps` only where the problem names one for its trained field
    (`AbstractProblem.recommended_max_steps`)."""
    problem = s.problem_object
    levers = dict(RECOMMENDED[s.controller])
    if not problem.uniform_grid and levers.get("solve") == "within_ode":
        levers["solve"] = "per_sample"
    if "max_steps" in levers:
        if problem.recommended_max_steps is None:
            del levers["max_steps"]
        else:
            levers["max_steps"] = problem.recommended_max_steps
    return levers


def recommended(s: Scenario) -> Scenario:
    """Scenario `s` with the recommended levers of its controller that are valid for its
    problem (`recommended_levers`)."""
    return dataclasses.replace(s, **recommended_levers(s))
