"""The compiled per-chunk moments: of every feature and of every (feature, class), with or without row weights.

The shared helpers and the rules every loop follows are in :mod:`daskbatch.stats.kernels._numba`.
"""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import BLOCK, _finite, _fourth_power, _jit, _load, _weight


@_jit
def moments_chunk(x, lut, weights):  # noqa: ANN001, ANN201
    """Per-column sums of a chunk for the corrected two-pass moments.

    Pass 1 finds ``count`` (finite values), ``shift`` (first finite value),
    ``approx_mean`` (mean of ``x - shift``), the finite min/max and the NaN and
    +inf counts; pass 2 sums the first four powers of the deviations
    ``(x - shift) - approx_mean`` (``s1`` … ``s4``). With weights the sums and
    ``approx_mean`` are weighted (``weights=None`` compiles the unweighted loop,
    whose sums are bitwise those of the former unweighted kernel). The caller applies the
    corrections of :meth:`daskbatch.stats.moments.Moments.chunk` (kept out of
    the compiled code: array expressions in numba compile slowly).

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    weights : numpy.ndarray or None
        The float64 weight of each row, all positive, or None.

    Returns
    -------
    tuple of numpy.ndarray
        ``(count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf)``,
        length-D vectors (``wsum`` is the count as float64 without weights).
    """
    rows, d = x.shape
    shift = np.zeros(d)
    for j in range(d):
        for i in range(rows):
            v = _load(x[i, j], lut)
            if _finite(v):
                shift[j] = v
                break

    count = np.zeros(d, dtype=np.int64)
    nan = np.zeros(d, dtype=np.int64)
    posinf = np.zeros(d, dtype=np.int64)
    fmin = np.full(d, np.inf)
    fmax = np.full(d, -np.inf)
    wsum = np.zeros(d)
    total = np.zeros(d)
    wpart = np.zeros(d)
    part = np.zeros(d)
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        wpart[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
            for j in range(d):
                v = _load(x[i, j], lut)
                fin = _finite(v)
                part[j] += wi * (v - shift[j]) if fin else 0.0
                wpart[j] += wi if fin else 0.0
                count[j] += fin
                nan[j] += v != v
                posinf[j] += v == np.inf
                fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
                fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        for j in range(d):
            total[j] += part[j]
            wsum[j] += wpart[j]

    # Without weights wsum is the count exactly; where it is 0, so is the total.
    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / wsum[j] if wsum[j] > 0 else 0.0

    s1 = np.zeros(d)
    s2 = np.zeros(d)
    s3 = np.zeros(d)
    s4 = np.zeros(d)
    p1 = np.zeros(d)
    p2 = np.zeros(d)
    p3 = np.zeros(d)
    p4 = np.zeros(d)
    for i0 in range(0, rows, BLOCK):
        p1[:] = 0.0
        p2[:] = 0.0
        p3[:] = 0.0
        p4[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            wi = _weight(weights, i)
            for j in range(d):
                v = _load(x[i, j], lut)
                dev = ((v - shift[j]) - approx_mean[j]) if _finite(v) else 0.0
                wdev = wi * dev
                p1[j] += wdev
                p2[j] += wdev * dev
                p3[j] += wdev * dev * dev
                p4[j] += _fourth_power(weights, wdev, dev)
        for j in range(d):
            s1[j] += p1[j]
            s2[j] += p2[j]
            s3[j] += p3[j]
            s4[j] += p4[j]

    return count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf



@_jit
def class_moments_chunk(x, lut, codes, count, shift, total, s1, s2, weights):  # noqa: ANN001, ANN201
    """Per-(class, column) sums of a chunk for the corrected two-pass class moments.

    The loops of :func:`daskbatch.stats.class_moments._one_class` run on every
    class at once, in row order: a short scan keeps the first finite value as
    ``shift``; pass 1 counts the finite values and sums ``x - shift`` into
    ``total``; pass 2 sums the deviations ``(x - shift) - total / count`` and
    their squares into ``s1`` and ``s2``. Each (class, column) is one running sum in row order,
    the order in which NumPy's axis-0 sums of the class-sorted rows add them,
    with the same float64 expressions: on two features or more the state is
    bitwise that of the array-API path (no partial-sum blocks here, unlike
    :func:`moments_chunk`); on one, NumPy sums the column pairwise.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    codes : numpy.ndarray
        The int64 class column (0..K-1) of every row.
    count : numpy.ndarray
        (K, D) int64, zeros; filled with the finite values' counts (float64: their weight sums, with ``weights``).
    shift, total, s1, s2 : numpy.ndarray
        (K, D) float64, zeros; filled with the sums above (each term times its row's weight, with ``weights``).
    weights : numpy.ndarray or None
        Positive float64 frequency weight of every row; None compiles the unweighted loops
        (a weight of integer 1: the same state bit for bit).
    """
    rows, d = x.shape
    n_classes = count.shape[0]
    # The first finite value of each (class, column): a scan that stops once all are found
    # (rows of a class already done cost one compare), so usually after a few rows.
    missing = np.full(n_classes, d, dtype=np.int64)
    found = np.zeros((n_classes, d), dtype=np.bool_)
    left = n_classes * d
    for i in range(rows):
        if left == 0:
            break
        k = codes[i]
        if missing[k] == 0:
            continue
        for j in range(d):
            v = _load(x[i, j], lut)
            if not found[k, j] and _finite(v):
                found[k, j] = True
                shift[k, j] = v
                missing[k] -= 1
                left -= 1
    # Branch-free running sums (a non-finite value adds 0.0, which leaves every sum as it
    # was): the loop over the columns of one row vectorises. Indexed in two dimensions, not
    # through row views (shift[k]): a view per row costs a reference count increment and decrement.
    for i in range(rows):
        k = codes[i]
        wi = _weight(weights, i)
        for j in range(d):
            v = _load(x[i, j], lut)
            fin = _finite(v)
            total[k, j] += (v - shift[k, j]) * wi if fin else 0.0
            count[k, j] += fin * wi
    mean = np.empty((n_classes, d))
    for k in range(n_classes):
        for j in range(d):
            c = count[k, j]
            mean[k, j] = total[k, j] / (c if c > 0 else 1)
    for i in range(rows):
        k = codes[i]
        wi = _weight(weights, i)
        for j in range(d):
            v = _load(x[i, j], lut)
            dev = ((v - shift[k, j]) - mean[k, j]) if _finite(v) else 0.0
            s1[k, j] += dev * wi
            s2[k, j] += dev * dev * wi
