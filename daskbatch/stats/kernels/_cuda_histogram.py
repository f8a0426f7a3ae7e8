"""The GPU loops (numba-cuda) of histogram counting: a tile of counts in shared memory, or atomics on global counts."""

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
    """Count a tile of ``tile`` features over a block of rows, privatised in shared memory."""
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
    """Count as :func:`histogram_shared` does, without privatisation (when a tile's counters do not fit)."""
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
