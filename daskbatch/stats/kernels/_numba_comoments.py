"""The compiled co-moment centring: the complete rows, their (weighted) mean and their centred blocks."""

from __future__ import annotations

import math

import numpy as np

from daskbatch.stats.kernels._numba import (
    BLOCK,
    _finite,
    _jit,
    _least,
    _load,
    _weight,
    finite_first_row,
)


@_jit
def _first_complete_row(x, shift):  # noqa: ANN001, ANN202
    """Write the first row of ``x`` without NaN or ±inf into ``shift`` as float64 (left as it is without one)."""
    rows, d = x.shape
    for i in range(rows):
        ok = True
        for j in range(d):
            ok &= _finite(_load(x[i, j]))
        if ok:
            for j in range(d):
                shift[j] = _load(x[i, j])
            break


def first_complete_row(x: np.ndarray) -> np.ndarray:
    """Give the first row of ``x`` without NaN or ±inf, as float64 (zeros without one)."""
    first = finite_first_row(x)
    if first is not None:
        return first
    shift = np.zeros(x.shape[1])  # made here, not by numba's constructors (each costs the first call a compile)
    _first_complete_row(x, shift)
    return shift


@_jit
def centre_block(x, shift, complete, dev, weights, total, part, approx_mean, s1):  # noqa: ANN001, ANN201
    """Centre the complete rows of a block about its own mean into ``dev[:n]`` (``approx_mean``, ``s1`` filled)."""
    rows, d = x.shape
    total[:] = 0.0
    n = 0
    wsum = 0.0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        wpart = 0.0
        for i in range(i0, _least(i0 + BLOCK, rows)):
            ok = True
            for j in range(d):
                ok &= _finite(_load(x[i, j]))
            complete[i] = ok
            if ok:
                n += 1
                wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
                wpart += wi
                for j in range(d):
                    part[j] += wi * (_load(x[i, j]) - shift[j])
        wsum += wpart
        for j in range(d):
            total[j] += part[j]
    for j in range(d):
        approx_mean[j] = total[j] / wsum if wsum > 0 else 0.0

    s1[:] = 0.0
    k = 0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, _least(i0 + BLOCK, rows)):
            if complete[i]:
                xi = x[i]
                di = dev[k]
                wi = _weight(weights, i)
                root = math.sqrt(wi)  # 1.0 without weights: root * v and wi * v are v
                # Two simple loops over one row's views vectorise; one loop writing dev and part did not.
                for j in range(d):
                    di[j] = (_load(xi[j]) - shift[j]) - approx_mean[j]
                for j in range(d):
                    part[j] += wi * di[j]
                    di[j] *= root
                k += 1
        for j in range(d):
            s1[j] += part[j]
    return n, wsum


def chunk_comoments(
    data: np.ndarray, weights: np.ndarray | None, block_rows: int
) -> tuple[int, float, np.ndarray, np.ndarray, np.ndarray]:
    """Compute a host chunk's co-moments block by block: each block centred about its own mean, then merged."""
    rows, d = data.shape
    block_rows = max(1, min(rows, block_rows))
    shift = first_complete_row(data)
    complete = np.empty(block_rows, dtype=np.bool_)
    buffer = np.empty((block_rows, d))  # one buffer, reused by every block
    c = np.zeros((d, d))
    product = np.empty((d, d))  # each block's devᵀ dev: reused, not a fresh (D, D) array per block
    n_blocks = -(-rows // block_rows)
    wsums = np.zeros(n_blocks)
    means = np.zeros((n_blocks, d))
    residuals = np.zeros((n_blocks, d))
    block_total, block_part, block_mean, block_s1 = np.empty((4, d))  # centre_block's work arrays, reused
    n = 0
    for b in range(n_blocks):
        start, stop = b * block_rows, (b + 1) * block_rows
        w = None if weights is None else weights[start:stop]
        k, wsum = centre_block(
            data[start:stop], shift, complete, buffer, w, block_total, block_part, block_mean, block_s1
        )
        if k == 0:
            continue  # weighs nothing in the merge below
        dev = buffer[:k]
        # numpy hands Aᵀ·A to BLAS syrk and mirrors it: exactly symmetric. Not SciPy's dsyrk, which
        # could add into c in place: SciPy's bundled OpenBLAS (0.3.30, SciPy 1.17) ran the two
        # scheduler threads' calls one at a time (two threads took twice one's time), numpy's did not.
        np.matmul(dev.T, dev, out=product)
        c += product
        residuals[b] = block_s1 / wsum
        means[b] = block_mean + residuals[b]
        wsums[b] = wsum
        n += k
    total = float(wsums.sum())
    if total == 0:
        return 0, 0.0, shift, np.zeros(d), c
    used = wsums > 0
    if used.sum() == 1:  # one block: its mean is the chunk's, exactly (w m / w may round)
        mean = means[used][0]
    else:
        mean = (wsums @ means) / total
    root = np.sqrt(wsums)[:, None]  # √w on both sides keeps each correction one symmetric product
    spread = root * (means - mean)
    residual = root * residuals
    # A feature whose sum of squares overflowed stays +inf on the diagonal (its correction is inf - inf: NaN),
    # as the moments' variance does (stats.numerics.central_moment).
    overflowed = np.flatnonzero(np.isposinf(np.diagonal(c)))
    c += spread.T @ spread
    c -= residual.T @ residual
    c[overflowed, overflowed] = np.inf
    return n, total, shift, mean, c
