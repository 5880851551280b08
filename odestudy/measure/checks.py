"""A problem checked before anything compiles: its data, then its model and loss on one
sample, traced but not compiled (`jax.eval_shape`). Each failure is a `ProblemError`:
one line naming the problem, the part and the rule broken."""

import hashlib
import os
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .data import DATA_CACHE_ENV, problem_source
from .loss import Mean
from .model import evaluation
from .problem import AbstractODEProblem, AbstractProblem, SeriesProblem
from .scenario import Scenario
from .step import study_loss
from .timing import code_fingerprint


class ProblemError(ValueError):
    """A problem that cannot be trained, found before anything compiles."""

    def __init__(self, problem: AbstractODEProblem, part: str, rule: str):
        super().__init__(f"problem {problem.name!r}, {part}: {rule}")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call_part(problem: AbstractODEProblem, part: str, method: str, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, which runs the user's `method`; what it raises becomes a `ProblemError`."""
    try:
        return fn(*args)
    except ProblemError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: one line, no traceback
        raise ProblemError(problem, part, f"{method} fails: {_one_line(exc)}") from None


def check_times(problem: AbstractODEProblem, ts: np.ndarray) -> None:
    """Observation times increase along each series, apart from padding at its end."""
    if ts.ndim != 2 or ts.shape[1] < 2:
        raise ProblemError(
            problem, "data", f"times must have shape (size, n_times >= 2), got {ts.shape}"
        )
    steps = np.diff(ts.astype(np.float64), axis=1)
    # Padding repeats the last time: once a step is 0, every later step is 0 too.
    inner = (np.cumsum(steps == 0, axis=1) > 0) & (steps > 0)
    rules = (
        (
            steps < 0,
            "observation times must increase along each series; series {row} goes "
            "back in time at point {point}",
        ),
        (
            inner,
            "series {row} repeats a time before point {point} and then goes on; only "
            "padding at a series' end may repeat its last time",
        ),
    )
    for broken, rule in rules:
        if broken.any():
            row, col = np.argwhere(broken)[0]
            raise ProblemError(problem, "data", rule.format(row=row, point=col + 1))


def check_data(problem: AbstractODEProblem, data: Any, size: int) -> None:
    """`make_data`'s result for `size` series: finite arrays with the series first."""
    leaves = jax.tree_util.tree_leaves_with_path(data)
    if not leaves:
        raise ProblemError(problem, "data", "make_data returned no arrays")
    for path, leaf in leaves:
        where = f"leaf {jax.tree_util.keystr(path) or '(root)'}"
        if not isinstance(leaf, np.ndarray | jax.Array):
            raise ProblemError(problem, "data", f"{where} is a {type(leaf).__name__}, not an array")
        if np.ndim(leaf) == 0 or np.shape(leaf)[0] != size:
            raise ProblemError(
                problem,
                "data",
                f"{where} has shape {np.shape(leaf)}: every leaf needs the {size} series on "
                "its first axis",
            )
        value = np.asarray(leaf)
        if np.issubdtype(value.dtype, np.inexact) and not np.isfinite(value).all():
            bad = int(np.size(value) - np.isfinite(value).sum())
            raise ProblemError(problem, "data", f"{where} holds {bad} NaN or infinite values")
    try:
        ts = np.asarray(problem.times(data))
    except Exception as exc:  # noqa: BLE001 - the user's method: say which part failed
        raise ProblemError(problem, "times", _one_line(exc)) from None
    check_times(problem, ts)
    if isinstance(problem, SeriesProblem):
        ys = np.asarray(data.ys)
        if ys.ndim != 3 or ys.shape[:2] != ts.shape:
            raise ProblemError(
                problem,
                "data",
                f"ys must have shape (size, n_times, state) = {(*ts.shape, 'state')}, "
                f"got {ys.shape}",
            )
        if not np.issubdtype(ys.dtype, np.floating):
            raise ProblemError(problem, "data", f"ys must be floating point, got {ys.dtype}")


def check_field(problem: SeriesProblem, field: Any, ts: np.ndarray, ys: np.ndarray) -> None:
    """An `AbstractProblem`'s field returns the state's shape on one state."""
    t = jax.ShapeDtypeStruct((), ts.dtype)
    y = jax.ShapeDtypeStruct(ys.shape[2:], ys.dtype)
    try:
        out = eqx.filter_eval_shape(field, t, y, None)
    except Exception as exc:  # noqa: BLE001
        raise ProblemError(
            problem,
            "field",
            f"must be callable as field(t, y, args) with y of shape {y.shape}: {_one_line(exc)}",
        ) from None
    if getattr(out, "shape", None) != y.shape:
        raise ProblemError(
            problem,
            "field",
            f"field(t, y, args) must return the state's shape {y.shape}, got "
            f"{getattr(out, 'shape', type(out).__name__)}",
        )


def _is_scalar(x: Any) -> bool:
    return getattr(x, "shape", None) == () and jnp.issubdtype(x.dtype, jnp.inexact)


def check_loss(s: Scenario, problem: AbstractODEProblem, batch: Any, params: Any, static: Any):
    """The loss of one batch, traced with the scenario's solve, is a scalar or a `Mean`."""
    spec = s.ode_solve(problem)
    loss = study_loss(spec)
    key = jr.PRNGKey(0) if problem.needs_key else None
    traced = {"loss": lambda p, b: loss(p, static, b, key)[0]}
    if _own_eval_loss(problem):
        traced["eval_loss"] = lambda p, b: evaluation(eqx.combine(p, static), b, spec)
    for part, fn in traced.items():
        try:
            value = jax.eval_shape(fn, params, batch)
        except Exception as exc:  # noqa: BLE001 - the user's code: one line, no traceback
            raise ProblemError(problem, part, f"fails on one sample: {_one_line(exc)}") from None
        _check_scalar(problem, part, value)


def _own_eval_loss(problem: AbstractODEProblem) -> bool:
    """Whether the problem's evaluation loss is its own, not its training loss."""
    if isinstance(problem, SeriesProblem):
        return type(problem.problem).eval_loss is not AbstractProblem.eval_loss
    return type(problem).eval_loss is not AbstractODEProblem.eval_loss


def _check_scalar(problem: AbstractODEProblem, part: str, value: Any) -> None:
    parts = [value.total, value.count] if isinstance(value, Mean) else [value]
    if not all(_is_scalar(x) for x in parts):
        shapes = [getattr(x, "shape", type(x).__name__) for x in parts]
        raise ProblemError(
            problem,
            part,
            f"must return one floating scalar (or odestudy.Mean of scalars), got shape "
            f"{shapes[0] if len(shapes) == 1 else shapes}",
        )


def check_parts(
    s: Scenario, problem: AbstractODEProblem, data: Any, params: Any, static: Any
) -> None:
    """The model and loss of `problem` on one sample, as `s` trains them (once per marker)."""
    if not jax.tree.leaves(params):
        raise ProblemError(problem, "model", "make_model returned no inexact arrays to train")
    one = problem.take(data, np.arange(1))
    if isinstance(problem, SeriesProblem):
        check_field(problem, eqx.combine(params, static), np.asarray(one[0]), np.asarray(one[1]))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), one)
    marker = _passed_marker(s, problem, shapes, params)
    if marker is not None and marker.exists():
        return
    check_loss(s, problem, shapes, params, static)
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
        tmp.write_text("passed\n")
        os.replace(tmp, marker)


def _passed_marker(s: Scenario, problem: Any, shapes: Any, params: Any) -> Path | None:
    """Where a passed loss check is remembered (named by what decides it), or None."""
    folder = os.environ.get(DATA_CACHE_ENV)
    source = problem_source(problem)
    if not folder or source is None:
        return None
    digest = hashlib.sha256()
    parts = [
        code_fingerprint()["fingerprint"],
        jax.__version__,
        s.controller,
        repr(s.structure),
        repr((jax.tree.structure(shapes), _shapes(shapes), _shapes(params))),
        type(problem).__qualname__,
        *source,
    ]
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
    return Path(folder) / f"checked-{digest.hexdigest()[:20]}"


def _shapes(tree: Any) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(tree))
