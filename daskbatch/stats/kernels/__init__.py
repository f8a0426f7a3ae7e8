"""Compiled kernels for the per-chunk step of the statistics: numba on NumPy chunks, numba-cuda on CuPy chunks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.kernels import _gpu
from daskbatch.stats.kernels.path import (
    KernelPath,
    available,
    centring_rows,
    enabled,
    float32_block,
    gpu_available,
    kernel_path,
)
from daskbatch.stats.numerics import central_moment

__all__ = [
    "INT32_ROWS", "KernelPath", "available", "class_moments", "comoments", "enabled", "gpu_available", "histogram", "histograms",
    "kernel_path", "moments", "route", "sketch", "sketch_merge", "weighted_comoments",
    "weighted_histogram", "weighted_moments",
]

def route(block: Any) -> str | None:
    """Name the compiled kernels that read ``block``, or None where the array-API code does.

    Parameters
    ----------
    block : array
        A chunk: a NumPy or CuPy array.

    Returns
    -------
    str or None
        ``"numba-cpu"`` for NumPy blocks, ``"numba-cuda"`` for CuPy blocks on a GPU the kernels
        run on, None otherwise (:func:`kernel_path` says why).
    """
    path = kernel_path(block)
    return path.kind if path.compiled else None


#: Most rows an int32 count array can count: no count of a chunk or merge of at most this many rows passes it.
INT32_ROWS = 2**31 - 1


def moments(x: np.ndarray, path: KernelPath | None = None) -> tuple[np.ndarray, ...]:
    """Compute the fields of :class:`~daskbatch.stats.moments.MomentsState` for a host chunk."""
    if (path or kernel_path(x)).kind == "numba-cuda":
        return _gpu.moments(x)
    return _host_moments(x, None)[1:]  # without weights the weight sum is the count, exactly


def weighted_moments(x: np.ndarray, w: np.ndarray, path: KernelPath | None = None) -> tuple[np.ndarray, ...]:
    """Compute the fields of :class:`~daskbatch.stats.moments.WeightedMomentsState` for a chunk."""
    if (path or kernel_path(x, weighted=True)).kind == "numba-cuda":
        return _gpu.moments(x, weights=w)
    return _host_moments(x, np.ascontiguousarray(w, dtype=np.float64))


def _host_moments(x: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """The numba moments of a host chunk: the rows counted, then the fields of ``WeightedMomentsState``."""
    from daskbatch.stats.kernels._numba_moments import moments_chunk  # lazy: numba

    count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf = moments_chunk(float32_block(x), w)
    # The corrected two-pass formulas of Moments.chunk (Chan, Golub & LeVeque 1983), weight sums for counts.
    e = s1 / np.where(wsum > 0, wsum, 1.0)
    m2 = s2 - wsum * e * e
    m3 = s3 - 3.0 * e * s2 + 2.0 * wsum * e**3
    m4 = s4 - 4.0 * e * s3 + 6.0 * e * e * s2 - 3.0 * wsum * e**4
    neginf = x.shape[0] - count - nan - posinf
    return (
        count.astype(np.float64), wsum, shift, approx_mean + e, central_moment(np, m2, s2), m3,
        central_moment(np, m4, s4), fmin, fmax, nan.astype(np.float64), posinf.astype(np.float64),
        neginf.astype(np.float64),
    )


def comoments(x: np.ndarray, path: KernelPath | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Compute the fields of :class:`~daskbatch.stats.comoments.CoMomentsState` for a host chunk."""
    if (path or kernel_path(x)).kind == "numba-cuda":
        return _gpu.comoments(x)
    from daskbatch.stats.kernels._numba_comoments import chunk_comoments  # lazy: numba

    n, _, shift, mean, c = chunk_comoments(float32_block(x), None, centring_rows(x.shape[1]))
    return np.asarray(float(n)), shift, mean, c


def class_moments(
    x: np.ndarray, codes: np.ndarray, n_classes: int, weights: np.ndarray | None = None,
    path: KernelPath | None = None,
) -> tuple[np.ndarray, ...]:
    """Compute the fields of :class:`~daskbatch.stats.class_moments.ClassMomentsState` for a chunk."""
    if (path or kernel_path(x)).kind == "numba-cuda":
        return _gpu.class_moments(x, codes.astype(np.int64, copy=False), int(n_classes), weights=weights)
    from daskbatch.stats.kernels._numba_moments import class_moments_chunk  # lazy: numba

    d = x.shape[1]
    count = np.zeros((n_classes, d), dtype=np.int64 if weights is None else np.float64)
    shift, total, s1, s2 = (np.zeros((n_classes, d)) for _ in range(4))
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    class_moments_chunk(float32_block(x), np.asarray(codes, dtype=np.int64), count, shift, total, s1, s2, w)
    n = count.astype(np.float64)
    n_safe = np.where(n > 0, n, 1.0)
    # The closing expressions of class_moments._one_class, on (K, D) at once.
    approx_mean = total / n_safe
    e = s1 / n_safe
    m2 = central_moment(np, s2 - n * e * e, s2)
    return tuple(np.ascontiguousarray(v.T) for v in (n, shift, approx_mean + e, m2))


def weighted_comoments(x: np.ndarray, w: np.ndarray, path: KernelPath | None = None) -> tuple[np.ndarray, ...]:
    """Compute the fields of :class:`~daskbatch.stats.comoments.WeightedCoMomentsState` for a chunk."""
    if (path or kernel_path(x, weighted=True)).kind == "numba-cuda":
        return _gpu.comoments(x, weights=w)
    from daskbatch.stats.kernels._numba_comoments import chunk_comoments  # lazy: numba

    # The unweighted chunks' blocked centring, with weight sums.
    w = np.ascontiguousarray(w, dtype=np.float64)
    rows, wsum, shift, mean, c = chunk_comoments(float32_block(x), w, centring_rows(x.shape[1]))
    return np.asarray(wsum), shift, mean, c, np.asarray(float(rows))


def histogram(
    x: Array, lo: Any, hi: Any, bins: int, labels: Array | None = None, n_classes: int = 1,
    path: KernelPath | None = None,
) -> Array:
    """Count the :class:`~daskbatch.stats.histogram.HistogramState` of a chunk with the kernels."""
    if (path or kernel_path(x)).kind == "numba-cuda":
        return _gpu.histogram(x, lo, hi, bins, labels, n_classes)
    return histograms(x, [(lo, hi, bins, n_classes, labels is not None)], labels)[0]


def weighted_histogram(
    x: Array, lo: Any, hi: Any, bins: int, labels: Array | None, n_classes: int, w: Array,
    path: KernelPath | None = None,
) -> Array:
    """Sum the weights of a chunk's values per slot, as :func:`histogram` counts them."""
    if (path or kernel_path(x, weighted=True)).kind == "numba-cuda":
        return _gpu.histogram(x, lo, hi, bins, labels, n_classes, weights=w)
    return histograms(x, [(lo, hi, bins, n_classes, labels is not None)], labels, w)[0]


def histograms(
    x: np.ndarray, grids: Sequence[tuple[Any, Any, int, int, bool]], labels: Array | None = None,
    weights: Array | None = None,
) -> list[np.ndarray]:
    """Count several histograms of a host chunk in one sweep of its values: a (D, bins + 3, K) table per grid.

    Each grid is ``(lo, hi, bins, n_classes, by_label)``; the grids ``by_label`` count in the class column of
    ``labels``. The counts are int64 (float64 sums of ``weights`` when given), those of :func:`histogram` each.
    """
    from daskbatch.stats.kernels._numba_histogram import count_grids  # lazy: numba

    # Counted in int32 where no count can pass it (fewer rows than 2**31): half the table the
    # scattered increments touch, so more of it stays in cache; returned as the int64 of the state.
    small = weights is None and x.shape[0] <= INT32_ROWS
    dtype = np.float64 if weights is not None else np.int32 if small else np.int64
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    lo = np.array([np.asarray(g[0], dtype=np.float64) for g in grids]).reshape(len(grids), x.shape[1])
    hi = np.array([np.asarray(g[1], dtype=np.float64) for g in grids]).reshape(len(grids), x.shape[1])
    bins = [int(g[2]) for g in grids]
    n_classes = [int(g[3]) for g in grids]
    # The float64 expressions of Histogram.edges and Histogram.slots: edges and scaled indices round alike.
    per_grid = np.asarray(bins, dtype=np.float64)[:, None]
    step, scale = (hi - lo) / per_grid, per_grid / (hi - lo)
    lab = np.empty(0, dtype=np.int64) if labels is None else np.asarray(labels, dtype=np.int64)
    shapes = [(x.shape[1], b + 3, k) for b, k in zip(bins, n_classes, strict=True)]
    counts = np.zeros(sum(math.prod(shape) for shape in shapes), dtype=dtype)
    count_grids(float32_block(x), lo, hi, step, scale, bins, n_classes, [bool(g[4]) for g in grids], lab, counts, w)
    tables, start = [], 0
    for shape in shapes:
        table = counts[start:start + math.prod(shape)].reshape(shape)
        tables.append(table.astype(np.int64) if small else table)
        start += math.prod(shape)
    return tables


def sketch(
    x: np.ndarray, ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n_buckets: int, window: int,
    weights: np.ndarray | None = None, *, count_dtype: str = "int64",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Compute the fields of :class:`~daskbatch.stats.sketch.SketchState` for a host chunk."""
    from daskbatch.stats.kernels import _numba_sketch, _sketch_table  # lazy: numba

    d = x.shape[1]
    data = float32_block(x)
    counts = np.zeros((d, 2 * window + 4), dtype=count_dtype if weights is None else np.float64)
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    offset, collapsed = np.empty((d, 2), dtype=np.int64), np.empty((d, 2), dtype=np.uint8)
    f32 = x.dtype == np.float32 and _sketch_table.sketch_float32(  # keyed from its bits, where a table exists
        data, ln_gamma, min_magnitude, k_min, k_max, n_buckets, window, counts, offset, collapsed, w)
    if f32:
        return counts, offset, *f32
    # The fast key decodes normal floats only: a subnormal min_magnitude takes a log per value.
    fast = min_magnitude >= np.finfo(np.float64).smallest_normal
    if fast and window == n_buckets:  # every bucket kept: the windows never move
        fmin, fmax = _numba_sketch.sketch_counts_all(
            data, float(ln_gamma), float(min_magnitude), int(k_min), int(k_max), int(n_buckets), counts, offset, w
        )
        return counts, offset, fmin, fmax
    kernel = _numba_sketch.sketch_counts if fast else _numba_sketch.sketch_counts_log
    fmin, fmax = kernel(
        data, float(ln_gamma), float(min_magnitude), int(k_min), int(k_max), int(n_buckets), int(window),
        counts, offset, collapsed, w,
    )
    return counts, offset, fmin, fmax


def sketch_merge(
    counts_a: np.ndarray, offset_a: np.ndarray, counts_b: np.ndarray, offset_b: np.ndarray, n_buckets: int, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge the windows of two host :class:`~daskbatch.stats.sketch.SketchState` in one compiled loop."""
    from daskbatch.stats.kernels._numba_sketch import sketch_merge as merge  # lazy: numba

    # Weighted states hold float64 sums of weights; unweighted ones int64 or int32 counts (the caller
    # promotes int32 ones that could overflow), merged in the wider dtype.
    dtype = np.result_type(counts_a.dtype, counts_b.dtype)
    counts = np.zeros_like(counts_a, dtype=dtype)
    offset = np.empty((counts_a.shape[0], 2), dtype=np.int64)
    merge(
        np.ascontiguousarray(counts_a, dtype=dtype), np.ascontiguousarray(offset_a, dtype=np.int64),
        np.ascontiguousarray(counts_b, dtype=dtype), np.ascontiguousarray(offset_b, dtype=np.int64),
        int(n_buckets), int(window), counts, offset,
    )
    return counts, offset
