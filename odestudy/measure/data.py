"""The nonlinear-oscillator toy data set of diffrax's neural ODE example, with a
per-sample complexity knob, its cache, and which samples go into which batch: random, or
grouped by solver cost."""

import hashlib
import inspect
import os
import pickle
from pathlib import Path
from typing import Any, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

T_END = 10.0
N_TIMES = 100


class Dataset(NamedTuple):
    """A batch of time series: observation times `ts` `(n, n_times)`, observed states
    `ys` `(n, n_times, 2)`, and each sample's horizon relative to `T_END` (`time_scale`)."""

    ts: np.ndarray
    ys: np.ndarray
    time_scale: np.ndarray

    def __len__(self) -> int:
        return self.ys.shape[0]

    def truncate(self, length: int) -> "Dataset":
        """The first `length` observations of every series."""
        return Dataset(self.ts[:, :length], self.ys[:, :length], self.time_scale)


def true_vector_field(t, y, args):
    """The data's ODE: `x = y / (1 + y)`, `dy/dt = [x1, -x0]`."""
    del t, args
    x = y / (1 + y)
    return jnp.stack([x[1], -x[0]], axis=-1)


def _solve_true(ts: jax.Array, y0: jax.Array) -> jax.Array:
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(true_vector_field),
        diffrax.Tsit5(),
        ts[0],
        ts[-1],
        0.1,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        max_steps=16384,
    )
    return sol.ys


# Compiled once per process (and shape), not at every call.
_solve_all = jax.jit(jax.vmap(_solve_true))


def make_dataset(size: int, key: jax.Array, spread: float = 0.0) -> Dataset:
    """`size` series of the nonlinear oscillator (the same key gives the same data on
    every machine). `spread`, the complexity knob: sample `i` is observed on
    `linspace(0, T_END * s_i, N_TIMES)`, `s_i = exp(spread * z_i)`, `z_i ~ N(0, 1)` (a
    longer horizon, more adaptive steps); 0 gives the reference data."""
    if size < 1:
        raise ValueError(f"dataset size must be >= 1, got {size}")
    if spread < 0:
        raise ValueError(f"spread must be >= 0, got {spread}")
    y0_key, scale_key = jr.split(key)
    y0 = jr.uniform(y0_key, (size, 2), minval=-0.6, maxval=1.0)
    scale = jnp.exp(spread * jr.normal(scale_key, (size,)))
    base = jnp.linspace(0.0, T_END, N_TIMES)
    ts = scale[:, None] * base[None, :]
    ys = _solve_all(ts, y0)
    return Dataset(np.asarray(ts), np.asarray(ys), np.asarray(scale))


# A folder for generated data sets (generating them costs seconds per scenario that
# nothing measures), named by everything that determines the data.
DATA_CACHE_ENV = "ODESTUDY_DATA_CACHE"


def _key_bytes(key: jax.Array) -> bytes:
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    return np.asarray(jr.key_data(key) if typed else key).tobytes()


def problem_source(problem: Any) -> list[str | bytes] | None:
    """What identifies another problem's data beyond size, key and spread: its value and
    the file defining its class (a `SeriesProblem`'s: the series problem's); None where
    the class has no file (defined in a notebook: its data is not cached)."""
    problem = getattr(problem, "problem", problem)
    if problem.name == "oscillator":
        return []
    try:
        source = Path(inspect.getfile(type(problem))).read_bytes()
    except (TypeError, OSError):
        return None
    return [repr(problem), source]


def _read(path: Path) -> Any:
    """The data written at `path` (`.npz`: a `Dataset`; `.pkl`: any pytree), or None."""
    try:
        if path.suffix == ".npz":
            with np.load(path) as f:
                return Dataset(f["ts"], f["ys"], f["time_scale"])
        with path.open("rb") as f:
            return pickle.load(f)
    except (OSError, KeyError, ValueError, EOFError, pickle.UnpicklingError, AttributeError):
        return None


def _write(path: Path, data: Any) -> None:
    """Write `data` at `path` atomically (a `Dataset` as `.npz`, else a pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp{path.suffix}")
    if isinstance(data, Dataset):
        np.savez(tmp, ts=data.ts, ys=data.ys, time_scale=data.time_scale)
    else:
        with tmp.open("wb") as f:
            pickle.dump(jax.tree.map(np.asarray, data), f)
    os.replace(tmp, path)


def cached_dataset(
    size: int,
    key: jax.Array,
    spread: float = 0.0,
    cache: str | os.PathLike | None = None,
    problem: Any = None,
) -> tuple[Any, bool]:
    """`(problem.make_data(size, key, spread), read_from_cache)` (`make_dataset` where
    `problem` is None), read from the folder `cache` where an earlier call wrote it
    (same size, key, spread, JAX version, `data.py`, problem value and source), else made
    and written there; `cache=None` (or no source file) always makes it."""
    make = make_dataset if problem is None else problem.make_data
    extra = [] if problem is None else problem_source(problem)
    if cache is None or extra is None:
        return make(size, key, spread), False
    digest = hashlib.sha256()
    parts: list[str | bytes] = [
        str(size),
        repr(float(spread)),
        jax.__version__,
        _key_bytes(key),
        Path(__file__).read_bytes(),
        *extra,
    ]
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
    stem = Path(cache) / f"data-{size}-{digest.hexdigest()[:16]}"
    for suffix in (".npz", ".pkl"):
        found = _read(stem.with_suffix(suffix))
        if found is not None:
            return found, True
    data = make(size, key, spread)
    _write(stem.with_suffix(".npz" if isinstance(data, Dataset) else ".pkl"), data)
    return data, False


def solver_cost(times: "np.ndarray | Dataset") -> np.ndarray:
    """Each sample's adaptive solver cost, estimated as its time horizon."""
    ts = np.asarray(times.ts if isinstance(times, Dataset) else times)
    return np.asarray(ts[:, -1] - ts[:, 0], dtype=np.float64)


def epoch_batches(
    n: int, global_batch: int, rng: np.random.Generator, cost: np.ndarray | None = None
) -> np.ndarray:
    """Sample indices of one epoch, shape `(n // global_batch, global_batch)` (a random
    remainder left out). With `cost`: a random permutation sorted by cost, cut into
    batches, the batch order shuffled (each device's slice holds similar costs too)."""
    order = rng.permutation(n)
    if cost is not None:
        order = order[np.argsort(np.asarray(cost)[order], kind="stable")]
    n_batches = n // global_batch
    batches = order[: n_batches * global_batch].reshape(n_batches, global_batch)
    if cost is not None:
        batches = batches[rng.permutation(n_batches)]
    return batches


def batch_stream(n: int, global_batch: int, seed: int, cost: np.ndarray | None = None):
    """Endless batches of indices, epoch after epoch (see `epoch_batches`)."""
    rng = np.random.default_rng(seed)
    while True:
        yield from epoch_batches(n, global_batch, rng, cost)
