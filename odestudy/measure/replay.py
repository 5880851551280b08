"""The fused solve's own reverse loop (`adjoint="accepted_steps"`): the forward loop
keeps a checkpoint per accepted step, and the backward pass replays those alone, last
to first.

The forward pass is `fused.py`'s loop, nothing differentiated: per accepted step it
writes the step's bounds, start and end states and 7 stage values into buffers of
`max_steps` rows (a rejected step's row is overwritten by the next try). The solution
at the observation times is interpolated once, after the loop, from the step holding
each time.

The backward pass is one `jax.vjp` per accepted step, recomputing its stages from its
row: no rejected step is replayed and the controller is not run again (diffrax's stops
the step sizes' gradient: the accepted bounds are constants). StepTo's steps are all
accepted: a `lax.scan` over the grid keeping each step's start, reversed by a reverse
scan. Gradients flow where `eqx.filter_custom_vjp`'s `perturbed` says; with `by_hand`
(PID) each step's reverse is `mlp_reverse.step_reverse` (fewer kernels per step).
"""

from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from . import mlp_reverse, tsit5
from .fused import PIDSteps

ADJOINT = "accepted_steps"


def _split(field: Any, args: Any, perturbed: Any) -> tuple[Any, Any]:
    """`(diff, static)`: the differentiated arrays of `(field, args)` and the rest."""
    pf, _, pargs = perturbed
    diff = (eqx.filter(field, pf), eqx.filter(args, pargs))
    static = (eqx.filter(field, pf, inverse=True), eqx.filter(args, pargs, inverse=True))
    return diff, static


def _step(static: Any, t: Array, tnext: Array) -> Callable[..., Any]:
    """One Tsit5 step from `t` to `tnext` as a function of `(y, f, diff)`: `((y1, fs),
    error)`, the stage values stacked."""

    def step(y, f, diff):
        field = eqx.combine(diff[0], static[0])
        args = eqx.combine(diff[1], static[1])
        y1, error, fs, _ = tsit5.stages(field, t, tnext, y, f, args)
        return (y1, jnp.stack(fs)), error

    return step


def _at_times(ts: Array, bounds: Array, rows: Array, held: Array) -> Array:
    """The solution at `ts[1:]` by Tsit5's interpolant, each time from its step `held`
    (`_holding`) of the accepted steps' `bounds` and `rows`."""

    def one(t, bound, y0, y1, fs):
        k = fs * (bound[1] - bound[0])
        interpolation = diffrax.Tsit5.interpolation_cls(t0=bound[0], t1=bound[1], y0=y0, y1=y1, k=k)
        return interpolation.evaluate(t)

    got = rows[held]
    return jax.vmap(one)(ts[1:], bounds[held], got[:, 0], got[:, 1], got[:, 2:])


def _holding(ts: Array, bounds: Array, accepted: Array) -> Array:
    """Per time of `ts[1:]`, the row of the accepted step that holds it (`t < ts <=
    tnext`); past the last accepted step, the last row."""
    ends = jnp.where(jnp.arange(bounds.shape[0]) < accepted, bounds[:, 1], jnp.inf)
    rows = jnp.searchsorted(ends, ts[1:], side="left", method="compare_all")
    return jnp.minimum(rows, bounds.shape[0] - 1)


def _pid_forward(vjp_arg, ts, rtol, atol, max_steps, by_hand=False):
    """The PID solve, its checkpoints kept: `((ys, steps), residuals)` (`by_hand` is
    the backward pass's)."""
    del by_hand
    field, y0, args = vjp_arg
    t0, t1 = ts[0], ts[-1]
    pid = PIDSteps.start(field, t0, t1, ts[1] - t0, y0, args, rtol, atol)
    diff, static = _split(field, args, jax.tree.map(lambda _: False, vjp_arg))
    f0 = field(t0, y0, args)
    bounds = jnp.zeros((max_steps, 2), ts.dtype)
    rows = jnp.zeros((max_steps, 2 + tsit5.STAGES, *y0.shape), y0.dtype)  # y, y1, fs

    def body(c):
        t, tnext, y, f, memory, steps, accepted, bounds, rows = c
        (y1, fs), error = _step(static, t, tnext)(y, f, diff)
        keep, t_, tnext_, memory = pid.adapt(t, tnext, y, y1, args, error, memory)
        bounds = bounds.at[accepted].set(jnp.stack([t, tnext]))
        rows = rows.at[accepted].set(jnp.concatenate([jnp.stack([y, y1]), fs]))
        return (
            t_,
            tnext_,
            jnp.where(keep, y1, y),
            jnp.where(keep, fs[-1], f),
            memory,
            steps + 1,
            accepted + keep.astype(accepted.dtype),
            bounds,
            rows,
        )

    init = (t0, pid.tnext, y0, f0, pid.memory, jnp.asarray(0), jnp.asarray(0), bounds, rows)
    final = jax.lax.while_loop(lambda c: (c[0] < t1) & (c[5] < max_steps), body, init)
    t, _, _, _, _, steps, accepted, bounds, rows = final
    held = _holding(ts, bounds, accepted)
    ys = jnp.concatenate([y0[None], _at_times(ts, bounds, rows, held)])
    reached = (ts <= t).reshape((-1,) + (1,) * y0.ndim)
    return (jnp.where(reached, ys, jnp.nan), steps), (accepted, bounds, rows, held, reached)


def with_residuals(forward: Callable, check: Callable | None = None) -> Any:
    """`eqx.filter_custom_vjp` of `forward(vjp_arg, *rest) -> (out, residuals)` keeping
    the residuals (after `check(perturbed)`); the caller defines `def_bwd`."""

    @eqx.filter_custom_vjp
    def solve(vjp_arg, *rest):
        return forward(vjp_arg, *rest)[0]

    def solve_fwd(perturbed, vjp_arg, *rest):
        if check is not None:
            check(perturbed)
        return forward(vjp_arg, *rest)

    solve.def_fwd(solve_fwd)
    return solve


_pid = with_residuals(_pid_forward)


def _by_jax(static, diff):
    """One accepted step's reverse by `jax.vjp`: recomputing its stages from its row."""

    def reverse(bound, row, y1_bar, fs_bar):
        step = _step(static, bound[0], bound[1])
        _, vjp, _ = jax.vjp(step, row[0], row[2], diff, has_aux=True)
        return vjp((y1_bar, fs_bar))

    return reverse


def _by_hand(static, diff):
    """One accepted step's reverse by `mlp_reverse.step_reverse` from its row (a
    within-ODE batch's MLP field, only its MLP differentiated; else a ValueError)."""
    field = eqx.combine(diff[0], static[0])
    mlp_rows = getattr(field, "mlp_rows", None)
    if mlp_rows is None:
        raise ValueError(
            "mlp_reverse: the fused solve's field is not a batch's MLP field "
            "(within-ODE batching of an odestudy.AbstractMLPField)"
        )
    rows_of = mlp_rows(eqx.combine(diff[1], static[1]))
    if jax.tree.leaves(diff[1]) or len(jax.tree.leaves(diff[0])) != len(
        jax.tree.leaves(eqx.filter(rows_of.mlp, eqx.is_inexact_array))
    ):
        raise ValueError(
            "mlp_reverse: the solve differentiates arrays other than the field's MLP's "
            "(its args, or the field's own)"
        )

    def reverse(bound, row, y1_bar, fs_bar):
        h = bound[1] - bound[0]
        y_in, f_in, mlp_bar = mlp_reverse.step_reverse(
            rows_of, h, row[0], row[2:], y1_bar, fs_bar, bound
        )
        d_field = diff[0].with_mlp(eqx.filter(mlp_bar, eqx.is_inexact_array))
        return y_in, f_in, (d_field, diff[1])

    return reverse


def _replay(static, diff, bounds, rows, bars, count, y_bar, f_bar, by_hand=False):
    """The accepted steps `count - 1` down to 0 replayed from the cotangents of the end
    state, last stage and rows (`bars`): those of the first step's start and of `diff`."""
    reverse = (_by_hand if by_hand else _by_jax)(static, diff)

    def body(c):
        i, y_bar, f_bar, d_bar = c
        i = i - 1
        row, bar = rows[i], bars[i]
        y_in, f_in, d = reverse(bounds[i], row, y_bar + bar[1], bar[2:].at[-1].add(f_bar))
        return i, y_in + bar[0], f_in, jax.tree.map(jnp.add, d_bar, d)

    init = (count, y_bar, f_bar, jax.tree.map(jnp.zeros_like, diff))
    _, y_bar, f_bar, d_bar = jax.lax.while_loop(lambda c: c[0] > 0, body, init)
    return y_bar, f_bar, d_bar


def _first_stage(static, diff, ts, y0, y_bar, f_bar, d_bar, ys_bar, perturbed):
    """The cotangents of `vjp_arg` once the steps are replayed: the first stage's
    evaluation at `(ts[0], y0)` and the saved initial state added."""

    def first(y0, diff):
        return eqx.combine(diff[0], static[0])(ts[0], y0, eqx.combine(diff[1], static[1]))

    _, vjp = jax.vjp(first, y0, diff)
    y0_bar, d = vjp(f_bar)
    d_bar = jax.tree.map(jnp.add, d_bar, d)
    y0_bar = y0_bar + y_bar + ys_bar[0]
    return d_bar[0], (y0_bar if perturbed[1] else None), d_bar[1]


@_pid.def_bwd
def _pid_bwd(residuals, grad_obj, perturbed, vjp_arg, ts, rtol, atol, max_steps, by_hand):
    accepted, bounds, rows, held, reached = residuals
    field, y0, args = vjp_arg
    diff, static = _split(field, args, perturbed)
    ys_bar = jnp.where(reached, grad_obj[0], 0.0)
    # The interpolation's cotangents, gathered back onto the rows they were read from.
    _, vjp = jax.vjp(lambda rows: _at_times(ts, bounds, rows, held), rows)
    (bars,) = vjp(ys_bar[1:])
    zero = jnp.zeros_like(y0)
    y_bar, f_bar, d_bar = _replay(static, diff, bounds, rows, bars, accepted, zero, zero, by_hand)
    return _first_stage(static, diff, ts, y0, y_bar, f_bar, d_bar, ys_bar, perturbed)


def solve_pid(
    field: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Array,
    args: Any,
    rtol: float,
    atol: float,
    max_steps: int,
    by_hand: bool = False,
    count_only: bool = False,
) -> tuple[Array, Int[Array, ""]]:
    """`fused.solve_pid` with its own reverse loop over the accepted steps; `by_hand`:
    each step's reverse by `mlp_reverse.step_reverse`. `count_only`: the forward loop
    alone, `(ys, accepted)` (the floor's count of the steps replayed)."""
    if count_only:
        (ys, _), (accepted, *_) = _pid_forward((field, y0, args), ts, rtol, atol, max_steps)
        return ys, accepted
    return _pid((field, y0, args), ts, rtol, atol, max_steps, by_hand)


def _stepto_forward(vjp_arg, ts):
    """The StepTo solve, each step's start kept: `((ys, steps), residuals)`."""
    field, y0, args = vjp_arg
    diff, static = _split(field, args, jax.tree.map(lambda _: False, vjp_arg))
    bounds = jnp.stack([ts[:-1], ts[1:]], axis=1)

    def body(carry, bound):
        y, f = carry
        (y1, fs), _ = _step(static, bound[0], bound[1])(y, f, diff)
        return (y1, fs[-1]), (y1, f)

    f0 = field(ts[0], y0, args)
    _, (ends, stages) = jax.lax.scan(body, (y0, f0), bounds)
    ys = jnp.concatenate([y0[None], ends])
    return (ys, jnp.asarray(ts.shape[0] - 1)), (bounds, ys[:-1], stages)


_stepto = with_residuals(_stepto_forward)


@_stepto.def_bwd
def _stepto_bwd(residuals, grad_obj, perturbed, vjp_arg, ts):
    bounds, starts, stages = residuals
    field, y0, args = vjp_arg
    diff, static = _split(field, args, perturbed)
    ys_bar = grad_obj[0]

    def body(c, step):
        y_bar, f_bar, d_bar = c
        bound, y, f, end_bar = step
        _, vjp, _ = jax.vjp(_step(static, bound[0], bound[1]), y, f, diff, has_aux=True)
        fs_bar = jnp.zeros((tsit5.STAGES, *y.shape), y.dtype).at[-1].set(f_bar)
        y_in, f_in, d = vjp((y_bar + end_bar, fs_bar))
        return (y_in, f_in, jax.tree.map(jnp.add, d_bar, d)), None

    zero = jnp.zeros_like(y0)
    init = (zero, zero, jax.tree.map(jnp.zeros_like, diff))
    (y_bar, f_bar, d_bar), _ = jax.lax.scan(
        body, init, (bounds, starts, stages, ys_bar[1:]), reverse=True
    )
    return _first_stage(static, diff, ts, y0, y_bar, f_bar, d_bar, ys_bar, perturbed)


def solve_stepto(
    field: Callable[..., Any], ts: Float[Array, " times"], y0: Array, args: Any
) -> tuple[Array, Int[Array, ""]]:
    """`fused.solve_stepto` with its own reverse scan replaying each step."""
    return _stepto((field, y0, args), ts)
