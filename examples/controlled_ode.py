"""A controlled ODE written outside the package: a pendulum driven by a per-series torque.

Each series is `x'' = -sin(x) - 0.1 x' + u` with its own constant torque `u`, observed as
`(x, x')` on an evenly spaced grid. The batch carries every series' torque; the loss hands
it to the study's solve as `args`, and the field `f(t, y, args) = MLP([y, u])` reads it
(the field is autonomous, and within-ODE batching is valid: it gives each series its own
`args`). Run it from the folder holding this file:

    odestudy run --problem controlled_ode:PROBLEM --scale smoke
    odestudy predict --problem controlled_ode:PROBLEM --scale smoke --devices 2
    odestudy report --scale smoke
"""

from typing import Any, ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

import odestudy

N_TIMES = 40
T_END = 8.0


class Driven(NamedTuple):
    """`ts` `(n, N_TIMES)`, `ys` `(n, N_TIMES, 2)`, `torque` `(n, 1)`."""

    ts: Any
    ys: Any
    torque: Any


def pendulum(t: Any, y: jax.Array, torque: jax.Array) -> jax.Array:
    return jnp.stack([y[1], -jnp.sin(y[0]) - 0.1 * y[1] + torque[0]])


@jax.jit
@jax.vmap
def _solve(ts: jax.Array, y0: jax.Array, torque: jax.Array) -> jax.Array:
    term = diffrax.ODETerm(pendulum)
    controller = diffrax.PIDController(rtol=1e-6, atol=1e-8)
    saveat = diffrax.SaveAt(ts=ts)
    return diffrax.diffeqsolve(
        term, diffrax.Tsit5(), ts[0], ts[-1], 0.05, y0, args=torque, saveat=saveat,
        stepsize_controller=controller, max_steps=16384,
    ).ys  # fmt: skip


class TorqueField(eqx.Module):
    """`dy/dt = MLP([y, u])`: the field reads its series' torque `u` (`args`)."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int):
        self.mlp = eqx.nn.MLP(3, 2, width, 2, activation=jnp.tanh, key=key)

    def __call__(self, t: Any, y: jax.Array, args: jax.Array) -> jax.Array:
        return self.mlp(jnp.concatenate([y, args]))


class DrivenPendulum(odestudy.AbstractODEProblem):
    name: ClassVar[str] = "driven_pendulum"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.02  # chosen before any run
    needs_key: ClassVar[bool] = False

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Driven:
        y_key, u_key = jr.split(key)
        y0 = jr.uniform(y_key, (size, 2), minval=-1.0, maxval=1.0)
        torque = jr.uniform(u_key, (size, 1), minval=-0.5, maxval=0.5)
        ts = jnp.broadcast_to(jnp.linspace(0.0, T_END, N_TIMES), (size, N_TIMES))
        return Driven(np.asarray(ts), np.asarray(_solve(ts, y0, torque)), np.asarray(torque))

    def times(self, data: Driven) -> Any:
        return data.ts

    def make_model(self, key: jax.Array, width: int) -> eqx.Module:
        return TorqueField(key, width)

    def loss(self, model, batch, key, solve):
        pred = solve(model, batch.ts, batch.ys[:, 0], args=batch.torque)
        mask = odestudy.observed(batch.ts)[..., None]
        return odestudy.Mean(jnp.sum(mask * (pred - batch.ys) ** 2), 2 * jnp.sum(mask))

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        return optax.adam(learning_rate)


PROBLEM = DrivenPendulum()
