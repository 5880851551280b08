"""Which samples go into which batch: random, or grouped by solver cost."""

import numpy as np

from .data import Dataset


def solver_cost(times: "np.ndarray | Dataset") -> np.ndarray:
    """An estimate of each sample's adaptive solver cost, from the training data alone:
    its time horizon (steps of an adaptive solver grow with the horizon).

    - `times`: the observation times, shape `(n, n_times)` (padding repeats the last
      time), or a `Dataset`.
    """
    ts = np.asarray(times.ts if isinstance(times, Dataset) else times)
    return np.asarray(ts[:, -1] - ts[:, 0], dtype=np.float64)


def epoch_batches(
    n: int, global_batch: int, rng: np.random.Generator, cost: np.ndarray | None = None
) -> np.ndarray:
    """Sample indices of one epoch, shape `(n // global_batch, global_batch)`.

    - `n`: data set size; `global_batch`: samples per step.
    - `rng`: the random generator (the same seed gives the same order in every mode).
    - `cost`: per-sample solver cost for complexity-aware batching, or `None` for
      random batches. Grouped: a random permutation is sorted by cost (the random order
      breaks ties), cut into batches of similar cost, and the batch order shuffled, so
      each epoch still visits every sample once. Within a batch samples stay sorted,
      so each device's contiguous slice holds similar costs too.

    A remainder of `n % global_batch` samples is left out of this epoch (a different
    one each epoch); no sample appears twice.
    """
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
