"""The recommended configuration, per controller: the fastest combination of diffrax's
levers on the training step that trains the default's model (`benchmarks/levers.py`,
records in `results/<machine>/levers/`; the step table, `figures/tables/step.md`, shows
them all with their speedups, intervals and final losses). Per problem, the package's
fused solve (`integrator="fused"`, `fused.py`) runs it where the problem says so
(`recommended_fused`): along the map (`make map-fused`, `figures/tables/workloads.md`)
it is faster on some workloads and slower on others. It saves at the observation times
and runs Tsit5's stages as straight-line code itself, so the step it runs keeps the
solve's structure (batching, step bound) and drops `saveat` and `stages`; its reverse
mode is the controller's (`AbstractController.fused_adjoint`): under PID its own
reverse loop replaying only the accepted steps (`adjoint="accepted_steps"`,
`replay.py`), faster in the levers records; under StepTo a checkpoint per step. Where
that PID loop differentiates its steps by hand (`mlp_reverse`), the step is compiled with
512-bit vectors on the CPU (`vector_width`, `vectors.py`: a compile option of its own
executable), faster in the levers record; along the map (`make map-vectors`) faster
or not separable from XLA's default width on the recommended steps, never slower.

- PID: within-ODE batching (the batch solved as one ODE with one shared step size),
  the solution evaluated from its dense output instead of an inner loop over the saved
  times, one checkpoint per solver step with the solve bounded at 64 steps (no
  recomputation, no conditional in the backward pass; a trained field takes fewer),
  and Tsit5's stages as straight-line code (`stages="unrolled"`, `tsit5.StraightTsit5`).
- StepTo: within-ODE batching, `SaveAt(steps=True)` (every StepTo step ends at a saved
  time: no save loop), one checkpoint per step, and Tsit5's stages unrolled.

The unrolled stages joined the others after `make map-levers` measured them on the
recommended step of every workload of the map (`figures/tables/workloads.md`): faster
at equal loss on each. For StepTo, the same arithmetic as a `lax.scan` (`solve="scan"`)
is the floor, not recommended (no adaptive steps, no adjoint choice).

Each trains to a final loss within the default's run-to-run spread over training seeds
(`benchmarks/loss_spread.py`). A PID solve that needs more than `max_steps` steps fails
loudly (a non-finite loss, recorded as a failed run), never silently.
"""

import dataclasses
from typing import Any

from . import levers as _shipped  # noqa: F401 - registers the shipped levers
from . import mlp_reverse, replay, vectors
from .activations import FASTER_ON
from .controllers import AbstractController
from .lever import LEVERS, combine
from .scenario import Scenario

# controller -> the `Scenario` fields to set.
RECOMMENDED: dict[str, dict[str, Any]] = {
    "pid": {
        "solve": "within_ode",
        "saveat": "dense",
        "adjoint": "all_steps",
        "max_steps": 64,
        "stages": "unrolled",
    },
    "stepto": {
        "solve": "within_ode",
        "saveat": "steps",
        "adjoint": "all_steps",
        "stages": "unrolled",
    },
}


def controller_levers(controller: str) -> dict[str, Any]:
    """The levers `RECOMMENDED` sets for `controller`; a ValueError for a controller
    without a recommendation (one defined outside the package, say)."""
    if controller not in RECOMMENDED:
        raise ValueError(
            f"no recommended step for controller {controller!r}; "
            f"one is measured for {', '.join(RECOMMENDED)}"
        )
    return dict(RECOMMENDED[controller])


def diffrax_levers(s: Scenario) -> dict[str, Any]:
    """The levers of `RECOMMENDED` for `s`'s controller that are valid for its problem,
    run by diffrax's loop: within-ODE batching only on evenly spaced grids (else one
    solve per sample), the PID bound `max_steps` only where the problem names one
    for its trained field (`AbstractProblem.recommended_max_steps`), and the model's
    activations by their faster equivalents where the problem says so
    (`AbstractProblem.recommended_fast_activations`) and on the devices where they were
    measured faster (`activations.FASTER_ON`)."""
    problem = s.problem_object
    levers = controller_levers(s.controller)
    if not problem.uniform_grid and levers.get("solve") == "within_ode":
        levers["solve"] = "per_sample"
    if problem.recommended_fast_activations and s.device in FASTER_ON:
        levers["fast_activations"] = True
    if "max_steps" in levers:
        if problem.recommended_max_steps is None:
            del levers["max_steps"]
        else:
            levers["max_steps"] = problem.recommended_max_steps
    return levers


def fused_levers(levers: dict[str, Any], controller: AbstractController) -> dict[str, Any]:
    """`levers` run by the fused solve: its integrator with `controller`'s reverse mode
    (`AbstractController.fused_adjoint`), and diffrax's saving and stages back to their
    defaults (the fused loop saves at the observation times and runs the stages as
    straight-line code itself)."""
    if controller.fused_adjoint is None:
        raise ValueError(f"the fused solve does not run controller {controller.name!r}")
    out = {k: v for k, v in levers.items() if k not in ("saveat", "stages")}
    return {**out, "integrator": "fused", "adjoint": controller.fused_adjoint}


def recommended_fused_levers(s: Scenario) -> dict[str, Any]:
    """`s`'s recommended step run by the fused solve: `diffrax_levers` run by it
    (`fused_levers`), its steps differentiated by hand (`mlp_reverse`) where the problem
    says so (`AbstractProblem.recommended_mlp_reverse`), the solve is the fused one's own
    reverse loop under PID within-ODE, and the device is one where it was measured
    faster (`mlp_reverse.FASTER_ON`); that step compiled with 512-bit vectors on the
    devices where it was measured faster so (`vectors.FASTER_ON`)."""
    controller = s.stepsize_controller
    levers = fused_levers(diffrax_levers(s), controller)
    by_hand = (levers["adjoint"], levers.get("solve")) == (replay.ADJOINT, "within_ode")
    if by_hand and controller.adaptive and s.problem_object.recommended_mlp_reverse:
        if s.device in mlp_reverse.FASTER_ON:
            levers["mlp_reverse"] = True
        if s.device in vectors.FASTER_ON:
            levers["vector_width"] = vectors.RECOMMENDED_WIDTH
    return levers


def recommended_levers(s: Scenario) -> dict[str, Any]:
    """The recommended step's levers for `s`: `diffrax_levers`, run by the fused solve
    (`recommended_fused_levers`) where its problem says so
    (`AbstractProblem.recommended_fused`) and the fused loop runs its controller."""
    fused = s.problem_object.recommended_fused and s.stepsize_controller.fused
    return recommended_fused_levers(s) if fused else diffrax_levers(s)


def recommended(s: Scenario) -> Scenario:
    """Scenario `s` with the recommended levers of its controller that are valid for its
    problem (`recommended_levers`)."""
    return dataclasses.replace(s, **recommended_levers(s))


def safe_levers(s: Scenario) -> tuple[list[str], dict[str, Any]]:
    """The registered levers that cannot slow `s`'s step down (`AbstractLever.safe_on`)
    and apply to it, by name, and the scenario fields they set together: what
    `--recommended` applies before `odestudy tune` has measured the problem."""
    chosen = [lever for lever in (cls() for cls in LEVERS.values()) if lever.safe_on(s)]
    chosen = [lever for lever in chosen if lever.refusal(s) is None]
    return [lever.name for lever in chosen], combine(s, chosen)
