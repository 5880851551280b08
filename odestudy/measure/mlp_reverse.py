"""The fused solve's reverse step written by hand for a vector field that is an MLP of
the state (the `mlp_reverse` lever of the fused solve's own reverse loop, `replay.py`).

`jax.vjp` of a Tsit5 step recomputes the six stages one after another and differentiates
each: per stage the MLP's forward pass, its input gradient and its weight gradient, then
the weight gradients summed over the stages. On XLA's CPU runtime a step of the quick
model is bound by its number of small kernels, not by its arithmetic. Given the step's
stored row (its start state and its seven stage values), this reverse step instead:

1. rebuilds the six stages' states from the stored stage values (elementwise: no field
   evaluation);
2. runs the MLP's forward pass on all six at once (six times the batch), keeping each
   hidden layer's activation and its derivative (`jax.jvp` of the activation);
3. walks the stages last to first: each stage state's cotangent from its value's through
   the layers' input gradients alone (the thin output layer's as elementwise products),
   handed on to the earlier stages' values by Tsit5's coefficients;
4. forms each layer's weight gradient as one product over the six stages' rows.

It computes what `jax.vjp` does, in another order (float32 rounding differs). The field
must be `scale * mlp(y)` row by row (`MLPRows`: within-ODE batching's `_BatchField`
over an `AbstractMLPField`); the solve refuses any other while tracing.
"""

import abc
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import tsit5

# A layer with at most this many outputs has its input gradient computed as elementwise
# products summed over its outputs (one fused kernel with the activation's derivative)
# rather than as a matrix product: the state-sized output layer.
THIN = 4


class AbstractMLPField(eqx.Module):
    """A vector field `dy/dt = mlp(y)`: an `eqx.nn.MLP` of the state alone, not of the
    time or the field's `args`, or (`groups` > 1) the one MLP applied to each of
    `groups` equal consecutive slices of the state, its weights shared (the oscillator
    bank's `SharedField`). Subclass it (and call `mlp` in `__call__`) to let the fused
    solve's reverse loop differentiate its steps by hand (`mlp_reverse`).

    - `mlp`: the MLP (unscanned, elementwise activations, no final activation); the
      study checks on random states that the field computes it.
    """

    mlp: eqx.AbstractVar[eqx.nn.MLP]

    @property
    def groups(self) -> int:
        """How many equal slices of the state the MLP moves, each on its own (1: the
        whole state)."""
        return 1

    @abc.abstractmethod
    def __call__(self, t: Any, y: Array, args: Any) -> Array:
        """`mlp(y)`, shape `(state,)`; `t` and `args` are not read."""


class MLPRows(NamedTuple):
    """A batch's field as the reverse step reads it: row `b` of the state `y` (shape
    `(batch, state)`) moves at `scale[b] * mlp(y[b])`, or with `groups` > 1 each of its
    `groups` equal slices at `scale[b] * mlp(slice)`."""

    mlp: eqx.nn.MLP
    scale: Float[Array, " batch"]
    groups: int = 1


def forward(mlp: eqx.nn.MLP, x: Float[Array, "rows state"]) -> Float[Array, "rows state"]:
    """`mlp` on each row of `x` as this module computes it (matrix products over the
    rows, no final activation): what `check` compares with the field's own output."""
    hidden, _ = _hidden_layers(mlp, x)
    return _affine(mlp.layers[-1], hidden[-1])


def check_mlp(mlp: eqx.nn.MLP, who: str = "mlp_reverse") -> None:
    """Raise a one-line ValueError, its first words `who` (the lever or integrator that
    needs it), unless `mlp` is one this module runs: depth at least 1, unscanned, vector
    input and output, one activation without parameters."""
    parameters = jax.tree.leaves(eqx.filter(mlp.activation, eqx.is_array))
    if mlp.depth < 1 or mlp.scan or parameters or "scalar" in (mlp.in_size, mlp.out_size):
        raise ValueError(
            f"{who}: the field's MLP needs depth >= 1, scan=False, vector input and "
            "output and one elementwise activation without parameters"
        )


def check(field: AbstractMLPField, key: Array, rows: int = 8, who: str = "mlp_reverse") -> None:
    """Raise a one-line ValueError (its first words `who`) unless `field`'s MLP is one
    this module runs (`check_mlp`) and the field's output at `rows` random states (from
    `key`) is `forward(field.mlp, y)` (to float32 tolerance), on each of its `groups`
    slices."""
    mlp, groups = field.mlp, field.groups
    check_mlp(mlp, who)
    size = int(mlp.in_size)
    if not isinstance(groups, int) or groups < 1 or mlp.out_size != size:
        raise ValueError(
            f"{who}: {type(field).__name__}'s MLP must map a slice of the state to its "
            f"derivative (in_size == out_size) over groups >= 1, got groups={groups!r}"
        )
    y = jax.random.normal(key, (rows, size * groups))
    own = jax.vmap(lambda yi: field(None, yi, None))(y)
    mine = forward(mlp, y.reshape(rows * groups, size)).reshape(rows, size * groups)
    if not jnp.allclose(own, mine, rtol=1e-4, atol=1e-6):
        raise ValueError(
            f"{who}: {type(field).__name__} does not compute dy/dt = mlp(y) (no final activation)"
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
    """Each layer's input for the rows of `x` (`x` first) and each hidden layer's
    activation derivative."""
    hidden, derivatives = [x], []
    for layer in mlp.layers[:-1]:
        value, derivative = with_derivative(mlp.activation, _affine(layer, hidden[-1]))
        hidden.append(value)
        derivatives.append(derivative)
    return hidden, derivatives


def _weight_gradients(
    mlp: eqx.nn.MLP, output_bars: list[list[Array]], hidden: list[Array]
) -> eqx.nn.MLP:
    """`mlp` with its arrays replaced by their gradients: per layer, its outputs'
    cotangents (`output_bars`, one array per stage, last stage first) against its
    inputs (`hidden`, the stages' rows stacked in stage order), as one product."""
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


def step_reverse(
    rows: MLPRows,
    h: Array,
    y: Float[Array, "batch state"],
    fs: Float[Array, "7 batch state"],
    y1_bar: Array,
    fs_bar: Array,
) -> tuple[Array, Array, eqx.nn.MLP]:
    """The cotangents of one Tsit5 step's start state `y` and first stage `fs[0]`, and of
    the MLP's arrays, given those of its end state (`y1_bar`) and of its seven stage
    values (`fs_bar`).

    - `h`: the step's length; `fs`: its stored stage values (`fs[0]` the FSAL stage).

    Returns `(y_bar, f_bar, mlp_bar)`, `mlp_bar` shaped as `rows.mlp` (its arrays the
    gradients, every other leaf as it was). With `rows.groups` > 1 each slice of a row
    is a row of its own, at its row's scale.
    """
    if rows.groups > 1:
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
    mlp, scale = rows.mlp, rows.scale[:, None]
    layers, batch = mlp.layers, y.shape[0]
    ks = [f * h for f in fs]
    inputs = [tsit5.stage_state(y, row, ks) for row in tsit5.A_LOWER]
    hidden, derivatives = _hidden_layers(mlp, jnp.concatenate(inputs))
    output_bars: list[list[Array]] = [[] for _ in layers]  # per layer, stages last first

    def state_bar(stage: int, value_bar: Array) -> Array:
        rows_of = slice((stage - 1) * batch, stage * batch)
        g = scale * value_bar
        for index in range(len(layers) - 1, -1, -1):
            output_bars[index].append(g)
            g = _input_gradient(g, layers[index].weight)
            if index:
                g = g * derivatives[index - 1][rows_of]
        return g

    fs_bars = [fs_bar[j] for j in range(tsit5.STAGES)]
    y_bar, f_bar = tsit5.reverse(h, y1_bar, fs_bars, state_bar)
    return y_bar, f_bar, _weight_gradients(mlp, output_bars, hidden)
