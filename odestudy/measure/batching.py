"""Which samples go into which batch: random, or grouped by solver cost."""

import numpy as np

from .data import Dataset


def solver_cost(times: "np.ndarray | Dataset") -> np.ndarray:
    """An estimate of each sample's adaptive solver cost from its observation times:
    its time horizon (steps of an adaptive solver grow with the horizon)."""
    ts = np.asarray(times.ts if isinstance(times, Dataset) else times)
    return np.asarray(ts[:, -1] - ts[:, 0], dtype=np.float64)


def epoch_batches(
    n: int, global_batch: int, rng: np.random.Generator, cost: np.ndarray | None = None
) -> np.ndarray:
    """Sample indices of one epoch, shape `(n // global_batch, global_batch)`; the
    remainder is left out (a different one each epoch).

    With `cost`, batches are grouped by it: a random permutation sorted by cost, cut
    into batches, the batch order shuffled. Samples stay sorted within a batch, so each
    device's contiguous slice holds similar costs too.
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
