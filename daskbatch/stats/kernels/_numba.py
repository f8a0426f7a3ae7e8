"""The compiled loops: per-chunk moments, co-moment centring and histogram counting.

All kernels live in this one module on purpose: numba's on-disk cache
(``cache=True``) is invalidated by the time stamp of the file that defines a
function only, so a helper edited in another file would leave stale machine
code behind.

Arrays that grow with the chunk or the state (the complete-row mask, the
centring buffer, the histogram counts) are allocated by the callers in
:mod:`daskbatch.stats.kernels` with NumPy and passed in, so that ``tracemalloc`` and
the memory model see them; the kernels allocate only length-D vectors.

Every kernel reads the chunk in C order (rows outside, features inside), casts
each element to float64 as it is loaded (``_load``) and never materialises a
float64 copy of the chunk. ``nogil=True`` lets dask's threads run chunks in
parallel; the kernels themselves are serial (dask parallelises over chunks).

Sums run in blocks of :data:`BLOCK` rows whose partial sums are added to the
totals, which bounds the rounding error by ``(BLOCK + rows / BLOCK) * eps``
rather than ``rows * eps`` of one running sum.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

#: Rows per block of partial sums.
BLOCK = 128

_jit = numba.njit(nogil=True, cache=True)
# NumPy's error model drops numba's division-by-zero checks, whose branch keeps
# a loop from vectorising; for kernels whose divisors cannot be zero.
_jit_nocheck = numba.njit(nogil=True, cache=True, error_model="numpy")


def _load(v, lut):  # noqa: ANN001, ANN202 - numba overload stub
    """``v`` as float64; ``lut`` is None, or the float16 table when ``v`` holds float16 bits."""
    raise NotImplementedError("only callable from compiled code")


@overload(_load, inline="always")
def _load_impl(v, lut):  # noqa: ANN001, ANN202
    # Chosen at compile time from the type of `lut`: numba has no float16 arrays,
    # so float16 chunks arrive as their uint16 bits plus a 65536-entry table.
    if isinstance(lut, types.NoneType):
        return lambda v, lut: np.float64(v)
    return lambda v, lut: lut[v]


def _weight(w, i):  # noqa: ANN001, ANN202 - numba overload stub
    """The weight of row ``i``: 1 when ``w`` is None (unweighted counts), else ``w[i]``."""
    raise NotImplementedError("only callable from compiled code")


@overload(_weight, inline="always")
def _weight_impl(w, i):  # noqa: ANN001, ANN202
    # Chosen at compile time from the type of `w`: without weights the loop is the unweighted one.
    if isinstance(w, types.NoneType):
        return lambda w, i: 1
    return lambda w, i: w[i]


@_jit
def _finite(v: float) -> bool:
    # One compare that is False for NaN and ±inf, and vectorises.
    return abs(v) < np.inf


@_jit
def moments_chunk(x, lut):  # noqa: ANN001, ANN201
    """Per-column sums of a chunk for the corrected two-pass moments.

    Pass 1 finds ``count`` (finite values), ``shift`` (first finite value),
    ``approx_mean`` (mean of ``x - shift``), the finite min/max and the NaN and
    +inf counts; pass 2 sums the first four powers of the deviations
    ``(x - shift) - approx_mean`` (``s1`` … ``s4``). The caller applies the
    corrections of :meth:`daskbatch.stats.moments.Moments.chunk` (kept out of
    the compiled code: array expressions in numba compile slowly).

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.

    Returns
    -------
    tuple of numpy.ndarray
        ``(count, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf)``,
        length-D vectors.
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
    total = np.zeros(d)
    part = np.zeros(d)
    for i0 in range(0, rows, BLOCK):
        part[:] = 0.0
        for i in range(i0, min(i0 + BLOCK, rows)):
            for j in range(d):
                v = _load(x[i, j], lut)
                fin = _finite(v)
                part[j] += (v - shift[j]) if fin else 0.0
                count[j] += fin
                nan[j] += v != v
                posinf[j] += v == np.inf
                fmin[j] = v if (fin and v < fmin[j]) else fmin[j]
                fmax[j] = v if (fin and v > fmax[j]) else fmax[j]
        for j in range(d):
            total[j] += part[j]

    approx_mean = np.empty(d)
    for j in range(d):
        approx_mean[j] = total[j] / max(count[j], 1)

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
            for j in range(d):
                v = _load(x[i, j], lut)
                dev = ((v - shift[j]) - approx_mean[j]) if _finite(v) else 0.0
                sq = dev * dev
                p1[j] += dev
                p2[j] += sq
                p3[j] += sq * dev
                p4[j] += sq * sq
        for j in range(d):
            s1[j] += p1[j]
            s2[j] += p2[j]
            s3[j] += p3[j]
            s4[j] += p4[j]

    return count, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf


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
    # was): the loop over the columns of one row vectorises.
    for i in range(rows):
        k = codes[i]
        wi = _weight(weights, i)
        sk, tk, ck = shift[k], total[k], count[k]
        for j in range(d):
            v = _load(x[i, j], lut)
            fin = _finite(v)
            tk[j] += (v - sk[j]) * wi if fin else 0.0
            ck[j] += fin * wi
    mean = np.empty((n_classes, d))
    for k in range(n_classes):
        for j in range(d):
            c = count[k, j]
            mean[k, j] = total[k, j] / (c if c > 0 else 1)
    for i in range(rows):
        k = codes[i]
        wi = _weight(weights, i)
        sk, mk, ak, bk = shift[k], mean[k], s1[k], s2[k]
        for j in range(d):
            v = _load(x[i, j], lut)
            dev = ((v - sk[j]) - mk[j]) if _finite(v) else 0.0
            ak[j] += dev * wi
            bk[j] += dev * dev * wi


@_jit
def histogram_counts(x, lut, lo, hi, step, scale, bins, labels, n_classes, counts):  # noqa: ANN001, ANN201
    """Add to ``counts`` (D·(bins + 3)·K int64, flat) the counts of slot ``[under, bins…, over, nan]`` × class.

    The slot of a value follows :meth:`daskbatch.stats.histogram.Histogram.slots`
    step by step (scaled index, clipped, then settled against the edges), so
    counts are bitwise those of the array-API path and of ``numpy.histogram``.
    Edge ``i`` is formed as ``i * step + lo``, the expression of
    :meth:`~daskbatch.stats.histogram.Histogram.edges`, instead of being looked
    up: the settle step then vectorises. The last edge (``hi``) is never needed
    there, since a value in the last bin cannot move up.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    lo, hi : numpy.ndarray
        The range of each feature.
    step, scale : numpy.ndarray
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : numpy.ndarray
        The int64 class of each row, or an empty array for K = 1.
    n_classes : int
        K.
    counts : numpy.ndarray
        The flat int64 counts, added to.
    """
    rows, d = x.shape
    n_slots = bins + 3
    by_label = labels.shape[0] > 0
    top = float(bins - 1)
    over_slot = float(bins + 1)
    nan_slot = float(bins + 2)
    slot = np.empty(d, dtype=np.int64)
    for i in range(rows):
        # Slots of one row, branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            f = math.floor((v - lo[j]) * scale[j])
            f = f if f < top else top  # also turns a NaN into `top`
            f = f if f > 0.0 else 0.0
            f -= np.float64(v < f * step[j] + lo[j])
            f += np.float64((v >= (f + 1.0) * step[j] + lo[j]) & (f < top))
            f += 1.0
            f = 0.0 if v < lo[j] else f
            f = over_slot if v > hi[j] else f
            f = nan_slot if v != v else f
            slot[j] = (j * n_slots + np.int64(f)) * n_classes
        # ... then one scattered increment per value.
        k = labels[i] if by_label else 0
        for j in range(d):
            counts[slot[j] + k] += 1


@_jit
def _sketch_key(a, ln_gamma, lo_key, hi_key):  # noqa: ANN001, ANN202
    """Bucket key less ``lo_key`` (float64) of the magnitude ``a``, as the reference computes it.

    ``ceil(log(a) / ln_gamma)`` clamped to ``[lo_key, hi_key]``: the
    expression of :meth:`daskbatch.stats.sketch.Sketch.slots`.
    """
    key = np.ceil(np.log(a) / ln_gamma)
    key = key if key < hi_key else hi_key
    return (key if key > lo_key else lo_key) - lo_key


@intrinsic
def _as_bits(typingctx, v):  # noqa: ANN001, ANN202
    """The IEEE bit pattern (int64) of the float64 ``v``: a register move, and it vectorises."""
    if v != types.float64:
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, b):  # noqa: ANN001, ANN202
    """The float64 whose bit pattern is the int64 ``b`` (inverse of :func:`_as_bits`)."""
    if b != types.int64:
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


#: Largest error of :func:`fast_log` on normal floats: its series stops after
#: ``t**9`` with ``|t| <= (sqrt 2 - 1)/(sqrt 2 + 1)``, so the rest is at most
#: ``2 |t|**11 / 11 / (1 - t**2) = 7.1e-10``; rounding adds below 1e-12.
FAST_LOG_ERROR = 7.2e-10

#: Where :func:`sketch_counts` does not trust its fast key: a ``fast_log|v|``
#: within this much of a bucket boundary ``k * ln_gamma``. It is 14 times
#: :data:`FAST_LOG_ERROR` (and ``np.log`` errs by below 1e-13), so outside the
#: band the fast and the reference log fall on the same side of every
#: boundary. About ``2 * SKETCH_NEAR / ln_gamma`` of random values (2e-6 by
#: default) land in it and are recomputed.
SKETCH_NEAR = 1e-8

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)


@_jit_nocheck
def fast_log(a):  # noqa: ANN001, ANN201
    """``log a`` within :data:`FAST_LOG_ERROR` for a normal float64 ``a > 0``, without a call (it vectorises).

    ``a = 2**e * m`` from the bits, ``m`` brought into ``[sqrt(1/2), sqrt 2]``,
    and ``log m = 2 atanh(t)`` with ``t = (m - 1)/(m + 1)`` summed as a series.
    Subnormals, zero, infinities and NaN give meaningless numbers.

    Parameters
    ----------
    a : float
        A normal float64 above 0.

    Returns
    -------
    float
        ``log(a)``, within ``FAST_LOG_ERROR``.
    """
    b = _as_bits(a)
    e = np.float64((b >> 52) - 1023)
    m = _from_bits((b & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000)  # in [1, 2)
    up = m > _SQRT2
    m = m * 0.5 if up else m
    e = e + 1.0 if up else e
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    return e * _LN2 + t * (2.0 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9)))))


@_jit
def _sketch_code(v, key, bucketed, n):  # noqa: ANN001, ANN202
    """Code of a value: its key (negative), ``n`` + key (positive), ``2n`` + 0..3 (-inf, zero or tiny, +inf, NaN)."""
    c = key + n if v > 0.0 else key
    c = c if bucketed else 2.0 * n + 1.0
    c = 2.0 * n + 2.0 if v == np.inf else c
    c = 2.0 * n if v == -np.inf else c
    c = 2.0 * n + 3.0 if v != v else c
    return np.int64(c)


@_jit
def _sketch_shift(buf, by, w):  # noqa: ANN001, ANN202
    """Move the window's first key up by ``by``: counts move down ``by`` columns, those below column 0 add into it."""
    if by > 0:
        total = 0
        for i in range(min(by + 1, w)):
            total += buf[i]
        for i in range(1, w - by):
            buf[i] = buf[i + by]
        buf[0] = total
        for i in range(max(w - by, 1), w):
            buf[i] = 0
    elif by < 0:
        up = -by
        for i in range(w - 1, up - 1, -1):
            buf[i] = buf[i - up]
        for i in range(min(up, w)):
            buf[i] = 0


@_jit
def _sketch_rebase(buf, offset, collapsed, side, key, n, w, wi):  # noqa: ANN001, ANN202
    """Count ``key`` (add ``wi``), outside the window ``buf`` (first key ``offset[side]``): move the window to hold it.

    While a chunk is counted, a window that is not collapsed may sit anywhere
    that holds its keys (centred on them, so that it rarely moves); when the
    keys span more than ``w``, the window keeps the ``w`` keys up to the
    largest and collapses the rest into its first bucket, for good.
    """
    if offset[side] == n:  # empty: centre the window on its first key
        offset[side] = key - w // 2
        buf[w // 2] += wi
        return
    first = 0
    while buf[first] == 0:
        first += 1
    last = w - 1
    while buf[last] == 0:
        last -= 1
    lo = min(offset[side] + first, key)
    hi = max(offset[side] + last, key)
    if hi - lo < w:
        new = lo - (w - (hi - lo + 1)) // 2
    else:
        new = hi - w + 1
        collapsed[side] = 1
    _sketch_shift(buf, new - offset[side], w)
    offset[side] = new
    buf[max(key - new, 0)] += wi


@_jit
def _sketch_add_row(code, counts, offset, collapsed, n, w, wi):  # noqa: ANN001, ANN202
    """Count one row's codes (:func:`_sketch_code`) into the windows, adding ``wi`` (its weight, or 1) for each.

    A key outside its window moves the window.
    """
    for j in range(code.size):
        c = code[j]
        if c >= 2 * n:
            counts[j, 2 * w + c - 2 * n] += wi
            continue
        side = 1 if c >= n else 0
        key = c - side * n
        col = key - offset[j, side]
        if 0 <= col < w:
            counts[j, side * w + col] += wi
        elif col < 0 and collapsed[j, side]:
            counts[j, side * w] += wi  # below a collapsed window: into its first bucket
        else:
            _sketch_rebase(counts[j, side * w : (side + 1) * w], offset[j], collapsed[j], side, key, n, w, wi)


@_jit
def _sketch_start(offset, collapsed, n):  # noqa: ANN001, ANN202
    """Empty windows: every offset ``n`` (the empty mark), nothing collapsed."""
    offset[:] = n
    collapsed[:] = 0


@_jit
def _sketch_finish(counts, offset, collapsed, n, w):  # noqa: ANN001, ANN202
    """Put every window at its canonical first key: the lowest populated one, at most ``n - w`` (collapsed ones are)."""
    for j in range(counts.shape[0]):
        for side in range(2):
            if offset[j, side] == n or collapsed[j, side]:
                continue
            buf = counts[j, side * w : (side + 1) * w]
            first = 0
            while buf[first] == 0:
                first += 1
            # The lowest key, but no window reaches past the overflow key (n - 1).
            by = min(offset[j, side] + first, n - w) - offset[j, side]
            _sketch_shift(buf, by, w)
            offset[j, side] += by


@_jit
def sketch_counts_log(x, lut, ln_gamma, min_magnitude, k_min, k_max, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """:func:`sketch_counts` with a log per value: the reference expression everywhere.

    Taken when ``min_magnitude`` is subnormal (the fast key reads normal
    floats only); the tests hold :func:`sketch_counts` to it.

    Parameters
    ----------
    x, lut, ln_gamma, min_magnitude, k_min, k_max, n, w, counts, offset, collapsed, weights : object
        As for :func:`sketch_counts`.

    Returns
    -------
    fmin : numpy.ndarray
        The finite minimum of each feature.
    fmax : numpy.ndarray
        The finite maximum of each feature.
    """
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    code = np.empty(d, dtype=np.int64)
    fmin = np.full(d, np.inf)
    fmax = np.full(d, -np.inf)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        for j in range(d):
            v = _load(x[i, j], lut)
            a = abs(v)
            bucketed = (a >= min_magnitude) & (a < np.inf)
            key = _sketch_key(a if bucketed else 1.0, ln_gamma, lo_key, hi_key)
            code[j] = _sketch_code(v, key, bucketed, n)
            fin = _finite(v)
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin, fmax


@_jit
def _sketch_top(c, o, j, side, w):  # noqa: ANN001, ANN202
    """Largest populated key of feature ``j``'s window ``side`` in counts ``c`` and offsets ``o``; -1 when empty."""
    last = w - 1
    while last >= 0 and c[j, side * w + last] == 0:
        last -= 1
    return o[j, side] + last if last >= 0 else -1


@_jit
def _sketch_merge_into(c, o, j, side, new, w, out):  # noqa: ANN001, ANN202
    """Add feature ``j``'s window ``side`` of ``c`` (first key ``o[j, side]``) to ``out``'s, whose first key is ``new``."""
    base = side * w
    by = o[j, side] - new
    if by == 0:
        for i in range(w):
            out[j, base + i] += c[j, base + i]
        return
    for i in range(w):
        if c[j, base + i]:
            out[j, base + max(i + by, 0)] += c[j, base + i]


@_jit
def sketch_merge(ca, oa, cb, ob, n, w, out, offset):  # noqa: ANN001, ANN201
    """Merge two sketch states' counts ``ca``, ``cb`` (D, 2w + 4) and offsets ``oa``, ``ob`` (D, 2) into ``out``, ``offset``.

    ``out`` comes in zeroed. The merged window of a sign starts at the lower
    offset, or at the largest populated key less ``w - 1`` when that is
    higher (a collapse: lower keys add into its first bucket), but at most
    at ``n - w``, as
    :meth:`daskbatch.stats.sketch.Sketch.merge` does.

    Parameters
    ----------
    ca, oa : numpy.ndarray
        The first state's counts (D, 2w + 4; int64, or float64 weighted) and window offsets (D, 2).
    cb, ob : numpy.ndarray
        The second state's.
    n : int
        ``Sketch.n_buckets``.
    w : int
        The window's width, ``Sketch.buckets_kept``.
    out : numpy.ndarray
        The merged counts (D, 2w + 4), zeros of the counts' dtype, filled in.
    offset : numpy.ndarray
        The merged offsets (D, 2), filled in.
    """
    for j in range(ca.shape[0]):
        for side in range(2):
            hi = max(_sketch_top(ca, oa, j, side, w), _sketch_top(cb, ob, j, side, w))
            if hi < 0:
                offset[j, side] = n
                continue
            new = min(max(min(oa[j, side], ob[j, side]), hi - w + 1), n - w)
            offset[j, side] = new
            _sketch_merge_into(ca, oa, j, side, new, w, out)
            _sketch_merge_into(cb, ob, j, side, new, w, out)
        for i in range(2 * w, 2 * w + 4):
            out[j, i] = ca[j, i] + cb[j, i]


@_jit_nocheck
def sketch_counts(x, lut, ln_gamma, min_magnitude, k_min, k_max, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """Count every value into the sketch windows ``counts`` (D, 2w + 4) and ``offset`` (D, 2); give the finite extrema.

    The key follows :meth:`daskbatch.stats.sketch.Sketch.slots` step by step:
    ``ceil(log|v| / ln_gamma)`` clamped to ``[k_min, k_max]`` (``k_max`` the
    overflow key), zero for magnitudes below ``min_magnitude``, ±inf and NaN
    apart. ``min_magnitude`` must be a normal float (else
    :func:`sketch_counts_log`). The windows follow
    :class:`~daskbatch.stats.sketch.SketchState`: while counting, a window
    sits wherever it holds its keys, and moves when one falls outside
    (:func:`_sketch_rebase`); at the end it is put at its canonical first key.

    The log comes from :func:`fast_log`, not from a call per value (numba does
    not vectorise ``np.log``); a value whose fast log lies within
    :data:`SKETCH_NEAR` of a bucket boundary is keyed again after its row with
    the reference expression (:func:`_sketch_key`), so that every key is the
    reference's, bit for bit. ``|v| = 1`` never needs that (``log 1 = 0``
    exactly either way), and is common (indicators).

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    ln_gamma, min_magnitude : float
        ``Sketch.ln_gamma`` and ``Sketch.min_magnitude``.
    k_min, k_max : int
        ``Sketch.key_range``.
    n : int
        ``Sketch.n_buckets``.
    w : int
        ``Sketch.window``.
    counts : numpy.ndarray
        The int64 counts (D, 2w + 4), zeros, filled in (float64 with ``weights``).
    offset : numpy.ndarray
        The int64 first keys of the windows (D, 2), filled in.
    collapsed : numpy.ndarray
        A uint8 scratch (D, 2): which windows collapsed.
    weights : numpy.ndarray or None
        The float64 weight of each row, added instead of 1 (``counts`` then
        float64); None counts values (the unweighted loop, chosen at compile time).

    Returns
    -------
    fmin : numpy.ndarray
        The finite minimum of each feature.
    fmax : numpy.ndarray
        The finite maximum of each feature.
    """
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    inv_ln_gamma = 1.0 / ln_gamma
    near_keys = SKETCH_NEAR * inv_ln_gamma  # the band in units of keys
    zero_code = 2.0 * n + 1.0
    code = np.empty(d, dtype=np.int64)
    fmin = np.full(d, np.inf)
    fmax = np.full(d, -np.inf)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        n_near = 0
        # Codes of one row (see _sketch_code), branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            a = abs(v)
            q = fast_log(a) * inv_ln_gamma
            key = np.ceil(q)
            key = key if key < hi_key else hi_key
            key = (key if key > lo_key else lo_key) - lo_key
            bucketed = (a >= min_magnitude) & (a < np.inf)
            c = key + n if v > 0.0 else key
            c = c if bucketed else zero_code
            c = 2.0 * n + 2.0 if v == np.inf else c
            c = 2.0 * n if v == -np.inf else c
            c = 2.0 * n + 3.0 if v != v else c
            code[j] = np.int64(c)
            n_near += bucketed & (abs(q - np.rint(q)) < near_keys) & (a != 1.0)
            fin = _finite(v)
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        # ... the rare values close to a boundary again, with the reference expression
        # (found again rather than marked above, which would cost a store per value;
        # the band is doubled, so that no value marked above can be missed) ...
        if n_near:
            for j in range(d):
                v = _load(x[i, j], lut)
                a = abs(v)
                q = fast_log(a) * inv_ln_gamma
                if (a >= min_magnitude) & (a < np.inf) & (abs(q - np.rint(q)) < 2.0 * near_keys):
                    key = np.int64(_sketch_key(a, ln_gamma, lo_key, hi_key))
                    code[j] = key + n if v > 0.0 else key
        # ... then one increment per value into its window.
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin, fmax


@_jit_nocheck
def sketch_counts_all(x, lut, ln_gamma, min_magnitude, k_min, k_max, n, counts, offset, weights):  # noqa: ANN001, ANN201
    """:func:`sketch_counts` for a sketch that keeps every bucket (``w = n``): windows start at key 0 and never move.

    The slot of a value is then known in the vectorised loop (no window
    check per value), as before the sketch had windows.

    Parameters
    ----------
    x, lut, ln_gamma, min_magnitude, k_min, k_max, n, counts, offset, weights : object
        As for :func:`sketch_counts`, with ``w = n``.

    Returns
    -------
    fmin : numpy.ndarray
        The finite minimum of each feature.
    fmax : numpy.ndarray
        The finite maximum of each feature.
    """
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    inv_ln_gamma = 1.0 / ln_gamma
    near_keys = SKETCH_NEAR * inv_ln_gamma  # the band in units of keys
    width = 2 * n + 4
    zero_slot = float(2 * n + 1)
    first = np.arange(d) * width  # first slot of every feature
    flat = counts.reshape(-1)
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    slot = np.empty(d, dtype=np.uint64)
    fmin = np.full(d, np.inf)
    fmax = np.full(d, -np.inf)
    for i in range(rows):
        n_near = 0
        # Slots of one row (see _sketch_code: the code is the column here), branch-free so that it vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            a = abs(v)
            q = fast_log(a) * inv_ln_gamma
            key = np.ceil(q)
            key = key if key < hi_key else hi_key
            key = (key if key > lo_key else lo_key) - lo_key
            bucketed = (a >= min_magnitude) & (a < np.inf)
            s = key + n if v > 0.0 else key
            s = s if bucketed else zero_slot
            s = 2.0 * n + 2.0 if v == np.inf else s
            s = 2.0 * n if v == -np.inf else s
            s = 2.0 * n + 3.0 if v != v else s
            slot[j] = np.uint64(first[j] + np.int64(s))
            n_near += bucketed & (abs(q - np.rint(q)) < near_keys) & (a != 1.0)
            fin = _finite(v)
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        # ... the rare values close to a boundary again, with the reference expression ...
        if n_near:
            for j in range(d):
                v = _load(x[i, j], lut)
                a = abs(v)
                q = fast_log(a) * inv_ln_gamma
                if (a >= min_magnitude) & (a < np.inf) & (abs(q - np.rint(q)) < 2.0 * near_keys):
                    key = np.int64(_sketch_key(a, ln_gamma, lo_key, hi_key))
                    slot[j] = np.uint64(first[j] + (key + n if v > 0.0 else key))
        # ... then one scattered increment per value (its row's weight with weights).
        wi = _weight(weights, i)
        for j in range(d):
            flat[slot[j]] += wi
    for j in range(d):  # a window holding a value starts at key 0; an empty one is marked
        for side in range(2):
            offset[j, side] = 0 if counts[j, side * n : (side + 1) * n].any() else n
    return fmin, fmax


# ------------------------------------------------------------------ sample weights
# Kept apart from the unweighted loops above, which stay as they are (and bitwise unchanged).


@_jit
def weighted_moments_chunk(x, lut, w):  # noqa: ANN001, ANN201
    """:func:`moments_chunk` with a frequency weight per row: weighted sums, weight totals and counts.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    w : numpy.ndarray
        The float64 weight of each row, all positive.

    Returns
    -------
    tuple of numpy.ndarray
        ``(count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf)``,
        length-D vectors; the sums ``s1`` … ``s4`` and ``approx_mean`` are weighted.
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
            wi = w[i]
            for j in range(d):
                v = _load(x[i, j], lut)
                fin = _finite(v)
                part[j] += wi * (v - shift[j]) if fin else 0.0
                wpart[j] += wi if fin else 0.0
                count[j] += fin
                nan[j] += v != v
                posinf[j] += v == np.inf
                fmin[j] = v if (fin and v < fmin[j]) else fmin[j]
                fmax[j] = v if (fin and v > fmax[j]) else fmax[j]
        for j in range(d):
            total[j] += part[j]
            wsum[j] += wpart[j]

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
            wi = w[i]
            for j in range(d):
                v = _load(x[i, j], lut)
                dev = ((v - shift[j]) - approx_mean[j]) if _finite(v) else 0.0
                wdev = wi * dev
                p1[j] += wdev
                p2[j] += wdev * dev
                p3[j] += wdev * dev * dev
                p4[j] += wdev * dev * dev * dev
        for j in range(d):
            s1[j] += p1[j]
            s2[j] += p2[j]
            s3[j] += p3[j]
            s4[j] += p4[j]

    return count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf


@_jit
def weighted_histogram_counts(x, lut, lo, hi, step, scale, bins, labels, n_classes, w, counts):  # noqa: ANN001, ANN201
    """:func:`histogram_counts` adding each row's weight ``w[i]`` into float64 ``counts`` instead of 1.

    The slot of a value is found by the same steps, so a weighted count of
    all-one weights equals the unweighted count.

    Parameters
    ----------
    x : numpy.ndarray
        The chunk, (R, D), C order.
    lut : numpy.ndarray or None
        The float16 decoding table when ``x`` holds float16 bits, else None.
    lo, hi : numpy.ndarray
        The range of each feature.
    step, scale : numpy.ndarray
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : numpy.ndarray
        The int64 class of each row, or an empty array for K = 1.
    n_classes : int
        K.
    w : numpy.ndarray
        The float64 weight of each row.
    counts : numpy.ndarray
        The flat float64 weighted counts, added to.
    """
    rows, d = x.shape
    n_slots = bins + 3
    by_label = labels.shape[0] > 0
    top = float(bins - 1)
    over_slot = float(bins + 1)
    nan_slot = float(bins + 2)
    slot = np.empty(d, dtype=np.int64)
    for i in range(rows):
        for j in range(d):
            v = _load(x[i, j], lut)
            f = math.floor((v - lo[j]) * scale[j])
            f = f if f < top else top
            f = f if f > 0.0 else 0.0
            f -= np.float64(v < f * step[j] + lo[j])
            f += np.float64((v >= (f + 1.0) * step[j] + lo[j]) & (f < top))
            f += 1.0
            f = 0.0 if v < lo[j] else f
            f = over_slot if v > hi[j] else f
            f = nan_slot if v != v else f
            slot[j] = (j * n_slots + np.int64(f)) * n_classes
        k = labels[i] if by_label else 0
        wi = w[i]
        for j in range(d):
            counts[slot[j] + k] += wi


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
