"""Problems a new user might write wrongly, one mistake each, for the checks made before
anything compiles (`odestudy.measure.checks`). Each is `tests.bad_problems:NAME`."""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import odestudy


class Good(odestudy.AbstractProblem):
    """A small valid series problem: decaying 2-D series on a shared grid."""

    name: ClassVar[str] = "good"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.05

    def make_data(self, size: int, key: jax.Array, spread: float = 0.0) -> odestudy.Dataset:
        y0 = jr.uniform(key, (size, 2), minval=-1.0, maxval=1.0)
        ts = jnp.broadcast_to(jnp.linspace(0.0, 2.0, 12), (size, 12))
        ys = y0[:, None, :] * jnp.exp(-ts)[..., None]
        return odestudy.Dataset(np.asarray(ts), np.asarray(ys), np.ones(size))

    def make_field(self, key: jax.Array, width: int) -> eqx.Module:
        return odestudy.VectorField(key, width=width)


class DecreasingTimes(Good):
    name: ClassVar[str] = "decreasing_times"

    def make_data(self, size, key, spread=0.0):
        data = super().make_data(size, key, spread)
        return odestudy.Dataset(data.ts[:, ::-1].copy(), data.ys, data.time_scale)


class NaNData(Good):
    name: ClassVar[str] = "nan_data"

    def make_data(self, size, key, spread=0.0):
        data = super().make_data(size, key, spread)
        ys = data.ys.copy()
        ys[3, 5, 1] = np.nan
        return odestudy.Dataset(data.ts, ys, data.time_scale)


class WrongRank(Good):
    name: ClassVar[str] = "wrong_rank"

    def make_data(self, size, key, spread=0.0):
        data = super().make_data(size, key, spread)
        return odestudy.Dataset(data.ts, data.ys[..., 0], data.time_scale)


class RaisingData(Good):
    name: ClassVar[str] = "raising_data"

    def make_data(self, size, key, spread=0.0):
        data = super().make_data(size, key, spread)
        data.ts[0, 0] = 1.0  # a read-only array
        return data


class BareMLP(Good):
    """A field called as `f(y)`: an `eqx.nn.MLP` as it is."""

    name: ClassVar[str] = "bare_mlp"

    def make_field(self, key, width):
        return eqx.nn.MLP(2, 2, width, 2, key=key)


class WrongOutput(Good):
    """A field returning 3 values for a state of 2."""

    name: ClassVar[str] = "wrong_output"

    def make_field(self, key, width):
        return _ThreeOut(eqx.nn.MLP(2, 3, width, 2, key=key))


class _ThreeOut(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t: Any, y: jax.Array, args: Any) -> jax.Array:
        return self.mlp(y)


class PerSeriesLoss(Good):
    """A loss with one value per series."""

    name: ClassVar[str] = "per_series_loss"

    def loss(self, pred, ys, mask):
        return jnp.mean((pred - ys) ** 2, axis=(1, 2))


class PerSeriesEval(Good):
    """An evaluation loss with one value per series."""

    name: ClassVar[str] = "per_series_eval"

    def eval_loss(self, pred, ys, mask):
        return jnp.mean((pred - ys) ** 2, axis=(1, 2))


class NoName(odestudy.AbstractProblem):
    """A subclass without its `name`."""

    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.05

    def make_data(self, size, key, spread=0.0):
        return Good().make_data(size, key, spread)

    def make_field(self, key, width):
        return Good().make_field(key, width)


class NoField(odestudy.AbstractProblem):
    """A subclass without `make_field`."""

    name: ClassVar[str] = "no_field"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.05

    def make_data(self, size, key, spread=0.0):
        return Good().make_data(size, key, spread)


class NeverSolves(odestudy.AbstractODEProblem):
    """A general problem whose loss never calls the study's solve."""

    name: ClassVar[str] = "never_solves"
    time_dependent: ClassVar[bool] = False
    uniform_grid: ClassVar[bool] = True
    trained_loss: ClassVar[float] = 0.05
    needs_key: ClassVar[bool] = False

    def make_data(self, size, key, spread=0.0):
        data = Good().make_data(size, key, spread)
        return {"ts": data.ts, "ys": data.ys}

    def times(self, data):
        return data["ts"]

    def make_model(self, key, width):
        return Good().make_field(key, width)

    def loss(self, model, batch, key, solve):
        return jnp.mean(jax.vmap(model, in_axes=(None, 0, None))(0.0, batch["ys"][:, 0], None))


class RaggedLeaf(NeverSolves):
    """A general problem whose data has a leaf without the series on its first axis."""

    name: ClassVar[str] = "ragged_leaf"

    def make_data(self, size, key, spread=0.0):
        return {**super().make_data(size, key, spread), "scale": np.ones(3)}
