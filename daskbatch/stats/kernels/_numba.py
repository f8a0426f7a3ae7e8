"""The compiled loops: per-chunk moments, co-moment centring and histogram counting.

All kernels live in this one module on purpose: numba's on-disk cache
(``cache=True``) is invalidated by the time stamp of the file that defines a
function only, so a helper edited in another file would leave stale machine
code behind.

Arrays that grow with the chunk or the state (the complete-row mask, the
centring buffer, the histogram counts) are allocated by the callers in
:mod:`daskbatch.kernels` with NumPy and passed in, so that ``tracemalloc`` and
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


@_jit
def sketch_counts_log(x, lut, ln_gamma, min_magnitude, k_min, k_max, n, counts, fmin, fmax, w):  # noqa: ANN001, ANN201
    """:func:`sketch_counts` with a log per value: the reference expression everywhere.

    Taken when ``min_magnitude`` is subnormal (the fast key reads normal
    floats only); the tests hold :func:`sketch_counts` to it.

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
    counts : numpy.ndarray
        The flat int64 counts, added to (float64 with ``w``).
    fmin, fmax : numpy.ndarray
        The finite extrema of each feature, updated.
    w : numpy.ndarray or None
        The float64 weight of each row, added instead of 1; None counts values.
    """
    rows, d = x.shape
    width = 2 * n + 4
    lo_key = float(k_min)
    hi_key = float(k_max)
    zero_slot = float(n + 1)
    posinf_slot = float(2 * n + 2)
    nan_slot = float(2 * n + 3)
    slot = np.empty(d, dtype=np.int64)
    for i in range(rows):
        for j in range(d):
            v = _load(x[i, j], lut)
            a = abs(v)
            bucketed = (a >= min_magnitude) & (a < np.inf)
            key = _sketch_key(a if bucketed else 1.0, ln_gamma, lo_key, hi_key)
            s = key + (n + 2.0) if v > 0.0 else n - key
            s = s if bucketed else zero_slot
            s = posinf_slot if v == np.inf else s
            s = 0.0 if v == -np.inf else s
            s = nan_slot if v != v else s
            slot[j] = j * width + np.int64(s)
            fin = _finite(v)
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        wi = _weight(w, i)
        for j in range(d):
            counts[slot[j]] += wi


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


@_jit_nocheck
def sketch_counts(x, lut, ln_gamma, min_magnitude, k_min, k_max, n, counts, fmin, fmax, w):  # noqa: ANN001, ANN201
    """Add to ``counts`` (D·(2n + 4) int64, flat) the sketch slot of every value; update the finite extrema.

    The slot follows :meth:`daskbatch.stats.sketch.Sketch.slots` step by step:
    ``ceil(log|v| / ln_gamma)`` clamped to ``[k_min, k_max]`` (``k_max`` the
    overflow key), mirrored for negative values, zero for magnitudes below
    ``min_magnitude``, ±inf at the ends and NaN last. ``min_magnitude`` must
    be a normal float (else :func:`sketch_counts_log`).

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
    counts : numpy.ndarray
        The flat int64 counts, added to (float64 with ``w``).
    fmin, fmax : numpy.ndarray
        The finite extrema of each feature, updated.
    w : numpy.ndarray or None
        The float64 weight of each row, added instead of 1; None counts values.
    """
    rows, d = x.shape
    width = 2 * n + 4
    lo_key = float(k_min)
    hi_key = float(k_max)
    inv_ln_gamma = 1.0 / ln_gamma
    near_keys = SKETCH_NEAR * inv_ln_gamma  # the band in units of keys
    zero_slot = float(n + 1)
    posinf_slot = float(2 * n + 2)
    nan_slot = float(2 * n + 3)
    offset = np.arange(d) * width  # first slot of every feature
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    slot = np.empty(d, dtype=np.uint64)
    for i in range(rows):
        n_near = 0
        # Slots of one row, branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j], lut)
            a = abs(v)
            q = fast_log(a) * inv_ln_gamma
            key = np.ceil(q)
            key = key if key < hi_key else hi_key
            key = (key if key > lo_key else lo_key) - lo_key
            bucketed = (a >= min_magnitude) & (a < np.inf)
            s = key + (n + 2.0) if v > 0.0 else n - key
            s = s if bucketed else zero_slot
            s = posinf_slot if v == np.inf else s
            s = 0.0 if v == -np.inf else s
            s = nan_slot if v != v else s
            slot[j] = np.uint64(offset[j] + np.int64(s))
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
                    slot[j] = np.uint64(offset[j] + (key + (n + 2) if v > 0.0 else n - key))
        # ... then one scattered increment per value (its row's weight with weights).
        wi = _weight(w, i)
        for j in range(d):
            counts[slot[j]] += wi


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
