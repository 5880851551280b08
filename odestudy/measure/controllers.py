"""The step-size controllers as types: adaptive `PID` and `StepTo` (one step per
observation), named by `name` and asked whatever depends on them (`CONTROLLERS`)."""

import abc
from typing import Any, ClassVar

import diffrax
import equinox as eqx
import jax

from .registry import Registered, lookup

# Every controller by name, in the order of the tables (`Registered`).
CONTROLLERS: dict[str, type["AbstractController"]] = {}


class AbstractController(Registered, eqx.Module, registry=CONTROLLERS):
    """How a solve chooses its steps: one final subclass per controller, registered
    (`CONTROLLERS`), holds its facts and builds diffrax's controller.

    - `label`: how tables and sentences name it; `line`: its matplotlib format (`"-o"`).
    - `adaptive`: its steps follow Tsit5's error estimate (the fused loop runs PID's).
    - `on_grid`: one step per interval of the series' grid (so padding a series would add
      steps: length stages compile one program each); `fused`: the fused loop runs it.
    - `fused_adjoint`: the reverse mode the recommended step takes with the fused solve
      (the faster in the levers records); None where the fused loop does not run it.
    """

    name: eqx.AbstractClassVar[str]
    label: eqx.AbstractClassVar[str]
    line: eqx.AbstractClassVar[str]
    adaptive: eqx.AbstractClassVar[bool]
    on_grid: eqx.AbstractClassVar[bool]
    fused: eqx.AbstractClassVar[bool]
    fused_adjoint: ClassVar[str | None] = None

    @abc.abstractmethod
    def stepsize_controller(
        self, ts: jax.Array, rtol: float, atol: float
    ) -> tuple[diffrax.AbstractStepSizeController, Any]:
        """Diffrax's step-size controller for a solve on the times `ts`, and its `dt0`."""

    def max_steps(self, bound: int, lever: bool, n_times: int) -> int:
        """The solve's step bound on a grid of `n_times` points: `bound`, but an `on_grid`
        controller's solve with a structure `lever` is bounded by its own steps."""
        if self.on_grid and lever:
            return n_times - 1
        return bound


class PID(AbstractController):
    """Diffrax's `PIDController`; the first step is the grid's first interval."""

    name: ClassVar[str] = "pid"
    label: ClassVar[str] = "PID"
    line: ClassVar[str] = "-o"
    adaptive: ClassVar[bool] = True
    on_grid: ClassVar[bool] = False
    fused: ClassVar[bool] = True
    # Its own reverse loop, replaying only the accepted steps (`replay.py`).
    fused_adjoint: ClassVar[str | None] = "accepted_steps"

    def stepsize_controller(self, ts, rtol, atol):
        return diffrax.PIDController(rtol=rtol, atol=atol), ts[1] - ts[0]


class StepTo(AbstractController):
    """Diffrax's `StepTo` on the series' grid: one solver step per observation."""

    name: ClassVar[str] = "stepto"
    label: ClassVar[str] = "StepTo"
    line: ClassVar[str] = "--s"
    adaptive: ClassVar[bool] = False
    on_grid: ClassVar[bool] = True
    fused: ClassVar[bool] = True
    # Every step stored (a `lax.scan`): its own reverse loop measured no faster here.
    fused_adjoint: ClassVar[str | None] = "all_steps"

    def stepsize_controller(self, ts, rtol, atol):
        del rtol, atol  # it takes no step it was not told to
        return diffrax.StepTo(ts=ts), None


def parse_controller(controller: "str | AbstractController") -> AbstractController:
    """The controller named `controller` (an `AbstractController` passes through)."""
    if isinstance(controller, AbstractController):
        return controller
    return lookup(CONTROLLERS, "controller", controller)()


def on_grid_names() -> str:
    """The registered controllers that step on the grid, as an error message names them."""
    names = [repr(n) for n, c in CONTROLLERS.items() if c.on_grid]
    return "controller=" + " or ".join(names) if names else "a controller on the grid"
