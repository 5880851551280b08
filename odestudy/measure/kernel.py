"""The kernel solve (`integrator="kernel"`): the adaptive Tsit5 solve of a block of
series as one Pallas kernel, and its reverse pass as one more, for a field that is an
MLP of the state (`odestudy.AbstractMLPField`).

On one GPU the fused solve still runs as thousands of small kernels per step, each
while-loop iteration a trip to the host: the step is bound by launches, not arithmetic.

- **Forward.** Each program takes a block of series (`BLOCK` rows, a controller per
  row) or the whole batch (within-ODE: one controller), and runs `fused.solve_pid`'s
  loop (StepTo: a loop over the grid's intervals), the weights held in the kernel. Per
  iteration it stores, in a slot of buffers of `max_steps` rows, each row's step bounds,
  start state, seven stage values and whether it kept the step (a slot no row kept is
  reused). A row past `max_steps` is NaN at the times it did not reach.
- **Reverse.** One kernel replays the slots last to first, as `replay.py` does with
  `mlp_reverse`; each program writes its block's weight gradients, summed after.

Pallas's Triton backend takes sizes that are powers of two and matrix products with
every side at least 16: rows are padded to the block (copies of the last series, left
out of the within-ODE norm), the times to a power of two (repeats of the last time),
the state and every layer to at least `MIN_WIDTH` (zeros). The CPU (and the tests) run
the same kernels in Pallas's interpret mode.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array, Int

from . import mlp_reverse, tsit5
from .compat import triton_params
from .fused import PID_FACTORMAX, PID_FACTORMIN, PID_SAFETY, clip_floor, clip_to_end
from .mlp_reverse import AbstractMLPField
from .replay import with_residuals

# Series per program under one solve per sample (each row its own controller); at least
# 16, the least side of a matrix product in Pallas's Triton backend.
BLOCK = 16
MIN_WIDTH = 16  # the least width of the state and of every layer inside the kernels
WHO = "integrator='kernel'"
_SLOT = tsit5.STAGES + 1  # buffer rows per slot: the stage values, then the start state


def _pow2(n: int) -> int:
    """The least power of two at least `n` (at least 1)."""
    return 1 << max(n - 1, 0).bit_length()


def _width(n: int) -> int:
    """A dimension's size inside the kernels: a power of two, at least `MIN_WIDTH`."""
    return max(MIN_WIDTH, _pow2(n))


class Config(NamedTuple):
    """What a kernel is compiled for: `adaptive` (PID, else StepTo), `shared` (one
    controller for the batch), the blocking and the sizes before padding."""

    adaptive: bool
    shared: bool
    rtol: float
    atol: float
    max_steps: int
    n_times: int
    rows: int
    state: int
    block: int
    programs: int
    activation: Callable[[Array], Array]
    interpret: bool

    @property
    def slots(self) -> int:
        """Rows of the step buffers: PID's iterations, or StepTo's intervals."""
        return _pow2(self.max_steps if self.adaptive else max(self.n_times - 1, 1))


def interpret_mode() -> bool:
    """Whether the kernels run in Pallas's interpret mode: on the CPU."""
    return jax.default_backend() == "cpu"


def rows_of(field: Any) -> tuple[eqx.nn.MLP, Array | None]:
    """The MLP of `field` (a within-ODE batch's field, or an `AbstractMLPField`) and each
    row's time scale (None for the latter); a one-line ValueError for any other field."""
    batch = hasattr(field, "mlp_rows")  # within-ODE batching's field
    model = field.model if batch else field
    if not isinstance(model, AbstractMLPField):
        raise ValueError(
            f"{WHO}: the vector field ({type(model).__name__}) is not an "
            "odestudy.AbstractMLPField (dy/dt = mlp(y)); use integrator='fused' or 'diffrax'"
        )
    mlp_reverse.check_mlp(model.mlp, WHO)
    if model.groups != 1:
        raise ValueError(f"{WHO}: the kernel solve runs an MLP of the whole state (groups 1)")
    if mlp_reverse.extra_inputs(model.mlp):
        raise ValueError(
            f"{WHO}: the kernel solve runs an MLP of the state alone (no inputs of the time "
            "or args); use integrator='fused' or 'diffrax'"
        )
    return model.mlp, (field.mlp_rows().scale if batch else None)


# --- the MLP inside the kernels: weights as a flat list [W0, b0, W1, b1, ...], each
# weight (out, in) and each bias (1, out).


def _dot_t(x: Array, w: Array) -> Array:
    """`x @ w.T`: a layer's output from its input rows."""
    return jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))


def _mlp(weights: Sequence[Array], activation: Callable, x: Array) -> Array:
    """The MLP on the rows of `x`."""
    for index in range(0, len(weights) - 2, 2):
        x = activation(_dot_t(x, weights[index]) + weights[index + 1])
    return _dot_t(x, weights[-2]) + weights[-1]


def _mlp_reverse(weights, activation, x, g, grads):
    """The cotangent of the MLP's input rows `x` from its output's `g`, and `grads` (the
    weights' gradients so far) plus this pass's, each a product over the rows."""
    inputs, derivatives = [x], []
    for index in range(0, len(weights) - 2, 2):
        z = _dot_t(inputs[-1], weights[index]) + weights[index + 1]
        value, derivative = mlp_reverse.with_derivative(activation, z)
        inputs.append(value)
        derivatives.append(derivative)
    grads = list(grads)
    for index in range(len(weights) // 2 - 1, -1, -1):
        grads[2 * index] = grads[2 * index] + jax.lax.dot_general(
            g, inputs[index], (((0,), (0,)), ((), ()))
        )
        grads[2 * index + 1] = grads[2 * index + 1] + jnp.sum(g, axis=0, keepdims=True)
        g = jnp.dot(g, weights[2 * index])
        if index:
            g = g * derivatives[index - 1]
    return g, grads


def _step_reverse(weights, activation, scale, h, y, fs, y1_bar, fs_bar, grads):
    """`mlp_reverse.step_reverse` stage by stage, the weights' gradients added to
    `grads`."""
    ks = [f * h for f in fs]

    def state_bar(stage, value_bar):
        nonlocal grads
        x = tsit5.stage_state(y, tsit5.A_LOWER[stage - 1], ks)
        g, grads = _mlp_reverse(weights, activation, x, scale * value_bar, grads)
        return g

    y_bar, f_bar = tsit5.reverse(h, y1_bar, fs_bar, state_bar)
    return y_bar, f_bar, grads


def _any(x: Array) -> Array:
    """Whether any element of boolean `x` holds (a reduction the GPU backends take)."""
    return jnp.max(x.astype(jnp.int32)) > 0


# --- the controller, row by row or shared.


def _adapt(cfg: Config, t, tnext, y, y1, error, t1, floor):
    """`fused.PIDSteps.adapt` per row (`shared`: the batch as one state), the norm over
    the unpadded state: `(keep, t, tnext)`."""
    valid = jax.lax.broadcasted_iota(jnp.int32, y.shape, 1) < cfg.state
    if cfg.shared:
        valid = valid & (jax.lax.broadcasted_iota(jnp.int32, y.shape, 0) < cfg.rows)
    error = jnp.where(jnp.isnan(error), jnp.inf, error)  # as diffrax: reject a NaN
    nan = jnp.isnan(y1) & valid
    if cfg.shared:
        nan_y1, size = _any(nan), cfg.rows * cfg.state
    else:
        nan_y1, size = jnp.max(nan.astype(jnp.int32), axis=1, keepdims=True) > 0, cfg.state
    y1 = jnp.where(nan_y1, y, y1)
    scaled = error / (cfg.atol + jnp.maximum(jnp.abs(y), jnp.abs(y1)) * cfg.rtol)
    squares = jnp.where(valid, scaled * scaled, 0)
    # Shared, the batch's one norm broadcast to a column as per sample: Triton's lowering
    # mistypes a select on a scalar predicate broadcast into a column (jax 0.10.2).
    total = jnp.sum(squares) if cfg.shared else jnp.sum(squares, axis=1, keepdims=True)
    total = jnp.broadcast_to(total, t.shape)
    norm = jnp.sqrt(total) / math.sqrt(size)  # optimistix's `rms_norm`
    keep = norm < 1
    factor1 = (1 / norm) ** (1 / tsit5.ERROR_ORDER)
    factormin = jnp.where(keep, 1, PID_FACTORMIN)
    factormax = jnp.where(keep, PID_FACTORMAX, PID_SAFETY)
    factor = jnp.clip(PID_SAFETY * factor1, factormin, factormax)
    t_next = jnp.where(keep, tnext, t)
    tnext_next = t_next + (tnext - t) * factor
    return keep, *clip_to_end(keep, t_next, tnext_next, t1, floor)


# --- the kernels. Inputs: the times, initial states, time scales, `clip_floor`s, the
# weights. PID's outputs: the saved states, steps per row, time reached, slots used, the
# slots' bounds (2 per slot), kept flags and stage values (`_SLOT` rows per slot);
# StepTo's: the saved states and the stage values.


def _forward_kernel(cfg: Config, n_weights: int):
    def kernel(ts_ref, y0_ref, scale_ref, floor_ref, *refs):
        weights = [r[...] for r in refs[:n_weights]]  # read once: held in the kernel
        out = refs[n_weights:]
        ys_ref, stages_ref = out[0], out[-1]
        scale = scale_ref[...]

        def field(t, y, args):
            return scale * _mlp(weights, cfg.activation, y)

        y0 = y0_ref[...]
        f0 = field(None, y0, None)
        ys_ref[...] = jnp.broadcast_to(y0[:, None, :], ys_ref.shape)

        def store(slot, y, fs):
            for j, f in enumerate(fs):
                stages_ref[_SLOT * slot + j] = f
            stages_ref[_SLOT * slot + tsit5.STAGES] = y

        if not cfg.adaptive:

            def interval(j, carry):
                y, f = carry
                t, tnext = ts_ref[:, pl.ds(j, 1)], ts_ref[:, pl.ds(j + 1, 1)]
                y1, _, fs, _ = tsit5.stages(field, t, tnext, y, f, None)
                store(j, y, fs)
                ys_ref[:, pl.ds(j + 1, 1), :] = y1[:, None, :]
                return y1, fs[-1]

            jax.lax.fori_loop(0, cfg.n_times - 1, interval, (y0, f0))
            return

        steps_ref, end_ref, count_ref, times_ref, keep_ref = out[1:-1]
        ts = ts_ref[...]
        t0 = ts_ref[:, pl.ds(0, 1)]
        t1 = ts_ref[:, pl.ds(cfg.n_times - 1, 1)]
        floor = floor_ref[...]
        tnext0 = jnp.minimum(t0 + (ts_ref[:, pl.ds(1, 1)] - t0), t1)  # `controller.init`

        def cond(c):
            i, _, t, *_ = c
            return (i < cfg.max_steps) & _any(t < t1)

        def body(c):
            i, slot, t, tnext, y, f, steps = c
            active = t < t1
            y1, error, fs, ks = tsit5.stages(field, t, tnext, y, f, None)
            keep, t_next, tnext_next = _adapt(cfg, t, tnext, y, y1, error, t1, floor)
            kept = keep & active
            inside = kept & (ts > t) & (ts <= tnext)
            at = tsit5.interpolation_weights(tsit5.rescale(t, tnext, ts))
            acc = sum(w[..., None] * k[:, None, :] for w, k in zip(at, ks, strict=True))
            at_times = y[:, None, :] + acc  # Tsit5's interpolant at every time
            ys_ref[...] = jnp.where(inside[..., None], at_times, ys_ref[...])
            times_ref[2 * slot] = t
            times_ref[2 * slot + 1] = tnext
            keep_ref[slot] = kept.astype(jnp.int32)
            store(slot, y, fs)
            return (
                i + 1,
                slot + _any(kept).astype(jnp.int32),
                jnp.where(active, t_next, t),
                jnp.where(active, tnext_next, tnext),
                jnp.where(kept, y1, y),
                jnp.where(kept, fs[-1], f),
                steps + active.astype(jnp.int32),
            )

        zero = jnp.asarray(0, jnp.int32)
        init = (zero, zero, t0, tnext0, y0, f0, jnp.zeros(t0.shape, jnp.int32))
        _, slot, t, _, _, _, steps = jax.lax.while_loop(cond, body, init)
        steps_ref[...] = steps
        end_ref[...] = t
        count_ref[...] = jnp.broadcast_to(slot, count_ref.shape)

    return kernel


def _reverse_kernel(cfg: Config, n_weights: int):
    def kernel(ts_ref, y0_ref, scale_ref, ys_bar_ref, *refs):
        if cfg.adaptive:
            count_ref, times_ref, keep_ref, stages_ref = refs[:4]
            refs = refs[4:]
        else:
            stages_ref, refs = refs[0], refs[1:]
        weights = [r[...] for r in refs[:n_weights]]
        y0_bar_ref, grad_refs = refs[n_weights], refs[n_weights + 1 :]
        scale, y0 = scale_ref[...], y0_ref[...]
        ts, ys_bar = ts_ref[...], ys_bar_ref[...]
        activation = cfg.activation

        def load(slot):
            fs = [stages_ref[_SLOT * slot + j] for j in range(tsit5.STAGES)]
            return stages_ref[_SLOT * slot + tsit5.STAGES], fs

        def replayed(slot, carry):
            """The PID slot's steps replayed: rows that kept it, the others unchanged."""
            y_bar, f_bar, grads = carry
            t, tnext = times_ref[2 * slot], times_ref[2 * slot + 1]
            kept = keep_ref[slot] > 0
            y, fs = load(slot)
            # A row that did not keep the step reads zeros (a rejected trial may hold
            # infinities, and 0 * inf would reach the weights' sums).
            y = jnp.where(kept, y, 0)
            fs = [jnp.where(kept, f, 0) for f in fs]
            h = jnp.where(kept, tnext - t, 0)
            inside = kept & (ts > t) & (ts <= tnext)
            g = jnp.where(inside[..., None], ys_bar, 0)
            # Times outside the step read 0: far off a short step the interpolant's
            # weights overflow, and inf * 0 would be NaN.
            theta = jnp.where(inside, tsit5.rescale(t, tnext, ts), 0)
            weights_at = tsit5.interpolation_weights(theta)
            fs_bar = [h * jnp.sum(w[..., None] * g, axis=1) for w in weights_at]
            fs_bar[-1] = fs_bar[-1] + jnp.where(kept, f_bar, 0)
            y1_bar = jnp.where(kept, y_bar, 0)
            y_in, f_in, grads = _step_reverse(
                weights, activation, scale, h, y, fs, y1_bar, fs_bar, grads
            )
            y_in = y_in + jnp.sum(g, axis=1)  # the interpolant's start state
            return jnp.where(kept, y_in, y_bar), jnp.where(kept, f_in, f_bar), grads

        def interval(j, carry):
            """StepTo's step `j` replayed, its end's saved cotangent added."""
            y_bar, f_bar, grads = carry
            y, fs = load(j)
            h = ts_ref[:, pl.ds(j + 1, 1)] - ts_ref[:, pl.ds(j, 1)]
            end_bar = jnp.squeeze(ys_bar_ref[:, pl.ds(j + 1, 1), :], axis=1)
            fs_bar = [jnp.zeros_like(y)] * (tsit5.STAGES - 1) + [f_bar]
            return _step_reverse(
                weights, activation, scale, h, y, fs, y_bar + end_bar, fs_bar, grads
            )

        count = count_ref[0, 0] if cfg.adaptive else cfg.n_times - 1
        step = replayed if cfg.adaptive else interval

        def body(k, carry):
            return step(count - 1 - k, carry)

        zero = jnp.zeros_like(y0)
        init = (zero, zero, [jnp.zeros_like(w) for w in weights])
        y_bar, f_bar, grads = jax.lax.fori_loop(0, count, body, init)
        # The first stage, the field at (t0, y0), and the saved initial state.
        g, grads = _mlp_reverse(weights, activation, y0, scale * f_bar, grads)
        y0_bar_ref[...] = y_bar + g + jnp.squeeze(ys_bar_ref[:, pl.ds(0, 1), :], axis=1)
        for ref, grad in zip(grad_refs, grads, strict=True):
            ref[...] = grad[None]

    return kernel


# --- the calls: block specs and padding.


def _spec(kind: str, shape: tuple[int, ...], block: int) -> pl.BlockSpec:
    """The block spec of an array of `shape`: `rows` (a block of rows per program),
    `slots` (rows second), `whole` or `program` (one entry per program)."""
    rest = (0,) * (len(shape) - 1)
    if kind == "rows":
        return pl.BlockSpec((block, *shape[1:]), lambda i: (i, *rest))
    if kind == "slots":
        return pl.BlockSpec((shape[0], block, *shape[2:]), lambda i: (0, i, *rest[1:]))
    if kind == "program":
        return pl.BlockSpec((1, *shape[1:]), lambda i: (i, *rest))
    return pl.BlockSpec(shape, lambda i: (0, *rest))


def _pallas(cfg: Config, kernel, inputs, outputs) -> list[Array]:
    """`kernel` over `cfg.programs` programs: `inputs` as `(array, kind)`, `outputs` as
    `(shape, dtype, kind)` (`_spec`'s kinds)."""
    call = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(shape, dtype) for shape, dtype, _ in outputs],
        grid=(cfg.programs,),
        in_specs=[_spec(kind, x.shape, cfg.block) for x, kind in inputs],
        out_specs=[_spec(kind, shape, cfg.block) for shape, _, kind in outputs],
        interpret=cfg.interpret,
        compiler_params=None if cfg.interpret else triton_params(),
    )
    return call(*[x for x, _ in inputs])


def _pad(x: Array, shape: Sequence[int], edge: bool = False) -> Array:
    """`x` padded at the end of each axis to `shape`, with zeros or (`edge`) copies."""
    widths = [(0, n - m) for m, n in zip(x.shape, shape, strict=True)]
    return jnp.pad(x, widths, mode="edge" if edge else "constant")


def _weights(mlp_arrays: Sequence[tuple[Array, Array | None]]) -> list[Array]:
    """The MLP's layers as the kernels take them: `[W0, b0, W1, b1, ...]`, padded."""
    out = []
    for weight, bias in mlp_arrays:
        shape = (_width(weight.shape[0]), _width(weight.shape[1]))
        out.append(_pad(weight, shape))
        b = jnp.zeros(weight.shape[0], weight.dtype) if bias is None else bias
        out.append(_pad(b[None], (1, shape[0])))
    return out


class _Padded(NamedTuple):
    """The kernels' inputs, padded."""

    ts: Array
    y0: Array
    scale: Array
    floor: Array
    weights: list[Array]


def _padded(cfg: Config, vjp_arg: Any) -> _Padded:
    mlp_arrays, y0, ts, scale = vjp_arg
    rows = cfg.block * cfg.programs
    ts = _pad(ts, (rows, _pow2(cfg.n_times)), edge=True)
    y0 = _pad(_pad(y0, (rows, cfg.state), edge=True), (rows, _width(cfg.state)))
    scale = _pad(scale[:, None], (rows, 1), edge=True)
    floor = clip_floor(ts[:, cfg.n_times - 1 : cfg.n_times])
    return _Padded(ts, y0, scale, floor, _weights(mlp_arrays))


def _forward(vjp_arg: Any, cfg: Config):
    """The forward kernel: `((ys, steps), residuals)`."""
    _, y0, ts, _ = vjp_arg
    p = _padded(cfg, vjp_arg)
    rows, width, slots = p.y0.shape[0], p.y0.shape[1], cfg.slots
    dt, it = y0.dtype, jnp.int32
    outputs: list[tuple[tuple[int, ...], Any, str]] = [((rows, p.ts.shape[1], width), dt, "rows")]
    if cfg.adaptive:
        outputs += [((rows, 1), it, "rows"), ((rows, 1), ts.dtype, "rows")]
        outputs += [((rows, 1), it, "rows"), ((2 * slots, rows, 1), ts.dtype, "slots")]
        outputs += [((slots, rows, 1), it, "slots")]
    outputs += [((_SLOT * slots, rows, width), dt, "slots")]
    inputs = [(p.ts, "rows"), (p.y0, "rows"), (p.scale, "rows"), (p.floor, "rows")]
    inputs += [(w, "whole") for w in p.weights]
    out = _pallas(cfg, _forward_kernel(cfg, len(p.weights)), inputs, outputs)
    n_rows, n_times = ts.shape
    ys = out[0][:n_rows, :n_times, : cfg.state]
    if cfg.adaptive:
        steps, end = out[1][:n_rows, 0], out[2][:n_rows]
        reached = ts <= end
        ys = jnp.where(reached[..., None], ys, jnp.nan)
    else:
        steps = jnp.full((n_rows,), n_times - 1, jnp.int32)
        reached = jnp.ones(ts.shape, bool)
    return (ys, steps), (out[3:] if cfg.adaptive else out[1:], reached)


def _check_perturbed(perturbed: Any) -> None:
    _, _, ts, scale = perturbed
    if any(jax.tree.leaves((ts, scale))):
        raise ValueError(
            f"{WHO}: the solve differentiates the observation times or the "
            "series' time scales; it differentiates the MLP's arrays and the initial state"
        )


_solve = with_residuals(_forward, _check_perturbed)


@_solve.def_bwd
def _solve_bwd(residuals, grad_obj, perturbed, vjp_arg, cfg):
    buffers, reached = residuals
    mlp_arrays, y0, _, _ = vjp_arg
    ys_bar = grad_obj[0]
    if ys_bar is None:
        return jax.tree.map(lambda _: None, vjp_arg)
    p = _padded(cfg, vjp_arg)
    rows, width = p.y0.shape
    ys_bar = _pad(jnp.where(reached[..., None], ys_bar, 0), (rows, p.ts.shape[1], width))
    inputs = [(p.ts, "rows"), (p.y0, "rows"), (p.scale, "rows"), (ys_bar, "rows")]
    if cfg.adaptive:
        inputs += [(buffers[0], "rows"), (buffers[1], "slots"), (buffers[2], "slots")]
    inputs += [(buffers[-1], "slots")]
    inputs += [(w, "whole") for w in p.weights]
    outputs = [((rows, width), y0.dtype, "rows")]
    outputs += [((cfg.programs, *w.shape), w.dtype, "program") for w in p.weights]
    out = _pallas(cfg, _reverse_kernel(cfg, len(p.weights)), inputs, outputs)
    grads = [jnp.sum(g, axis=0) for g in out[1:]]
    mlp_bar = [
        (
            grads[2 * i][: w.shape[0], : w.shape[1]],
            None if b is None else grads[2 * i + 1][0, : b.shape[0]],
        )
        for i, (w, b) in enumerate(mlp_arrays)
    ]
    mlp_bar = jax.tree.map(lambda g, p: g if p else None, mlp_bar, perturbed[0])
    y0_bar = out[0][: y0.shape[0], : cfg.state] if perturbed[1] else None
    return mlp_bar, y0_bar, None, None


def solve(
    field: Callable[..., Any],
    ts: Array,
    y0: Array,
    adaptive: bool,
    rtol: float,
    atol: float,
    max_steps: int,
) -> tuple[Array, Int[Array, "..."]]:
    """ODEs solved by the kernels: `ts` of shape `(n_times,)` one ODE (a within-ODE
    batch's field, or one series), of shape `(batch, n_times)` each series on its own;
    PID where `adaptive`, else StepTo. Returns `(ys, num_steps)` as `fused.solve_pid`."""
    mlp, scale = rows_of(field)
    shared = scale is not None  # a within-ODE batch: its rows one ODE
    one = ts.ndim == 1 and not shared  # one series
    if ts.ndim == 2 and shared:
        raise ValueError(f"{WHO}: a batch's field is solved as one ODE (ts of one row)")
    if one:
        ts, y0 = ts[None], y0[None]
    elif shared:
        ts = jnp.broadcast_to(ts, (y0.shape[0], ts.shape[0]))
    rows, n_times = ts.shape
    if n_times < 2:
        raise ValueError(f"{WHO}: a series needs at least 2 observation times")
    block = max(MIN_WIDTH, _pow2(rows)) if shared else BLOCK
    cfg = Config(
        adaptive=adaptive,
        shared=shared,
        rtol=float(rtol),
        atol=float(atol),
        max_steps=int(max_steps),
        n_times=n_times,
        rows=rows,
        state=y0.shape[1],
        block=block,
        programs=1 if shared else -(-rows // block),
        activation=mlp.activation,
        interpret=interpret_mode(),
    )
    mlp_arrays = [(layer.weight, layer.bias) for layer in mlp.layers]
    scale = jnp.ones(rows, y0.dtype) if scale is None else scale
    ys, steps = _solve((mlp_arrays, y0, ts, scale), cfg)
    if one:
        return ys[0], steps[0]
    return (jnp.swapaxes(ys, 0, 1), steps[0]) if shared else (ys, steps)
