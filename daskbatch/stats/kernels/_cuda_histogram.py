"""The GPU loops (numba-cuda) of histogram counting: a tile of counts in shared memory, or atomics on global counts.

Both loops take ``weighted`` and ``w``: false, they count (``w`` a dummy) into int64 counts,
as before weights came; true, they add ``w[i]`` into float64 counts (float64 counters in
shared memory). Float64 atomics add in no fixed order: weighted counts equal the CPU's to
rounding, and exactly where the sums are exact (integer weights, sums below 2**53).

The shared helpers are in :mod:`daskbatch.stats.kernels._cuda`; launches, buffers and finishing steps in
:mod:`daskbatch.stats.kernels._gpu`.
"""

from __future__ import annotations

import math

import numba
from numba import cuda

from daskbatch.stats.kernels._cuda import _add_rn, _load, _mul_rn, _rows_of_group


@cuda.jit(device=True)
def _slot(v, lo, hi, step, scale, bins):  # noqa: ANN001, ANN202
    """Slot of ``v``: 0 underflow, 1..bins, bins + 1 overflow, bins + 2 NaN (as ``Histogram.slots``)."""
    # Inside the range: the scaled index, clipped, then settled against the
    # edges ``i * step + lo`` rounded as the reference rounds them (twice).
    if math.isnan(v):
        return bins + 2
    if v < lo:
        return 0
    if v > hi:
        return bins + 1
    top = bins - 1
    # On the device math.floor returns a float64: clip it as a float, then index with an integer.
    f = numba.int64(min(max(math.floor((v - lo) * scale), 0.0), numba.float64(top)))
    if v < _add_rn(_mul_rn(numba.float64(f), step), lo):
        f -= 1
    if f < top and v >= _add_rn(_mul_rn(numba.float64(f + 1), step), lo):
        f += 1
    return f + 1


@cuda.jit(cache=True)
def histogram_shared(x, lo, hi, step, scale, bins, labels, by_label, n_classes, tile, rows_per_block, counts,  # noqa: ANN001, ANN201
                     weighted, w):
    """Count a tile of ``tile`` features over a block of rows, privatised in shared memory.

    Dynamic shared memory holds ``tile * (bins + 3) * n_classes`` uint32
    counters (float64 weighted: both views start at the same address, one is used); ``blockDim.x = tile * lanes``: thread t takes feature
    ``t % tile`` of the tile and every ``lanes``-th row. At the end the
    block adds its non-zero counters to ``counts``.

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    lo, hi : device array
        The range of each feature.
    step, scale : device array
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : device array
        The int64 class of each row (read with ``by_label``). The caller checks
        them (or trusts a check made on the host, without a host synchronisation
        here); a row whose class lies outside ``0 .. K - 1`` anyway is left
        uncounted, never written out of bounds.
    by_label : bool
        Count by class.
    n_classes : int
        K.
    tile : int
        Features per block.
    rows_per_block : int
        Rows of each block.
    counts : device array
        The flat int64 counts D·(bins + 3)·K (float64 weighted), added to.
    weighted : bool
        Add ``w[i]`` for each value instead of 1.
    w : device array
        The float64 weight of each row (read when ``weighted``).
    """
    local = cuda.shared.array(0, dtype=numba.uint32)
    wlocal = cuda.shared.array(0, dtype=numba.float64)  # the same bytes, for weighted counts
    t = cuda.threadIdx.x
    threads = cuda.blockDim.x
    rows, d = x.shape
    n_slots = bins + 3
    f0 = cuda.blockIdx.x * tile
    width = min(tile, d - f0)
    size = width * n_slots * n_classes
    for k in range(t, size, threads):
        if weighted:
            wlocal[k] = 0.0
        else:
            local[k] = 0
    cuda.syncthreads()
    jj = t % tile
    lane = t // tile
    lanes = threads // tile
    j = f0 + jj
    start = cuda.blockIdx.y * rows_per_block
    stop = min(start + rows_per_block, rows)
    if jj < width and lane < lanes:
        a, b, s, sc = lo[j], hi[j], step[j], scale[j]
        for i in range(start + lane, stop, lanes):
            cls = labels[i] if by_label else 0
            if 0 <= cls < n_classes:  # a code outside the table is never written
                slot = _slot(_load(x, i, j), a, b, s, sc, bins)
                if weighted:
                    cuda.atomic.add(wlocal, (jj * n_slots + slot) * n_classes + cls, w[i])
                else:
                    cuda.atomic.add(local, (jj * n_slots + slot) * n_classes + cls, numba.uint32(1))
    cuda.syncthreads()
    base = f0 * n_slots * n_classes
    for k in range(t, size, threads):
        if weighted:
            wc = wlocal[k]
            if wc != 0.0:
                cuda.atomic.add(counts, base + k, wc)
        else:
            c = local[k]
            if c != 0:
                cuda.atomic.add(counts, base + k, numba.int64(c))


@cuda.jit(cache=True)
def histogram_global(x, lo, hi, step, scale, bins, labels, by_label, n_classes, rows_per_group, counts,  # noqa: ANN001, ANN201
                     weighted, w):
    """Count as :func:`histogram_shared` does, without privatisation (when a tile's counters do not fit).

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    lo, hi : device array
        The range of each feature.
    step, scale : device array
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : device array
        The int64 class of each row (read with ``by_label``).
    by_label : bool
        Count by class.
    n_classes : int
        K.
    rows_per_group : int
        Rows of each group.
    counts : device array
        The flat int64 counts D·(bins + 3)·K (float64 weighted), added to with atomics.
    weighted : bool
        Add ``w[i]`` for each value instead of 1.
    w : device array
        The float64 weight of each row (read when ``weighted``).
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    n_slots = bins + 3
    a, b, s, sc = lo[j], hi[j], step[j], scale[j]
    for i in range(start, stop):
        cls = labels[i] if by_label else 0
        if 0 <= cls < n_classes:  # a code outside the table is never written
            slot = _slot(_load(x, i, j), a, b, s, sc, bins)
            if weighted:
                cuda.atomic.add(counts, (j * n_slots + slot) * n_classes + cls, w[i])
            else:
                cuda.atomic.add(counts, (j * n_slots + slot) * n_classes + cls, numba.int64(1))
