"""Your own problem for odestudy: a worked example written outside the package.

A forced, damped system `dy/dt = -y + sin(t)` per component, observed at irregular times,
learned by a field that reads its time argument. Run it from the folder holding this file:

    odestudy run --problem own_problem:PROBLEM --scale smoke --out results/own
    odestudy report --scale smoke

(`odestudy matrix --problem own_problem:PROBLEM --scale smoke` runs the whole matrix.)
Its fastest step on this machine, then that step in your own loop:

    odestudy tune --problem own_problem:PROBLEM --out step.json [--devices 2]
    odestudy predict --problem own_problem:PROBLEM --step step.json --devices 8 \\
        --profile h100-nvlink

and in Python `step = odestudy.load_step("step.json")`, `step.solve(...)` in your loss,
`odestudy.make_step(loss, optimiser, step=step)` (docs/own_model.md;
`make own-loop` times such a loop against one calling diffrax directly).
Everything the study needs is here: the data, the field, the losses, the optimiser and
the training schedule, and the facts that decide which solves are valid (the field is
time-dependent and the grids are irregular, so within-ODE batching is refused).
"""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

import odestudy

STATE = 3  # state dimension
T_END = 6.0
N_TIMES = 40


def exact(ts: jax.Array, y0: jax.Array) -> jax.Array:
    """The solution of `dy/dt = -y + sin(t)`, `y(0) = y0`, at times `ts`."""
    decay = jnp.exp(-ts)[:, None]
    wave = ((jnp.sin(ts) - jnp.cos(ts)) / 2)[:, None]
    return (y0 + 0.5) * decay + wave


class ForcedField(eqx.Module):
    """`dy/dt = MLP([y, sin t, cos t])`: a field that depends on time."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int):
        self.mlp = eqx.nn.MLP(STATE + 2, STATE, width, 2, activation=jnp.tanh, key=key)

    def __call__(self, t: Any, y: jax.Array, args: Any) -> jax.Array:
        return self.mlp(jnp.concatenate([y, jnp.stack([jnp.sin(t), jnp.cos(t)])]))


class ForcedDecay(odestudy.AbstractProblem):
    """The example problem: irregular observation times, a time-dependent field."""

    name: ClassVar[str] = "forced_decay"
    time_dependent: ClassVar[bool] = True
    uniform_grid: ClassVar[bool] = False
    trained_loss: ClassVar[float] = 0.05  # the untrained field sits near 0.3

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> odestudy.Dataset:
        times_key, y0_key = jr.split(key)
        inner = jnp.sort(jr.uniform(times_key, (size, N_TIMES - 2), maxval=T_END), axis=1)
        zero, end = jnp.zeros((size, 1)), jnp.full((size, 1), T_END)
        ts = jnp.concatenate([zero, inner, end], axis=1)
        y0 = jr.uniform(y0_key, (size, STATE), minval=-1.0, maxval=1.0)
        ys = jax.vmap(exact)(ts, y0)
        return odestudy.Dataset(np.asarray(ts), np.asarray(ys), np.ones(size))

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        return ForcedField(key, width)

    def loss(self, pred, ys, mask):
        # A loss of your own: mean absolute error over the observed points.
        if mask is None:
            return jnp.mean(jnp.abs(pred - ys))
        return jnp.sum(mask * jnp.abs(pred - ys)) / (jnp.sum(mask) * ys.shape[-1])

    def eval_loss(self, pred, ys, mask):
        # Evaluated as mean squared error, the scale `trained_loss` is given in.
        if mask is None:
            return jnp.mean((pred - ys) ** 2)
        return jnp.sum(mask * (pred - ys) ** 2) / (jnp.sum(mask) * ys.shape[-1])

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        return optax.adam(learning_rate)

    def schedule(self, scale: str) -> dict[str, Any]:
        # The problem's own training, chosen before any run: smoke only checks the
        # pipeline (a few steps); quick trains it.
        if scale == "smoke":
            return {"learning_rate": 1e-2}
        if scale == "quick":
            return {"steps_per_stage": 150, "learning_rate": 1e-2}
        return {}


PROBLEM = ForcedDecay()
