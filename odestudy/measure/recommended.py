"""The study's recommended step, the rule its records were made by: the levers of the
study's step on every problem (`STUDY_LEVERS`, each where it applies), and those of each
shipped problem's step that the tune records measured per device kind
(`data/measured_steps.json`). The fused solve, where it runs the step, drops diffrax's
saving and stages and takes the controller's `fused_adjoint`. A problem the study did
not measure gets no per-problem lever or bound: before any `odestudy tune`,
`--recommended` applies only the levers that cannot slow a step down (`safe_levers`).

Each trains to a final loss within the default's run-to-run spread over training seeds
(`benchmarks/loss_spread.py`); a PID solve needing more than `max_steps` steps fails
loudly (a non-finite loss, a failed run), never silently.
"""

import dataclasses
import functools
import json
from typing import Any

from . import levers as _shipped  # noqa: F401 - registers the shipped levers
from .controllers import CONTROLLERS, AbstractController
from .environment import shipped
from .lever import LEVERS, AbstractLever, Facts, combine, get_lever
from .levers import AllSteps, Dense, SaveSteps, StepBound, UnrolledStages, WithinODE
from .levers.fused import FusedSolve
from .scenario import Scenario

# The levers of the study's step on every problem, each where it applies (the measured
# bound for those that need one: `measured`).
STUDY_LEVERS: tuple[type[AbstractLever], ...] = (
    WithinODE,
    Dense,
    SaveSteps,
    AllSteps,
    StepBound,
    UnrolledStages,
)


@functools.cache
def _measured() -> dict[str, Any]:
    return json.loads(shipped("data", "measured_steps.json").read_text())["problems"]


def _names(entry: dict[str, Any], device: str, controller: str) -> list[AbstractLever]:
    """The levers derived for `controller` on `device`'s kind; where that kind has no
    tune record, those derived on other kinds that are not known faster only elsewhere."""
    kinds = entry["levers"]
    if controller in kinds.get(device, {}):
        return [get_lever(n) for n in kinds[device][controller]]
    out: dict[str, AbstractLever] = {}
    for kind in sorted(kinds):
        for lever in (get_lever(n) for n in kinds[kind].get(controller, [])):
            if lever.faster_on is None or device in lever.faster_on:
                out.setdefault(lever.name, lever)
    return list(out.values())


def measured(s: Scenario) -> tuple[Facts, list[AbstractLever]]:
    """What the study's tune records measured of `s`'s problem: the bound its trained field
    stays under, and its step's levers under `s`'s controller on `s`'s device kind."""
    entry = _measured().get(s.problem)
    if entry is None:
        return Facts(), []
    return Facts(max_steps=entry.get("max_steps")), _names(entry, s.device, s.controller)


def study_measured(s: Scenario) -> bool:
    """Whether the study's records measured `s`'s problem (`data/measured_steps.json`)."""
    return s.problem in _measured()


def measured_problems(lever: str) -> list[str]:
    """The shipped problems whose measured levers include `lever` (anywhere)."""
    return [
        name
        for name, entry in _measured().items()
        if any(lever in names for kind in entry["levers"].values() for names in kind.values())
    ]


def study_controllers() -> dict[str, dict[str, Any]]:
    """Each registered controller with a recommended step, and its levers."""
    out = {}
    for name in CONTROLLERS:
        try:
            out[name] = controller_levers(name)
        except ValueError:
            continue
    return out


def controller_levers(controller: str) -> dict[str, Any]:
    """The study's levers for `controller` on the oscillator, as scenario fields."""
    try:
        s = Scenario(scale="smoke", controller=controller)
    except ValueError as exc:
        raise ValueError(f"no recommended step for controller {controller!r}: {exc}") from None
    return diffrax_levers(s, (measured(Scenario(scale="smoke"))[0], []))


Found = tuple[Facts, list[AbstractLever]]


def diffrax_levers(s: Scenario, found: Found | None = None) -> dict[str, Any]:
    """The study's levers for `s` run by diffrax's loop: `STUDY_LEVERS` where each applies
    (with the measured bound), and the problem's measured levers diffrax's loop runs
    (`found`: those instead of `measured(s)`)."""
    facts, levers = found or measured(s)
    if not s.stepsize_controller.adaptive and not s.stepsize_controller.on_grid:
        raise ValueError(f"no recommended step for controller {s.controller!r}")
    chosen = [cls() for cls in STUDY_LEVERS]
    out = combine(s, [lever for lever in chosen if lever.refusal(s, facts) is None], facts)
    own = [lever for lever in levers if not lever.fused_loop]
    return {**out, **combine(dataclasses.replace(s, **out), own, facts)}


def fused_levers(levers: dict[str, Any], controller: AbstractController) -> dict[str, Any]:
    """`levers` run by the fused solve (which saves and runs its stages itself)."""
    if controller.fused_adjoint is None:
        raise ValueError(f"the fused solve does not run controller {controller.name!r}")
    out = {k: v for k, v in levers.items() if k not in ("saveat", "stages")}
    return {**out, "integrator": "fused", "adjoint": controller.fused_adjoint}


def recommended_fused_levers(s: Scenario, found: Found | None = None) -> dict[str, Any]:
    """`s`'s recommended step run by the fused solve, with its measured fused-loop levers."""
    facts, levers = found or measured(s)
    out = fused_levers(diffrax_levers(s, found), s.stepsize_controller)
    for lever in levers:
        if lever.fused_loop and not isinstance(lever, FusedSolve):
            at = dataclasses.replace(s, **out)
            if lever.refusal(at, facts) is None:
                out.update(lever.fields(at, facts))
    return out


def recommended_levers(s: Scenario, found: Found | None = None) -> dict[str, Any]:
    """The recommended step's levers for `s`: `diffrax_levers`, run by the fused solve
    where the study measured it faster on the problem and it runs the controller
    (`found`: the problem's bound and levers, instead of `measured(s)`)."""
    fused = any(isinstance(lever, FusedSolve) for lever in (found or measured(s))[1])
    if fused and s.stepsize_controller.fused:
        return recommended_fused_levers(s, found)
    return diffrax_levers(s, found)


@functools.lru_cache(maxsize=4096)
def recommended(s: Scenario) -> Scenario:
    """Scenario `s` with its recommended levers (`recommended_levers`); kept per scenario
    (the measured steps are read once too): a report asks for thousands."""
    return dataclasses.replace(s, **recommended_levers(s))


def safe_levers(s: Scenario) -> tuple[list[str], dict[str, Any]]:
    """The registered levers that cannot slow `s`'s step down and apply to it, by name,
    and the fields they set together: what `--recommended` applies before any tune."""
    chosen = [lever for lever in (cls() for cls in LEVERS.values()) if lever.safe_on(s)]
    chosen = [lever for lever in chosen if lever.refusal(s) is None]
    return [lever.name for lever in chosen], combine(s, chosen)
