"""Confidence intervals for step-time ratios: a hierarchical bootstrap over runs, then
over steps within each run."""

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..study.rec import Rec

RESAMPLES = 2000
LEVEL = 0.95
METHOD = (
    f"95% intervals: hierarchical bootstrap ({RESAMPLES} resamples; runs drawn "
    "with replacement, then step times within each drawn run), percentiles of the "
    "ratio of pooled medians"
)


def step_time_runs(record: dict[str, Any]) -> list[np.ndarray]:
    """The step times of each run of a record (one run for records without repeats)."""
    rec = Rec(record)  # any record-like dict: a ratio's other side may be a bare roof
    runs: list[Any] | None = rec.step_times_runs_s
    if not runs:
        runs = [rec.last_stage.step_times_s or [rec.step_time_s]]
    return [np.asarray(r, dtype=float) for r in runs if len(r)]


def bootstrap_medians(
    runs: Sequence[np.ndarray], rng: np.random.Generator, resamples: int = RESAMPLES
) -> np.ndarray:
    """Pooled medians of `resamples` hierarchical bootstrap samples of `runs`."""
    k = len(runs)
    lens = np.array([len(r) for r in runs])
    m = lens.max()
    padded = np.full((k, m), np.nan)
    for i, r in enumerate(runs):
        padded[i, : len(r)] = r
    choice = rng.integers(0, k, (resamples, k))  # which run fills each slot
    n = lens[choice][..., None]  # (B, k, 1)
    idx = (rng.random((resamples, k, m)) * n).astype(int)
    vals = padded[choice[..., None], idx]
    vals = np.where(np.arange(m)[None, None, :] < n, vals, np.nan)
    # The median of each draw's steps: sorted, NaN (padding) last, the middle one or two.
    ordered = np.sort(vals.reshape(resamples, -1), axis=1)
    count = (~np.isnan(ordered)).sum(axis=1)
    rows = np.arange(resamples)
    return (ordered[rows, (count - 1) // 2] + ordered[rows, count // 2]) / 2


def ratio_interval(
    numerator: dict[str, Any], denominator: dict[str, Any], scale: float = 1.0, seed: int = 0
) -> tuple[float, float, float]:
    """`scale * t(numerator) / t(denominator)` of two records' median step times, with
    its 95% bootstrap interval: `(estimate, low, high)`. The same step times give the
    same interval, computed once (`_ratio_interval`, by the times' bytes)."""
    a, b = step_time_runs(numerator), step_time_runs(denominator)
    return _ratio_interval(_key(a), _key(b), scale, seed)


def _key(runs: list[np.ndarray]) -> tuple[bytes, ...]:
    return tuple(r.tobytes() for r in runs)


@functools.lru_cache(maxsize=4096)
def _ratio_interval(
    a_key: tuple[bytes, ...], b_key: tuple[bytes, ...], scale: float, seed: int
) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    a = [np.frombuffer(r, dtype=float) for r in a_key]
    b = [np.frombuffer(r, dtype=float) for r in b_key]
    estimate = scale * float(np.median(np.concatenate(a)) / np.median(np.concatenate(b)))
    ratios = scale * bootstrap_medians(a, rng) / bootstrap_medians(b, rng)
    return estimate, *central(ratios)


def central(samples: np.ndarray) -> tuple[float, float]:
    """The central `LEVEL` interval of bootstrap `samples`: `(low, high)`."""
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def fmt_interval(
    value: float | None, low: float | None, high: float | None, decimals: int = 2
) -> str:
    """`1.80 [1.62, 1.95]`, or `–` without a value."""
    if value is None:
        return "–"
    if low is None or high is None:
        return f"{value:.{decimals}f}"
    return f"{value:.{decimals}f} [{low:.{decimals}f}, {high:.{decimals}f}]"
