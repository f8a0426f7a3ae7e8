"""The GPU loops (numba-cuda) of the co-moment centring: complete rows, their mean, centred blocks and the correction."""

from __future__ import annotations

import math

from numba import cuda

from daskbatch.stats.kernels._cuda import _load, _rows_of_group


@cuda.jit(cache=True)
def mark_incomplete(x, rows_per_group, bad):  # noqa: ANN001, ANN201
    """Set ``bad[i] = 1`` for every row i holding a NaN or ±inf (every writer writes the same 1)."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    for i in range(start, stop):
        if not math.isfinite(_load(x, i, j)):
            bad[i] = 1


@cuda.jit(cache=True)
def first_complete(bad, first):  # noqa: ANN001, ANN201
    """Set ``first[0]`` to the smallest complete row (``first[0]`` starts at R: none)."""
    i = cuda.grid(1)
    if i < bad.shape[0] and bad[i] == 0:
        cuda.atomic.min(first, 0, i)


@cuda.jit(cache=True)
def complete_sums(x, rows_per_group, bad, first, part, n_rows, weighted, w, w_rows):  # noqa: ANN001, ANN201
    """Sum ``x - shift`` (times ``w[i]`` weighted) over the complete rows of each group (``shift`` = the first complete row)."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    ref = _load(x, first[0], j) if first[0] < rows else 0.0
    total = 0.0
    n = 0
    wsum = 0.0
    for i in range(start, stop):
        if bad[i] == 0:
            if weighted:
                total += w[i] * (_load(x, i, j) - ref)
                wsum += w[i]
            else:
                total += _load(x, i, j) - ref
            n += 1
    part[g, j] = total
    if j == 0:
        n_rows[g] = n
        if weighted:
            w_rows[g] = wsum


@cuda.jit(cache=True)
def complete_mean(x, first, part, n_rows, n_out, centre, weighted, w_rows):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`complete_sums` into the shift and the approximate mean."""
    j = cuda.grid(1)
    groups = n_rows.shape[0]  # ``part`` may have more rows: it also serves the centring blocks
    d = part.shape[1]
    if j >= d:
        return
    n = 0
    total = 0.0
    wsum = 0.0
    for g in range(groups):
        n += n_rows[g]
        total += part[g, j]
        if weighted:
            wsum += w_rows[g]
    rows = x.shape[0]
    centre[0, j] = _load(x, first[0], j) if first[0] < rows else 0.0
    if weighted:
        centre[1, j] = total / wsum if wsum > 0 else 0.0
    else:
        centre[1, j] = total / max(n, 1)
    centre[2, j] = 0.0  # residual sums, added to block by block
    if j == 0:
        n_out[0] = wsum if weighted else n
        n_out[1] = n


@cuda.jit(cache=True)
def centre_block(x, start, rows_per_group, bad, centre, dev, part, weighted, w):  # noqa: ANN001, ANN201
    """Centre rows ``start .. start + len(dev)`` of ``x`` into ``dev``, summing each group."""
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    k, d = dev.shape
    if j >= d:
        return
    lo, hi = _rows_of_group(g, rows_per_group, k)
    shift = centre[0, j]
    approx_mean = centre[1, j]
    total = 0.0
    for r in range(lo, hi):
        i = start + r
        v = 0.0
        if bad[i] == 0:
            v = (_load(x, i, j) - shift) - approx_mean
        if weighted:
            dev[r, j] = math.sqrt(w[i]) * v
            total += w[i] * v
        else:
            dev[r, j] = v
            total += v
    part[g, j] = total


@cuda.jit(cache=True)
def add_group_sums(part, groups, centre):  # noqa: ANN001, ANN201
    """Add ``sum of part[:groups, j]`` to ``centre[2, j]`` in group order (the residual sums of the deviations)."""
    j = cuda.grid(1)
    d = part.shape[1]
    if j >= d:
        return
    total = 0.0
    for g in range(groups):
        total += part[g, j]
    centre[2, j] += total


@cuda.jit(cache=True)
def correct_upper(c, centre, n_out):  # noqa: ANN001, ANN201
    """Correct the upper triangle of ``c`` (i <= j) to ``c - n e eᵀ``; the lower one is neither read nor written."""
    j, i = cuda.grid(2)
    d = c.shape[0]
    if i >= d or j >= d or i > j:
        return
    if i == j and c[i, j] == math.inf:
        return  # the sum of squares overflowed: +inf, as the moments' variance (not inf - inf)
    n = n_out[0]
    n_safe = n if n > 0 else 1.0
    c[i, j] = c[i, j] - n * ((centre[2, i] / n_safe) * (centre[2, j] / n_safe))


@cuda.jit(cache=True)
def finish_mean(centre, n_out, mean):  # noqa: ANN001, ANN201
    """Set ``mean = approx_mean + residual mean``."""
    j = cuda.grid(1)
    if j >= mean.shape[0]:
        return
    n = n_out[0]
    mean[j] = centre[1, j] + centre[2, j] / (n if n > 0 else 1.0)
