"""The solve's structure: how diffrax saves, differentiates and bounds a solve
(`Structure`), which loop runs it (the integrators as types: `AbstractIntegrator`,
`Diffrax`, `Fused`, `Kernel`), and which structures a controller
(`controllers.AbstractController`) can run."""

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import diffrax
import equinox as eqx
import jax
from jaxtyping import Array, Int

from . import fused, kernel, replay
from .controllers import AbstractController, on_grid_names
from .registry import Registered, lookup
from .tsit5 import StraightTsit5

MAX_STEPS = 4096
RTOL = 1e-3
ATOL = 1e-6

# Each lever of the solve's structure (`Structure`) is a type with one final subclass
# per choice, registered by the name scenarios and records hold.
SOLVE_KINDS: dict[str, type["AbstractSolveKind"]] = {}
SAVINGS: dict[str, type["AbstractSaving"]] = {}
REVERSES: dict[str, type["AbstractReverse"]] = {}
STAGE_RUNS: dict[str, type["AbstractStages"]] = {}


class AbstractSolveKind(Registered, eqx.Module, registry=SOLVE_KINDS):
    """How a batch is solved (`Structure.solve`): `one_ode`, as one ODE (within-ODE
    batching); `fixed_step`, as a fixed-step Tsit5 `lax.scan` over each series' grid
    (StepTo only: no diffrax saveat, adjoint, step bound or stages)."""

    name: eqx.AbstractClassVar[str]
    one_ode: ClassVar[bool] = False
    fixed_step: ClassVar[bool] = False


class PerSampleSolve(AbstractSolveKind):
    """One solve per sample (`vmap`, one step size each)."""

    name: ClassVar[str] = "per_sample"


class WithinODESolve(AbstractSolveKind):
    """The local batch as one ODE."""

    name: ClassVar[str] = "within_ode"
    one_ode: ClassVar[bool] = True


class ScanSolve(AbstractSolveKind):
    """StepTo's steps as a fixed-step `lax.scan`."""

    name: ClassVar[str] = "scan"
    fixed_step: ClassVar[bool] = True


class AbstractSaving(Registered, eqx.Module, registry=SAVINGS):
    """Where a diffrax solve saves its solution (`Structure.saveat`); `default`:
    diffrax's, as first measured; `on_grid`: at StepTo's steps (a controller on the grid)."""

    name: eqx.AbstractClassVar[str]
    default: ClassVar[bool] = False
    on_grid: ClassVar[bool] = False

    @abc.abstractmethod
    def saveat(self, ts: jax.Array) -> diffrax.SaveAt:
        """`diffeqsolve`'s `saveat` for the times `ts`."""

    def values(self, sol: diffrax.Solution, ts: jax.Array) -> jax.Array:
        """The solution at `ts` (the times first) from a solve saved so."""
        assert sol.ys is not None
        return sol.ys


class SaveAtTimes(AbstractSaving):
    """`SaveAt(ts=...)`: an inner loop over the saved times in every solver step."""

    name: ClassVar[str] = "ts"
    default: ClassVar[bool] = True

    def saveat(self, ts):
        return diffrax.SaveAt(ts=ts)


class SaveDense(AbstractSaving):
    """`SaveAt(dense=True)`, evaluated at the times afterwards."""

    name: ClassVar[str] = "dense"

    def saveat(self, ts):
        return diffrax.SaveAt(dense=True)

    def values(self, sol, ts):
        return jax.vmap(sol.evaluate)(ts)


class SaveAtSteps(AbstractSaving):
    """`SaveAt(steps=True)`: StepTo on the grid, every step ending at a saved time."""

    name: ClassVar[str] = "steps"
    on_grid: ClassVar[bool] = True

    def saveat(self, ts):
        return diffrax.SaveAt(t0=True, steps=True)


class AbstractReverse(Registered, eqx.Module, registry=REVERSES):
    """The backward pass (`Structure.adjoint`; `AbstractIntegrator.adjoints`); `default`:
    diffrax's, as first measured; `own_reverse`: a reverse loop replaying the accepted
    steps (the fused loop's, `replay.py`, or the kernel solve's, `kernel.py`)."""

    name: eqx.AbstractClassVar[str]
    default: ClassVar[bool] = False
    own_reverse: ClassVar[bool] = False

    def adjoint(self, max_steps: int) -> diffrax.AbstractAdjoint:
        """Diffrax's adjoint for a solve bounded by `max_steps`."""
        del max_steps
        return diffrax.DirectAdjoint()


class RecursiveReverse(AbstractReverse):
    """Diffrax's default `RecursiveCheckpointAdjoint`: about sqrt(2 max_steps)
    checkpoints, a conditional per backward step."""

    name: ClassVar[str] = "recursive"
    default: ClassVar[bool] = True

    def adjoint(self, max_steps):
        return diffrax.RecursiveCheckpointAdjoint()


class AllStepsReverse(AbstractReverse):
    """One checkpoint per step (`checkpoints=max_steps`): no recomputation or conditional."""

    name: ClassVar[str] = "all_steps"

    def adjoint(self, max_steps):
        return diffrax.RecursiveCheckpointAdjoint(checkpoints=max_steps)


class DirectReverse(AbstractReverse):
    """`DirectAdjoint`."""

    name: ClassVar[str] = "direct"


class ScanReverse(AbstractReverse):
    """A `lax.scan` over `max_steps` storing every step (the fused loop's)."""

    name: ClassVar[str] = "scan"


class CheckpointedScanReverse(AbstractReverse):
    """The same rematerialising each step (the fused loop's)."""

    name: ClassVar[str] = "checkpointed_scan"


class AcceptedStepsReverse(AbstractReverse):
    """The fused loop's own reverse loop, replaying only the accepted steps."""

    name: ClassVar[str] = replay.ADJOINT
    own_reverse: ClassVar[bool] = True


class AbstractStages(Registered, eqx.Module, registry=STAGE_RUNS):
    """How Tsit5 runs its stages within a solver step (`Structure.stages`)."""

    name: eqx.AbstractClassVar[str]
    default: ClassVar[bool] = False

    @abc.abstractmethod
    def solver(self) -> diffrax.AbstractERK:
        """Tsit5, its stages run so."""


class StagesLoop(AbstractStages):
    """Diffrax's default: a checkpointed while loop over the stages."""

    name: ClassVar[str] = "loop"
    default: ClassVar[bool] = True

    def solver(self):
        return diffrax.Tsit5()


class StagesBounded(AbstractStages):
    """Equinox's bounded loop: a `lax.scan` over the stages with a conditional each."""

    name: ClassVar[str] = "bounded"

    def solver(self):
        return diffrax.Tsit5(scan_kind="bounded")


class StagesUnrolled(AbstractStages):
    """Straight-line code with no loop over the stages (`tsit5.StraightTsit5`)."""

    name: ClassVar[str] = "unrolled"

    def solver(self):
        return StraightTsit5()


SOLVES = tuple(SOLVE_KINDS)
SAVEATS = tuple(SAVINGS)
ADJOINTS = tuple(REVERSES)
STAGES = tuple(STAGE_RUNS)


class Tolerances(Protocol):
    """The tolerances an integrator reads of a problem."""

    @property
    def rtol(self) -> float: ...

    @property
    def atol(self) -> float: ...


class SolveSpec(Protocol):
    """What an integrator reads of a solve (`model.Solve`, which this cannot import)."""

    @property
    def controller(self) -> AbstractController: ...

    @property
    def structure(self) -> "Structure": ...

    @property
    def problem(self) -> Tolerances: ...


# Which loop runs the solve, by name, in the order of the choices (`Registered`).
INTEGRATORS: dict[str, type["AbstractIntegrator"]] = {}


class AbstractIntegrator(Registered, eqx.Module, registry=INTEGRATORS):
    """Which loop runs a solve: one final subclass per loop, registered (`INTEGRATORS`),
    refuses the structures it cannot run (`check`) and solves one ODE (`solve`).

    - `label`: how error messages name it; `adjoints`: the reverse modes it takes.
    - `own_saving`: it saves at the observation times and runs Tsit5's stages as
      straight-line code itself (`saveat` and `stages` stay default).
    - `solves_batch`: one solve per sample is its own `solve_batch`, not `solve` under
      `vmap`; `mlp_field`: it runs only an MLP field of the state alone.
    - `own_loop`: how errors name its loop where it is its own (the fused loop's
      controllers, no `solve='scan'`); None for diffrax's.
    """

    name: eqx.AbstractClassVar[str]
    label: eqx.AbstractClassVar[str]
    adjoints: eqx.AbstractClassVar[tuple[str, ...]]
    own_saving: eqx.AbstractClassVar[bool]
    solves_batch: ClassVar[bool] = False
    mlp_field: ClassVar[bool] = False
    own_loop: ClassVar[str | None] = None

    @abc.abstractmethod
    def solve(
        self, field: Callable[..., Any], ts: Array, y0: Array, spec: SolveSpec, args: Any = None
    ) -> tuple[Array, Int[Array, ""]]:
        """One ODE `field(t, y, args)` from `y0` solved as `spec` (`model.Solve`) says,
        saved at `ts` (shape `(n_times,)`): `(ys, num_steps)`, the times on the first
        axis of `ys`, and the solver's forward step count."""

    def solve_batch(
        self, field: Callable[..., Any], ts: Array, y0: Array, spec: SolveSpec, args: Any = None
    ) -> tuple[Array, Int[Array, " batch"]]:
        """A batch's series (`ts` `(batch, n_times)`) together, where `solves_batch`."""
        raise NotImplementedError(f"{self.label} solves one series at a time")

    def check(self, structure: "Structure", controller: AbstractController) -> None:
        """Raise a one-line ValueError if it cannot run `structure` with `controller`."""
        if self.own_loop is not None and not controller.fused:
            raise ValueError(
                f"{self.own_loop} has no controller {controller.name!r}: it needs "
                f"integrator={Diffrax.name!r}"
            )
        if self.own_loop is not None and structure.solve_kind.fixed_step:
            raise ValueError(
                f"integrator={self.name!r} is a solve of its own: solve='scan' cannot use it"
            )
        if self.own_saving and not (structure.saving.default and structure.stage_run.default):
            raise ValueError(
                f"{self.label} saves at the observation times and runs its stages as "
                "straight-line code itself: leave saveat at ts and stages at loop"
            )
        if structure.adjoint not in self.adjoints:
            takers = [
                f"integrator={n!r}"
                for n, c in INTEGRATORS.items()
                if structure.adjoint in c.adjoints
            ]
            raise ValueError(
                f"{self.label} takes adjoint {', '.join(self.adjoints)}; got "
                f"{structure.adjoint!r}"
                + (f", which needs {' or '.join(takers)}" if takers else "")
            )


class Diffrax(AbstractIntegrator):
    """Diffrax's `diffeqsolve` with any controller, as `Structure` and `solve_options` say."""

    name: ClassVar[str] = "diffrax"
    label: ClassVar[str] = "diffrax's loop"
    adjoints: ClassVar[tuple[str, ...]] = ("recursive", "all_steps", "direct")
    own_saving: ClassVar[bool] = False

    def solve(self, field, ts, y0, spec, args=None):
        structure, problem = spec.structure, spec.problem
        stepsize_controller, dt0 = spec.controller.stepsize_controller(
            ts, problem.rtol, problem.atol
        )
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            structure.stage_run.solver(),
            ts[0],
            ts[-1],
            dt0,
            y0,
            args=args,
            stepsize_controller=stepsize_controller,
            **solve_options(structure, spec.controller, ts),
        )
        return structure.saving.values(sol, ts), sol.stats["num_steps"]


class Fused(AbstractIntegrator):
    """The package's fused loop (`fused.py`; with `accepted_steps`, its own reverse loop,
    `replay.py`): PID where the controller is `adaptive`, else StepTo."""

    name: ClassVar[str] = "fused"
    label: ClassVar[str] = "the fused solve"
    adjoints: ClassVar[tuple[str, ...]] = (*fused.REVERSE, replay.ADJOINT)
    own_saving: ClassVar[bool] = True
    own_loop: ClassVar[str | None] = "the fused loop"
    # The forward PID loop alone, counting the accepted steps (the floor's count).
    count_accepted: bool = False

    def solve(self, field, ts, y0, spec, args=None):
        controller, structure, problem = spec.controller, spec.structure, spec.problem
        own_reverse = structure.reverse.own_reverse  # `replay.py`
        if controller.adaptive:
            pid = (field, ts, y0, args, problem.rtol, problem.atol, structure.max_steps)
            if own_reverse or self.count_accepted:
                return replay.solve_pid(*pid, structure.mlp_reverse, self.count_accepted)
            return fused.solve_pid(*pid, structure.adjoint)
        if own_reverse:
            return replay.solve_stepto(field, ts, y0, args)
        return fused.solve_stepto(field, ts, y0, args, structure.adjoint)


class Kernel(AbstractIntegrator):
    """The kernel solve (`kernel.py`): the whole solve of a block of series as one Pallas
    kernel and its reverse pass as one more, for a field that is an MLP of the state
    alone; PID where the controller is `adaptive`, else StepTo."""

    name: ClassVar[str] = "kernel"
    label: ClassVar[str] = "the kernel solve"
    adjoints: ClassVar[tuple[str, ...]] = (replay.ADJOINT,)
    own_saving: ClassVar[bool] = True
    solves_batch: ClassVar[bool] = True
    mlp_field: ClassVar[bool] = True
    own_loop: ClassVar[str | None] = "the kernel solve"

    def solve(self, field, ts, y0, spec, args=None):
        del args  # an MLP field reads neither its time nor its args
        problem = spec.problem
        bounds = (problem.rtol, problem.atol, spec.structure.max_steps)
        return kernel.solve(field, ts, y0, spec.controller.adaptive, *bounds)

    # `kernel.solve` takes a batch's grids (`ts` of shape `(batch, n_times)`) too.
    solve_batch = solve


def parse_integrator(integrator: "str | AbstractIntegrator") -> AbstractIntegrator:
    """The integrator named `integrator` (an `AbstractIntegrator` passes through)."""
    if isinstance(integrator, AbstractIntegrator):
        return integrator
    return lookup(INTEGRATORS, "integrator", integrator)()


@dataclasses.dataclass(frozen=True)
class Structure:
    """How the step's solve is built (the scenario's same-named fields; default diffrax's)."""

    solve: str = "per_sample"
    saveat: str = "ts"
    adjoint: str = "recursive"
    max_steps: int = MAX_STEPS
    unroll: int = 1
    stages: str = "loop"
    integrator: AbstractIntegrator = Diffrax()
    mlp_reverse: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "integrator", parse_integrator(self.integrator))

    def fields(self) -> dict[str, Any]:
        """Its levers as a scenario's fields hold them (the integrator by name)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**values, "integrator": self.integrator.name}

    @property
    def solve_kind(self) -> AbstractSolveKind:
        """`solve` as its type (a one-line ValueError if unknown; so the others)."""
        return lookup(SOLVE_KINDS, "solve", self.solve)()

    @property
    def saving(self) -> AbstractSaving:
        return lookup(SAVINGS, "saveat", self.saveat)()

    @property
    def reverse(self) -> AbstractReverse:
        return lookup(REVERSES, "adjoint", self.adjoint)()

    @property
    def stage_run(self) -> AbstractStages:
        return lookup(STAGE_RUNS, "stages", self.stages)()

    @property
    def is_default(self) -> bool:
        """Diffrax's default solve, as the study measured it first."""
        return (
            self.saving.default
            and self.reverse.default
            and self.max_steps == MAX_STEPS
            and self.stage_run.default
            and isinstance(self.integrator, Diffrax)
        )


def check_structure(structure: Structure, controller: AbstractController) -> None:
    """Raise a ValueError if `structure` cannot run with `controller`."""
    # Each lever's name looked up (a one-line ValueError naming the choices if unknown).
    kind, saving = structure.solve_kind, structure.saving
    _ = structure.reverse, structure.stage_run
    if controller.on_grid and structure.max_steps != MAX_STEPS:
        raise ValueError(
            f"max_steps bounds the PID solve; {controller.label}'s solve is bounded by its "
            f"own steps (one per interval of the grid): leave max_steps at {MAX_STEPS}"
        )
    if not controller.on_grid:
        if kind.fixed_step:
            raise ValueError(f"solve='scan' is a fixed-step solve: it needs {on_grid_names()}")
        if saving.on_grid:
            raise ValueError(f"saveat='steps' saves at StepTo's steps: it needs {on_grid_names()}")
    structure.integrator.check(structure, controller)
    own_reverse = isinstance(structure.integrator, Fused) and structure.reverse.own_reverse
    by_hand = own_reverse and kind.one_ode and controller.adaptive
    if structure.mlp_reverse and not by_hand:
        raise ValueError(
            "mlp_reverse is a reverse step of the fused solve's own reverse loop under PID: "
            f"it needs integrator={Fused.name!r}, adjoint={replay.ADJOINT!r}, "
            "solve='within_ode' and an adaptive controller"
        )
    if kind.fixed_step and not structure.is_default:
        raise ValueError(
            "solve='scan' has no diffrax saveat, adjoint, max_steps or stages: leave them default"
        )
    if not kind.fixed_step and structure.unroll != 1:
        raise ValueError(f"unroll applies to solve='scan' only, got solve={structure.solve!r}")
    if not isinstance(structure.max_steps, int) or structure.max_steps < 1:
        raise ValueError(f"max_steps must be a whole number >= 1, got {structure.max_steps!r}")
    if not isinstance(structure.unroll, int) or structure.unroll < 1:
        raise ValueError(f"unroll must be a whole number >= 1, got {structure.unroll!r}")


def solve_options(structure: Structure, controller: AbstractController, ts: jax.Array) -> dict:
    """`diffeqsolve`'s `saveat`, `adjoint` and `max_steps` on the times `ts`."""
    max_steps = controller.max_steps(structure.max_steps, not structure.is_default, ts.shape[0])
    adjoint = structure.reverse.adjoint(max_steps)
    return dict(saveat=structure.saving.saveat(ts), adjoint=adjoint, max_steps=max_steps)
