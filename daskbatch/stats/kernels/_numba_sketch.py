"""The compiled sketch loops: bucket keys (with a fast log), counting windows per feature, merging windows, and the kept tails."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from daskbatch.stats.kernels._numba import (
    _choose,
    _empty,
    _filled,
    _finite,
    _flat,
    _greatest,
    _jit,
    _jit_inline,
    _jit_nocheck,
    _jit_nocheck_inline,
    _least,
    _load,
    _weight,
    _zeros,
)


@_jit_inline
def _clamped_key(q, lo_key, hi_key):  # noqa: ANN001, ANN202
    """``ceil(q)`` clamped to ``[lo_key, hi_key]``, less ``lo_key`` (float64)."""
    key = np.ceil(q)
    key = _choose(key < hi_key, key, hi_key)
    return _choose(key > lo_key, key, lo_key) - lo_key


@_jit_inline
def _sketch_key(a, ln_gamma, lo_key, hi_key):  # noqa: ANN001, ANN202
    """Bucket key less ``lo_key`` of the magnitude ``a``, the expression of :meth:`daskbatch.stats.sketch.Sketch.slots`."""
    return _clamped_key(np.log(a) / ln_gamma, lo_key, hi_key)


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

#: Where :func:`sketch_counts` does not trust its fast key: a ``fast_log|v|`` within this much of a bucket
#: boundary ``k * ln_gamma``; 14 times :data:`FAST_LOG_ERROR` (``np.log`` errs below 1e-13), so outside it
#: both logs fall on the same side of every boundary. About ``2 * SKETCH_NEAR / ln_gamma`` of values land in it.
SKETCH_NEAR = 1e-8

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)


@_jit_nocheck_inline
def fast_log(a):  # noqa: ANN001, ANN201
    """``log a`` within :data:`FAST_LOG_ERROR` for a normal float64 ``a > 0``, without a call (it vectorises)."""
    b = _as_bits(a)
    e = np.float64((b >> 52) - 1023)
    m = _from_bits((b & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000)  # in [1, 2)
    up = m > _SQRT2
    m = _choose(up, m * 0.5, m)
    e = _choose(up, e + 1.0, e)
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    return e * _LN2 + t * (2.0 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9)))))


@_jit_inline
def _sketch_code(v, key, bucketed, n):  # noqa: ANN001, ANN202
    """Code of a value: its key (negative), ``n`` + key (positive), ``2n`` + 0..3 (-inf, zero or tiny, +inf, NaN)."""
    c = _choose(v > 0.0, key + n, key)
    c = _choose(bucketed, c, 2.0 * n + 1.0)
    c = _choose(v == np.inf, 2.0 * n + 2.0, c)
    c = _choose(v == -np.inf, 2.0 * n, c)
    c = _choose(v != v, 2.0 * n + 3.0, c)
    return np.int64(c)


@_jit_inline
def _sketch_shift(buf, by, w):  # noqa: ANN001, ANN202
    """Move the window's first key up by ``by``: counts move down ``by`` columns, those below column 0 add into it."""
    if by > 0:
        total = 0
        for i in range(_least(by + 1, w)):
            total += buf[i]
        for i in range(1, w - by):
            buf[i] = buf[i + by]
        buf[0] = total
        for i in range(_greatest(w - by, 1), w):
            buf[i] = 0
    elif by < 0:
        up = -by
        for i in range(w - 1, up - 1, -1):
            buf[i] = buf[i - up]
        for i in range(_least(up, w)):
            buf[i] = 0


@_jit_inline
def _sketch_rebase(buf, offset, collapsed, side, key, n, w, wi):  # noqa: ANN001, ANN202
    """Count ``key`` (add ``wi``), outside the window ``buf`` (first key ``offset[side]``): move the window to hold it."""
    # While a chunk is counted, a window that is not collapsed may sit anywhere
    # that holds its keys (centred on them, so that it rarely moves); when the
    # keys span more than ``w``, the window keeps the ``w`` keys up to the
    # largest and collapses the rest into its first bucket, for good.
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
    lo = _least(offset[side] + first, key)
    hi = _greatest(offset[side] + last, key)
    if hi - lo < w:
        new = lo - (w - (hi - lo + 1)) // 2
    else:
        new = hi - w + 1
        collapsed[side] = 1
    _sketch_shift(buf, new - offset[side], w)
    offset[side] = new
    buf[_greatest(key - new, 0)] += wi


# The windows' steps below are functions of their own, not copied into their callers: their
# arguments (codes, counts) do not depend on the input's dtype, so each compiles once per count
# dtype. Copied, they were compiled again into every input dtype's sketch_counts (3.2 s a
# signature, 1.3 s without them; benchmarks/RESULTS.md, session 24).
@_jit
def _sketch_add_row(code, counts, offset, collapsed, n, w, wi):  # noqa: ANN001, ANN202
    """Count one row's codes (:func:`_sketch_code`) into the windows, adding ``wi`` (its weight, or 1) for each."""
    # A key outside its window moves the window.
    for j in range(code.size):
        c = code[j]
        if c >= 2 * n:
            counts[j, 2 * w + c - 2 * n] += wi
            continue
        side = _choose(c >= n, 1, 0)
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
            by = _least(offset[j, side] + first, n - w) - offset[j, side]
            _sketch_shift(buf, by, w)
            offset[j, side] += by


@_jit
def sketch_counts_log(x, ln_gamma, min_magnitude, k_min, k_max, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """:func:`sketch_counts` with a log per value: the reference expression everywhere."""
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    code = _empty(d, np.int64)
    fmin = _filled(d, np.inf)
    fmax = _filled(d, -np.inf)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        for j in range(d):
            v = _load(x[i, j])
            a = abs(v)
            bucketed = (a >= min_magnitude) & (a < np.inf)
            key = _sketch_key(_choose(bucketed, a, 1.0), ln_gamma, lo_key, hi_key)
            code[j] = _sketch_code(v, key, bucketed, n)
            fin = _finite(v)
            fmin[j] = _choose(fin & (v < fmin[j]), v, fmin[j])
            fmax[j] = _choose(fin & (v > fmax[j]), v, fmax[j])
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin, fmax


@_jit_inline
def _sketch_top(c, o, j, side, w):  # noqa: ANN001, ANN202
    """Largest populated key of feature ``j``'s window ``side`` in counts ``c`` and offsets ``o``; -1 when empty."""
    last = w - 1
    while last >= 0 and c[j, side * w + last] == 0:
        last -= 1
    return _choose(last >= 0, o[j, side] + last, -1)


@_jit_inline
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
            out[j, base + _greatest(i + by, 0)] += c[j, base + i]


@_jit
def sketch_merge(ca, oa, cb, ob, n, w, out, offset):  # noqa: ANN001, ANN201
    """Merge two sketch states' counts ``ca``, ``cb`` (D, 2w + 4) and offsets ``oa``, ``ob`` (D, 2) into ``out``, ``offset``."""
    for j in range(ca.shape[0]):
        for side in range(2):
            hi = _greatest(_sketch_top(ca, oa, j, side, w), _sketch_top(cb, ob, j, side, w))
            if hi < 0:
                offset[j, side] = n
                continue
            new = _least(_greatest(_least(oa[j, side], ob[j, side]), hi - w + 1), n - w)
            offset[j, side] = new
            _sketch_merge_into(ca, oa, j, side, new, w, out)
            _sketch_merge_into(cb, ob, j, side, new, w, out)
        for i in range(2 * w, 2 * w + 4):
            out[j, i] = ca[j, i] + cb[j, i]


@_jit_nocheck_inline
def _recode_near(x, i, ln_gamma, inv_ln_gamma, min_magnitude, lo_key, hi_key, n, band, code):  # noqa: ANN001, ANN202
    """Key again with the reference log the values of row ``i`` within ``band`` keys of a boundary, into ``code``."""
    # Found again rather than marked in the vectorised loop, which would cost a store per value;
    # the band is twice that loop's, so that no value marked there can be missed.
    for j in range(x.shape[1]):
        v = _load(x[i, j])
        a = abs(v)
        q = fast_log(a) * inv_ln_gamma
        if (a >= min_magnitude) & (a < np.inf) & (abs(q - np.rint(q)) < band):
            key = np.int64(_sketch_key(a, ln_gamma, lo_key, hi_key))
            code[j] = _choose(v > 0.0, key + n, key)


@_jit_nocheck
def sketch_counts(x, ln_gamma, min_magnitude, k_min, k_max, n, w, counts, offset, collapsed, weights):  # noqa: ANN001, ANN201
    """Count every value into the sketch windows ``counts`` (D, 2w + 4) and ``offset`` (D, 2); give the finite extrema."""
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    inv_ln_gamma = 1.0 / ln_gamma
    near_keys = SKETCH_NEAR * inv_ln_gamma  # the band in units of keys
    code = _empty(d, np.int64)
    fmin = _filled(d, np.inf)
    fmax = _filled(d, -np.inf)
    _sketch_start(offset, collapsed, n)
    for i in range(rows):
        n_near = 0
        # Codes of one row, branch-free so that the loop vectorises ...
        for j in range(d):
            v = _load(x[i, j])
            a = abs(v)
            q = fast_log(a) * inv_ln_gamma
            bucketed = (a >= min_magnitude) & (a < np.inf)
            code[j] = _sketch_code(v, _clamped_key(q, lo_key, hi_key), bucketed, n)
            n_near += bucketed & (abs(q - np.rint(q)) < near_keys) & (a != 1.0)
            fin = _finite(v)
            fmin[j] = _choose(fin & (v < fmin[j]), v, fmin[j])
            fmax[j] = _choose(fin & (v > fmax[j]), v, fmax[j])
        # ... the rare values close to a boundary again, with the reference expression ...
        if n_near:
            _recode_near(x, i, ln_gamma, inv_ln_gamma, min_magnitude, lo_key, hi_key, n, 2.0 * near_keys, code)
        # ... then one increment per value into its window.
        _sketch_add_row(code, counts, offset, collapsed, n, w, _weight(weights, i))
    _sketch_finish(counts, offset, collapsed, n, w)
    return fmin, fmax


@_jit_nocheck
def sketch_counts_all(x, ln_gamma, min_magnitude, k_min, k_max, n, counts, offset, weights):  # noqa: ANN001, ANN201
    """:func:`sketch_counts` for a sketch that keeps every bucket (``w = n``): windows start at key 0 and never move."""
    rows, d = x.shape
    lo_key = float(k_min)
    hi_key = float(k_max)
    inv_ln_gamma = 1.0 / ln_gamma
    near_keys = SKETCH_NEAR * inv_ln_gamma  # the band in units of keys
    first = _empty(d, np.int64)  # first slot of every feature
    for j in range(d):
        first[j] = j * (2 * n + 4)
    flat = _flat(counts)
    code = _empty(d, np.int64)
    fmin = _filled(d, np.inf)
    fmax = _filled(d, -np.inf)
    # Bucketed values of each sign, counted in the vectorised loop: which windows hold any
    # (scanning the counts afterwards reads all 2n of them per feature).
    n_neg = _zeros(d, np.int64)
    n_pos = _zeros(d, np.int64)
    for i in range(rows):
        n_near = 0
        # Codes of one row (the code is the column here), branch-free so that it vectorises ...
        for j in range(d):
            v = _load(x[i, j])
            a = abs(v)
            q = fast_log(a) * inv_ln_gamma
            bucketed = (a >= min_magnitude) & (a < np.inf)
            code[j] = _sketch_code(v, _clamped_key(q, lo_key, hi_key), bucketed, n)
            n_neg[j] += bucketed & (v < 0.0)
            n_pos[j] += bucketed & (v > 0.0)
            n_near += bucketed & (abs(q - np.rint(q)) < near_keys) & (a != 1.0)
            fin = _finite(v)
            fmin[j] = _choose(fin & (v < fmin[j]), v, fmin[j])
            fmax[j] = _choose(fin & (v > fmax[j]), v, fmax[j])
        # ... the rare values close to a boundary again, with the reference expression ...
        if n_near:
            _recode_near(x, i, ln_gamma, inv_ln_gamma, min_magnitude, lo_key, hi_key, n, 2.0 * near_keys, code)
        # ... then one scattered increment per value (its row's weight with weights), at an
        # unsigned index, which needs no wraparound of negative indices.
        wi = _weight(weights, i)
        for j in range(d):
            flat[np.uint64(first[j] + code[j])] += wi
    for j in range(d):  # a window holding a value starts at key 0; an empty one is marked
        offset[j, 0] = _choose(n_neg[j] != 0, 0, n)
        offset[j, 1] = _choose(n_pos[j] != 0, 0, n)
    return fmin, fmax


@_jit_inline
def _heap_replace(h, j, v):  # noqa: ANN001, ANN202
    """Put ``v`` in place of the largest value of the max-heap ``h[j]`` and sift it down."""
    k = h.shape[1]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        if c + 1 < k and h[j, c + 1] > h[j, c]:
            c += 1
        if h[j, c] <= v:
            break
        h[j, i] = h[j, c]
        i = c
    h[j, i] = v



@_jit_inline
def _tail_row(x, i, low, high, low2, high2):  # noqa: ANN001, ANN202
    """Take row ``i`` into the two least and two greatest finite values of each column of ``x`` so far."""
    # The greatest of x, not the least of -x: negated once a block (exactly, and ties kept alike: min
    # and max keep their first argument on a tie). The loop's body is written out, not a helper of
    # its own per value: numba's inlining of one that takes arrays kept the loop from vectorising
    # (3.5x its time; benchmarks/RESULTS.md, session 25).
    for j in range(x.shape[1]):  # branch-free, so that it vectorises
        v = _load(x[i, j])
        fin = _finite(v)
        u = v if fin else np.inf
        low2[j] = _least(low2[j], _greatest(low[j], u))
        low[j] = _least(low[j], u)
        u = v if fin else -np.inf
        high2[j] = _greatest(high2[j], _least(high[j], u))
        high[j] = _greatest(high[j], u)


@_jit_inline
def _tail_block_end(f, g, low, high, low2, high2, fine, coarse):  # noqa: ANN001, ANN202
    """Store block ``f``'s least values of ``x`` and ``-x`` in ``fine`` and ``coarse``, and start the next block's."""
    d = low.size
    for j in range(d):
        fine[f, j], fine[f, d + j] = low[j], -high[j]
        fine[f, 2 * d + j], fine[f, 3 * d + j] = low2[j], -high2[j]
        coarse[f // g, j] = _least(coarse[f // g, j], low[j])
        coarse[f // g, d + j] = _least(coarse[f // g, d + j], -high[j])
    _tail_start(low, high, low2, high2)


@_jit_inline
def _tail_start(low, high, low2, high2):  # noqa: ANN001, ANN202
    """Start a block: no values yet (least +inf, greatest -inf)."""
    for j in range(low.size):
        low[j], high[j], low2[j], high2[j] = np.inf, -np.inf, np.inf, -np.inf


@_jit
def tail_blocks(x, b, g, fine, coarse):  # noqa: ANN001, ANN201
    """Per block of ``b`` rows, the least and second least finite values of the 2D columns ``x``, ``-x``."""
    # fine (blocks, 4D): each block's least of every column, then its second least; coarse
    # (blocks / g, 2D), filled with +inf, the least over each g blocks. +inf where there are none.
    rows, d = x.shape
    low, high, low2, high2 = _empty(d, np.float64), _empty(d, np.float64), _empty(d, np.float64), _empty(d, np.float64)
    _tail_start(low, high, low2, high2)
    for f in range(fine.shape[0]):
        for i in range(f * b, _least(f * b + b, rows)):
            _tail_row(x, i, low, high, low2, high2)
        _tail_block_end(f, g, low, high, low2, high2, fine, coarse)


@_jit
def tail_candidates(x, b, fine, scan, cand, n_cand):  # noqa: ANN001, ANN201
    """Append to ``cand[c]`` the finite values of column c below ``scan[c]``, counted in ``n_cand[c]`` past its end."""
    # A block's least value (tail_blocks) is appended as such when its second is not below the bound.
    rows, d = x.shape
    w, room = scan.size, cand.shape[1]
    # Block by block, so that its rows stay in cache for every column.
    for f in range(fine.shape[0]):
        for c in range(w):
            t = scan[c]
            if fine[f, c] < t:
                n = n_cand[c]
                if fine[f, w + c] < t:
                    sign = 1.0 if c < d else -1.0
                    for i in range(f * b, _least(f * b + b, rows)):
                        u = sign * _load(x[i, c % d])
                        if _finite(u) & (u < t):
                            if n < room:
                                cand[c, n] = u
                            n += 1
                else:
                    if n < room:
                        cand[c, n] = fine[f, c]
                    n += 1
                n_cand[c] = n


@_jit
def tail_replay(x, b, h, c, fine):  # noqa: ANN001, ANN201
    """Fill the max-heap ``h[c]`` with the k least finite values of column c (see :func:`tail_blocks`), offered in row order."""
    # As the heaps always were filled (which of 0.0 and -0.0 stays depends on it); a block whose
    # least value is not below the heap's top holds none that enters it.
    d = x.shape[1]
    sign = 1.0 if c < d else -1.0
    for q in range(h.shape[1]):
        h[c, q] = np.inf
    for f in range(fine.shape[0]):
        if fine[f, c] < h[c, 0]:
            for i in range(f * b, _least(f * b + b, x.shape[0])):
                u = sign * _load(x[i, c % d])
                if _finite(u) & (u < h[c, 0]):
                    _heap_replace(h, c, u)
