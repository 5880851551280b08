"""A controlled ODE: a forced, damped oscillator whose forcing differs per series (a
worked example of `odestudy.AbstractODEProblem` whose field reads `args`).

Each series is `x'' = -x - 0.2 x' + a sin(w t)` with its own amplitude `a` and
frequency `w`, observed as `(x, x')` on an evenly spaced grid. The batch carries every
series' `(a, w)`; the loss hands them to the study's solve as `args`, and the learned
field `f(t, y, args) = MLP([y, a sin(w t)])` reads its series' forcing at the time it is
evaluated (so it is time-dependent, and within-ODE batching gives it each series' own
time and `args`). It is an `odestudy.AbstractMLPField` whose MLP input after the state
is that forcing (`ForcedField.inputs`), so `mlp_reverse` runs it.
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

N_TIMES = 50
T_END = 10.0
DAMPING = 0.2


class Forced(NamedTuple):
    """Series with their forcing: `ts` `(n, N_TIMES)`, `ys` `(n, N_TIMES, 2)` (position
    and velocity, `ys[:, 0]` the initial states), `forcing` `(n, 2)` (amplitude and
    frequency)."""

    ts: np.ndarray | jax.Array
    ys: np.ndarray | jax.Array
    forcing: np.ndarray | jax.Array


def true_field(t: Any, y: jax.Array, forcing: jax.Array) -> jax.Array:
    """The data's system: `x' = v`, `v' = -x - DAMPING v + a sin(w t)`."""
    amplitude, frequency = forcing[0], forcing[1]
    return jnp.stack([y[1], -y[0] - DAMPING * y[1] + amplitude * jnp.sin(frequency * t)])


@jax.jit
@jax.vmap
def _solve_true(ts: jax.Array, y0: jax.Array, forcing: jax.Array) -> jax.Array:
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(true_field),
        diffrax.Tsit5(),
        ts[0],
        ts[-1],
        0.05,
        y0,
        args=forcing,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        max_steps=16384,
    )
    return sol.ys


def forced_series(size: int, key: jax.Array) -> Forced:
    """`size` series of the forced oscillator from random initial states in
    `[-1, 1]^2`, amplitudes in `[0.2, 1]` and frequencies in `[0.5, 2]`."""
    y_key, a_key, w_key = jr.split(key, 3)
    y0 = jr.uniform(y_key, (size, 2), minval=-1.0, maxval=1.0)
    amplitude = jr.uniform(a_key, (size,), minval=0.2, maxval=1.0)
    frequency = jr.uniform(w_key, (size,), minval=0.5, maxval=2.0)
    forcing = jnp.stack([amplitude, frequency], axis=1)
    ts = jnp.broadcast_to(jnp.linspace(0.0, T_END, N_TIMES), (size, N_TIMES))
    ys = _solve_true(ts, y0, forcing)
    return Forced(np.asarray(ts), np.asarray(ys), np.asarray(forcing))


class ForcedField(odestudy.AbstractMLPField):
    """`dy/dt = MLP([y, a sin(w t)])`: a field that reads its series' forcing (`args`),
    an MLP of the state and of one input of the time and `args` (`inputs`), so the fused
    solve's reverse loop can differentiate its steps by hand (`mlp_reverse`)."""

    mlp: eqx.nn.MLP

    def __init__(self, key: jax.Array, width: int):
        self.mlp = eqx.nn.MLP(3, 2, width, 2, activation=jnp.tanh, key=key)

    def inputs(self, t: Any, args: jax.Array) -> jax.Array:
        """The forcing `a sin(w t)` at `t`, shape `(1,)`."""
        control = args[0] * jnp.sin(args[1] * t)
        return control[None]

    def __call__(self, t: Any, y: jax.Array, args: jax.Array) -> jax.Array:
        return self.mlp(jnp.concatenate([y, self.inputs(t, args)]))


class ForcedOscillator(odestudy.AbstractODEProblem):
    """The controlled problem: learn the forced oscillator's field from series with
    different forcing; mean squared error over observed points (an `odestudy.Mean`)."""

    name: ClassVar[str] = "forced_oscillator"
    time_dependent: ClassVar[bool] = True
    uniform_grid: ClassVar[bool] = True
    # Chosen before any run, below the series' variance.
    trained_loss: ClassVar[float] = 0.02
    needs_key: ClassVar[bool] = False

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> Forced:
        del spread  # no complexity knob
        return forced_series(size, key)

    def times(self, data: Forced) -> Any:
        return data.ts

    def make_model(self, key: jax.Array, width: int) -> ForcedField:
        return ForcedField(key, width)

    def loss(self, model, batch, key, solve):
        del key
        pred = solve(model, batch.ts, batch.ys[:, 0], args=batch.forcing)
        mask = odestudy.observed(batch.ts)[..., None]
        return odestudy.Mean(jnp.sum(mask * (pred - batch.ys) ** 2), jnp.sum(mask) * 2)

    def optimiser(self, learning_rate: float) -> optax.GradientTransformation:
        return optax.adam(learning_rate)


PROBLEM = ForcedOscillator()
