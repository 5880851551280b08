"""The solve's structure: how diffrax saves, differentiates and bounds a solve
(`Structure`), and which structures a controller (`controllers.AbstractController`)
can run."""

import dataclasses

import diffrax
import jax

from .controllers import AbstractController, on_grid_names
from .tsit5 import StraightTsit5

MAX_STEPS = 4096
RTOL = 1e-3
ATOL = 1e-6

# How a batch is solved: one solve per sample (vmap), the batch as one ODE, or a
# fixed-step Tsit5 written as `lax.scan` over each series' grid (StepTo only).
SOLVES = ("per_sample", "within_ode", "scan")
# Where the solution is saved: `SaveAt(ts=...)` (an inner loop over the saved times in
# every solver step), `SaveAt(dense=True)` evaluated at the times afterwards, or
# `SaveAt(steps=True)` (StepTo on the series' grid: every step ends at a saved time).
SAVEATS = ("ts", "dense", "steps")
# The backward pass: diffrax's default `RecursiveCheckpointAdjoint` (checkpoints about
# sqrt(2 max_steps), a conditional per backward step), the same with one checkpoint per
# step (`checkpoints=max_steps`: no recomputation, no conditional), or `DirectAdjoint`.
# A checkpointed `lax.scan` over `max_steps` (`scan`) is the fused loop's alone.
ADJOINTS = ("recursive", "all_steps", "direct", "scan", "checkpointed_scan")
# How Tsit5 runs its stages within a solver step: diffrax's default, a checkpointed
# while loop over the stages (`scan_kind=None`), equinox's bounded loop
# (`scan_kind="bounded"`: a `lax.scan` over the stages with a conditional each), or
# straight-line code with no loop over the stages (`tsit5.StraightTsit5`).
STAGES = ("loop", "bounded", "unrolled")
# Which loop runs the solve: diffrax's `diffeqsolve`, or the package's fused loop
# (`fused.py`: Tsit5 and the controller as one loop carrying only what a step needs;
# it saves at the observation times itself and runs its stages as straight-line code).
INTEGRATORS = ("diffrax", "fused")
# The adjoints the fused loop takes (`fused.REVERSE`); `scan` is the fused loop's alone.
FUSED_ADJOINTS = ("all_steps", "recursive", "scan", "checkpointed_scan")


@dataclasses.dataclass(frozen=True)
class Structure:
    """How the training step's solve is built; the default is diffrax's default.

    - `solve`: one of `SOLVES`.
    - `saveat`: one of `SAVEATS`.
    - `adjoint`: one of `ADJOINTS`.
    - `max_steps`: the solve's step bound under PID (it sizes the default adjoint's
      checkpoints and, with `all_steps` or `direct`, the stored steps). Under StepTo
      every structure lever bounds the solve by the steps it takes: one per interval
      of the grid.
    - `unroll`: `lax.scan`'s unroll with `solve="scan"`.
    - `stages`: one of `STAGES`.
    - `integrator`: one of `INTEGRATORS`.
    """

    solve: str = "per_sample"
    saveat: str = "ts"
    adjoint: str = "recursive"
    max_steps: int = MAX_STEPS
    unroll: int = 1
    stages: str = "loop"
    integrator: str = "diffrax"

    @property
    def is_default(self) -> bool:
        """Diffrax's default solve, as the study measured it first."""
        return (
            self.saveat == "ts"
            and self.adjoint == "recursive"
            and self.max_steps == MAX_STEPS
            and self.stages == "loop"
            and self.integrator == "diffrax"
        )

    def solver(self) -> diffrax.Tsit5:
        """Tsit5, its stages run as `stages` says."""
        if self.stages == "unrolled":
            return StraightTsit5()
        return diffrax.Tsit5() if self.stages == "loop" else diffrax.Tsit5(scan_kind="bounded")


def check_structure(structure: Structure, controller: AbstractController) -> None:
    """Raise a ValueError if `structure` cannot run with `controller` (naming the
    valid choices)."""
    for name, choices in (
        ("solve", SOLVES),
        ("saveat", SAVEATS),
        ("adjoint", ADJOINTS),
        ("stages", STAGES),
        ("integrator", INTEGRATORS),
    ):
        value = getattr(structure, name)
        if value not in choices:
            raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(choices)}")
    if controller.on_grid and structure.max_steps != MAX_STEPS:
        raise ValueError(
            f"max_steps bounds the PID solve; {controller.label}'s solve is bounded by its "
            f"own steps (one per interval of the grid): leave max_steps at {MAX_STEPS}"
        )
    if not controller.on_grid:
        if structure.solve == "scan":
            raise ValueError(f"solve='scan' is a fixed-step solve: it needs {on_grid_names()}")
        if structure.saveat == "steps":
            raise ValueError(f"saveat='steps' saves at StepTo's steps: it needs {on_grid_names()}")
    if structure.integrator == "fused":
        if not controller.fused:
            raise ValueError(
                f"the fused loop has no controller {controller.name!r}: it needs "
                "integrator='diffrax'"
            )
        check_fused(structure)
    elif structure.adjoint == "scan":
        raise ValueError("adjoint='scan' is the fused solve's: it needs integrator='fused'")
    if structure.solve == "scan" and not structure.is_default:
        raise ValueError(
            "solve='scan' has no diffrax saveat, adjoint, max_steps or stages: leave them default"
        )
    if structure.solve != "scan" and structure.unroll != 1:
        raise ValueError(f"unroll applies to solve='scan' only, got solve={structure.solve!r}")
    if not isinstance(structure.max_steps, int) or structure.max_steps < 1:
        raise ValueError(f"max_steps must be a whole number >= 1, got {structure.max_steps!r}")
    if not isinstance(structure.unroll, int) or structure.unroll < 1:
        raise ValueError(f"unroll must be a whole number >= 1, got {structure.unroll!r}")


def check_fused(structure: Structure) -> None:
    """Raise a ValueError if the fused solve cannot run `structure`: it is its own
    loop (no fixed-step `scan` solve), saves at the observation times itself and runs
    Tsit5's stages as straight-line code (saveat and stages stay default), and takes the
    adjoints of `FUSED_ADJOINTS`."""
    if structure.solve == "scan":
        raise ValueError("integrator='fused' is a solve of its own: solve='scan' cannot use it")
    if structure.saveat != "ts" or structure.stages != "loop":
        raise ValueError(
            "the fused solve saves at the observation times and runs its stages as "
            "straight-line code itself: leave saveat at ts and stages at loop"
        )
    if structure.adjoint not in FUSED_ADJOINTS:
        raise ValueError(
            f"the fused solve takes adjoint {', '.join(FUSED_ADJOINTS)}; got {structure.adjoint!r}"
        )


def solve_options(structure: Structure, controller: AbstractController, ts: jax.Array) -> dict:
    """`diffeqsolve`'s `saveat`, `adjoint` and `max_steps` for `structure` and
    `controller` on the times `ts` (shape `(n_times,)`); with `saveat="dense"` the
    caller evaluates the solution at `ts` itself."""
    max_steps = controller.max_steps(structure.max_steps, not structure.is_default, ts.shape[0])
    if structure.saveat == "ts":
        saveat = diffrax.SaveAt(ts=ts)
    elif structure.saveat == "dense":
        saveat = diffrax.SaveAt(dense=True)
    else:
        saveat = diffrax.SaveAt(t0=True, steps=True)
    adjoint: diffrax.AbstractAdjoint
    if structure.adjoint == "recursive":
        adjoint = diffrax.RecursiveCheckpointAdjoint()
    elif structure.adjoint == "all_steps":
        adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=max_steps)
    else:
        adjoint = diffrax.DirectAdjoint()
    return dict(saveat=saveat, adjoint=adjoint, max_steps=max_steps)


def saved_values(sol: diffrax.Solution, structure: Structure, ts: jax.Array) -> jax.Array:
    """The solution at the times `ts` (shape `(n_times, ...)`) from a solve made with
    `solve_options(structure, ...)`."""
    if structure.saveat == "dense":
        return jax.vmap(sol.evaluate)(ts)
    assert sol.ys is not None
    return sol.ys
