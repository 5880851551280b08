"""A fused adaptive solve: Tsit5 with diffrax's PID controller (or `StepTo`) as one loop
that carries only what a step needs.

Diffrax's `diffeqsolve` carries its whole state through every step (events, `SaveAt`
bookkeeping with an inner loop over saved times, result codes, dense buffers, jumps).
The fused solve keeps diffrax's arithmetic (Tsit5's tableau, `PIDController`, Tsit5's
interpolation, the clipping of the last step) and carries only what `_Carry` holds.
Saving evaluates the step's interpolant at every observation time and keeps those
inside the step: no inner loop.

The loop is differentiated as the scenario's `adjoint` says (`REVERSE`): equinox's
checkpointed while loop (`all_steps`: a checkpoint per step; `recursive`: diffrax's
default number), or a `lax.scan` over `max_steps` storing every step (`scan`;
`checkpointed_scan` rematerialises each). The own reverse loop over the accepted steps
is `replay.py`. A PID solve past `max_steps` is NaN at the times it did not reach, so
that the run fails loudly.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import diffrax
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from . import tsit5

REVERSE = ("all_steps", "recursive", "scan", "checkpointed_scan")

# Diffrax's PID constants, for the kernel that writes the rule out itself.
_PID = diffrax.PIDController(rtol=1.0, atol=1.0)
PID_SAFETY, PID_FACTORMIN, PID_FACTORMAX = (float(_PID.safety), float(_PID.factormin),
                                            float(_PID.factormax))  # fmt: skip


class PIDSteps(NamedTuple):
    """Diffrax's `PIDController` as the fused loops drive it: the controller, its first
    step's end and memory, the solve's end `t1` and its `clip_floor`."""

    controller: diffrax.PIDController
    tnext: Array
    memory: Any
    t1: Array
    floor: Array

    @classmethod
    def start(cls, field, t0, t1, dt0, y0, args, rtol: float, atol: float) -> "PIDSteps":
        """The controller at the start of a solve from `t0` to `t1`, first step `dt0`."""
        term = diffrax.ODETerm(field)
        controller = diffrax.PIDController(rtol=rtol, atol=atol)
        tnext, memory = controller.init(term, t0, t1, y0, dt0, args, field, tsit5.ERROR_ORDER)
        return cls(controller, jnp.minimum(tnext, t1), memory, t1, clip_floor(t1))

    def adapt(self, t, tnext, y, y1, args, error, memory):
        """After a trial step from `(t, y)` to `(tnext, y1)`: `(keep, t, tnext, memory)`,
        the next step's bounds clipped at `t1` (`clip_to_end`)."""
        error = jnp.where(jnp.isnan(error), jnp.inf, error)  # as diffrax: reject a NaN
        keep, t, tnext, _, memory, _ = self.controller.adapt_step_size(
            t, tnext, y, y1, args, error, tsit5.ERROR_ORDER, memory
        )
        return keep, *clip_to_end(keep, t, tnext, self.t1, self.floor), memory


class _Carry(NamedTuple):
    """What the fused PID loop carries from step to step."""

    t: Array  # the current time (the start of the next step)
    tnext: Array  # the end of the next step
    y: Any  # the state at `t`
    f: Any  # the field at `(t, y)`: Tsit5's first-same-as-last stage
    controller: Any  # the PID controller's memory (diffrax's `_PidState`)
    ys: Any  # the solution at the observation times, filled as steps pass them
    steps: Array  # steps taken (accepted and rejected)


def clip_floor(t1: Array) -> Array:
    """`t1` less 100 ULPs: a next time past it is rounded to `t1` (diffrax's rule: the
    last step is not a sliver)."""
    floor = t1
    for _ in range(100):
        floor = eqxi.prevbefore(floor)
    return floor


def clip_to_end(
    keep: Array, t: Array, tnext: Array, t1: Array, floor: Array
) -> tuple[Array, Array]:
    """The next step's bounds `(t, tnext)` as diffrax clips them at the solve's end `t1`:
    a next time past `floor` is `t1`, or halfway there after a rejected step."""
    t = jnp.minimum(t, t1)
    return t, jnp.where(tnext > floor, jnp.where(keep, t1, t + 0.5 * (t1 - t)), tnext)


def _loop(
    cond: Callable[[_Carry], Array],
    body: Callable[[_Carry], _Carry],
    init: _Carry,
    max_steps: int,
    reverse: str,
) -> _Carry:
    """`body` while `cond` holds, at most `max_steps` times, differentiated as `reverse`
    says."""
    if reverse in ("scan", "checkpointed_scan"):

        def scanned(carry, _):
            return jax.lax.cond(cond(carry), body, lambda c: c, carry), None

        if reverse == "checkpointed_scan":
            scanned = jax.checkpoint(scanned)
        final, _ = jax.lax.scan(scanned, init, None, length=max_steps)
        return final
    checkpoints = max_steps if reverse == "all_steps" else None
    return eqxi.while_loop(
        cond, body, init, max_steps=max_steps, kind="checkpointed", checkpoints=checkpoints
    )


def solve_pid(
    field: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Array,
    args: Any,
    rtol: float,
    atol: float,
    max_steps: int,
    reverse: str = "all_steps",
) -> tuple[Array, Int[Array, ""]]:
    """One ODE `field(t, y, args)` solved with Tsit5 under diffrax's
    `PIDController(rtol, atol)` from `ts[0]` to `ts[-1]` (first step `ts[1] - ts[0]`),
    saved at `ts` (padding repeats the last time); `reverse`: one of `REVERSE`. Returns
    `(ys, num_steps)`: the states at `ts` and the steps taken, accepted and rejected."""
    t0, t1 = ts[0], ts[-1]
    pid = PIDSteps.start(field, t0, t1, ts[1] - t0, y0, args, rtol, atol)
    ys = jnp.zeros((ts.shape[0], *y0.shape), y0.dtype).at[0].set(y0)
    f0 = field(t0, y0, args)
    init = _Carry(t0, pid.tnext, y0, f0, pid.memory, ys, jnp.asarray(0))

    def body(c: _Carry) -> _Carry:
        y1, error, fs, ks = tsit5.stages(field, c.t, c.tnext, c.y, c.f, args)
        k = jnp.stack(ks)
        keep, t, tnext, memory = pid.adapt(c.t, c.tnext, c.y, y1, args, error, c.controller)
        interpolation = diffrax.Tsit5.interpolation_cls(t0=c.t, t1=c.tnext, y0=c.y, y1=y1, k=k)
        inside = keep & (ts > c.t) & (ts <= c.tnext)
        at_times = jax.vmap(interpolation.evaluate)(ts)
        mask = inside.reshape(inside.shape + (1,) * y0.ndim)
        return _Carry(
            t,
            tnext,
            jnp.where(keep, y1, c.y),
            jnp.where(keep, fs[-1], c.f),
            memory,
            jnp.where(mask, at_times, c.ys),
            c.steps + 1,
        )

    final = _loop(lambda c: c.t < t1, body, init, max_steps, reverse)
    reached = (ts <= final.t).reshape((-1,) + (1,) * y0.ndim)
    return jnp.where(reached, final.ys, jnp.nan), final.steps


def solve_stepto(
    field: Callable[..., Any],
    ts: Float[Array, " times"],
    y0: Array,
    args: Any,
    reverse: str = "all_steps",
) -> tuple[Array, Int[Array, ""]]:
    """`solve_pid` with one step per interval of `ts` (diffrax's `StepTo(ts)`) as a
    `lax.scan`; `reverse="checkpointed_scan"` rematerialises each step."""

    def step(carry, interval):
        y, f = carry
        y1, _, fs, _ = tsit5.stages(field, *interval, y, f, args)
        return (y1, fs[-1]), y1

    if reverse == "checkpointed_scan":
        step = jax.checkpoint(step)
    first = (y0, field(ts[0], y0, args))
    _, ys = jax.lax.scan(step, first, (ts[:-1], ts[1:]))
    return jnp.concatenate([y0[None], ys]), jnp.asarray(ts.shape[0] - 1)
