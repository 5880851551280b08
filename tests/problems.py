"""Problems for the tests: the README's example problem (`examples/own_problem.py`,
time-dependent on irregular grids) and the same field on evenly spaced grids."""

import importlib.util
from pathlib import Path
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import odestudy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_problem.py"
_spec = importlib.util.spec_from_file_location("own_problem", EXAMPLE)
assert _spec is not None and _spec.loader is not None
own_problem = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(own_problem)


class ForcedUniform(own_problem.ForcedDecay):
    """The example's field on evenly spaced grids, each series with its own start and
    step, so that within-ODE batching is valid (its targets are not the system's)."""

    name: ClassVar[str] = "forced_uniform"
    uniform_grid: ClassVar[bool] = True

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> odestudy.Dataset:
        start_key, end_key, y0_key = jr.split(key, 3)
        start = jr.uniform(start_key, (size, 1), maxval=1.0)
        end = start + jr.uniform(end_key, (size, 1), minval=3.0, maxval=6.0)
        ts = start + (end - start) * jnp.linspace(0.0, 1.0, own_problem.N_TIMES)
        y0 = jr.uniform(y0_key, (size, own_problem.STATE), minval=-1.0, maxval=1.0)
        # Targets need not solve the system: the tests compare solves of one field.
        decay = jnp.exp(-(ts - start))[..., None]
        ys = y0[:, None, :] * decay + jnp.sin(ts)[..., None] / 2
        ys = ys.at[:, 0].set(y0)
        return odestudy.Dataset(np.asarray(ts), np.asarray(ys), np.ones(size))


FORCED = own_problem.PROBLEM
UNIFORM = ForcedUniform()


class Spiral(odestudy.AbstractProblem):
    """A problem whose step costs more as it trains: a fast, slowly decaying spiral
    `dy/dt = A y` (`A` a rotation at `OMEGA` rad per unit time). The untrained field is
    slow and the PID solve takes few steps; as the field learns the rotation, each solve
    takes more (as a continuous normalising flow's does while it learns its density)."""

    name: ClassVar[str] = "spiral"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.5
    OMEGA: ClassVar[float] = 12.0
    T_END: ClassVar[float] = 2.0

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> odestudy.Dataset:
        ts = jnp.broadcast_to(jnp.linspace(0.0, self.T_END, 24), (size, 24))
        y0 = jr.normal(key, (size, 2))
        angle = self.OMEGA * ts
        cos, sin, decay = jnp.cos(angle), jnp.sin(angle), jnp.exp(-0.1 * ts)
        ys = decay[..., None] * jnp.stack(
            [cos * y0[:, :1] + sin * y0[:, 1:], -sin * y0[:, :1] + cos * y0[:, 1:]], axis=-1
        )
        return odestudy.Dataset(np.asarray(ts), np.asarray(ys), np.ones(size))

    def make_field(self, key: jax.Array, width: int):
        return _Field(eqx.nn.MLP(2, 2, width, 2, activation=jnp.tanh, key=key))

    def schedule(self, scale: str) -> dict:
        return {"learning_rate": 0.01, "steps_per_stage": 60} if scale == "smoke" else {}


class _Field(eqx.Module):
    """`dy/dt = MLP(y)`."""

    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return self.mlp(y)


RISING = Spiral()
