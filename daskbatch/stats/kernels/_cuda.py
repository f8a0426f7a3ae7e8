"""The GPU loops (numba-cuda): per-chunk moments, co-moment centring and histogram counting.

Device code only; launch configurations, buffers and the finishing steps are
in :mod:`daskbatch.stats.kernels._gpu`. Every kernel reads the chunk (R, D) in its
own dtype and casts each element to float64 as it is loaded, like the CPU
loops of :mod:`daskbatch.stats.kernels._numba`: no float64 copy of the chunk exists.

Layout of the work: the chunk is row-major, so consecutive threads take
consecutive features (``j``) of the same row and their loads coalesce. A grid
row (``blockIdx.y = g``) takes a group of consecutive rows; each thread walks
its group serially and writes its partial results to ``[g, j]`` of a small
(G, D) buffer, which a second kernel folds in the order g = 0, 1, ... . No
floating-point atomics are used anywhere: results are bitwise reproducible
from run to run. Histogram counts are integers and use atomics (exact in any
order).

The kernels are compiled with ``cache=True``: a worker that starts again loads
them from numba's cache beside this file instead of compiling them anew.

Rounding: NVVM contracts ``a * b + c`` into one fused multiply-add unless told
not to. Where the array-API reference rounds twice and the result must match
bit for bit (the histogram's bin edges ``i * step + lo``), the products and
sums go through :func:`_mul_rn` / :func:`_add_rn` (libdevice's correctly
rounded, never contracted ``__dmul_rn``/``__dadd_rn``). Under numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``, used by the CPU tests) libdevice is not
available and plain Python arithmetic, which rounds every operation, stands in.
"""

from __future__ import annotations

import math

import numba
from numba import config, cuda

#: Rows of the (R, D) outputs of :func:`moments_finish` / :func:`moments_correct`, in
#: the field order of :class:`~daskbatch.stats.moments.MomentsState`.
N, SHIFT, MEAN, M2, M3, M4, FMIN, FMAX, NAN, POSINF, NEGINF = range(11)
#: Rows of the float64 (4, G, D) partials of the moments' first pass (reused for the powers).
P_FIRST, P_TOTAL, P_MIN, P_MAX = range(4)
#: Rows of the int64 (3, G, D) partial counts of the moments' first pass.
C_FINITE, C_NAN, C_POSINF = range(3)

SIMULATED = bool(getattr(config, "ENABLE_CUDASIM", False))  # set by NUMBA_ENABLE_CUDASIM=1

if SIMULATED:  # Python floats round every operation, as __dmul_rn/__dadd_rn do

    @cuda.jit(device=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return a * b

    @cuda.jit(device=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return a + b

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dmul_rn(a, b)

    @cuda.jit(device=True, inline=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dadd_rn(a, b)


@cuda.jit(device=True)
def _load(x, i, j):  # noqa: ANN001, ANN202
    return numba.float64(x[i, j])


@cuda.jit(device=True)
def _rows_of_group(g, rows_per_group, rows):  # noqa: ANN001, ANN202
    start = g * rows_per_group
    return start, min(start + rows_per_group, rows)


# --- moments ----------------------------------------------------------------------------------


@cuda.jit(cache=True)
def moments_partials(x, rows_per_group, part, counts):  # noqa: ANN001, ANN201
    """First pass over group g of rows, feature j: first finite value, sum about it, extrema, counts.

    ``part`` (4, G, D) float64 receives the group's first finite value (its
    local reference), the sum of finite values less that reference, and the
    finite min and max; ``counts`` (3, G, D) int64 the finite, NaN and +inf
    counts. :func:`moments_finish` folds the groups.

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    rows_per_group : int
        Rows of each group.
    part : device array
        The float64 (4, G, D) partials, written.
    counts : device array
        The int64 (3, G, D) partial counts, written.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    ref = 0.0
    found = False
    n = 0
    n_nan = 0
    n_pos = 0
    total = 0.0
    lo = math.inf
    hi = -math.inf
    for i in range(start, stop):
        v = _load(x, i, j)
        if math.isfinite(v):
            if not found:
                ref = v
                found = True
            n += 1
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


@cuda.jit(cache=True)
def moments_finish(part, counts, rows, out):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`moments_partials` for feature j into ``out`` (11, D).

    ``shift`` is the first finite value of the chunk (that of the first group
    holding one), as on the CPU; the approximate mean about it goes to row
    ``MEAN`` and is corrected by :func:`moments_correct`. Each group's sum about
    its own reference moves to ``shift`` by ``n_g (ref_g - shift)``: only an
    approximation is needed here, the second pass removes its rounding.

    Parameters
    ----------
    part, counts : device array
        The partials of :func:`moments_partials`.
    rows : int
        R, the chunk's rows (the -inf count is what the others leave).
    out : device array
        The float64 (11, D) result, written in the field order of the moments state.
    """
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
    lo = math.inf
    hi = -math.inf
    for g in range(groups):
        c = counts[C_FINITE, g, j]
        if c > 0:
            total += part[P_TOTAL, g, j] + c * (part[P_FIRST, g, j] - shift)
            lo = min(lo, part[P_MIN, g, j])
            hi = max(hi, part[P_MAX, g, j])
        n += c
        n_nan += counts[C_NAN, g, j]
        n_pos += counts[C_POSINF, g, j]
    out[N, j] = n
    out[SHIFT, j] = shift
    out[MEAN, j] = total / max(n, 1)
    out[FMIN, j] = lo
    out[FMAX, j] = hi
    out[NAN, j] = n_nan
    out[POSINF, j] = n_pos
    out[NEGINF, j] = rows - n - n_nan - n_pos


@cuda.jit(cache=True)
def moments_powers(x, rows_per_group, out, part):  # noqa: ANN001, ANN201
    """Sum the first four powers of ``(x - shift) - approx_mean`` per group (the second pass).

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    rows_per_group : int
        Rows of each group.
    out : device array
        The (11, D) output of :func:`moments_finish` (shift and approximate mean).
    part : device array
        The float64 (4, G, D) buffer, written with the power sums.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
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
    """Fold the power sums and apply the corrected two-pass formulas of ``Moments.chunk`` to ``out``.

    Parameters
    ----------
    part : device array
        The power sums of :func:`moments_powers`, (4, G, D).
    out : device array
        The (11, D) state fields, completed in place.
    """
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
    out[M2, j] = max(m2, 0.0)
    out[M3, j] = m3
    out[M4, j] = max(m4, 0.0)


# --- co-moments -------------------------------------------------------------------------------


@cuda.jit(cache=True)
def mark_incomplete(x, rows_per_group, bad):  # noqa: ANN001, ANN201
    """Set ``bad[i] = 1`` for every row i holding a NaN or ±inf (every writer writes the same 1).

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    rows_per_group : int
        Rows of each group.
    bad : device array
        One flag per row, zeroed by the caller.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    for i in range(start, stop):
        if not math.isfinite(_load(x, i, j)):
            bad[i] = 1


@cuda.jit(cache=True)
def first_complete(bad, first):  # noqa: ANN001, ANN201
    """Set ``first[0]`` to the smallest complete row (``first[0]`` starts at R: none).

    Parameters
    ----------
    bad : device array
        The flags of :func:`mark_incomplete`.
    first : device array
        One int, lowered atomically.
    """
    i = cuda.grid(1)
    if i < bad.shape[0] and bad[i] == 0:
        cuda.atomic.min(first, 0, i)


@cuda.jit(cache=True)
def complete_sums(x, rows_per_group, bad, first, part, n_rows):  # noqa: ANN001, ANN201
    """Sum ``x - shift`` over the complete rows of each group (``shift`` = the first complete row).

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    rows_per_group : int
        Rows of each group.
    bad : device array
        The flags of :func:`mark_incomplete`.
    first : device array
        The first complete row (:func:`first_complete`).
    part : device array
        The float64 (G, D) buffer, written with the sums.
    n_rows : device array
        (G,), written by thread j = 0 with each group's complete rows.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    ref = _load(x, first[0], j) if first[0] < rows else 0.0
    total = 0.0
    n = 0
    for i in range(start, stop):
        if bad[i] == 0:
            total += _load(x, i, j) - ref
            n += 1
    part[g, j] = total
    if j == 0:
        n_rows[g] = n


@cuda.jit(cache=True)
def complete_mean(x, first, part, n_rows, n_out, centre):  # noqa: ANN001, ANN201
    """Fold the groups of :func:`complete_sums` into the shift and the approximate mean.

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    first : device array
        The first complete row.
    part, n_rows : device array
        The sums and row counts of :func:`complete_sums` (the first ``len(n_rows)`` rows of ``part``).
    n_out : device array
        ``n_out[0]``, written with the number of complete rows.
    centre : device array
        (3, D): ``centre[0] = shift``, ``centre[1]`` = approximate mean less it,
        ``centre[2]`` = 0 (the residual sums to come).
    """
    j = cuda.grid(1)
    groups = n_rows.shape[0]  # ``part`` may have more rows: it also serves the centring blocks
    d = part.shape[1]
    if j >= d:
        return
    n = 0
    total = 0.0
    for g in range(groups):
        n += n_rows[g]
        total += part[g, j]
    rows = x.shape[0]
    centre[0, j] = _load(x, first[0], j) if first[0] < rows else 0.0
    centre[1, j] = total / max(n, 1)
    centre[2, j] = 0.0  # residual sums, added to block by block
    if j == 0:
        n_out[0] = n


@cuda.jit(cache=True)
def centre_block(x, start, rows_per_group, bad, centre, dev, part):  # noqa: ANN001, ANN201
    """Centre rows ``start .. start + len(dev)`` of ``x`` into ``dev``, summing each group.

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    start : int
        The block's first row.
    rows_per_group : int
        Rows of each group of the block.
    bad : device array
        The flags of :func:`mark_incomplete`.
    centre : device array
        The shift and approximate mean (:func:`complete_mean`).
    dev : device array
        The float64 (k, D) buffer, written with the rows less shift less approximate mean
        (0 for incomplete rows).
    part : device array
        (G, D), written with each group's sums.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    k, d = dev.shape
    if j >= d:
        return
    lo, hi = _rows_of_group(g, rows_per_group, k)
    shift = centre[0, j]
    approx_mean = centre[1, j]
    total = 0.0
    for r in range(lo, hi):
        i = start + r
        v = 0.0
        if bad[i] == 0:
            v = (_load(x, i, j) - shift) - approx_mean
        dev[r, j] = v
        total += v
    part[g, j] = total


@cuda.jit(cache=True)
def add_group_sums(part, groups, centre):  # noqa: ANN001, ANN201
    """Add ``sum of part[:groups, j]`` to ``centre[2, j]`` in group order (the residual sums of the deviations).

    Parameters
    ----------
    part : device array
        The group sums of :func:`centre_block`.
    groups : int
        The groups of the block.
    centre : device array
        (3, D); row 2 accumulates.
    """
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
    """Correct the upper triangle of ``c`` (i <= j) to ``c - n e eᵀ``; the lower one is neither read nor written.

    ``e`` is the residual mean. The co-moments state keeps its matrix in the
    upper triangle (``CoMoments.finalize`` mirrors it once), so the chunk's
    SYRK, which fills only that triangle, needs no mirror here: the
    mirror's writes, one column of ``c`` per warp, would not coalesce.

    Parameters
    ----------
    c : device array
        The (D, D) co-moments, corrected in place.
    centre : device array
        (3, D); row 2 holds the residual sums.
    n_out : device array
        ``n_out[0]``: the number of complete rows.
    """
    j, i = cuda.grid(2)
    d = c.shape[0]
    if i >= d or j >= d or i > j:
        return
    n = n_out[0]
    n_safe = n if n > 0 else 1.0
    c[i, j] = c[i, j] - n * ((centre[2, i] / n_safe) * (centre[2, j] / n_safe))


@cuda.jit(cache=True)
def finish_mean(centre, n_out, mean):  # noqa: ANN001, ANN201
    """Set ``mean = approx_mean + residual mean``.

    Parameters
    ----------
    centre : device array
        (3, D): approximate mean in row 1, residual sums in row 2.
    n_out : device array
        ``n_out[0]``: the number of complete rows.
    mean : device array
        (D,), written.
    """
    j = cuda.grid(1)
    if j >= mean.shape[0]:
        return
    n = n_out[0]
    mean[j] = centre[1, j] + centre[2, j] / (n if n > 0 else 1.0)


# --- histograms -------------------------------------------------------------------------------


@cuda.jit(device=True)
def _slot(v, lo, hi, step, scale, bins):  # noqa: ANN001, ANN202
    """Slot of ``v``: 0 underflow, 1..bins, bins + 1 overflow, bins + 2 NaN (as ``Histogram.slots``).

    Inside the range: the scaled index, clipped, then settled against the
    edges ``i * step + lo`` rounded as the reference rounds them (twice).
    """
    if math.isnan(v):
        return bins + 2
    if v < lo:
        return 0
    if v > hi:
        return bins + 1
    top = bins - 1
    # On the device math.floor returns a float64: clip it as a float, then index with an integer.
    f = numba.int64(min(max(math.floor((v - lo) * scale), 0.0), numba.float64(top)))
    if v < _add_rn(_mul_rn(numba.float64(f), step), lo):
        f -= 1
    if f < top and v >= _add_rn(_mul_rn(numba.float64(f + 1), step), lo):
        f += 1
    return f + 1


@cuda.jit(cache=True)
def histogram_shared(x, lo, hi, step, scale, bins, labels, by_label, n_classes, tile, rows_per_block, counts):  # noqa: ANN001, ANN201
    """Count a tile of ``tile`` features over a block of rows, privatised in shared memory.

    Dynamic shared memory holds ``tile * (bins + 3) * n_classes`` uint32
    counters; ``blockDim.x = tile * lanes``: thread t takes feature
    ``t % tile`` of the tile and every ``lanes``-th row. At the end the
    block adds its non-zero counters to ``counts``.

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    lo, hi : device array
        The range of each feature.
    step, scale : device array
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : device array
        The int64 class of each row (read with ``by_label``). The caller checks
        them (or trusts a check made on the host, without a host synchronisation
        here); a row whose class lies outside ``0 .. K - 1`` anyway is left
        uncounted, never written out of bounds.
    by_label : bool
        Count by class.
    n_classes : int
        K.
    tile : int
        Features per block.
    rows_per_block : int
        Rows of each block.
    counts : device array
        The flat int64 counts D·(bins + 3)·K, added to.
    """
    local = cuda.shared.array(0, dtype=numba.uint32)
    t = cuda.threadIdx.x
    threads = cuda.blockDim.x
    rows, d = x.shape
    n_slots = bins + 3
    f0 = cuda.blockIdx.x * tile
    width = min(tile, d - f0)
    size = width * n_slots * n_classes
    for k in range(t, size, threads):
        local[k] = 0
    cuda.syncthreads()
    jj = t % tile
    lane = t // tile
    lanes = threads // tile
    j = f0 + jj
    start = cuda.blockIdx.y * rows_per_block
    stop = min(start + rows_per_block, rows)
    if jj < width and lane < lanes:
        a, b, s, sc = lo[j], hi[j], step[j], scale[j]
        for i in range(start + lane, stop, lanes):
            cls = labels[i] if by_label else 0
            if 0 <= cls < n_classes:  # a code outside the table is never written
                slot = _slot(_load(x, i, j), a, b, s, sc, bins)
                cuda.atomic.add(local, (jj * n_slots + slot) * n_classes + cls, numba.uint32(1))
    cuda.syncthreads()
    base = f0 * n_slots * n_classes
    for k in range(t, size, threads):
        c = local[k]
        if c != 0:
            cuda.atomic.add(counts, base + k, numba.int64(c))


@cuda.jit(cache=True)
def histogram_global(x, lo, hi, step, scale, bins, labels, by_label, n_classes, rows_per_group, counts):  # noqa: ANN001, ANN201
    """Count as :func:`histogram_shared` does, without privatisation (when a tile's counters do not fit).

    Parameters
    ----------
    x : device array
        The chunk, (R, D).
    lo, hi : device array
        The range of each feature.
    step, scale : device array
        ``(hi - lo) / bins`` and ``bins / (hi - lo)`` of each feature.
    bins : int
        Bins per feature.
    labels : device array
        The int64 class of each row (read with ``by_label``).
    by_label : bool
        Count by class.
    n_classes : int
        K.
    rows_per_group : int
        Rows of each group.
    counts : device array
        The flat int64 counts D·(bins + 3)·K, added to with atomics.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    g = cuda.blockIdx.y
    rows, d = x.shape
    if j >= d:
        return
    start, stop = _rows_of_group(g, rows_per_group, rows)
    n_slots = bins + 3
    a, b, s, sc = lo[j], hi[j], step[j], scale[j]
    for i in range(start, stop):
        cls = labels[i] if by_label else 0
        if 0 <= cls < n_classes:  # a code outside the table is never written
            slot = _slot(_load(x, i, j), a, b, s, sc, bins)
            cuda.atomic.add(counts, (j * n_slots + slot) * n_classes + cls, numba.int64(1))
