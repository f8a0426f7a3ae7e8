"""The compiled co-moment centring: the complete rows, their (weighted) mean and their centred blocks.

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import math

import numpy as np

from daskbatch.stats.kernels._numba import BLOCK, _finite, _jit, _load, _weight


@_jit
def complete_rows_mean(x, lut, complete, weights):  # noqa: ANN001, ANN201
    """Find the complete rows of ``x`` (no NaN or ±inf), their weight sum and their approximate (weighted) mean.

    Rows holding any NaN or ±inf are left out, as
    :meth:`daskbatch.stats.comoments.CoMoments.chunk` does. Without weights
    (``weights=None`` compiles the unweighted loop) every row weighs 1.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    complete : numpy.ndarray of bool
        Filled with one flag per row.
    weights : numpy.ndarray or None
        The float64 weight of each row, all positive, or None.

    Returns
    -------
    n : int
        The number of complete rows.
    wsum : float
        Their weight sum (``n`` without weights).
    shift : numpy.ndarray
        The first complete row.
    approx_mean : numpy.ndarray
        The (weighted) mean of the complete rows less ``shift``.
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

    complete[:] = False
    n = 0
    wsum = 0.0
    total = np.zeros(d)
    part = np.zeros(d)
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        wpart = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            ok = True
            for j in range(d):
                ok &= _finite(_load(x[i, j], lut))
            if ok:
                complete[i] = True
                n += 1
                wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
                wpart += wi
                for j in range(d):
                    part[j] += wi * (_load(x[i, j], lut) - shift[j])
        wsum += wpart
        for j in range(d):
            total[j] += part[j]
    # Without weights wsum is n exactly; with none complete, total is 0 and so is the mean.
    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / wsum if wsum > 0 else 0.0
    return n, wsum, shift, approx_mean


@_jit
def centre_rows(x, lut, complete, shift, approx_mean, dev, weights):  # noqa: ANN001, ANN201
    """Write the deviations of the complete rows of ``x`` into ``dev[:k]`` (float64), and sum them.

    The rows less ``shift`` less ``approx_mean``; the sums are the residual that
    corrects the mean and the co-moments (the corrected two-pass algorithm).
    With weights ``dev`` holds ``sqrt(w)`` times the deviations and the sums are weighted.

    Parameters
    ----------
    x : numpy.ndarray
        A block of the chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    complete : numpy.ndarray of bool
        The complete-row flags of the block.
    shift, approx_mean : numpy.ndarray
        From :func:`complete_rows_mean`.
    dev : numpy.ndarray
        The float64 centring buffer, at least (R, D).
    weights : numpy.ndarray or None
        The float64 weight of each row of the block, or None.

    Returns
    -------
    k : int
        How many rows of ``dev`` were written.
    s1 : numpy.ndarray
        The column sums of the deviations.
    """
    rows, d = x.shape
    s1 = np.zeros(d)
    part = np.zeros(d)
    k = 0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            if complete[i]:
                wi = _weight(weights, i)
                root = math.sqrt(wi)  # 1.0 without weights: root * v and wi * v are v
                for j in range(d):
                    v = (_load(x[i, j], lut) - shift[j]) - approx_mean[j]
                    dev[k, j] = root * v
                    part[j] += wi * v
                k += 1
        for j in range(d):
            s1[j] += part[j]
    return k, s1
