"""Sketch keys of float32 values from their bits: a table built with the reference key, and the loops that read it.

A float32 magnitude's bit pattern is monotone in its value. Its top ``8 + K``
bits (exponent and ``K`` mantissa bits) pick a sub-interval whose ends differ
by a factor below ``1 + 2**-K``; with ``K`` chosen so that this is below
``gamma``, a sub-interval holds at most one bucket boundary, so the key of any
pattern in it is the key at its low end, plus one from the pattern at which
the key steps up. Both are found with the reference key itself
(:func:`~daskbatch.stats.kernels._numba_sketch._sketch_key`, by binary search),
so the table keys every float32 as the reference does, by construction; the
loops then key a value with a load and a compare instead of a log.
"""

from __future__ import annotations

import functools

import numpy as np

from daskbatch.stats.kernels._numba import _jit, _jit_nocheck, _weight
from daskbatch.stats.kernels._numba_sketch import (
    _sketch_add_row,
    _sketch_finish,
    _sketch_key,
    _sketch_start,
)

#: Most mantissa bits a table reads (``512 * 2**12`` int64 entries, 16 MiB); finer sketches keep the log.
MAX_BITS = 12
_EXP_MASK = 0x7F800000  # float32 +inf; magnitudes above it are NaN
_NEVER = 0xFFFFFFFF  # a step no magnitude reaches
_INF32 = np.float32(np.inf)


@_jit
def _keys(a, ln_gamma, lo_key, hi_key):  # noqa: ANN001, ANN202
    """Reference keys (less ``lo_key``) of the float64 magnitudes ``a``."""
    out = np.empty(a.size, dtype=np.int64)
    for i in range(a.size):
        out[i] = np.int64(_sketch_key(a[i], ln_gamma, lo_key, hi_key))
    return out


def _pattern_keys(p: np.ndarray, ln_gamma: float, lo_key: float, hi_key: float) -> np.ndarray:
    """Reference keys of the float32 magnitudes with bit patterns ``p`` (uint32)."""
    return _keys(p.view(np.float32).astype(np.float64), ln_gamma, lo_key, hi_key)


def min_pattern(min_magnitude: float) -> int:
    """Give the lowest float32 bit pattern whose value is at least ``min_magnitude``.

    Parameters
    ----------
    min_magnitude : float
        ``Sketch.min_magnitude``.

    Returns
    -------
    int
        The pattern (+inf's when no finite float32 reaches it).
    """
    with np.errstate(over="ignore"):
        f = np.float32(min_magnitude)
    if float(f) < min_magnitude:
        f = np.nextafter(f, np.float32(np.inf))
    return int(np.array(f, dtype=np.float32).view(np.uint32))


@functools.lru_cache(maxsize=16)
def float32_table(
    ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n: int
) -> tuple[np.ndarray, int] | None:
    """The key table of a sketch for float32 magnitudes, or None where it cannot have one step per entry.

    Parameters
    ----------
    ln_gamma, min_magnitude : float
        ``Sketch.ln_gamma`` and ``Sketch.min_magnitude``.
    k_min, k_max : int
        ``Sketch.key_range``.
    n : int
        ``Sketch.n_buckets``.

    Returns
    -------
    table : numpy.ndarray
        An int64 per sub-interval of each sign, ``512 << K`` of them: the code
        at its low end (the key less ``k_min``, plus ``n`` when positive),
        shifted left by 32, or'ed with the bit pattern (sign included) at
        which the code becomes one more (``0xFFFFFFFF``: never).
    shift : int
        ``23 - K``: a float32's bit pattern shifted right by it is its entry.
        None when ``gamma`` is too close to 1 for :data:`MAX_BITS`, or when
        float32 subnormals are bucketed (their sub-intervals span any ratio).
    """
    gamma = float(np.exp(ln_gamma))
    bits = next((k for k in range(1, MAX_BITS + 1) if 1.0 + 2.0**-k < gamma), None)
    min_bits = min_pattern(min_magnitude)
    if bits is None or min_bits < 0x00800000:
        return None
    shift = 23 - bits
    lo_key, hi_key = float(k_min), float(k_max)
    lo = np.arange(255 << bits, dtype=np.uint32) << np.uint32(shift)  # every finite exponent
    hi = lo + np.uint32((1 << shift) - 1)
    key = _pattern_keys(lo, ln_gamma, lo_key, hi_key)
    rise = _pattern_keys(hi, ln_gamma, lo_key, hi_key) - key
    # Sub-intervals wholly below min_magnitude are never keyed (their values count as zero).
    used = hi >= min_bits
    if not np.all((rise[used] == 0) | (rise[used] == 1)):
        raise AssertionError("a float32 sub-interval holds more than one bucket boundary")
    # Binary search, in every sub-interval that steps, for its first pattern of key + 1:
    # key(a) is that of the low end, key(b) one more.
    up = np.flatnonzero(used & (rise == 1))
    a, b = lo[up].copy(), hi[up].copy()
    while np.any(b - a > 1):
        mid = a + (b - a) // np.uint32(2)
        higher = _pattern_keys(mid, ln_gamma, lo_key, hi_key) > key[up]
        b = np.where(higher, mid, b)
        a = np.where(higher, a, mid)
    step = np.full(255 << bits, _NEVER, dtype=np.int64)
    step[up] = b
    # Entries for both signs (the sign bit is the index's top bit), holding the code
    # (:func:`~daskbatch.stats.kernels._numba_sketch._sketch_code`) rather than the key;
    # ±inf (exponent 255) have theirs. One int64 per entry: one load.
    inf = np.full(1 << bits, _NEVER, dtype=np.int64)
    pos = np.concatenate([((key + n) << 32) | step, ((2 * n + 2) << 32) | inf])
    neg = np.concatenate([(key << 32) | np.where(step == _NEVER, _NEVER, step | 0x80000000), ((2 * n) << 32) | inf])
    return np.concatenate([pos, neg]), shift


@_jit_nocheck
def _code_f32(u, table, shift, min_bits, n):  # noqa: ANN001, ANN202
    """Code of the float32 with bits ``u``, as :func:`~daskbatch.stats.kernels._numba_sketch._sketch_code`."""
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    e = table[np.uint64(u) >> np.uint64(shift)]
    c = (e >> 32) + (np.int64(u) >= (e & 0xFFFFFFFF))
    mag = np.int64(u & 0x7FFFFFFF)
    c = c if mag >= min_bits else 2 * n + 1
    return 2 * n + 3 if mag > _EXP_MASK else c


@_jit_nocheck
def _extrema(x, d):  # noqa: ANN001, ANN202
    """Starting finite extrema of ``d`` features, of the chunk's dtype."""
    return np.full(d, np.inf, dtype=x.dtype), np.full(d, -np.inf, dtype=x.dtype)


@_jit_nocheck
def sketch_counts_all_f32(x, u, table, shift, min_bits, n, counts, offset, weights):  # noqa: ANN001, ANN201
    """:func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts_all` for a float32 chunk, keyed from its bits.

    Parameters
    ----------
    x : numpy.ndarray
        The float32 chunk, (R, D), C order.
    u : numpy.ndarray
        ``x.view(numpy.uint32)``.
    table, shift : object
        The table of :func:`float32_table`.
    min_bits : int
        :func:`min_pattern` of ``Sketch.min_magnitude``.
    n, counts, offset, weights : object
        As for :func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts_all`.

    Returns
    -------
    fmin : numpy.ndarray
        The finite minimum of each feature (float64).
    fmax : numpy.ndarray
        The finite maximum of each feature (float64).
    """
    rows, d = x.shape
    width = np.uint64(2 * n + 4)
    flat = counts.reshape(-1)
    # float32 extrema: the float64 ones are their casts, and the compares run twice as wide.
    fmin, fmax = _extrema(x, d)
    n_neg = np.zeros(d, dtype=np.int64)
    n_pos = np.zeros(d, dtype=np.int64)
    for i in range(rows):
        wi = _weight(weights, i)
        # The table read is a gather, which LLVM does not vectorise: key and count each value
        # in one scalar pass (no slot stored and read back) ...
        for j in range(d):
            c = _code_f32(u[i, j], table, shift, min_bits, n)
            flat[np.uint64(j) * width + np.uint64(c)] += wi
        # ... and the rest, which needs no table, in a loop that vectorises.
        for j in range(d):
            mag = u[i, j] & 0x7FFFFFFF
            bucketed = (mag >= min_bits) & (mag < _EXP_MASK)
            neg = u[i, j] >> 31
            n_neg[j] += bucketed & (neg == 1)
            n_pos[j] += bucketed & (neg == 0)
            v = x[i, j]
            fin = abs(v) < _INF32
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
    for j in range(d):  # a window holding a value starts at key 0; an empty one is marked
        offset[j, 0] = 0 if n_neg[j] else n
        offset[j, 1] = 0 if n_pos[j] else n
    return fmin.astype(np.float64), fmax.astype(np.float64)


@_jit_nocheck
def sketch_counts_f32(x, u, table, shift, min_bits, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """:func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts` (windowed) for a float32 chunk, keyed from its bits.

    Parameters
    ----------
    x, u, table, shift, min_bits : object
        As for :func:`sketch_counts_all_f32`.
    n, w, counts, offset, collapsed, weights : object
        As for :func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts`.

    Returns
    -------
    fmin : numpy.ndarray
        The finite minimum of each feature (float64).
    fmax : numpy.ndarray
        The finite maximum of each feature (float64).
    """
    rows, d = x.shape
    code = np.empty(d, dtype=np.int64)
    fmin, fmax = _extrema(x, d)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        for j in range(d):
            code[j] = _code_f32(u[i, j], table, shift, min_bits, n)
        for j in range(d):
            v = x[i, j]
            fin = abs(v) < _INF32
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin.astype(np.float64), fmax.astype(np.float64)


def sketch_float32(
    x: np.ndarray, ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n_buckets: int, window: int,
    counts: np.ndarray, offset: np.ndarray, collapsed: np.ndarray, weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Count the float32 chunk ``x`` into ``counts`` and ``offset`` with the table; None where the sketch has none.

    Parameters
    ----------
    x : numpy.ndarray
        The float32 chunk, (R, D), C order.
    ln_gamma, min_magnitude, k_min, k_max, n_buckets, window : object
        As for :func:`daskbatch.stats.kernels.sketch`.
    counts, offset, collapsed, weights : numpy.ndarray or None
        As for :func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts`.

    Returns
    -------
    tuple of numpy.ndarray or None
        The float64 finite minimum and maximum of each feature; None (nothing
        counted) where :func:`float32_table` gives no table.
    """
    table = float32_table(float(ln_gamma), float(min_magnitude), int(k_min), int(k_max), int(n_buckets))
    if table is None:
        return None
    args = (x, x.view(np.uint32), *table, min_pattern(min_magnitude), int(n_buckets))
    if window == n_buckets:  # every bucket kept: the windows never move
        return sketch_counts_all_f32(*args, counts, offset, weights)
    return sketch_counts_f32(*args, int(window), counts, offset, collapsed, weights)
