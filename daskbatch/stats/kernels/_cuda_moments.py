"""The GPU loops (numba-cuda) of the per-chunk moments (partial sums per row group, their fold, the centred powers) and of the co-moment centring (complete rows, their mean, centred blocks, the correction)."""

from __future__ import annotations

import math

from numba import cuda

from daskbatch.stats.kernels._cuda import _cell, _load

#: Rows of the (R, D) outputs of :func:`moments_finish` / :func:`moments_correct`, in
#: the field order of :class:`~daskbatch.stats.moments.MomentsState`; weighted, ``N`` holds
#: the weight sum and a twelfth row ``ROWS`` the finite values' count.
N, SHIFT, MEAN, M2, M3, M4, FMIN, FMAX, NAN, POSINF, NEGINF, ROWS = range(12)
#: Rows of the float64 (4, G, D) partials of the moments' first pass (reused for the powers);
#: weighted, a fifth row ``P_WSUM`` holds each group's weight sum.
P_FIRST, P_TOTAL, P_MIN, P_MAX, P_WSUM = range(5)
#: Rows of the int64 (3, G, D) partial counts of the moments' first pass.
C_FINITE, C_NAN, C_POSINF = range(3)


@cuda.jit(cache=True)
def moments_partials(x, rows_per_group, part, counts, weighted, w):  # noqa: ANN001, ANN201
    """First pass over group g of rows, feature j: first finite value, sum about it, extrema, counts."""
    rows, d = x.shape
    j, g, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    ref = 0.0
    found = False
    n = 0
    n_nan = 0
    n_pos = 0
    total = 0.0
    wsum = 0.0
    lo = math.inf
    hi = -math.inf
    for i in range(start, stop):
        v = _load(x, i, j)
        if math.isfinite(v):
            if not found:
                ref = v
                found = True
            n += 1
            if weighted:
                wsum += w[i]
                total += w[i] * (v - ref)
            else:
                total += v - ref
            lo = min(lo, v)
            hi = max(hi, v)
        elif math.isnan(v):
            n_nan += 1
        elif v > 0:
            n_pos += 1
    part[P_FIRST, g, j] = ref
    part[P_TOTAL, g, j] = total
    part[P_MIN, g, j] = lo
    part[P_MAX, g, j] = hi
    counts[C_FINITE, g, j] = n
    counts[C_NAN, g, j] = n_nan
    counts[C_POSINF, g, j] = n_pos
    if weighted:
        part[P_WSUM, g, j] = wsum


@cuda.jit(cache=True)
def moments_finish(part, counts, rows, out, weighted):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`moments_partials` for feature j into ``out`` (11, D)."""
    j = cuda.grid(1)
    groups = counts.shape[1]
    d = counts.shape[2]
    if j >= d:
        return
    shift = 0.0
    for g in range(groups):
        if counts[C_FINITE, g, j] > 0:
            shift = part[P_FIRST, g, j]
            break
    n = 0
    n_nan = 0
    n_pos = 0
    total = 0.0
    wsum = 0.0
    lo = math.inf
    hi = -math.inf
    for g in range(groups):
        c = counts[C_FINITE, g, j]
        if c > 0:
            if weighted:
                wg = part[P_WSUM, g, j]
                wsum += wg
                total += part[P_TOTAL, g, j] + wg * (part[P_FIRST, g, j] - shift)
            else:
                total += part[P_TOTAL, g, j] + c * (part[P_FIRST, g, j] - shift)
            lo = min(lo, part[P_MIN, g, j])
            hi = max(hi, part[P_MAX, g, j])
        n += c
        n_nan += counts[C_NAN, g, j]
        n_pos += counts[C_POSINF, g, j]
    if weighted:
        out[N, j] = wsum
        out[ROWS, j] = n
        out[MEAN, j] = total / wsum if wsum > 0 else 0.0
    else:
        out[N, j] = n
        out[MEAN, j] = total / max(n, 1)
    out[SHIFT, j] = shift
    out[FMIN, j] = lo
    out[FMAX, j] = hi
    out[NAN, j] = n_nan
    out[POSINF, j] = n_pos
    out[NEGINF, j] = rows - n - n_nan - n_pos


@cuda.jit(cache=True)
def moments_powers(x, rows_per_group, out, part, weighted, w):  # noqa: ANN001, ANN201
    """Sum the first four powers of ``(x - shift) - approx_mean`` per group (the second pass), each times ``w[i]`` weighted."""
    rows, d = x.shape
    j, g, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    shift = out[SHIFT, j]
    approx_mean = out[MEAN, j]
    p1 = 0.0
    p2 = 0.0
    p3 = 0.0
    p4 = 0.0
    for i in range(start, stop):
        v = _load(x, i, j)
        if math.isfinite(v):
            dev = (v - shift) - approx_mean
            if weighted:
                wdev = w[i] * dev
                p1 += wdev
                p2 += wdev * dev
                p3 += wdev * dev * dev
                p4 += wdev * dev * dev * dev
            else:
                sq = dev * dev
                p1 += dev
                p2 += sq
                p3 += sq * dev
                p4 += sq * sq
    part[0, g, j] = p1
    part[1, g, j] = p2
    part[2, g, j] = p3
    part[3, g, j] = p4


@cuda.jit(cache=True)
def moments_correct(part, out):  # noqa: ANN001, ANN201
    """Fold the power sums and apply the corrected two-pass formulas of ``Moments.chunk`` to ``out``."""
    j = cuda.grid(1)
    groups = part.shape[1]
    d = part.shape[2]
    if j >= d:
        return
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    for g in range(groups):
        s1 += part[0, g, j]
        s2 += part[1, g, j]
        s3 += part[2, g, j]
        s4 += part[3, g, j]
    n = out[N, j]
    e = s1 / (n if n > 0 else 1.0)
    m2 = s2 - n * e * e
    m3 = s3 - 3.0 * e * s2 + 2.0 * n * e * e * e
    m4 = s4 - 4.0 * e * s3 + 6.0 * e * e * s2 - 3.0 * n * e * e * e * e
    out[MEAN, j] += e
    # As stats.numerics.central_moment: +inf where the sum overflowed, else at least 0 (not max(): on
    # the device it is fmax, which turns NaN into 0, where the simulator's max keeps NaN).
    out[M2, j] = math.inf if s2 == math.inf else (m2 if m2 > 0.0 else 0.0)
    out[M3, j] = m3
    out[M4, j] = math.inf if s4 == math.inf else (m4 if m4 > 0.0 else 0.0)


@cuda.jit(cache=True)
def mark_incomplete(x, rows_per_group, bad):  # noqa: ANN001, ANN201
    """Set ``bad[i] = 1`` for every row i holding a NaN or ±inf (every writer writes the same 1)."""
    rows, d = x.shape
    j, _, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    for i in range(start, stop):
        if not math.isfinite(_load(x, i, j)):
            bad[i] = 1


@cuda.jit(cache=True)
def first_complete(bad, first):  # noqa: ANN001, ANN201
    """Set ``first[0]`` to the smallest complete row (``first[0]`` starts at R: none)."""
    i = cuda.grid(1)
    if i < bad.shape[0] and bad[i] == 0:
        cuda.atomic.min(first, 0, i)


@cuda.jit(cache=True)
def complete_sums(x, rows_per_group, bad, first, part, n_rows, weighted, w, w_rows):  # noqa: ANN001, ANN201
    """Sum ``x - shift`` (times ``w[i]`` weighted) over the complete rows of each group (``shift`` = the first complete row)."""
    rows, d = x.shape
    j, g, start, stop = _cell(rows_per_group, rows)
    if j >= d:
        return
    ref = _load(x, first[0], j) if first[0] < rows else 0.0
    total = 0.0
    n = 0
    wsum = 0.0
    for i in range(start, stop):
        if bad[i] == 0:
            if weighted:
                total += w[i] * (_load(x, i, j) - ref)
                wsum += w[i]
            else:
                total += _load(x, i, j) - ref
            n += 1
    part[g, j] = total
    if j == 0:
        n_rows[g] = n
        if weighted:
            w_rows[g] = wsum


@cuda.jit(cache=True)
def complete_mean(x, first, part, n_rows, n_out, centre, weighted, w_rows):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`complete_sums` into the shift and the approximate mean."""
    j = cuda.grid(1)
    groups = n_rows.shape[0]  # ``part`` may have more rows: it also serves the centring blocks
    d = part.shape[1]
    if j >= d:
        return
    n = 0
    total = 0.0
    wsum = 0.0
    for g in range(groups):
        n += n_rows[g]
        total += part[g, j]
        if weighted:
            wsum += w_rows[g]
    rows = x.shape[0]
    centre[0, j] = _load(x, first[0], j) if first[0] < rows else 0.0
    if weighted:
        centre[1, j] = total / wsum if wsum > 0 else 0.0
    else:
        centre[1, j] = total / max(n, 1)
    centre[2, j] = 0.0  # residual sums, added to block by block
    if j == 0:
        n_out[0] = wsum if weighted else n
        n_out[1] = n


@cuda.jit(cache=True)
def centre_block(x, start, rows_per_group, bad, centre, dev, part, weighted, w):  # noqa: ANN001, ANN201
    """Centre rows ``start .. start + len(dev)`` of ``x`` into ``dev``, summing each group."""
    k, d = dev.shape
    j, g, lo, hi = _cell(rows_per_group, k)
    if j >= d:
        return
    shift = centre[0, j]
    approx_mean = centre[1, j]
    total = 0.0
    for r in range(lo, hi):
        i = start + r
        v = 0.0
        if bad[i] == 0:
            v = (_load(x, i, j) - shift) - approx_mean
        if weighted:
            dev[r, j] = math.sqrt(w[i]) * v
            total += w[i] * v
        else:
            dev[r, j] = v
            total += v
    part[g, j] = total


@cuda.jit(cache=True)
def add_group_sums(part, groups, centre):  # noqa: ANN001, ANN201
    """Add ``sum of part[:groups, j]`` to ``centre[2, j]`` in group order (the residual sums of the deviations)."""
    j = cuda.grid(1)
    d = part.shape[1]
    if j >= d:
        return
    total = 0.0
    for g in range(groups):
        total += part[g, j]
    centre[2, j] += total


@cuda.jit(cache=True)
def correct_upper(c, centre, n_out):  # noqa: ANN001, ANN201
    """Correct the upper triangle of ``c`` (i <= j) to ``c - n e eᵀ``; the lower one is neither read nor written."""
    j, i = cuda.grid(2)
    d = c.shape[0]
    if i >= d or j >= d or i > j:
        return
    if i == j and c[i, j] == math.inf:
        return  # the sum of squares overflowed: +inf, as the moments' variance (not inf - inf)
    n = n_out[0]
    n_safe = n if n > 0 else 1.0
    c[i, j] = c[i, j] - n * ((centre[2, i] / n_safe) * (centre[2, j] / n_safe))


@cuda.jit(cache=True)
def finish_mean(centre, n_out, mean):  # noqa: ANN001, ANN201
    """Set ``mean = approx_mean + residual mean``."""
    j = cuda.grid(1)
    if j >= mean.shape[0]:
        return
    n = n_out[0]
    mean[j] = centre[1, j] + centre[2, j] / (n if n > 0 else 1.0)
