"""The fused solve's reverse step written by hand for a vector field that is an MLP of
the state (the `mlp_reverse` lever of `replay.py`).

`jax.vjp` of a Tsit5 step differentiates the six stages one after another; on XLA's
CPU runtime a step of the quick model is bound by its number of small kernels. From the
step's stored start state and seven stage values, this reverse step instead:

1. rebuilds the six stages' states (elementwise: no field evaluation);
2. runs the MLP forward on all six at once, keeping each hidden layer's activation and
   its derivative;
3. walks the stages last to first, each stage state's cotangent from its value's
   through the layers' input gradients (the thin output layer's elementwise), handed on
   to the earlier stages by Tsit5's coefficients;
4. forms each layer's weight gradient as one product over the six stages' rows.

It computes what `jax.vjp` does in another order (float32 rounding differs). The field
must be `scale * mlp([y, inputs])` row by row (`MLPRows`), `inputs` none or values of
the time and `args` alone; the solve refuses any other while tracing.
"""

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from . import tsit5

# A layer with at most this many outputs (the output layer) has its input gradient as
# elementwise products (one fused kernel with the activation's derivative), not a matmul.
THIN = 4


class AbstractMLPField(eqx.Module):
    """A vector field that is an `eqx.nn.MLP`: `dy/dt = mlp(concatenate([y, inputs(t,
    args)]))` (no inputs by default), or (`groups` > 1, no inputs) the one MLP applied
    to each of `groups` equal slices of the state. Subclass it to let the fused solve's
    reverse loop differentiate its steps by hand (`mlp_reverse`); the study checks on
    random `(t, y, args)` that the field computes its `mlp`."""

    mlp: eqx.AbstractVar[eqx.nn.MLP]

    @property
    def groups(self) -> int:
        """How many equal slices of the state the MLP moves (1: the whole state)."""
        return 1

    def inputs(self, t: Any, args: Any) -> Float[Array, " inputs"]:
        """The MLP's inputs after the state (no gradient flows into them); none by
        default."""
        del t, args
        return jnp.zeros((0,))

    @abc.abstractmethod
    def __call__(self, t: Any, y: Array, args: Any) -> Array:
        """`mlp(concatenate([y, inputs(t, args)]))`, shape `(state,)`."""


def extra_inputs(mlp: eqx.nn.MLP) -> int:
    """How many inputs an `AbstractMLPField`'s MLP reads after the state."""
    return int(mlp.in_size) - int(mlp.out_size)


class MLPRows(NamedTuple):
    """A batch's field as the reverse step reads it: row `b` moves at `scale[b] *
    mlp([y[b], inputs(tau)[b]])`, or with `groups` > 1 each of its slices at `scale[b] *
    mlp(slice)`."""

    mlp: eqx.nn.MLP
    scale: Float[Array, " batch"]
    groups: int = 1
    inputs: Callable[[Array], Float[Array, "batch inputs"]] | None = None


def forward(mlp: eqx.nn.MLP, x: Float[Array, "rows in"]) -> Float[Array, "rows state"]:
    """`mlp` on each row of `x` as this module computes it."""
    hidden, _ = _hidden_layers(mlp, x)
    return _affine(mlp.layers[-1], hidden[-1])


def check_mlp(mlp: eqx.nn.MLP, who: str = "mlp_reverse") -> None:
    """A one-line ValueError, its first words `who`, unless this module runs `mlp`."""
    parameters = jax.tree.leaves(eqx.filter(mlp.activation, eqx.is_array))
    if mlp.depth < 1 or mlp.scan or parameters or "scalar" in (mlp.in_size, mlp.out_size):
        raise ValueError(
            f"{who}: the field's MLP needs depth >= 1, scan=False, vector input and "
            "output and one elementwise activation without parameters"
        )


def _random_args(key: Array, args: Any, rows: int) -> Any:
    """`rows` random samples of one series' `args` (arrays or shapes) on a first axis:
    normal where inexact, else zeros."""
    leaves, tree = jax.tree.flatten(args)
    keys = jr.split(key, max(len(leaves), 1))
    drawn = [
        jr.normal(k, (rows, *x.shape), x.dtype)
        if jnp.issubdtype(x.dtype, jnp.inexact)
        else jnp.zeros((rows, *x.shape), x.dtype)
        for k, x in zip(keys, leaves, strict=False)
    ]
    return jax.tree.unflatten(tree, drawn)


def _check_sizes(field: AbstractMLPField, args: Any, who: str) -> tuple[int, int, int]:
    """`(state, inputs, groups)` of `field`; a one-line ValueError unless its MLP maps a
    slice of the state (and its `inputs` on `args`) to its derivative."""
    mlp, groups, name = field.mlp, field.groups, type(field).__name__
    size, extra = int(mlp.out_size), extra_inputs(mlp)
    if not isinstance(groups, int) or groups < 1 or extra < 0:
        raise ValueError(
            f"{who}: {name}'s MLP must map a slice of the state (then its inputs) to its "
            f"derivative (in_size >= out_size) over groups >= 1, got groups={groups!r}"
        )
    if extra and groups != 1:
        raise ValueError(
            f"{who}: {name} reads inputs of the time or args ({extra}) and moves "
            f"groups={groups} slices of the state; a field with inputs needs groups 1"
        )
    try:
        out = jax.eval_shape(field.inputs, jax.ShapeDtypeStruct((), jnp.float32), args)
        got = getattr(out, "shape", type(out).__name__)
    except Exception as error:  # noqa: BLE001 - the user's method: one line
        raise ValueError(f"{who}: {name}.inputs(t, args) fails: {error}") from None
    if got != (extra,):
        raise ValueError(
            f"{who}: {name}.inputs(t, args) has shape {got}; its MLP takes "
            f"in_size - out_size = {extra} inputs after the state"
        )
    return size, extra, groups


def check(field: AbstractMLPField, key: Array, who: str = "mlp_reverse", args: Any = None) -> None:
    """A one-line ValueError (its first words `who`) unless this module runs `field`'s
    MLP, its `inputs` match the MLP's sizes and its output at 8 random `(t, y, args)` is
    `forward(field.mlp, ...)`; `args`: one series' `args`, or None."""
    rows = 8
    check_mlp(field.mlp, who)
    size, extra, groups = _check_sizes(field, args, who)
    y_key, t_key, a_key = jr.split(key, 3)
    y = jr.normal(y_key, (rows, size * groups))
    t = jr.uniform(t_key, (rows,), maxval=10.0)
    a = None if args is None else _random_args(a_key, args, rows)
    axes = (0, None if a is None else 0)
    own = jax.vmap(field, in_axes=(axes[0], 0, axes[1]))(t, y, a)
    if extra:
        x = jnp.concatenate([y, jax.vmap(field.inputs, in_axes=axes)(t, a)], axis=1)
    else:
        x = y.reshape(rows * groups, size)
    mine = forward(field.mlp, x).reshape(rows, size * groups)
    if not jnp.allclose(own, mine, rtol=1e-4, atol=1e-6):
        raise ValueError(
            f"{who}: {type(field).__name__} does not compute dy/dt = mlp([y, inputs(t, "
            "args)]) (no final activation)"
        )


def _affine(layer: eqx.nn.Linear, x: Array) -> Array:
    out = x @ layer.weight.T
    return out if layer.bias is None else out + layer.bias


def _input_gradient(g: Array, weight: Array) -> Array:
    """`g @ weight`: the cotangent of a layer's input from its output's."""
    if g.shape[1] > THIN:
        return g @ weight
    out = g[:, :1] * weight[0]
    for k in range(1, g.shape[1]):
        out = out + g[:, k : k + 1] * weight[k]
    return out


def with_derivative(activation: Any, z: Array) -> tuple[Array, Array]:
    """The activation at `z` and its derivative there (elementwise)."""
    return jax.jvp(activation, (z,), (jnp.ones_like(z),))


def _hidden_layers(mlp: eqx.nn.MLP, x: Array) -> tuple[list[Array], list[Array]]:
    """Each layer's input (`x` first) and each hidden layer's activation derivative."""
    hidden, derivatives = [x], []
    for layer in mlp.layers[:-1]:
        value, derivative = with_derivative(mlp.activation, _affine(layer, hidden[-1]))
        hidden.append(value)
        derivatives.append(derivative)
    return hidden, derivatives


def _weight_gradients(
    mlp: eqx.nn.MLP, output_bars: list[list[Array]], hidden: list[Array]
) -> eqx.nn.MLP:
    """`mlp` with its arrays replaced by their gradients: per layer, one product of its
    outputs' cotangents (last stage first) and its inputs."""
    grads = []
    for layer, bars, inputs in zip(mlp.layers, output_bars, hidden, strict=True):
        g = jnp.concatenate(bars[::-1])
        grads.append(g.T @ inputs)
        if layer.bias is not None:
            grads.append(jnp.sum(g, axis=0))
    return eqx.tree_at(
        lambda m: [
            leaf for layer in m.layers for leaf in (layer.weight, layer.bias) if leaf is not None
        ],
        mlp,
        grads,
    )


def _stage_inputs(rows: MLPRows, bound: Array, h: Array, state: int) -> Array:
    """The six stages' MLP inputs after their states, stacked; a one-line ValueError
    unless the MLP takes as many."""
    assert rows.inputs is not None
    extra = [rows.inputs(tsit5.stage_time(bound[0], bound[1], h, c)) for c in tsit5.C]
    want = int(rows.mlp.in_size) - state
    if extra[0].ndim != 2 or extra[0].shape[1] != want:
        raise ValueError(
            f"mlp_reverse: the field's inputs(t, args) give {extra[0].shape[1:]} values per "
            f"row; its MLP takes in_size - state = {want}"
        )
    return jnp.concatenate(extra)


def step_reverse(
    rows: MLPRows,
    h: Array,
    y: Float[Array, "batch state"],
    fs: Float[Array, "7 batch state"],
    y1_bar: Array,
    fs_bar: Array,
    bound: Float[Array, "2"] | None = None,
) -> tuple[Array, Array, eqx.nn.MLP]:
    """`(y_bar, f_bar, mlp_bar)`: the cotangents of one Tsit5 step's start state `y`,
    its first stage and the MLP's arrays, given those of its end state and seven stage
    values (`fs_bar`); `fs`: its stored stage values; `bound`: its start and end times
    (needed where `rows.inputs`)."""
    if rows.groups > 1:
        return _grouped_reverse(rows, h, y, fs, y1_bar, fs_bar)
    mlp, scale = rows.mlp, rows.scale[:, None]
    layers, (batch, state) = mlp.layers, y.shape
    ks = [f * h for f in fs]
    inputs = jnp.concatenate([tsit5.stage_state(y, row, ks) for row in tsit5.A_LOWER])
    weights = [layer.weight for layer in layers]
    if rows.inputs is not None:  # the state's columns alone go back to the states
        assert bound is not None, "a field with inputs needs the step's times"
        inputs = jnp.concatenate([inputs, _stage_inputs(rows, bound, h, state)], axis=1)
        weights[0] = weights[0][:, :state]
    hidden, derivatives = _hidden_layers(mlp, inputs)
    output_bars: list[list[Array]] = [[] for _ in layers]  # per layer, stages last first

    def state_bar(stage: int, value_bar: Array) -> Array:
        rows_of = slice((stage - 1) * batch, stage * batch)
        g = scale * value_bar
        for index in range(len(layers) - 1, -1, -1):
            output_bars[index].append(g)
            g = _input_gradient(g, weights[index])
            if index:
                g = g * derivatives[index - 1][rows_of]
        return g

    fs_bars = [fs_bar[j] for j in range(tsit5.STAGES)]
    y_bar, f_bar = tsit5.reverse(h, y1_bar, fs_bars, state_bar)
    return y_bar, f_bar, _weight_gradients(mlp, output_bars, hidden)


def _grouped_reverse(
    rows: MLPRows, h: Array, y: Array, fs: Array, y1_bar: Array, fs_bar: Array
) -> tuple[Array, Array, eqx.nn.MLP]:
    """`step_reverse` for `rows.groups` > 1: each slice a row of its own."""
    if rows.inputs is not None:
        raise ValueError(
            "mlp_reverse: a field with inputs of the time or args needs groups 1, got "
            f"groups={rows.groups}"
        )
    n = rows.groups

    def split(a: Array) -> Array:
        return a.reshape(*a.shape[:-2], a.shape[-2] * n, a.shape[-1] // n)

    def join(a: Array) -> Array:
        return a.reshape(*a.shape[:-2], a.shape[-2] // n, a.shape[-1] * n)

    single = MLPRows(rows.mlp, jnp.repeat(rows.scale, n))
    y_bar, f_bar, mlp_bar = step_reverse(
        single, h, split(y), split(fs), split(y1_bar), split(fs_bar)
    )
    return join(y_bar), join(f_bar), mlp_bar
