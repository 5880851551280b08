"""The step-size controllers as types: adaptive `PID` and `StepTo` (one step per
observation). A scenario, a record and the command line name a controller by its
`name`; the code asks its type (`CONTROLLERS`) whatever depends on it."""

import abc
from typing import Any, ClassVar

import diffrax
import equinox as eqx
import jax

from .registry import Registered, lookup

# Every controller by name, in the order of the tables: each final subclass of
# `AbstractController` registers itself here when its class is defined.
CONTROLLERS: dict[str, type["AbstractController"]] = {}


class AbstractController(Registered, eqx.Module, registry=CONTROLLERS):
    """How a solve chooses its steps. Abstract: one final subclass per controller (`PID`,
    `StepTo`) holds the facts the study asks about it and builds diffrax's controller.
    Defining the class registers it (`CONTROLLERS`), so that scenarios, the command line
    and the report take it as a choice without an edit elsewhere.

    - `name`: the controller's name in scenarios, records and tables.
    - `label`: how tables and sentences name it.
    - `line`: its line and marker in figures (a matplotlib format such as `"-o"`).
    - `adaptive`: it chooses its step sizes from Tsit5's error estimate, within the
      problem's tolerances; the fused loop runs it as PID's loop.
    - `on_grid`: it takes exactly one step per interval of the series' grid: the
      fixed-step `scan` solve and `saveat="steps"` need it, a solve with a structure
      lever is bounded by those steps (`max_steps`), and padding a series (repeating its
      last time) would add steps, so that length stages compile one program each.
    - `fused`: the fused loop (`fused.py`) runs it: PID's loop where `adaptive`,
      StepTo's otherwise.
    - `fused_adjoint`: the reverse mode the recommended step takes when the fused solve
      runs it (`recommended.fused_levers`), the faster in this machine's levers records
      (`figures/tables/step.md`); None where the fused loop does not run it.
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
        """Diffrax's step-size controller for one solve and its initial step `dt0`
        (None where the controller sets the steps itself).

        - `ts`: the series' observation times, shape `(n_times,)`.
        - `rtol`, `atol`: the problem's tolerances (an adaptive controller's).
        """

    def max_steps(self, bound: int, lever: bool, n_times: int) -> int:
        """The solve's step bound on a grid of `n_times` points: the structure's `bound`
        (`Structure.max_steps`), except that an `on_grid` controller's solve with a
        structure `lever` (not `Structure.is_default`) is bounded by its own steps, one
        per interval. Diffrax's default solve keeps its bound (the program the study
        measured first)."""
        if self.on_grid and lever:
            return n_times - 1
        return bound


class PID(AbstractController):
    """Diffrax's `PIDController` with the problem's tolerances; the first step is the
    grid's first interval."""

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
    """The controller named `controller` (an `AbstractController` passes through); a
    ValueError naming the valid choices if there is none."""
    if isinstance(controller, AbstractController):
        return controller
    return lookup(CONTROLLERS, "controller", controller)()


def on_grid_names() -> str:
    """The registered controllers that step on the grid, as an error message names
    them (`controller='stepto'`)."""
    names = [repr(n) for n, c in CONTROLLERS.items() if c.on_grid]
    return "controller=" + " or ".join(names) if names else "a controller on the grid"
