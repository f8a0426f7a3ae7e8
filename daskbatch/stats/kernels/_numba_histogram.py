"""The compiled histogram counting: slot counts (or sums of row weights) per feature and class.

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import math

import numpy as np

from daskbatch.stats.kernels._numba import _jit, _load, _weight


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
    slot = np.empty(d, dtype=np.int64)
    for i in range(rows):
        # Slots of one row, branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            f = math.floor((v - lo[j]) * scale[j])
            f = f if f < top else top  # also turns a NaN into `top`
            f = f if f > 0.0 else 0.0
            f -= np.float64(v < f * step[j] + lo[j])
            f += np.float64((v >= (f + 1.0) * step[j] + lo[j]) & (f < top))
            f += 1.0
            f = 0.0 if v < lo[j] else f
            f = over_slot if v > hi[j] else f
            f = nan_slot if v != v else f
            slot[j] = (j * n_slots + np.int64(f)) * n_classes
        # ... then one scattered increment per value.
        k = labels[i] if by_label else 0
        wi = _weight(weights, i)
        for j in range(d):
            counts[slot[j] + k] += wi
