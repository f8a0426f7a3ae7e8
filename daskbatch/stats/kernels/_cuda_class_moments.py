"""The GPU loops (numba-cuda) of the per-class moments: partial sums per (class, row group), their fold, the squares."""

from __future__ import annotations

import math

from numba import cuda

from daskbatch.stats.kernels._cuda import _load, _rows_of_group

#: Rows of the float64 (3, K, G, D) partials of the first pass (rows 0 and 1 reused for the squares).
P_REF, P_TOTAL, P_WSUM = range(3)
#: Rows of the float64 (4, D, K) result, in the field order of ``ClassMomentsState``.
N, SHIFT, MEAN, M2 = range(4)


@cuda.jit(cache=True)
def class_partials(x, rows_per_group, codes, part, counts, weighted, w):  # noqa: ANN001, ANN201
    """First pass over group g of rows, feature j: per class, the first finite value, the sum about it, counts."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    n_classes = counts.shape[0]
    start, stop = _rows_of_group(g, rows_per_group, rows)
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
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    n_classes = part.shape[1]
    for k in range(n_classes):  # this thread's own slots: no other thread reads or writes them
        part[0, k, g, j] = 0.0
        part[1, k, g, j] = 0.0
    start, stop = _rows_of_group(g, rows_per_group, rows)
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
    out[M2, j, k] = math.inf if s2 == math.inf else (m2 if m2 > 0.0 else 0.0)  # as stats._base.central_moment
