"""Problems for the tests: the README's example problem (`examples/own_problem.py`,
time-dependent on irregular grids) and the same field on evenly spaced grids."""

import importlib.util
from pathlib import Path
from typing import ClassVar

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
