"""The GPU loops (numba-cuda) every kernel shares (element load, row groups, correctly rounded arithmetic), and those of histogram counting and the per-class moments."""

from __future__ import annotations

import math

import numba
from numba import config, cuda

SIMULATED = bool(getattr(config, "ENABLE_CUDASIM", False))  # set by NUMBA_ENABLE_CUDASIM=1

if SIMULATED:  # Python floats round every operation, as __dmul_rn/__dadd_rn do

    @cuda.jit(device=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return a * b

    @cuda.jit(device=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return a + b

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dmul_rn(a, b)

    @cuda.jit(device=True, inline=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dadd_rn(a, b)


@cuda.jit(device=True)
def _load(x, i, j):  # noqa: ANN001, ANN202
    return numba.float64(x[i, j])


@cuda.jit(device=True)
def _cell(rows_per_group, rows):  # noqa: ANN001, ANN202
    """This thread's feature j, its row group g (the grid's y) and the group's rows ``start:stop``."""
    g = cuda.blockIdx.y
    start = g * rows_per_group
    return cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, g, start, min(start + rows_per_group, rows)


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
    rows, d = x.shape
    j, _, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
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


#: Rows of the float64 (3, K, G, D) partials of the first pass (rows 0 and 1 reused for the squares).
P_REF, P_TOTAL, P_WSUM = range(3)
#: Rows of the float64 (4, D, K) result, in the field order of ``ClassMomentsState``.
N, SHIFT, MEAN, M2 = range(4)


@cuda.jit(cache=True)
def class_partials(x, rows_per_group, codes, part, counts, weighted, w):  # noqa: ANN001, ANN201
    """First pass over group g of rows, feature j: per class, the first finite value, the sum about it, counts."""
    rows, d = x.shape
    j, g, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    n_classes = counts.shape[0]
    for i in range(start, stop):
        k = codes[i]
        if 0 <= k < n_classes:
            v = _load(x, i, j)
            if math.isfinite(v):
                if counts[k, g, j] == 0:
                    part[P_REF, k, g, j] = v
                counts[k, g, j] += 1
                if weighted:
                    part[P_TOTAL, k, g, j] += (v - part[P_REF, k, g, j]) * w[i]
                    part[P_WSUM, k, g, j] += w[i]
                else:
                    part[P_TOTAL, k, g, j] += v - part[P_REF, k, g, j]


@cuda.jit(cache=True)
def class_finish(part, counts, out, weighted):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`class_partials` for feature j (x) and the classes k of grid row y: count, shift, mean."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    n_classes, groups, d = counts.shape
    if j >= d:
        return
    for k in range(cuda.blockIdx.y, n_classes, cuda.gridDim.y):  # more classes than grid rows: each takes several
        _fold_first_pass(part, counts, out, weighted, groups, j, k)


@cuda.jit(device=True)
def _fold_first_pass(part, counts, out, weighted, groups, j, k):  # noqa: ANN001, ANN202
    """The fold of :func:`class_finish` for feature j and class k."""
    shift = 0.0
    for g in range(groups):
        if counts[k, g, j] > 0:
            shift = part[P_REF, k, g, j]
            break
    n = 0.0
    total = 0.0
    for g in range(groups):
        c = counts[k, g, j]
        if c > 0:
            ng = part[P_WSUM, k, g, j] if weighted else float(c)
            total += part[P_TOTAL, k, g, j] + ng * (part[P_REF, k, g, j] - shift)
            n += ng
    out[N, j, k] = n
    out[SHIFT, j, k] = shift
    out[MEAN, j, k] = total / n if n > 0 else 0.0


@cuda.jit(cache=True)
def class_squares(x, rows_per_group, codes, out, part, weighted, w):  # noqa: ANN001, ANN201
    """Second pass: per class, the sums of ``dev`` and ``dev²`` (``dev = (x - shift) - approx_mean``), times ``w[i]`` weighted."""
    rows, d = x.shape
    j, g, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    n_classes = part.shape[1]
    for k in range(n_classes):  # this thread's own slots: no other thread reads or writes them
        part[0, k, g, j] = 0.0
        part[1, k, g, j] = 0.0
    for i in range(start, stop):
        k = codes[i]
        if 0 <= k < n_classes:
            v = _load(x, i, j)
            if math.isfinite(v):
                dev = (v - out[SHIFT, j, k]) - out[MEAN, j, k]
                wdev = dev * w[i] if weighted else dev
                part[0, k, g, j] += wdev
                part[1, k, g, j] += dev * wdev


@cuda.jit(cache=True)
def class_correct(part, out):  # noqa: ANN001, ANN201
    """Fold the sums of :func:`class_squares` for feature j (x) and the classes k of grid row y; correct mean, set ``M2``."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    n_classes, groups, d = part.shape[1], part.shape[2], part.shape[3]
    if j >= d:
        return
    for k in range(cuda.blockIdx.y, n_classes, cuda.gridDim.y):  # more classes than grid rows: each takes several
        _fold_squares(part, out, groups, j, k)


@cuda.jit(device=True)
def _fold_squares(part, out, groups, j, k):  # noqa: ANN001, ANN202
    """The fold of :func:`class_correct` for feature j and class k."""
    s1 = 0.0
    s2 = 0.0
    for g in range(groups):
        s1 += part[0, k, g, j]
        s2 += part[1, k, g, j]
    n = out[N, j, k]
    e = s1 / (n if n > 0 else 1.0)
    m2 = s2 - n * e * e
    out[MEAN, j, k] += e
    out[M2, j, k] = math.inf if s2 == math.inf else (m2 if m2 > 0.0 else 0.0)  # as stats.numerics.central_moment
