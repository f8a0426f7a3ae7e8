"""Sketch keys of float32 values from their bits (a table built with the reference key, and the loops that read it), and the side-cars' loops: the exact counts of each feature's few distinct finite values, and the dyadic grid."""

from __future__ import annotations

import functools
import math

import numpy as np

from daskbatch.stats.kernels._numba import (
    _choose,
    _empty,
    _finite,
    _flat,
    _greatest,
    _jit,
    _jit_nocheck,
    _jit_nocheck_inline,
    _least,
    _load,
    _weight,
)
from daskbatch.stats.kernels._numba_sketch import (
    _as_bits,
    _sketch_add_row,
    _sketch_finish,
    _sketch_key,
    _sketch_start,
    _tail_block_end,
    _tail_row,
    _tail_start,
)

#: Most mantissa bits a table reads (``512 * 2**12`` int64 entries, 16 MiB); finer sketches keep the log.
MAX_BITS = 12
_EXP_MASK = 0x7F800000  # float32 +inf; magnitudes above it are NaN
_NEVER = 0xFFFFFFFF  # a step no magnitude reaches
_INF32 = np.float32(np.inf)
# uint32 constants: numba types a plain int literal as int64, which would widen the lanes.
_MAG32 = np.uint32(0x7FFFFFFF)
_EXP32 = np.uint32(_EXP_MASK)
_NEG_INF32 = np.uint32(0xFF800000)


@_jit
def _keys(a, ln_gamma, lo_key, hi_key, out):  # noqa: ANN001, ANN202
    """Reference keys (less ``lo_key``) of the float64 magnitudes ``a`` into ``out``."""
    for i in range(a.size):
        out[i] = np.int64(_sketch_key(a[i], ln_gamma, lo_key, hi_key))


def _pattern_keys(p: np.ndarray, ln_gamma: float, lo_key: float, hi_key: float) -> np.ndarray:
    """Reference keys of the float32 magnitudes with bit patterns ``p`` (uint32)."""
    out = np.empty(p.size, dtype=np.int64)  # made here, not by numba's constructors (each costs a compile)
    _keys(p.view(np.float32).astype(np.float64), ln_gamma, lo_key, hi_key, out)
    return out


def min_pattern(min_magnitude: float) -> int:
    """Give the lowest float32 bit pattern whose value is at least ``min_magnitude``."""
    with np.errstate(over="ignore"):
        f = np.float32(min_magnitude)
    if float(f) < min_magnitude:
        f = np.nextafter(f, np.float32(np.inf))
    return int(np.array(f, dtype=np.float32).view(np.uint32))


@functools.lru_cache(maxsize=16)
def float32_table(
    ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n: int
) -> tuple[np.ndarray, int] | None:
    """The key table of a sketch for float32 magnitudes, or None where it cannot have one step per entry."""
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


@functools.lru_cache(maxsize=16)
def folded_table(
    ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n: int
) -> tuple[np.ndarray, int] | None:
    """:func:`float32_table` with the codes of zero, tiny values and NaN in its entries, for :func:`sketch_counts_all_f32`."""
    got = float32_table(ln_gamma, min_magnitude, k_min, k_max, n)
    if got is None:
        return None
    table, shift = got
    half = table.size // 2  # entries of one sign; the sign bit is the index's top bit
    lo = np.arange(half, dtype=np.int64) << shift  # each entry's lowest magnitude pattern
    below = lo + ((1 << shift) - 1) < min_pattern(min_magnitude)
    nan = lo > _EXP_MASK
    out = table.copy()
    for sign, part in ((0, out[:half]), (0x80000000, out[half:])):
        part[below] = ((2 * n + 1) << 32) | _NEVER
        part[nan] = ((2 * n + 2) << 32) | (lo[nan] | sign)
    # +inf and the NaN patterns after it share an entry: NaN is the code after +inf's.
    # (-inf's NaN are no step of one after -inf's code: those stay rare.)
    out[255 << (23 - shift)] = ((2 * n + 2) << 32) | (_EXP_MASK + 1)
    # The step as its complement: the pattern plus the low half carries into the code exactly
    # at the step, so that a code is an add and a shift (no step is 0; 0 never carries).
    step = out & 0xFFFFFFFF
    return ((out >> 32) << 32) | np.where(step == _NEVER, 0, (1 << 32) - step), shift


@_jit_nocheck_inline
def _code_f32(u, table, shift, min_bits, n):  # noqa: ANN001, ANN202
    """Code of the float32 with bits ``u``, as :func:`~daskbatch.stats.kernels._numba_sketch._sketch_code`."""
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    e = table[np.uint64(u) >> np.uint64(shift)]
    c = (e >> 32) + (np.int64(u) >= (e & 0xFFFFFFFF))
    mag = np.int64(u & 0x7FFFFFFF)
    c = _choose(mag >= min_bits, c, 2 * n + 1)
    return _choose(mag > _EXP_MASK, 2 * n + 3, c)


@_jit_nocheck
def _counts_all_f32(x, u, table, shift, min_bits, n, flat, weights, fmin, fmax, has_neg, has_pos, rare_lo, rare_hi):  # noqa: ANN001, ANN202, E501
    """The loop of :func:`sketch_counts_all_f32`: ``flat`` (its counts), the extrema and the sign flags updated."""
    rows, d = x.shape
    width = np.uint64(2 * n + 4)
    lo_bits = np.uint32(min_bits)
    nan_hi = np.uint32(0xFF800000 + (1 << shift))
    for i in range(rows):
        wi = _weight(weights, i)
        # First what needs no table, in a loop that vectorises (numba widens uint32 arithmetic
        # to 64 bits, which would halve the lanes: results are cast back, compares kept 32-bit) ...
        rare = False
        for j in range(d):
            bits = u[i, j]
            mag = np.uint32(bits & _MAG32)
            bucketed = (mag >= lo_bits) & (mag < _EXP32)
            neg = bits > _MAG32
            has_neg[j] = np.uint32(has_neg[j] | np.uint32(bucketed & neg))
            has_pos[j] = np.uint32(has_pos[j] | np.uint32(bucketed & (bits <= _MAG32)))
            rare |= ((mag >= rare_lo) & (mag < rare_hi)) | ((bits > _NEG_INF32) & (bits < nan_hi))
            v = x[i, j]
            fin = abs(v) < _INF32
            fmin[j] = _choose(fin & (v < fmin[j]), v, fmin[j])
            fmax[j] = _choose(fin & (v > fmax[j]), v, fmax[j])
        # ... then key and count each value in one scalar pass (no code stored and read back):
        # the table read is a gather, which LLVM does not vectorise. The folded table makes a
        # code one load, a compare and an add.
        if rare:
            for j in range(d):
                b = u[i, j]
                c = _code_folded(b, table, shift)
                mag = b & 0x7FFFFFFF
                c = _choose(mag >= min_bits, c, 2 * n + 1)
                c = _choose(mag > _EXP_MASK, 2 * n + 3, c)
                flat[np.uint64(j) * width + np.uint64(c)] += wi
        else:
            for j in range(d):
                flat[np.uint64(j) * width + np.uint64(_code_folded(u[i, j], table, shift))] += wi


def sketch_counts_all_f32(
    x: np.ndarray, u: np.ndarray, table: np.ndarray, shift: int, min_bits: int, n: int, counts: np.ndarray,
    offset: np.ndarray, weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts_all` for a float32 chunk, keyed from its bits."""
    # Arrays made here, not by numba's constructors (each costs the first call a compile).
    d = x.shape[1]
    # float32 extrema: the float64 ones are their casts, and the compares run twice as wide.
    fmin, fmax = np.full(d, np.inf, dtype=x.dtype), np.full(d, -np.inf, dtype=x.dtype)
    # Whether a feature has a bucketed value of each sign: uint32 flags, or'ed, so that the loop
    # runs in uint32 lanes (int64 counts of them ran four to a vector and twice as slow).
    has_neg, has_pos = np.zeros((2, d), dtype=np.uint32)
    # The patterns whose folded entry is not their code (folded_table): a row holding one keys
    # every value with _code_f32's tests, which give every pattern its code from this table too.
    rare_lo, rare_hi = np.uint32(min_bits & ~((1 << shift) - 1)), np.uint32(min_bits)
    _counts_all_f32(x, u, table, shift, min_bits, n, counts.reshape(-1), weights, fmin, fmax, has_neg, has_pos,
                    rare_lo, rare_hi)
    # A window holding a value starts at key 0; an empty one is marked.
    offset[:, 0] = np.where(has_neg != 0, 0, n)
    offset[:, 1] = np.where(has_pos != 0, 0, n)
    return fmin.astype(np.float64), fmax.astype(np.float64)


@_jit_nocheck_inline
def _code_folded(b, table, shift):  # noqa: ANN001, ANN202
    """The code of the float32 with bits ``b`` from :func:`folded_table` (not for its rare patterns)."""
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    return (table[np.uint64(b) >> np.uint64(shift)] + np.int64(b)) >> 32


@_jit_nocheck
def sketch_counts_f32(x, u, table, shift, min_bits, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """:func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts` (windowed) for a float32 chunk, keyed from its bits."""
    rows, d = x.shape
    code = _empty(d, np.int64)
    fmin, fmax = np.full(d, np.inf, dtype=x.dtype), np.full(d, -np.inf, dtype=x.dtype)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        for j in range(d):
            code[j] = _code_f32(u[i, j], table, shift, min_bits, n)
        for j in range(d):
            v = x[i, j]
            fin = abs(v) < _INF32
            fmin[j] = _choose(fin & (v < fmin[j]), v, fmin[j])
            fmax[j] = _choose(fin & (v > fmax[j]), v, fmax[j])
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin.astype(np.float64), fmax.astype(np.float64)


def sketch_float32(
    x: np.ndarray, ln_gamma: float, min_magnitude: float, k_min: int, k_max: int, n_buckets: int, window: int,
    counts: np.ndarray, offset: np.ndarray, collapsed: np.ndarray, weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Count the float32 chunk ``x`` into ``counts`` and ``offset`` with the table; None where the sketch has none."""
    table = float32_table(float(ln_gamma), float(min_magnitude), int(k_min), int(k_max), int(n_buckets))
    if table is None:
        return None
    u, min_bits = x.view(np.uint32), min_pattern(min_magnitude)
    if window == n_buckets:  # every bucket kept: the windows never move
        folded = folded_table(float(ln_gamma), float(min_magnitude), int(k_min), int(k_max), int(n_buckets))
        assert folded is not None  # there is a table
        return sketch_counts_all_f32(x, u, *folded, min_bits, int(n_buckets), counts, offset, weights)
    return sketch_counts_f32(x, u, *table, min_bits, int(n_buckets), int(window), counts, offset, collapsed, weights)


#: Fibonacci hashing's multiplier (2**64 / golden ratio, as a wrapped int64): spreads nearby bit patterns.
_SPREAD = -7046029254386353131


@_jit
def _count_distinct(x, weights, k, first, table, table_counts, values, counts, held, live):  # noqa: ANN001, ANN202
    """The compiled loop of :func:`distinct_counts`: the values in hash-table order (``live``: scratch, one per feature)."""
    rows = x.shape[0]
    d = table.shape[0]
    size = table.shape[1]
    mask = size - 1
    bits = 0
    while (1 << bits) < size:
        bits += 1
    shift = 64 - bits  # the hash's top bits index the table
    # The features still counting, so that a row costs only theirs: a feature with few values
    # is read to the chunk's end, past the others' k-th.
    n_live = 0
    for j in range(d):
        if held[j] <= k:
            live[n_live] = j
            n_live += 1
    for i in range(rows):
        if n_live == 0:
            break
        wi = _weight(weights, i)
        q = 0
        while q < n_live:
            j = live[q]
            q += 1
            v = _load(x[i, first + j])
            if not _finite(v):
                continue  # ±inf have slots of the sketch's own; NaN is left out
            v = v + 0.0  # -0.0 and 0.0 are one value
            h = ((_as_bits(v) * _SPREAD) >> shift) & mask
            t = table[j, h]
            while t != v and t == t:  # an empty entry holds NaN, which no stored value is
                h = (h + 1) & mask
                t = table[j, h]
            if t == v:
                table_counts[j, h] += wi
            elif held[j] == k:
                held[j] = k + 1  # too many: from here the sketch's buckets answer
                q -= 1  # the last live feature takes its place (features are counted apart: any order)
                n_live -= 1
                live[q] = live[n_live]
            else:
                table[j, h] = v
                table_counts[j, h] = wi
                held[j] += 1
    for j in range(d):  # each feature's held values, in the table's order
        if held[j] > k:
            continue
        m = 0
        for h in range(size):
            if table[j, h] == table[j, h]:
                values[j, m] = table[j, h]
                counts[j, m] = table_counts[j, h]
                m += 1


def distinct_counts(
    x: np.ndarray, weights: np.ndarray | None, k: int, first: int, table: np.ndarray,
    table_counts: np.ndarray, values: np.ndarray, counts: np.ndarray, held: np.ndarray,
) -> None:
    """Count the distinct finite values of the features ``first ..`` while each has at most ``k`` of them."""
    live = np.empty(held.size, dtype=np.int64)  # made here, not by numba's constructors (each costs a compile)
    _count_distinct(x, weights, k, first, table, table_counts, values, counts, held, live)
    # Sorted by NumPy, not in the compiled loop: numba's argsort took a second of the first call's compile.
    # The values are distinct, so any sort gives the one order.
    for j in np.flatnonzero(held <= k):
        order = np.argsort(values[j, : held[j]])
        values[j, : held[j]] = values[j, : held[j]][order]
        counts[j, : held[j]] = counts[j, : held[j]][order]


@_jit_nocheck_inline
def _grid_scales(step, scale):  # noqa: ANN001, ANN202
    """Fill ``scale`` with each feature's normal ``2**-step`` (0.0 where it is none); whether all are."""
    exact = True
    for j in range(step.size):
        scale[j] = math.ldexp(1.0, -step[j]) if -1022 <= -step[j] <= 1023 else 0.0
        exact &= scale[j] != 0.0
    return exact


@_jit_nocheck_inline
def _grid_slot(scaled, fin, first, start, width):  # noqa: ANN001, ANN202
    """Index in the flat grid counts (the feature's from ``start``) of a value scaled by ``2**-step``; -1 when not ``fin``."""
    b = np.int64(math.floor(_choose(fin, scaled, 0.0))) - first
    return _choose(fin, start + _least(_greatest(b, 0), width - 1), -1)


@_jit_nocheck
def grid_counts(x, weights, step, first, counts):  # noqa: ANN001, ANN201
    """Add every finite value of the chunk ``x`` (R, D) into its feature's dyadic grid ``counts`` (D, K)."""
    # Bin ``floor(v / 2**step) - first``: ldexp is exact, so every chunk and merge bins a value alike.
    # Times a normal 2**-step it is one correctly rounded product, the same number 3x faster than
    # libm's ldexp call (a third of the sketch's chunk); ldexp itself where 2**-step is no normal float.
    rows, n_features = x.shape
    width = counts.shape[1]
    scale = _empty(n_features, np.float64)
    # Every 2**-step a normal float (as a grid of finite data has): a row's bins in one branch-free
    # loop that vectorises, then its counts.
    exact = _grid_scales(step, scale)
    flat = _flat(counts)
    slot = _empty(n_features, np.int64)  # index in ``flat``; -1: NaN or ±inf
    for i in range(rows):
        w = _weight(weights, i)
        if exact:
            for j in range(n_features):
                v = _load(x[i, j])
                slot[j] = _grid_slot(v * scale[j], _finite(v), first[j], j * width, width)
        else:
            for j in range(n_features):
                v = _load(x[i, j])
                scaled = v * scale[j] if scale[j] != 0.0 else math.ldexp(v, -step[j])
                slot[j] = _grid_slot(scaled, _finite(v), first[j], j * width, width)
        for j in range(n_features):
            if slot[j] >= 0:
                flat[slot[j]] += w


@_jit_nocheck
def grid_tail_blocks(x, step, first, counts, b, g, fine, coarse):  # noqa: ANN001, ANN201
    """:func:`grid_counts` (unweighted, every ``2**-step`` normal) and :func:`~daskbatch.stats.kernels._numba_sketch.tail_blocks` in one read of ``x``."""
    # Each row is read once for both while it is in cache: the chunk (64 MB at 262,144 x 64 float32)
    # is not, and a second sweep of it cost the tails most of their time.
    rows, d = x.shape
    width = counts.shape[1]
    scale = _empty(d, np.float64)
    _grid_scales(step, scale)
    flat = _flat(counts)
    slot = _empty(d, np.int64)
    low, high, low2, high2 = _empty(d, np.float64), _empty(d, np.float64), _empty(d, np.float64), _empty(d, np.float64)
    _tail_start(low, high, low2, high2)
    for f in range(fine.shape[0]):
        for i in range(f * b, _least(f * b + b, rows)):
            # Two branch-free loops over the row (in L1 after the first), each of which vectorises.
            _tail_row(x, i, low, high, low2, high2)
            for j in range(d):
                v = _load(x[i, j])
                slot[j] = _grid_slot(v * scale[j], _finite(v), first[j], j * width, width)
            for j in range(d):
                if slot[j] >= 0:
                    flat[slot[j]] += 1
        _tail_block_end(f, g, low, high, low2, high2, fine, coarse)
