"""What a scenario trains: the problem (data, model, losses, optimiser, schedule).

`AbstractODEProblem` is any neural ODE: it owns its model, batch and loss; the study owns
the solve, which it hands to the loss. `AbstractProblem`, whose ODE state is the observed
series itself, runs through `SeriesProblem`. A user names a subclass `module:object` or
registers an object (`register_problem`).
"""

import abc
import dataclasses
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
from .loss import Mean
from .mlp_reverse import AbstractMLPField
from .solvers import ATOL, RTOL


class VectorField(AbstractMLPField):
    """`dy/dt = MLP(y)`: 2 -> 2, width 64, depth 2, softplus (the oscillator's field)."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int = 64, depth: int = 2):
        self.mlp = eqx.nn.MLP(2, 2, width, depth, activation=jax.nn.softplus, key=key)

    def __call__(self, t: Any, y: Float[Array, "2"], args: Any) -> Float[Array, "2"]:
        del t, args
        return self.mlp(y)


class SharedField(AbstractMLPField):
    """`copies` oscillators' field: one softplus MLP 2 -> width -> width -> 2 applied to
    each pair of the state (shape `(2 * copies,)`), the weights shared by all pairs (an
    `AbstractMLPField` of `copies` groups: `mlp_reverse` runs it)."""

    mlp: eqx.nn.MLP
    copies: int = eqx.field(static=True)

    @property
    def groups(self) -> int:
        return self.copies

    def __init__(self, key: jax.Array, width: int, copies: int):
        self.mlp = eqx.nn.MLP(2, 2, width, 2, activation=jax.nn.softplus, key=key)
        self.copies = copies

    def __call__(self, t: Any, y: Float[Array, " state"], args: Any) -> Float[Array, " state"]:
        del t, args
        return jax.vmap(self.mlp)(y.reshape(self.copies, 2)).reshape(-1)


def observed(ts: Float[Array | np.ndarray, "batch times"]) -> Float[Array, "batch times"]:
    """Which points of each series are observations (1.0), not padding (a repeated time)."""
    xp = jnp if isinstance(ts, jax.Array) else np
    later = ts[:, 1:] > ts[:, :-1]
    return xp.concatenate([xp.ones_like(later[:, :1]), later], axis=1).astype(ts.dtype)


def select_series(data: Any, idx: np.ndarray) -> Any:
    """The series at indices `idx` of `data` (the series on every leaf's first axis)."""
    return jax.tree.map(lambda x: x[idx], data)


class AbstractProblemFacts(eqx.Module):
    """The facts every problem declares (class attributes, read before anything
    compiles) and the training choices both problem forms share.

    - `time_dependent`: the field reads its time `t`; `uniform_grid`: every series is on
      an evenly spaced grid (within-ODE batching rescales time by its step).
    - `trained_loss`: the evaluation loss at or below which a model counts as trained
      (a record above it says `trained: false`; no table counts its speedup).
    - `rtol`, `atol`: PID's tolerances; `has_spread`: `make_data` honours `spread`.
    """

    name: eqx.AbstractClassVar[str]
    time_dependent: eqx.AbstractClassVar[bool]
    uniform_grid: eqx.AbstractClassVar[bool]
    trained_loss: eqx.AbstractClassVar[float]
    rtol: ClassVar[float] = RTOL
    atol: ClassVar[float] = ATOL
    has_spread: ClassVar[bool] = False

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        """The optax optimiser at the scenario's learning rate; default: adabelief."""
        return optax.adabelief(learning_rate)

    def schedule(self, scale: str) -> dict[str, Any]:
        """The problem's own training at `scale`: `Scenario` fields replacing the scale's."""
        del scale
        return {}


class AbstractODEProblem(AbstractProblemFacts):
    """Any neural-ODE training problem: it owns its model, batch and loss; the study
    owns the solve (`docs/own_model.md`). `needs_key`: the loss draws random numbers
    from its `key` (one per step and device); False: it gets `key=None`."""

    needs_key: ClassVar[bool] = True

    @abc.abstractmethod
    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Any:
        """`size` series as a pytree of host arrays, every leaf with `size` on its first
        axis (the study splits batches along it). The same key must give the same data.
        `spread`: the complexity knob (only where `has_spread`; else 0)."""

    @abc.abstractmethod
    def times(self, data: Any) -> Float[np.ndarray, "size times"]:
        """The observation times of every series of `data` (`make_data`'s or a batch of
        it), shape `(size, n_times)`: increasing in each row, apart from padding at its
        end that repeats the last time (`observed`)."""

    @abc.abstractmethod
    def make_model(self, key: jax.Array, width: int) -> eqx.Module:
        """The model to train (any equinox module: an encoder, a vector field and a
        decoder, for example); `width` is the scenario's width knob (hidden units). Its
        inexact arrays are trained; other leaves (integers, static fields) are kept."""

    @abc.abstractmethod
    def loss(self, model: Any, batch: Any, key: jax.Array | None, solve: Any) -> Any:
        """The training loss of `model` on `batch`: a scalar mean, or a `Mean(total,
        count)` that reduces exactly over devices. `key`: this step's and device's (None
        unless `needs_key`). `solve`: the study's batched solve (`model.BatchSolve`),
        called on the whole batch (not inside your own `vmap`: the study reads its
        solver steps)."""

    def eval_loss(self, model: Any, batch: Any, key: jax.Array | None, solve: Any) -> Any:
        """The evaluation loss (compared with `trained_loss`; full series, diffrax's default
        solve, a fixed key); default: `loss`."""
        return self.loss(model, batch, key, solve)

    def take(self, data: Any, idx: np.ndarray) -> Any:
        """The batch of the series at indices `idx` (what the loss receives)."""
        return select_series(data, idx)

    def truncate(self, data: Any, length: int, total: int) -> Any:
        """The first `length` observations of every series, padded to `total` points by
        repeating the last kept one, for the study's length stages. Default: every leaf
        with `n_times` points on its second axis is cut so; other leaves are kept."""
        n_times = np.shape(self.times(data))[1]
        if not 1 <= length <= total <= n_times:
            raise ValueError(f"need 1 <= length <= total <= {n_times}, got {length}, {total}")
        idx = np.minimum(np.arange(total), length - 1)

        def cut(x):
            return x[:, idx] if np.ndim(x) >= 2 and np.shape(x)[1] == n_times else x

        return jax.tree.map(cut, data)

    def size(self, data: Any) -> int:
        """How many series `data` holds."""
        return int(np.shape(self.times(data))[0])


class AbstractProblem(AbstractProblemFacts):
    """A neural-ODE training problem whose ODE state is the observed series itself: a
    field, data as a `Dataset`, and a loss of solved against observed series, run as
    `SeriesProblem` (every solve from `ys[:, 0]`, `args=None`)."""

    @abc.abstractmethod
    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        """`size` series as a `Dataset` (`ts` `(size, n_times)`, `ys` `(size, n_times,
        state)`, `time_scale` `(size,)`, not read); the same key must give the same data."""

    @abc.abstractmethod
    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        """The vector field to train, called as `field(t, y, args)` with `y` one state
        (shape `(state,)`) and `args` None; `width`: the scenario's hidden units."""

    def loss(
        self,
        pred: Float[Array, "batch times state"],
        ys: Float[Array, "batch times state"],
        mask: Float[Array, "batch times 1"] | None,
    ) -> Float[Array, ""]:
        """The loss of solved series `pred` against observations `ys` (`mask`: 1 where
        observed, 0 where padding, or None); default: the MSE over observed points."""
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


class Oscillator(AbstractProblem):
    """The reference's problem: diffrax's nonlinear-oscillator toy set
    (`data.make_dataset`), a 2 -> width -> width -> 2 softplus MLP field, MSE, adabelief.
    The study's default; its records carry no `problem` field in their key."""

    name: ClassVar[str] = "oscillator"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    # The level a trained field must reach, fixed before the runs, well below the
    # untrained field's loss (the records hold the losses reached).
    trained_loss: ClassVar[float] = 0.02
    has_spread: ClassVar[bool] = True

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        return make_dataset(size, key, spread)

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        return VectorField(key, width=width)


class OscillatorBank(AbstractProblem):
    """`COPIES` independent oscillators side by side in one state (dimension 16), on one
    grid, learned by one MLP shared by the copies (`SharedField`): the study's workload
    with a larger state. (One 16 -> 64 -> 64 -> 16 MLP did not train in the quick
    scale's 200 steps: evaluation loss 0.28.)"""

    name: ClassVar[str] = "oscillator_bank"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.02  # the oscillator's threshold, per component
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


@dataclasses.dataclass(frozen=True)
class GivenFacts:
    """The facts the study's solve reads of a problem, for a loss without a problem class."""

    time_dependent: bool
    uniform_grid: bool
    rtol: float = RTOL
    atol: float = ATOL
    name: str = "a loss without a problem class"


def read_through(name: str, source: str = "problem") -> Any:
    """A property reading fact `name` through the adapter's attribute `source`."""
    return property(lambda self: getattr(getattr(self, source), name))


class SeriesProblem(AbstractODEProblem):
    """An `AbstractProblem` as the study runs it: a batch is `(ts, ys)`; the loss solves
    the field from `ys[:, 0]` and applies the problem's `loss(pred, ys, mask)`, as a
    `Mean` weighted by the observed points where `weighted` (`for_data`)."""

    problem: AbstractProblem
    weighted: bool = eqx.field(default=False, static=True)
    needs_key: ClassVar[bool] = False

    # The series problem's facts, read through (declared there, not here).
    name = read_through("name")
    time_dependent = read_through("time_dependent")
    uniform_grid = read_through("uniform_grid")
    trained_loss = read_through("trained_loss")
    rtol = read_through("rtol")
    atol = read_through("atol")
    has_spread = read_through("has_spread")

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
        return self.problem.make_data(size, key, spread)

    def times(self, data: Any) -> Any:
        return data[0]  # a Dataset's or a batch's `ts`

    def make_model(self, key: jax.Array, width: int) -> eqx.Module:
        return self.problem.make_field(key, width)

    def _series_loss(self, which: Any, model: Any, batch: Any, solve: Any) -> Any:
        ts, ys = batch
        pred = solve(model, ts, ys[:, 0])
        # Within-ODE batching solves equal grids only: every point is observed.
        mask = None if solve.within_ode else observed(ts)[..., None]
        value = which(pred, ys, mask)
        if not self.weighted:
            return value
        count = (ys.size if mask is None else jnp.sum(mask) * ys.shape[-1]).astype(value.dtype)
        return Mean(value * count, count)

    def loss(self, model, batch, key, solve):
        del key
        return self._series_loss(self.problem.loss, model, batch, solve)

    def eval_loss(self, model, batch, key, solve):
        del key
        return self._series_loss(self.problem.eval_loss, model, batch, solve)

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        return self.problem.optimiser(learning_rate)

    def schedule(self, scale: str) -> dict[str, Any]:
        return self.problem.schedule(scale)

    def take(self, data: Dataset, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return data.ts[idx], data.ys[idx]

    def for_data(self, data: Dataset) -> "SeriesProblem":
        """This problem, `weighted` where the series of `data` differ in observed points."""
        counts = observed(np.asarray(data.ts)).sum(axis=1)
        return SeriesProblem(self.problem, weighted=bool(np.ptp(counts) > 0))


AnyProblem = AbstractProblem | AbstractODEProblem


def as_ode_problem(problem: AnyProblem) -> AbstractODEProblem:
    """`problem` as the study runs it (an `AbstractProblem` through `SeriesProblem`)."""
    if isinstance(problem, AbstractODEProblem):
        return problem
    return SeriesProblem(problem)


# The problems shipped with the package, by name (`register_problem` adds to it).
PROBLEMS: dict[str, AnyProblem] = {
    "oscillator": Oscillator(),
    "oscillator_bank": OscillatorBank(),
}
DEFAULT_PROBLEM = "oscillator"
_SHIPPED = frozenset(PROBLEMS)
# Problems whose module is imported when first named (their JAX work stays out of the
# package's import): name -> module:object.
LAZY_PROBLEMS: dict[str, str] = {
    "latent_ode": "odestudy.problems.latent:PROBLEM",
    "forced_oscillator": "odestudy.problems.controlled:PROBLEM",
}


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


def _instantiate(spec: str, found: Any) -> Any:
    """A problem class made with no arguments (a one-line ValueError where it cannot)."""
    if not (isinstance(found, type) and issubclass(found, AbstractProblem | AbstractODEProblem)):
        return found
    try:
        return found()
    except TypeError as exc:
        raise ValueError(f"problem {spec!r} cannot be made: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def check_problem_type(spec: str, problem: Any) -> AnyProblem:
    """`problem` if it is a problem object with every fact a problem needs."""
    if not isinstance(problem, AbstractProblem | AbstractODEProblem):
        raise ValueError(
            f"problem {spec!r} is a {type(problem).__name__}, not an odestudy."
            "AbstractODEProblem or AbstractProblem"
        )
    for fact, kind in (("name", str), ("time_dependent", bool), ("uniform_grid", bool)):
        value = getattr(problem, fact, None)
        if not isinstance(value, kind) or (kind is str and not value):
            raise ValueError(
                f"problem {spec!r}: class attribute {fact} must be a {kind.__name__}, got {value!r}"
            )
    trained = getattr(problem, "trained_loss", None)
    if isinstance(trained, bool) or not isinstance(trained, int | float) or not trained > 0:
        raise ValueError(f"problem {spec!r}: trained_loss must be a number > 0, got {trained!r}")
    return problem


def register_problem(problem: AnyProblem) -> str:
    """Make `problem` known to this process by its `name` (returned), so that scenarios
    run it as `problem=name`; registering a name again replaces its problem, a shipped
    name is refused. Other processes need a `module:object` to import."""
    problem = check_problem_type(repr(problem), _instantiate(repr(problem), problem))
    name = problem.name
    if (name in _SHIPPED and PROBLEMS[name] is not problem) or name in LAZY_PROBLEMS:
        raise ValueError(f"problem name {name!r} is shipped: give your problem another name")
    PROBLEMS[name] = problem
    resolve_problem.cache_clear()
    return name


def problem_spec(problem: "str | AnyProblem") -> str:
    """How scenarios name `problem`: a string as it is; an object by its shipped or
    registered name, else `module:Class` where that makes it again, else it is
    registered (this process only)."""
    if isinstance(problem, str):
        return problem
    problem = check_problem_type(repr(problem), problem)
    if problem.name in PROBLEMS or problem.name in LAZY_PROBLEMS:
        if resolve_problem(problem.name) is problem:
            return problem.name
    cls = type(problem)
    if cls.__module__ != "__main__" and "<locals>" not in cls.__qualname__:
        spec = f"{cls.__module__}:{cls.__qualname__}"
        try:
            same = bool(resolve_problem(spec) == problem)
        except Exception:  # noqa: BLE001 - not made so, or not comparable: register it
            same = False
        if same:
            return spec
    return register_problem(problem)


def in_this_process_only(spec: str) -> bool:
    """Whether problem `spec` is known to this process only (registered)."""
    return spec in PROBLEMS and spec not in _SHIPPED


@functools.cache
def resolve_problem(spec: str) -> AnyProblem:
    """The problem named by `spec`: a shipped or registered name, or `module:object` (a
    problem instance, or a class made with no arguments)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"problem must be a name or module:object, got {spec!r}")
    if spec in PROBLEMS:
        return PROBLEMS[spec]
    target = LAZY_PROBLEMS.get(spec, spec)
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(
            f"unknown problem {spec!r}; valid choices: "
            f"{', '.join([*PROBLEMS, *LAZY_PROBLEMS])}, or module:object naming an "
            "odestudy.AbstractODEProblem or AbstractProblem"
        )
    try:
        found: Any = getattr(_import(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load problem {spec!r}: {type(exc).__name__}: {exc}") from None
    return check_problem_type(spec, _instantiate(spec, found))


def problem_facts(problem: AnyProblem) -> dict[str, Any]:
    """What a record says of its problem (the user's class, not `SeriesProblem`)."""
    if isinstance(problem, SeriesProblem):
        problem = problem.problem
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


def check_uniform_grids(problem: AnyProblem, ts: np.ndarray) -> None:
    """A ValueError where `problem` claims `uniform_grid` and a row of `ts` is uneven."""
    steps = np.diff(np.asarray(ts, dtype=np.float64), axis=1)
    uneven = ~np.isclose(steps, steps[:, :1], rtol=1e-4, atol=1e-6).all(axis=1)
    if uneven.any():
        raise ValueError(
            f"problem {problem.name!r} says uniform_grid=True, but {int(uneven.sum())} of "
            f"{len(steps)} series are not evenly spaced (first: row {int(np.argmax(uneven))})"
            "; set uniform_grid=False (within-ODE batching is then refused)"
        )


def stage_lengths(n_times: int, fractions: Sequence[float]) -> list[int]:
    """Observations per series in each length stage (at least 2)."""
    return [max(2, int(n_times * fraction)) for fraction in fractions]
