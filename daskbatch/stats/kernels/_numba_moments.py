"""The compiled per-chunk moments: of every feature and of every (feature, class), with or without row weights."""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import (
    BLOCK,
    _choose,
    _empty,
    _finite,
    _fourth_power,
    _greatest,
    _jit,
    _jit_inline,
    _least,
    _load,
    _weight,
    _zeros,
    finite_first_row,
)

#: After a block whose fast try found more than a quarter of its columns non-finite,
#: this many blocks run masked at once before the next try (data with NaN everywhere
#: would otherwise pay for both loops in every block).
_RETRY = 32

#: Rows at the head of a chunk in which class_moments_chunk looks for each class's first row before any scan.
_HEAD_ROWS = 4096


@_jit
def _moments_block_masked(  # noqa: ANN202
    x, weights, shift, i0, i1, j0, j1, part, wpart, count, nan, posinf, fmin, fmax  # noqa: ANN001
):
    """Columns ``j0:j1`` of rows ``i0:i1``, with the finite test: ``part`` and ``wpart`` from zero; the rest updated."""
    for j in range(j0, j1):
        part[j] = 0.0
        wpart[j] = 0.0
    for i in range(i0, i1):
        wi = _weight(weights, i)  # the literal 1 without weights: 1 * v is v, bit for bit
        for j in range(j0, j1):
            v = _load(x[i, j])
            fin = _finite(v)
            # Conditional expressions, not _choose: as selects this loop ran 7 % slower (data with NaN only).
            part[j] += wi * (v - shift[j]) if fin else 0.0
            wpart[j] += wi if fin else 0.0
            count[j] += fin
            nan[j] += v != v
            posinf[j] += v == np.inf
            fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
            fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]


@_jit_inline
def _moments_block_fast(x, weights, shift, i0, i1, part, bmin, bmax):  # noqa: ANN001, ANN202
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
            v = _load(x[i, j])
            p += wa * (v - s)
            lo = _least(lo, v)
            hi = _greatest(hi, v)
            v = _load(x[i + 1, j])
            p += wb * (v - s)
            lo = _least(lo, v)
            hi = _greatest(hi, v)
            v = _load(x[i + 2, j])
            p += wc * (v - s)
            lo = _least(lo, v)
            hi = _greatest(hi, v)
            v = _load(x[i + 3, j])
            p += wd * (v - s)
            part[j] = p
            bmin[j] = _least(lo, v)
            bmax[j] = _greatest(hi, v)
        i += 4
    for r in range(i, i1):
        wi = _weight(weights, r)
        for j in range(d):
            v = _load(x[r, j])
            part[j] += wi * (v - shift[j])
            bmin[j] = _least(bmin[j], v)
            bmax[j] = _greatest(bmax[j], v)


@_jit_inline
def _moments_block_clean(x, weights, shift, approx_mean, i0, i1, p1, p2, p3, p4):  # noqa: ANN001, ANN202
    """Pass 2 on rows ``i0:i1`` with no NaN or infinity, without the finite test; ``p1`` … ``p4`` updated."""
    d = p1.shape[0]
    # Two rows per sweep of the columns, added one after the other (the same order as row by row).
    i = i0
    while i + 2 <= i1:
        wa, wb = _weight(weights, i), _weight(weights, i + 1)
        for j in range(d):
            da = (_load(x[i, j]) - shift[j]) - approx_mean[j]
            db = (_load(x[i + 1, j]) - shift[j]) - approx_mean[j]
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
            dev = (_load(x[r, j]) - shift[j]) - approx_mean[j]
            wdev = wi * dev
            p1[j] += wdev
            p2[j] += wdev * dev
            p3[j] += wdev * dev * dev
            p4[j] += _fourth_power(weights, wdev, dev)


@_jit
def _moments_shift(x, shift):  # noqa: ANN001, ANN202
    """The first finite value of each column into ``shift`` (left 0.0 where there is none)."""
    rows, d = x.shape
    for j in range(d):
        for i in range(rows):
            v = _load(x[i, j])
            if _finite(v):
                shift[j] = v
                break


@_jit
def _moments_pass1_clean(x, weights, shift, count, wsum, total, fmin, fmax, part, bmin, bmax):  # noqa: ANN001, ANN202
    """Pass 1 over the leading blocks without NaN or infinity; give the first block that has one (or the count of blocks)."""
    # Stops before it changes anything for that block: _moments_pass1 goes on from it, as if it had run from the start.
    rows, d = x.shape
    n_blocks = (rows + BLOCK - 1) // BLOCK
    for b in range(n_blocks):
        i0 = b * BLOCK
        i1 = _least(i0 + BLOCK, rows)
        _moments_block_fast(x, weights, shift, i0, i1, part, bmin, bmax)
        for j in range(d):
            if not _finite(part[j]):
                return b
        # The block's weight sum, added in row order from 0.0 as the masked loop adds it per column.
        w = 0.0
        for i in range(i0, i1):
            w += _weight(weights, i)
        for j in range(d):
            count[j] += i1 - i0
            fmin[j] = _least(fmin[j], bmin[j])  # ties keep the earlier value, as row by row
            fmax[j] = _greatest(fmax[j], bmax[j])
            total[j] += part[j]
            wsum[j] += w
    return n_blocks


@_jit
def _moments_pass1(x, weights, shift, first, count, wsum, total, nan, posinf, fmin, fmax, clean, part, wpart, bmin, bmax):  # noqa: ANN001, ANN202, E501
    """Pass 1 of :func:`moments_chunk` from block ``first`` on, where a block has NaN or infinity; marks the clean blocks."""
    rows, d = x.shape
    n_blocks = clean.shape[0]
    wait = 0
    for b in range(first, n_blocks):
        i0 = b * BLOCK
        i1 = _least(i0 + BLOCK, rows)
        bad = d
        if wait == 0:
            _moments_block_fast(x, weights, shift, i0, i1, part, bmin, bmax)
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
                    fmin[j] = _least(fmin[j], bmin[j])  # ties keep the earlier value, as row by row
                    fmax[j] = _greatest(fmax[j], bmax[j])
                else:  # a few columns: again with the finite test
                    _moments_block_masked(
                        x, weights, shift, i0, i1, j, j + 1, part, wpart, count, nan, posinf, fmin, fmax
                    )
        else:
            _moments_block_masked(x, weights, shift, i0, i1, np.int64(0), d, part, wpart, count, nan, posinf, fmin, fmax)
            wait -= 1
        clean[b] = bad == 0
        for j in range(d):
            total[j] += part[j]
            wsum[j] += wpart[j]


@_jit
def _moments_pass2_clean(x, weights, shift, approx_mean, s1, s2, s3, s4, p1, p2, p3, p4):  # noqa: ANN001, ANN202
    """Pass 2 of :func:`moments_chunk` on a chunk without NaN or infinity: ``s1`` … ``s4`` updated."""
    rows, d = x.shape
    for i0 in range(0, rows, BLOCK):
        p1[:] = 0.0
        p2[:] = 0.0
        p3[:] = 0.0
        p4[:] = 0.0
        _moments_block_clean(x, weights, shift, approx_mean, i0, _least(i0 + BLOCK, rows), p1, p2, p3, p4)
        for j in range(d):
            s1[j] += p1[j]
            s2[j] += p2[j]
            s3[j] += p3[j]
            s4[j] += p4[j]


@_jit
def _moments_pass2(x, weights, shift, approx_mean, clean, s1, s2, s3, s4):  # noqa: ANN001, ANN202
    """Pass 2 of :func:`moments_chunk` on a chunk with NaN or infinity: the clean blocks as there, the rest masked."""
    rows, d = x.shape
    # Made here, not passed in: LLVM then knows that they alias nothing, and the masked loop
    # below vectorises (passed in, it ran 15-25 % slower). Compiled only for chunks with NaN or inf.
    p1 = _zeros(d, np.float64)
    p2 = _zeros(d, np.float64)
    p3 = _zeros(d, np.float64)
    p4 = _zeros(d, np.float64)
    for b in range(clean.shape[0]):
        i0 = b * BLOCK
        p1[:] = 0.0
        p2[:] = 0.0
        p3[:] = 0.0
        p4[:] = 0.0
        if clean[b]:  # every value finite: the same deviations without the test
            _moments_block_clean(x, weights, shift, approx_mean, i0, _least(i0 + BLOCK, rows), p1, p2, p3, p4)
        else:
            for i in range(i0, _least(i0 + BLOCK, rows)):
                wi = _weight(weights, i)
                for j in range(d):
                    v = _load(x[i, j])
                    dev = _choose(_finite(v), (v - shift[j]) - approx_mean[j], 0.0)
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


def _pass1(x: np.ndarray, weights: np.ndarray | None, shift: np.ndarray) -> tuple[np.ndarray, ...]:
    """Pass 1 of :func:`moments_chunk`: the block sums of ``x - shift`` and the counts; also which blocks were clean."""
    rows, d = x.shape
    n_blocks = (rows + BLOCK - 1) // BLOCK
    count, nan, posinf = np.zeros((3, d), dtype=np.int64)
    wsum, total, part, wpart = np.zeros((4, d))
    bmin, bmax = np.empty((2, d))
    fmin, fmax = np.full(d, np.inf), np.full(d, -np.inf)
    clean = np.ones(n_blocks, dtype=np.bool_)
    first = _moments_pass1_clean(x, weights, shift, count, wsum, total, fmin, fmax, part, bmin, bmax)
    if first < n_blocks:  # the loops with the finite test compile only for a chunk that needs them
        _moments_pass1(x, weights, shift, first, count, wsum, total, nan, posinf, fmin, fmax, clean, part, wpart,
                       bmin, bmax)
    return count, wsum, total, nan, posinf, fmin, fmax, clean


def moments_chunk(x: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Per-column sums of a chunk for the corrected two-pass moments."""
    # Arrays made here, not in compiled code: each array constructor numba compiles costs the first call
    # ~0.05 s. The loops for NaN and infinity compile only when a chunk has them.
    d = x.shape[1]
    shift = finite_first_row(x)
    if shift is None:
        shift = np.zeros(d)
        _moments_shift(x, shift)
    count, wsum, total, nan, posinf, fmin, fmax, clean = _pass1(x, weights, shift)
    # As the compiled loop had it: 0.0 where nothing counted (NaN weights included).
    approx_mean = np.where(wsum > 0, total / np.where(wsum > 0, wsum, 1.0), 0.0)
    s1, s2, s3, s4 = np.zeros((4, d))
    if clean.all():
        p1, p2, p3, p4 = np.zeros((4, d))
        _moments_pass2_clean(x, weights, shift, approx_mean, s1, s2, s3, s4, p1, p2, p3, p4)
    else:
        _moments_pass2(x, weights, shift, approx_mean, clean, s1, s2, s3, s4)
    return count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf


@_jit
def _class_block_masked(x, weights, codes, i0, i1, j0, j1, count, shift, total):  # noqa: ANN001, ANN202
    """Columns ``j0:j1`` of rows ``i0:i1`` into the running sums, with the finite test."""
    # Branch-free (a non-finite value adds 0.0, which leaves every sum as it was): the loop
    # over the columns of one row vectorises. Indexed in two dimensions, not through row
    # views (shift[k]): a view per row costs a reference count increment and decrement.
    for i in range(i0, i1):
        k = codes[i]
        wi = _weight(weights, i)
        for j in range(j0, j1):
            v = _load(x[i, j])
            fin = _finite(v)
            total[k, j] += _choose(fin, (v - shift[k, j]) * wi, 0.0)
            count[k, j] += fin * wi


@_jit_inline
def _class_block_fast(x, weights, codes, i0, i1, count, shift, total, rows_of):  # noqa: ANN001, ANN202
    """Rows ``i0:i1`` into the running sums without the finite test; ``rows_of`` counts each class's rows."""
    d = x.shape[1]
    rows_of[:] = 0
    for i in range(i0, i1):
        k = codes[i]
        wi = _weight(weights, i)
        rows_of[k] += 1
        for j in range(d):
            total[k, j] += (_load(x[i, j]) - shift[k, j]) * wi
            if weights is not None:  # pruned at compile time: weighted counts are running float sums
                count[k, j] += wi


@_jit_inline
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
def _class_shift(x, codes, shift, found, missing):  # noqa: ANN001, ANN202
    """The first finite value of each (class, column) into ``shift``; ``found`` and ``missing`` from False and D."""
    # A scan that stops once all are found (rows of a class already done cost one compare),
    # so usually after a few rows.
    rows, d = x.shape
    left = found.size
    for i in range(rows):
        if left == 0:
            break
        k = codes[i]
        if missing[k] == 0:
            continue
        for j in range(d):
            v = _load(x[i, j])
            if not found[k, j] and _finite(v):
                found[k, j] = True
                shift[k, j] = v
                missing[k] -= 1
                left -= 1


@_jit
def _class_pass1_clean(x, weights, codes, count, shift, total, saved_total, saved_count, rows_of):  # noqa: ANN001, ANN202
    """Pass 1 over the leading blocks without NaN or infinity; give the first block that has one (or the count of blocks)."""
    # That block's sums are put back: _class_pass1 goes on from it, as if it had run from the start.
    rows, d = x.shape
    n_classes = count.shape[0]
    n_blocks = (rows + BLOCK - 1) // BLOCK
    for b in range(n_blocks):
        i0 = b * BLOCK
        _copy_sums(total, count, saved_total, saved_count, weights is not None)
        _class_block_fast(x, weights, codes, i0, _least(i0 + BLOCK, rows), count, shift, total, rows_of)
        for j in range(d):
            for k in range(n_classes):
                if not _finite(total[k, j]):
                    _copy_sums(saved_total, saved_count, total, count, weights is not None)
                    return b
        if weights is None:
            for j in range(d):
                for k in range(n_classes):
                    count[k, j] += rows_of[k]
    return n_blocks


@_jit
def _class_pass1(x, weights, codes, first, count, shift, total, saved_total, saved_count, rows_of, clean):  # noqa: ANN001, ANN202
    """Pass 1 of :func:`class_moments_chunk` from block ``first`` on, where a block has NaN or infinity; marks the clean blocks."""
    rows, d = x.shape
    n_classes = count.shape[0]
    # The sums before the block: a column with a non-finite value starts again from them.
    bad_column = _zeros(d, np.bool_)
    wait = 0
    for b in range(first, clean.shape[0]):
        i0 = b * BLOCK
        i1 = _least(i0 + BLOCK, rows)
        bad = d
        if wait == 0:
            _copy_sums(total, count, saved_total, saved_count, weights is not None)
            _class_block_fast(x, weights, codes, i0, i1, count, shift, total, rows_of)
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
                    _class_block_masked(x, weights, codes, i0, i1, j, j + 1, count, shift, total)
                elif weights is None:
                    for k in range(n_classes):
                        count[k, j] += rows_of[k]
        else:
            _class_block_masked(x, weights, codes, i0, i1, np.int64(0), d, count, shift, total)
            wait -= 1
        clean[b] = bad == 0


@_jit_inline
def _class_block_clean(x, weights, codes, shift, mean, i0, i1, s1, s2):  # noqa: ANN001, ANN202
    """Pass 2 on rows ``i0:i1`` with no NaN or infinity, without the finite test: ``s1``, ``s2`` updated."""
    for i in range(i0, i1):
        k = codes[i]
        wi = _weight(weights, i)
        for j in range(x.shape[1]):
            dev = (_load(x[i, j]) - shift[k, j]) - mean[k, j]
            s1[k, j] += dev * wi
            s2[k, j] += dev * dev * wi


@_jit
def _class_pass2_clean(x, weights, codes, shift, mean, s1, s2):  # noqa: ANN001, ANN202
    """Pass 2 of :func:`class_moments_chunk` on a chunk without NaN or infinity: ``s1``, ``s2`` updated."""
    _class_block_clean(x, weights, codes, shift, mean, 0, x.shape[0], s1, s2)


@_jit
def _class_pass2(x, weights, codes, shift, count, total, clean, s1, s2):  # noqa: ANN001, ANN202
    """Pass 2 of :func:`class_moments_chunk` on a chunk with NaN or infinity: the clean blocks as there, the rest masked."""
    rows, d = x.shape
    # The means made here, not passed in: LLVM then knows that they alias nothing (see _moments_pass2).
    n_classes = count.shape[0]
    mean = _empty((n_classes, d), np.float64)
    for k in range(n_classes):
        for j in range(d):
            c = count[k, j]
            mean[k, j] = total[k, j] / _choose(c > 0, c, 1)
    for b in range(clean.shape[0]):
        i0 = b * BLOCK
        if clean[b]:  # every value finite: the same deviations without the test
            _class_block_clean(x, weights, codes, shift, mean, i0, _least(i0 + BLOCK, rows), s1, s2)
        else:
            for i in range(i0, _least(i0 + BLOCK, rows)):
                k = codes[i]
                wi = _weight(weights, i)
                for j in range(d):
                    v = _load(x[i, j])
                    dev = _choose(_finite(v), (v - shift[k, j]) - mean[k, j], 0.0)
                    s1[k, j] += dev * wi
                    s2[k, j] += dev * dev * wi


def _class_pass1_blocks(
    x: np.ndarray, weights: np.ndarray | None, codes: np.ndarray, count: np.ndarray,
    shift: np.ndarray, total: np.ndarray,
) -> np.ndarray:
    """Pass 1 of :func:`class_moments_chunk` into ``count`` and ``total``; give which blocks were clean."""
    n_classes = count.shape[0]
    n_blocks = (x.shape[0] + BLOCK - 1) // BLOCK
    saved_total, saved_count = np.empty_like(total), np.empty_like(count)
    rows_of = np.zeros(n_classes, dtype=np.int64)
    clean = np.ones(n_blocks, dtype=np.bool_)
    first = _class_pass1_clean(x, weights, codes, count, shift, total, saved_total, saved_count, rows_of)
    if first < n_blocks:  # the loops with the finite test compile only for a chunk that needs them
        _class_pass1(x, weights, codes, first, count, shift, total, saved_total, saved_count, rows_of, clean)
    return clean


def _classes_first_rows(x: np.ndarray, codes: np.ndarray, shift: np.ndarray) -> bool:
    """Each class's first row into ``shift`` when the first :data:`_HEAD_ROWS` rows hold every class and those rows are finite; whether they did."""
    # Usually so: then they are each (class, column)'s first finite values, with no scan to compile (as
    # finite_first_row for the moments).
    n_classes = shift.shape[0]
    present, first = np.unique(codes[:_HEAD_ROWS], return_index=True)
    if present.size != n_classes or (n_classes and (present[0] != 0 or present[-1] != n_classes - 1)):
        return False
    rows = x[first]
    if not np.isfinite(rows).all():
        return False
    shift[:] = rows
    return True


def class_moments_chunk(
    x: np.ndarray, codes: np.ndarray, count: np.ndarray, shift: np.ndarray, total: np.ndarray,
    s1: np.ndarray, s2: np.ndarray, weights: np.ndarray | None,
) -> None:
    """Per-(class, column) sums of a chunk for the corrected two-pass class moments, added to the arrays given."""
    # Arrays made here, not in compiled code (see moments_chunk).
    n_classes, d = count.shape[0], x.shape[1]
    if not _classes_first_rows(x, codes, shift):
        _class_shift(x, codes, shift, np.zeros((n_classes, d), dtype=np.bool_), np.full(n_classes, d, dtype=np.int64))
    clean = _class_pass1_blocks(x, weights, codes, count, shift, total)
    if clean.all():
        with np.errstate(all="ignore"):  # as compiled: x / 0.0 gives ±inf or NaN without a warning
            mean = total / np.where(count > 0, count, 1)
        _class_pass2_clean(x, weights, codes, shift, mean, s1, s2)
    else:
        _class_pass2(x, weights, codes, shift, count, total, clean, s1, s2)
