"""The compiled per-chunk moments: of every feature and of every (feature, class), with or without row weights."""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import BLOCK, _finite, _fourth_power, _jit, _load, _weight

#: After a block whose fast try found more than a quarter of its columns non-finite,
#: this many blocks run masked at once before the next try (data with NaN everywhere
#: would otherwise pay for both loops in every block).
_RETRY = 32


@_jit
def _moments_block_masked(  # noqa: ANN202
    x, lut, weights, shift, i0, i1, j0, j1, part, wpart, count, nan, posinf, fmin, fmax  # noqa: ANN001
):
    """Columns ``j0:j1`` of rows ``i0:i1``, with the finite test: ``part`` and ``wpart`` from zero; the rest updated."""
    for j in range(j0, j1):
        part[j] = 0.0
        wpart[j] = 0.0
    for i in range(i0, i1):
        wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
        for j in range(j0, j1):
            v = _load(x[i, j], lut)
            fin = _finite(v)
            part[j] += wi * (v - shift[j]) if fin else 0.0
            wpart[j] += wi if fin else 0.0
            count[j] += fin
            nan[j] += v != v
            posinf[j] += v == np.inf
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]


@_jit
def _moments_block_fast(x, lut, weights, shift, i0, i1, part, bmin, bmax):  # noqa: ANN001, ANN202
    """Rows ``i0:i1`` without the finite test: ``part`` and the block's ``bmin``/``bmax`` from scratch."""
    part[:] = 0.0
    bmin[:] = np.inf
    bmax[:] = -np.inf
    d = part.shape[0]
    # Four rows per sweep of the columns: each column's sum still adds them one by one in
    # row order, but loads and stores its partial sums once instead of four times.
    i = i0
    while i + 4 <= i1:
        wa, wb, wc, wd = _weight(weights, i), _weight(weights, i + 1), _weight(weights, i + 2), _weight(weights, i + 3)
        for j in range(d):
            s, p, lo, hi = shift[j], part[j], bmin[j], bmax[j]
            v = _load(x[i, j], lut)
            p += wa * (v - s)
            lo = v if v < lo else lo
            hi = v if v > hi else hi
            v = _load(x[i + 1, j], lut)
            p += wb * (v - s)
            lo = v if v < lo else lo
            hi = v if v > hi else hi
            v = _load(x[i + 2, j], lut)
            p += wc * (v - s)
            lo = v if v < lo else lo
            hi = v if v > hi else hi
            v = _load(x[i + 3, j], lut)
            p += wd * (v - s)
            part[j] = p
            bmin[j] = v if v < lo else lo
            bmax[j] = v if v > hi else hi
        i += 4
    for r in range(i, i1):
        wi = _weight(weights, r)
        for j in range(d):
            v = _load(x[r, j], lut)
            part[j] += wi * (v - shift[j])
            bmin[j] = v if v < bmin[j] else bmin[j]
            bmax[j] = v if v > bmax[j] else bmax[j]


@_jit
def _moments_block_clean(x, lut, weights, shift, approx_mean, i0, i1, p1, p2, p3, p4):  # noqa: ANN001, ANN202
    """Pass 2 on rows ``i0:i1`` with no NaN or infinity, without the finite test; ``p1`` … ``p4`` updated."""
    d = p1.shape[0]
    # Two rows per sweep of the columns, added one after the other (the same order as row by row).
    i = i0
    while i + 2 <= i1:
        wa, wb = _weight(weights, i), _weight(weights, i + 1)
        for j in range(d):
            da = (_load(x[i, j], lut) - shift[j]) - approx_mean[j]
            db = (_load(x[i + 1, j], lut) - shift[j]) - approx_mean[j]
            wda = wa * da
            wdb = wb * db
            p1[j] = (p1[j] + wda) + wdb
            p2[j] = (p2[j] + wda * da) + wdb * db
            p3[j] = (p3[j] + wda * da * da) + wdb * db * db
            p4[j] = (p4[j] + _fourth_power(weights, wda, da)) + _fourth_power(weights, wdb, db)
        i += 2
    for r in range(i, i1):
        wi = _weight(weights, r)
        for j in range(d):
            dev = (_load(x[r, j], lut) - shift[j]) - approx_mean[j]
            wdev = wi * dev
            p1[j] += wdev
            p2[j] += wdev * dev
            p3[j] += wdev * dev * dev
            p4[j] += _fourth_power(weights, wdev, dev)


@_jit
def _moments_pass1(x, lut, weights, shift):  # noqa: ANN001, ANN202
    """Pass 1 of :func:`moments_chunk`: the block sums of ``x - shift`` and the counts; also which blocks were clean."""
    rows, d = x.shape
    n_blocks = (rows + BLOCK - 1) // BLOCK
    count = np.zeros(d, dtype=np.int64)
    nan = np.zeros(d, dtype=np.int64)
    posinf = np.zeros(d, dtype=np.int64)
    fmin = np.full(d, np.inf)
    fmax = np.full(d, -np.inf)
    wsum = np.zeros(d)
    total = np.zeros(d)
    part = np.zeros(d)
    wpart = np.zeros(d)
    bmin = np.empty(d)
    bmax = np.empty(d)
    clean = np.zeros(n_blocks, dtype=np.bool_)
    wait = 0
    for b in range(n_blocks):
        i0 = b * BLOCK
        i1 = min(i0 + BLOCK, rows)
        bad = d
        if wait == 0:
            _moments_block_fast(x, lut, weights, shift, i0, i1, part, bmin, bmax)
            bad = 0
            for j in range(d):
                bad += not _finite(part[j])
            if 4 * bad > d:
                wait = _RETRY
        if 4 * bad <= d:
            # The block's weight sum, added in row order from 0.0 as the masked loop adds it per column.
            w = 0.0
            for i in range(i0, i1):
                w += _weight(weights, i)
            for j in range(d):
                if _finite(part[j]):
                    wpart[j] = w
                    count[j] += i1 - i0
                    fmin[j] = bmin[j] if bmin[j] < fmin[j] else fmin[j]  # ties keep the earlier value, as row by row
                    fmax[j] = bmax[j] if bmax[j] > fmax[j] else fmax[j]
                else:  # a few columns: again with the finite test
                    _moments_block_masked(
                        x, lut, weights, shift, i0, i1, j, j + 1, part, wpart, count, nan, posinf, fmin, fmax
                    )
        else:
            _moments_block_masked(x, lut, weights, shift, i0, i1, np.int64(0), d, part, wpart, count, nan, posinf, fmin, fmax)
            wait -= 1
        clean[b] = bad == 0
        for j in range(d):
            total[j] += part[j]
            wsum[j] += wpart[j]
    return count, wsum, total, nan, posinf, fmin, fmax, clean


@_jit
def moments_chunk(x, lut, weights):  # noqa: ANN001, ANN201
    """Per-column sums of a chunk for the corrected two-pass moments."""
    rows, d = x.shape
    shift = np.zeros(d)
    for j in range(d):
        for i in range(rows):
            v = _load(x[i, j], lut)
            if _finite(v):
                shift[j] = v
                break

    count, wsum, total, nan, posinf, fmin, fmax, clean = _moments_pass1(x, lut, weights, shift)
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
    for b in range(clean.shape[0]):
        i0 = b * BLOCK
        p1[:] = 0.0
        p2[:] = 0.0
        p3[:] = 0.0
        p4[:] = 0.0
        if clean[b]:  # every value finite: the same deviations without the test
            _moments_block_clean(x, lut, weights, shift, approx_mean, i0, min(i0 + BLOCK, rows), p1, p2, p3, p4)
        else:
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
def _class_block_masked(x, lut, weights, codes, i0, i1, j0, j1, count, shift, total):  # noqa: ANN001, ANN202
    """Columns ``j0:j1`` of rows ``i0:i1`` into the running sums, with the finite test."""
    # Branch-free (a non-finite value adds 0.0, which leaves every sum as it was): the loop
    # over the columns of one row vectorises. Indexed in two dimensions, not through row
    # views (shift[k]): a view per row costs a reference count increment and decrement.
    for i in range(i0, i1):
        k = codes[i]
        wi = _weight(weights, i)
        for j in range(j0, j1):
            v = _load(x[i, j], lut)
            fin = _finite(v)
            total[k, j] += (v - shift[k, j]) * wi if fin else 0.0
            count[k, j] += fin * wi


@_jit
def _class_block_fast(x, lut, weights, codes, i0, i1, count, shift, total, rows_of):  # noqa: ANN001, ANN202
    """Rows ``i0:i1`` into the running sums without the finite test; ``rows_of`` counts each class's rows."""
    d = x.shape[1]
    rows_of[:] = 0
    for i in range(i0, i1):
        k = codes[i]
        wi = _weight(weights, i)
        rows_of[k] += 1
        for j in range(d):
            total[k, j] += (_load(x[i, j], lut) - shift[k, j]) * wi
            if weights is not None:  # pruned at compile time: weighted counts are running float sums
                count[k, j] += wi


@_jit
def _copy_sums(total, count, to_total, to_count, with_count):  # noqa: ANN001, ANN202
    """Copy ``total`` (and ``count`` when ``with_count``) into ``to_*`` element by element."""
    # Loops, not `to_total[:] = total`: numba's array assignment compiles a shape-mismatch
    # error message (string formatting) that took 3-4 s of the first call's compile.
    for k in range(total.shape[0]):
        for j in range(total.shape[1]):
            to_total[k, j] = total[k, j]
            if with_count:
                to_count[k, j] = count[k, j]


@_jit
def _class_pass1(x, lut, weights, codes, count, shift, total):  # noqa: ANN001, ANN202
    """Pass 1 of :func:`class_moments_chunk` in blocks of rows; which blocks were clean."""
    rows, d = x.shape
    n_classes = count.shape[0]
    n_blocks = (rows + BLOCK - 1) // BLOCK
    clean = np.zeros(n_blocks, dtype=np.bool_)
    # The sums before the block: a column with a non-finite value starts again from them.
    saved_total = np.empty_like(total)
    saved_count = np.empty_like(count)
    rows_of = np.zeros(n_classes, dtype=np.int64)
    bad_column = np.zeros(d, dtype=np.bool_)
    wait = 0
    for b in range(n_blocks):
        i0 = b * BLOCK
        i1 = min(i0 + BLOCK, rows)
        bad = d
        if wait == 0:
            _copy_sums(total, count, saved_total, saved_count, weights is not None)
            _class_block_fast(x, lut, weights, codes, i0, i1, count, shift, total, rows_of)
            bad = 0
            for j in range(d):
                bad_column[j] = False
                for k in range(n_classes):
                    bad_column[j] |= not _finite(total[k, j])
                bad += bad_column[j]
            if 4 * bad > d:
                wait = _RETRY
                _copy_sums(saved_total, saved_count, total, count, weights is not None)
        if 4 * bad <= d:
            for j in range(d):
                if bad_column[j]:  # a few columns: again with the finite test
                    for k in range(n_classes):
                        total[k, j] = saved_total[k, j]
                        if weights is not None:
                            count[k, j] = saved_count[k, j]
                    _class_block_masked(x, lut, weights, codes, i0, i1, j, j + 1, count, shift, total)
                elif weights is None:
                    for k in range(n_classes):
                        count[k, j] += rows_of[k]
        else:
            _class_block_masked(x, lut, weights, codes, i0, i1, np.int64(0), d, count, shift, total)
            wait -= 1
        clean[b] = bad == 0
    return clean


@_jit
def class_moments_chunk(x, lut, codes, count, shift, total, s1, s2, weights):  # noqa: ANN001, ANN201
    """Per-(class, column) sums of a chunk for the corrected two-pass class moments."""
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
    clean = _class_pass1(x, lut, weights, codes, count, shift, total)
    mean = np.empty((n_classes, d))
    for k in range(n_classes):
        for j in range(d):
            c = count[k, j]
            mean[k, j] = total[k, j] / (c if c > 0 else 1)
    for b in range(clean.shape[0]):
        i0 = b * BLOCK
        if clean[b]:  # every value finite: the same deviations without the test
            for i in range(i0, min(i0 + BLOCK, rows)):
                k = codes[i]
                wi = _weight(weights, i)
                for j in range(d):
                    dev = (_load(x[i, j], lut) - shift[k, j]) - mean[k, j]
                    s1[k, j] += dev * wi
                    s2[k, j] += dev * dev * wi
        else:
            for i in range(i0, min(i0 + BLOCK, rows)):
                k = codes[i]
                wi = _weight(weights, i)
                for j in range(d):
                    v = _load(x[i, j], lut)
                    dev = ((v - shift[k, j]) - mean[k, j]) if _finite(v) else 0.0
                    s1[k, j] += dev * wi
                    s2[k, j] += dev * dev * wi
