"""Percentile bootstrap intervals: every interval the evaluate step reports is drawn here.

A mean of per-example scores (ROUGE, accuracy) and a statistic that is not one (macro-F1,
which pools the resampled rows' counts per label) are resampled the same way: `n_resamples`
draws of n row indices with replacement, made as one index matrix per block, so 1000
resamples of 10k examples take a fraction of a second; the same seed gives the same interval.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["bootstrap_interval", "percentile_bootstrap", "resample_counts"]

#: Index matrices are drawn in blocks of at most this many indices (16 MB as int32).
_BLOCK_INDICES = 4_000_000


def bootstrap_interval(
    values: np.ndarray, *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each column of `values` (n × k or n)."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim not in (1, 2) or data.shape[0] == 0:
        raise ValueError(f"values must be a non-empty 1-d or 2-d array, got shape {data.shape}")
    columns = np.ascontiguousarray(data.reshape(data.shape[0], -1).T)  # one row per metric

    def means(idx: np.ndarray) -> np.ndarray:
        return np.stack([column[idx].mean(axis=1) for column in columns], axis=1)

    low, high = percentile_bootstrap(
        means, data.shape[0], n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    shape = data.shape[1:]
    return low.reshape(shape), high.reshape(shape)


def percentile_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of each of the k values `statistic` computes.

    `statistic` takes a block of resamples as a (b × n) matrix of row indices and returns
    its (b × k) values; the result is the (low, high) arrays of length k.
    """
    if n < 1:
        raise ValueError(f"values must be a non-empty 1-d or 2-d array, got {n} rows")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    rng = np.random.default_rng(seed)
    blocks = []
    block = max(1, _BLOCK_INDICES // n)
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        # int32 indices are drawn several times faster than int64 ones.
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.int32)
        blocks.append(np.asarray(statistic(idx), dtype=np.float64).reshape(stop - start, -1))
    values = np.concatenate(blocks)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail], axis=0)
    return low, high


def resample_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """How many times each of the n rows is drawn in each resample of `idx` (b × n), as
    floats: a resample's sum of a per-row quantity is then one matrix product."""
    rows = idx.shape[0]
    offsets = (np.arange(rows, dtype=np.int64) * n)[:, None]
    flat = np.bincount((idx + offsets).ravel(), minlength=rows * n)
    return flat.reshape(rows, n).astype(np.float64)
