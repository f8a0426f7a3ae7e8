"""The compiled co-moment centring: the complete rows, their (weighted) mean and their centred blocks.

Chunks are centred block by block (:func:`chunk_comoments`): each block of
:func:`~daskbatch.stats.kernels._centring.centring_rows` rows about its own
mean, read from memory once and a second time from cache, and the blocks'
co-moments merged as states are; weighted or not (:func:`host_comoments`).

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import math

import numpy as np

from daskbatch.stats.kernels._centring import centring_rows
from daskbatch.stats.kernels._numba import BLOCK, _finite, _jit, _load, _weight


@_jit
def first_complete_row(x, lut):  # noqa: ANN001, ANN201
    """Give the first row of ``x`` without NaN or ±inf, as float64.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.

    Returns
    -------
    numpy.ndarray
        The row (zeros if there is none).
    """
    rows, d = x.shape
    shift = np.zeros(d)
    for i in range(rows):
        ok = True
        for j in range(d):
            ok &= _finite(_load(x[i, j], lut))
        if ok:
            for j in range(d):
                shift[j] = _load(x[i, j], lut)
            break
    return shift


@_jit
def centre_block(x, lut, shift, complete, dev, weights):  # noqa: ANN001, ANN201
    """Centre the complete rows of one block of a chunk about the block's own mean, into ``dev[:n]``.

    The corrected two-pass algorithm on a block small enough to stay in cache:
    the first pass flags the complete rows and sums them less ``shift``, the
    second writes their deviations from that approximate mean (``sqrt(w)``
    times them with weights) and sums the (weighted) deviations, the residual
    that corrects the mean and the co-moments. Reading the block twice from
    cache replaces a second read of the whole chunk from memory.

    Parameters
    ----------
    x : numpy.ndarray
        The block, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    shift : numpy.ndarray
        The chunk's reference row (:func:`first_complete_row`).
    complete : numpy.ndarray of bool
        Scratch for one flag per row, at least (R,).
    dev : numpy.ndarray
        The float64 centring buffer, at least (R, D).
    weights : numpy.ndarray or None
        The float64 weight of each row of the block, all positive, or None.

    Returns
    -------
    n : int
        The number of complete rows (rows of ``dev`` written).
    wsum : float
        Their weight sum (``n`` without weights).
    approx_mean : numpy.ndarray
        Their approximate (weighted) mean less ``shift``.
    s1 : numpy.ndarray
        The (weighted) column sums of their deviations from it.
    """
    rows, d = x.shape
    total = np.zeros(d)
    part = np.zeros(d)
    n = 0
    wsum = 0.0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        wpart = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            ok = True
            for j in range(d):
                ok &= _finite(_load(x[i, j], lut))
            complete[i] = ok
            if ok:
                n += 1
                wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
                wpart += wi
                for j in range(d):
                    part[j] += wi * (_load(x[i, j], lut) - shift[j])
        wsum += wpart
        for j in range(d):
            total[j] += part[j]
    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / wsum if wsum > 0 else 0.0

    s1 = np.zeros(d)
    k = 0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            if complete[i]:
                xi = x[i]
                di = dev[k]
                wi = _weight(weights, i)
                root = math.sqrt(wi)  # 1.0 without weights: root * v and wi * v are v
                # Two simple loops over one row's views vectorise; one loop writing dev and part did not.
                for j in range(d):
                    di[j] = (_load(xi[j], lut) - shift[j]) - approx_mean[j]
                for j in range(d):
                    part[j] += wi * di[j]
                    di[j] *= root
                k += 1
        for j in range(d):
            s1[j] += part[j]
    return n, wsum, approx_mean, s1


def chunk_comoments(
    data: np.ndarray, lut: np.ndarray | None, weights: np.ndarray | None, block_rows: int
) -> tuple[int, float, np.ndarray, np.ndarray, np.ndarray]:
    """Compute a host chunk's co-moments block by block: each block centred about its own mean, then merged.

    Each block of ``block_rows`` rows is read from memory once and centred in
    cache (:func:`centre_block`); its ``devᵀ dev`` is added to the result with
    one BLAS product (syrk). The blocks' co-moments about their own means then
    merge as Chan et al.'s pairwise update does, all at once:
    ``C = Σ_b (devᵀdev_b - w_b e_b e_bᵀ) + Σ_b w_b (m_b - m)(m_b - m)ᵀ``, with
    ``e_b`` a block's residual mean, ``m_b`` its mean and ``m`` the chunk's.

    Parameters
    ----------
    data : numpy.ndarray
        The chunk, (R, D), C order, as :func:`~daskbatch.stats.kernels._bits` gives it.
    lut : numpy.ndarray or None
        The float16 decoding table when ``data`` holds float16 bits, else None.
    weights : numpy.ndarray or None
        The float64 weight of each row, all positive, or None.
    block_rows : int
        Rows centred at a time (the float64 buffer is ``block_rows`` x D).

    Returns
    -------
    n : int
        The number of complete rows.
    wsum : float
        Their weight sum (``n`` without weights).
    shift : numpy.ndarray
        The first complete row.
    mean : numpy.ndarray
        The (weighted) mean of the complete rows less ``shift``.
    c : numpy.ndarray
        Their (weighted) co-moment matrix, (D, D), symmetric.
    """
    rows, d = data.shape
    block_rows = max(1, min(rows, block_rows))
    shift = first_complete_row(data, lut)
    complete = np.empty(block_rows, dtype=np.bool_)
    buffer = np.empty((block_rows, d))  # one buffer, reused by every block
    c = np.zeros((d, d))
    product = np.empty((d, d))  # each block's devᵀ dev: reused, not a fresh (D, D) array per block
    n_blocks = -(-rows // block_rows)
    wsums = np.zeros(n_blocks)
    means = np.zeros((n_blocks, d))
    residuals = np.zeros((n_blocks, d))
    n = 0
    for b in range(n_blocks):
        start, stop = b * block_rows, (b + 1) * block_rows
        w = None if weights is None else weights[start:stop]
        k, wsum, approx_mean, s1 = centre_block(data[start:stop], lut, shift, complete, buffer, w)
        if k == 0:
            continue  # weighs nothing in the merge below
        dev = buffer[:k]
        # numpy hands Aᵀ·A to BLAS syrk and mirrors it: exactly symmetric. Not SciPy's dsyrk, which
        # could add into c in place: SciPy's bundled OpenBLAS (0.3.30, SciPy 1.17) ran the two
        # scheduler threads' calls one at a time (two threads took twice one's time), numpy's did not.
        np.matmul(dev.T, dev, out=product)
        c += product
        residuals[b] = s1 / wsum
        means[b] = approx_mean + residuals[b]
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


def host_comoments(
    x: np.ndarray, weights: np.ndarray | None = None
) -> tuple[int, float, np.ndarray, np.ndarray, np.ndarray]:
    """Compute the co-moments of a host chunk, weighted or not, :func:`centring_rows` rows at a time.

    The CPU path of :func:`daskbatch.stats.kernels.comoments` and of weighted
    :meth:`~daskbatch.stats.comoments.CoMoments.chunk`.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), of a dtype the kernels read.
    weights : numpy.ndarray, optional
        The weight of each row, all positive.

    Returns
    -------
    tuple
        As :func:`chunk_comoments`: ``(n, wsum, shift, mean, c)``.
    """
    from daskbatch.stats.kernels import _bits  # lazy: kernels imports this module (a cycle)

    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    return chunk_comoments(*_bits(x), w, centring_rows(x.shape[1]))
