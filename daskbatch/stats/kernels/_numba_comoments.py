"""The compiled co-moment centring: the complete rows, their mean and their centred blocks (unweighted and weighted).

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import math

import numpy as np

from daskbatch.stats.kernels._numba import BLOCK, _finite, _jit, _load


@_jit
def complete_rows_mean(x, lut, complete):  # noqa: ANN001, ANN201
    """Find the complete rows of ``x`` (no NaN or ±inf) and their approximate mean.

    Rows holding any NaN or ±inf are left out, as
    :meth:`daskbatch.stats.comoments.CoMoments.chunk` does.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    complete : numpy.ndarray of bool
        Filled with one flag per row.

    Returns
    -------
    n : int
        The number of complete rows.
    shift : numpy.ndarray
        The first complete row.
    approx_mean : numpy.ndarray
        The mean of the complete rows less ``shift``.
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
    total = np.zeros(d)
    part = np.zeros(d)
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            ok = True
            for j in range(d):
                ok &= _finite(_load(x[i, j], lut))
            if ok:
                complete[i] = True
                n += 1
                for j in range(d):
                    part[j] += _load(x[i, j], lut) - shift[j]
        for j in range(d):
            total[j] += part[j]
    n_safe = max(n, 1)
    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / n_safe
    return n, shift, approx_mean


@_jit
def centre_rows(x, lut, complete, shift, approx_mean, dev):  # noqa: ANN001, ANN201
    """Write the deviations of the complete rows of ``x`` into ``dev[:k]`` (float64), and sum them.

    The rows less ``shift`` less ``approx_mean``; the sums are the residual that
    corrects the mean and the co-moments (the corrected two-pass algorithm).

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
                for j in range(d):
                    v = (_load(x[i, j], lut) - shift[j]) - approx_mean[j]
                    dev[k, j] = v
                    part[j] += v
                k += 1
        for j in range(d):
            s1[j] += part[j]
    return k, s1



@_jit
def weighted_complete_rows_mean(x, lut, w, complete):  # noqa: ANN001, ANN201
    """:func:`complete_rows_mean` with row weights: the complete rows, their weight sum and weighted mean.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    w : numpy.ndarray
        The float64 weight of each row, all positive.
    complete : numpy.ndarray of bool
        Filled with one flag per row.

    Returns
    -------
    n : int
        The number of complete rows.
    wsum : float
        Their weight sum.
    shift : numpy.ndarray
        The first complete row.
    approx_mean : numpy.ndarray
        The weighted mean of the complete rows less ``shift``.
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
    wpart = 0.0
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
                wi = w[i]
                wpart += wi
                for j in range(d):
                    part[j] += wi * (_load(x[i, j], lut) - shift[j])
        wsum += wpart
        for j in range(d):
            total[j] += part[j]
    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / wsum if wsum > 0 else 0.0
    return n, wsum, shift, approx_mean


@_jit
def weighted_centre_rows(x, lut, complete, shift, approx_mean, w, dev):  # noqa: ANN001, ANN201
    """:func:`centre_rows` with row weights: ``dev[:k]`` holds ``sqrt(w)`` times the deviations.

    ``devᵀ dev`` is then the weighted co-moment sum; the returned sums are the
    weighted sums of the deviations (the residual of the corrected two-pass).

    Parameters
    ----------
    x : numpy.ndarray
        A block of the chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    complete : numpy.ndarray of bool
        The complete-row flags of the block.
    shift, approx_mean : numpy.ndarray
        From :func:`weighted_complete_rows_mean`.
    w : numpy.ndarray
        The float64 weight of each row of the block.
    dev : numpy.ndarray
        The float64 centring buffer, at least (R, D).

    Returns
    -------
    k : int
        How many rows of ``dev`` were written.
    s1 : numpy.ndarray
        The weighted column sums of the deviations.
    """
    rows, d = x.shape
    s1 = np.zeros(d)
    part = np.zeros(d)
    k = 0
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            if complete[i]:
                wi = w[i]
                root = math.sqrt(wi)
                for j in range(d):
                    v = (_load(x[i, j], lut) - shift[j]) - approx_mean[j]
                    dev[k, j] = root * v
                    part[j] += wi * v
                k += 1
        for j in range(d):
            s1[j] += part[j]
    return k, s1
