"""The compiled histogram counting: slot counts (or sums of row weights) per feature and class.

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import _jit, _load, _weight

#: 2**63: a float floor at or beyond it (or NaN) became int64's INT_MIN in the former ``math.floor`` slot.
_INT_LIMIT = 2.0**63


@_jit
def histogram_counts(x, lut, lo, hi, step, scale, bins, labels, n_classes, counts, weights):  # noqa: ANN001, ANN201
    """Add to ``counts`` (D·(bins + 3)·K, flat) the counts of slot ``[under, bins…, over, nan]`` × class.

    Without weights ``counts`` is int64 and every value adds 1 (the loop compiled
    for ``weights=None`` is the unweighted one); with weights it is float64 and a
    value adds its row's weight.

    The slot of a value follows :meth:`daskbatch.stats.histogram.Histogram.slots`
    step by step (scaled index, clipped, then settled against the edges), so
    counts are bitwise those of the array-API path and of ``numpy.histogram``.
    Edge ``i`` is formed as ``i * step + lo``, the expression of
    :meth:`~daskbatch.stats.histogram.Histogram.edges`, instead of being looked
    up: the settle step then vectorises. The last edge (``hi``) is never needed
    there, since a value in the last bin cannot move up.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    lo, hi : numpy.ndarray
        The range of each feature.
    step, scale : numpy.ndarray
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : numpy.ndarray
        The int64 class of each row, or an empty array for K = 1.
    n_classes : int
        K.
    counts : numpy.ndarray
        The flat counts, added to: int64, or float64 with weights.
    weights : numpy.ndarray or None
        The float64 weight of each row, or None.
    """
    rows, d = x.shape
    n_slots = bins + 3
    by_label = labels.shape[0] > 0
    top = float(bins - 1)
    over_slot = float(bins + 1)
    nan_slot = float(bins + 2)
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    slot = np.empty(d, dtype=np.uint64)
    for i in range(rows):
        # Slots of one row, branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            # np.floor, not math.floor: the latter's int64 result (the x86 "indefinite"
            # INT_MIN for NaN, ±inf and beyond ±2**63, clipped to 0 below) keeps the loop
            # scalar; the float expression gives the same slot for every value.
            f = np.floor((v - lo[j]) * scale[j])
            f = f if abs(f) < _INT_LIMIT else 0.0  # where math.floor gave INT_MIN (NaN included)
            f = f if f < top else top
            f = f if f > 0.0 else 0.0
            f = f - 1.0 if v < f * step[j] + lo[j] else f
            f = f + 1.0 if (v >= (f + 1.0) * step[j] + lo[j]) & (f < top) else f
            f += 1.0
            f = 0.0 if v < lo[j] else f
            f = over_slot if v > hi[j] else f
            f = nan_slot if v != v else f
            slot[j] = np.uint64((j * n_slots + np.int64(f)) * n_classes)
        # ... then one scattered increment per value.
        k = np.uint64(labels[i] if by_label else 0)
        wi = _weight(weights, i)
        for j in range(d):
            counts[slot[j] + k] += wi
