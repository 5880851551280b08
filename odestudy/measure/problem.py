"""What a scenario trains: the problem (data, vector field, losses, optimiser, schedule).

A problem is a type, as diffrax's solvers are: `AbstractProblem` says what the study
needs, `Oscillator` (the reference's toy set, the default) is one final implementation,
and a user brings their own by subclassing it in any importable module and naming it as
`module:object` (`odestudy run --problem own_problem:PROBLEM`).
"""

import functools
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from .data import Dataset, make_dataset
from .solvers import ATOL, RTOL


class VectorField(eqx.Module):
    """`dy/dt = MLP(y)`: 2 -> 2, width 64, depth 2, softplus (the oscillator's field)."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int = 64, depth: int = 2):
        self.mlp = eqx.nn.MLP(2, 2, width, depth, activation=jax.nn.softplus, key=key)

    def __call__(self, t: Any, y: Float[Array, "2"], args: Any) -> Float[Array, "2"]:
        del t, args
        return self.mlp(y)


class SharedField(eqx.Module):
    """`copies` oscillators' field: one softplus MLP 2 -> width -> width -> 2 applied to
    each pair of the state (shape `(2 * copies,)`), the weights shared by all pairs."""

    mlp: eqx.nn.MLP
    copies: int = eqx.field(static=True)

    def __init__(self, key: jax.Array, width: int, copies: int):
        self.mlp = eqx.nn.MLP(2, 2, width, 2, activation=jax.nn.softplus, key=key)
        self.copies = copies

    def __call__(self, t: Any, y: Float[Array, " state"], args: Any) -> Float[Array, " state"]:
        del t, args
        return jax.vmap(self.mlp)(y.reshape(self.copies, 2)).reshape(-1)


class AbstractProblem(eqx.Module):
    """A neural-ODE training problem: what the study trains, independent of how the step
    runs over devices. Subclass it (an `eqx.Module`) and implement the abstract parts.

    Class attributes (facts about the problem, read before anything compiles):

    - `name`: a short name for tables and records.
    - `time_dependent`: the vector field reads its time argument `t`. The study's solves
      then give it the true time in every stage; a solve that cannot is refused.
    - `uniform_grid`: every series is observed on an evenly spaced grid (within-ODE
      batching rescales time by the grid's step and needs it).
    - `trained_loss`: the evaluation loss at or below which a model counts as trained;
      a record above it says `trained: false` and no table counts its speedup.
    - `rtol`, `atol`: the PID controller's tolerances.
    - `recommended_max_steps`: a bound on the adaptive solve's steps that the
      recommended step may use (None: keep the scenario's `max_steps`); set it only
      where the trained field is known to need fewer.
    - `has_spread`: `make_data` honours the complexity knob `spread` (else only 0).
    """

    name: eqx.AbstractClassVar[str]
    time_dependent: eqx.AbstractClassVar[bool]
    uniform_grid: eqx.AbstractClassVar[bool]
    trained_loss: eqx.AbstractClassVar[float]
    rtol: ClassVar[float] = RTOL
    atol: ClassVar[float] = ATOL
    recommended_max_steps: ClassVar[int | None] = None
    has_spread: ClassVar[bool] = False

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        """`size` series as a `Dataset`: `ts` of shape `(size, n_times)` (increasing in
        each row), `ys` of shape `(size, n_times, state)` with `ys[:, 0]` the initial
        states. The same key must give the same data. `spread`: the complexity knob
        (only where `has_spread`; the study passes 0 otherwise)."""
        raise NotImplementedError

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        """The vector field to train, called as `field(t, y, args)` with `y` one state
        (shape `(state,)`); `width` is the scenario's width knob (hidden units)."""
        raise NotImplementedError

    def loss(
        self,
        pred: Float[Array, "batch times state"],
        ys: Float[Array, "batch times state"],
        mask: Float[Array, "batch times 1"] | None,
    ) -> Float[Array, ""]:
        """The training loss of solved series `pred` against observations `ys`; `mask`
        is 1 where a point is observed and 0 where it pads a shorter series, or None
        where every point is observed. Default: the mean squared error over observed
        points."""
        if mask is None:
            return jnp.mean((pred - ys) ** 2)
        return jnp.sum(mask * (pred - ys) ** 2) / (jnp.sum(mask) * ys.shape[-1])

    def eval_loss(
        self,
        pred: Float[Array, "batch times state"],
        ys: Float[Array, "batch times state"],
        mask: Float[Array, "batch times 1"] | None,
    ) -> Float[Array, ""]:
        """The evaluation loss (compared with `trained_loss`); default: `loss`."""
        return self.loss(pred, ys, mask)

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        """The optax optimiser at the scenario's learning rate; default: adabelief."""
        return optax.adabelief(learning_rate)

    def schedule(self, scale: str) -> dict[str, Any]:
        """The problem's own training at `scale`, as `Scenario` fields that replace the
        scale's (`steps_per_stage`, `learning_rate`, `length_fractions`, `batch`,
        `dataset_size`, `eval_size`, `warmup_steps`, `optimiser_state`); default: none."""
        del scale
        return {}


class Oscillator(AbstractProblem):
    """The reference's problem: diffrax's nonlinear-oscillator toy set
    (`data.make_dataset`), a 2 -> width -> width -> 2 softplus MLP field, MSE, adabelief.
    The study's default; its records carry no `problem` field in their key."""

    name: ClassVar[str] = "oscillator"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    # The untrained field sits near 0.25; trained quick rows end near 0.004 (issue 22).
    trained_loss: ClassVar[float] = 0.02
    # A trained field takes about 25 PID steps per series (the levers benchmark).
    recommended_max_steps: ClassVar[int | None] = 64
    has_spread: ClassVar[bool] = True

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        return make_dataset(size, key, spread)

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        return VectorField(key, width=width)


class OscillatorBank(AbstractProblem):
    """`COPIES` independent oscillators of the reference's kind side by side in one state
    (dimension 16): series `i` stacks series `COPIES * i ... COPIES * i + COPIES - 1` of
    the oscillator's data, all on the same grid, learned by one MLP shared by the copies
    (`SharedField`): a solver step evaluates it `COPIES` times, and the adaptive step
    size is chosen on all 16 components. The study's workload with a larger state
    (`study.workloads`); its loss is per component, on the oscillator's scale. (One
    16 -> 64 -> 64 -> 16 MLP did not train in the quick scale's 200 steps: evaluation
    loss 0.28.)"""

    name: ClassVar[str] = "oscillator_bank"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.02  # the oscillator's threshold, per component
    # Its trained field takes as many PID steps per series as the oscillator's (the
    # map's trained 1-device PID row: at most 24 per series, 21 within-ODE), so the
    # oscillator's bound. Without one the recommended step's one-checkpoint-per-step
    # adjoint kept diffrax's bound of 4096 and ran slower than the default.
    recommended_max_steps: ClassVar[int | None] = 64
    COPIES: ClassVar[int] = 8

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        del spread  # no complexity knob: the copies share one grid
        data = make_dataset(size * self.COPIES, key)
        n_times = data.ys.shape[1]
        pairs = data.ys.reshape(size, self.COPIES, n_times, 2).transpose(0, 2, 1, 3)
        ys = pairs.reshape(size, n_times, 2 * self.COPIES)
        return Dataset(data.ts[:size], ys, np.ones(size, dtype=data.time_scale.dtype))

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        return SharedField(key, width, self.COPIES)


# The problems shipped with the package, by name.
PROBLEMS: dict[str, AbstractProblem] = {
    "oscillator": Oscillator(),
    "oscillator_bank": OscillatorBank(),
}
DEFAULT_PROBLEM = "oscillator"


def _import(module: str):
    """Import `module`, also from the working directory (as `python -m` would)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        cwd = str(Path.cwd())
        if exc.name != module.split(".")[0] or cwd in sys.path:
            raise
        sys.path.insert(0, cwd)
        return importlib.import_module(module)


@functools.cache
def resolve_problem(spec: str) -> AbstractProblem:
    """The problem named by `spec`: a shipped problem's name (`PROBLEMS`), or
    `module:object` where `object` is an `AbstractProblem` instance or subclass (made
    with no arguments) in an importable module. ValueError saying why otherwise."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"problem must be a name or module:object, got {spec!r}")
    if spec in PROBLEMS:
        return PROBLEMS[spec]
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(
            f"unknown problem {spec!r}; valid choices: {', '.join(PROBLEMS)}, or "
            "module:object naming an odestudy.AbstractProblem"
        )
    try:
        found: Any = getattr(_import(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load problem {spec!r}: {type(exc).__name__}: {exc}") from None
    if isinstance(found, type) and issubclass(found, AbstractProblem):
        found = found()
    if not isinstance(found, AbstractProblem):
        raise ValueError(
            f"problem {spec!r} is a {type(found).__name__}, not an odestudy.AbstractProblem"
        )
    return found


def problem_facts(problem: AbstractProblem) -> dict[str, Any]:
    """What a record says of its problem."""
    cls = type(problem)
    return {
        "name": problem.name,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "time_dependent": problem.time_dependent,
        "uniform_grid": problem.uniform_grid,
        "trained_loss": problem.trained_loss,
        "rtol": problem.rtol,
        "atol": problem.atol,
    }


def check_uniform_grids(problem: AbstractProblem, ts: np.ndarray) -> None:
    """Raise ValueError if `problem` claims evenly spaced grids (`uniform_grid`) and a
    row of `ts` (shape `(n, n_times)`) is not one: within-ODE batching would train on
    wrong times without an error."""
    steps = np.diff(np.asarray(ts, dtype=np.float64), axis=1)
    uneven = ~np.isclose(steps, steps[:, :1], rtol=1e-4, atol=1e-6).all(axis=1)
    if uneven.any():
        raise ValueError(
            f"problem {problem.name!r} says uniform_grid=True, but {int(uneven.sum())} of "
            f"{len(steps)} series are not evenly spaced (first: row {int(np.argmax(uneven))})"
            "; set uniform_grid=False (within-ODE batching is then refused)"
        )


def stage_lengths(n_times: int, fractions: Sequence[float]) -> list[int]:
    """Observations per series in each length stage: `fraction` of the series' `n_times`
    points, at least 2. The one place stage lengths are computed."""
    return [max(2, int(n_times * fraction)) for fraction in fractions]
