"""The sketch's exact side-cars: each feature's distinct values while few, and a dyadic grid.

Distinct values (at most ``k``, :func:`kept_values`) answer quantiles exactly on tied data. The
grid counts values in power-of-two bins over ``[min, max]``; grids nest, so merges re-bin onto the
union's grid and merged quantiles are read in one grid bin and one bucket (:func:`grid_fine`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace
from daskbatch.stats.numerics import bincount, device, namespace, to_numpy, weighted_bincount
from daskbatch.stats.sketch_layout import inverted_cdf_rank

#: The most distinct values a feature keeps with every bucket of the sketch (16 kB a feature, 7 % of its state).
DISTINCT_VALUES = 1024


#: Features whose hash tables the compiled loop fills at a time.
_BLOCK_FEATURES = 16


def kept_values(buckets_kept: int) -> int:
    """Give the most distinct values a feature keeps beside ``buckets_kept`` buckets per sign."""
    return max(1, min(DISTINCT_VALUES, buckets_kept // 16))


def empty_distinct(
    xp: Namespace, n_features: int, k: int, dev: object = None
) -> tuple[Array, Array, Array]:
    """Give the distinct values of no rows: zero values, zero counts, none held."""
    return (
        xp.zeros((n_features, k), dtype=xp.float64, device=dev),
        xp.zeros((n_features, k), dtype=xp.float64, device=dev),
        xp.zeros((n_features,), dtype=xp.int64, device=dev),
    )


def _table_size(k: int) -> int:
    """Slots of one feature's hash table: a power of two of at least 2 k, so probes stay short."""
    return 1 << max(1, int(2 * k - 1).bit_length())


def distinct_scratch_bytes(n_features: int, k: int) -> int:
    """Give the bytes of the hash tables :func:`compiled_distinct` works in, for ``n_features`` and ``k`` values kept."""
    return 2 * 8 * min(_BLOCK_FEATURES, max(n_features, 1)) * _table_size(k)


def compiled_distinct(
    x: np.ndarray, k: int, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count a host chunk's distinct values per feature with the compiled loop."""
    from daskbatch.stats.kernels._sketch_table import distinct_counts  # lazy: numba
    from daskbatch.stats.kernels.path import float32_block  # lazy: the kernels' package

    n_features = x.shape[1]
    size = _table_size(k)
    values, counts, held = empty_distinct(np, n_features, k)
    data = float32_block(x)
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    # The hash tables of a block of features at a time: their scratch stays 16 x 2 k float64 pairs
    # (512 kB at k = 1024) however wide the chunk.
    block = min(_BLOCK_FEATURES, n_features)
    table, table_counts = np.empty((block, size)), np.empty((block, size))
    for first in range(0, n_features, block):
        part = slice(first, min(first + block, n_features))
        width = part.stop - first
        table[:width] = np.nan  # empty
        distinct_counts(
            data,
            w,
            int(k),
            first,
            table[:width],
            table_counts[:width],
            values[part],
            counts[part],
            held[part],
        )
    return values, counts, held


def xp_distinct(x: Array, k: int, weights: Array | None) -> tuple[Array, Array, Array]:
    """Count a float64 chunk's distinct values per feature with array-API calls (CuPy; the compiled loop's state)."""
    xp = namespace(x)
    rows = x.shape[0]
    dev = device(x)
    finite = xp.isfinite(x)
    keys = xp.where(
        finite, x, xp.asarray(xp.inf, dtype=xp.float64, device=dev)
    ).T  # (D, R): non-finite sort last
    n_finite = xp.count_nonzero(finite, axis=0)
    del finite
    order = xp.argsort(
        keys, axis=1, stable=True
    )  # stable: equal values keep row order, as the loop adds them
    ranked = xp.take_along_axis(keys, order, axis=1)
    del keys
    each = None if weights is None else xp.take(weights, xp.reshape(order, (-1,)))
    del order
    valid = (
        xp.arange(rows, dtype=xp.int64, device=dev)[None, :]
        < xp.astype(n_finite, xp.int64)[:, None]
    )
    return _grouped(xp, ranked, valid, each, k)


def merge_distinct(
    a: tuple[Array, Array, Array], b: tuple[Array, Array, Array], k: int
) -> tuple[Array, Array, Array]:
    """Merge two states' distinct values: the union with counts added, marked where it passes ``k`` or either side is."""
    xp = namespace(a[0], b[0])
    if bool(xp.all((a[2] > k) | (b[2] > k))):  # every feature marked (continuous data's): the union keeps nothing
        return _all_marked(xp, a[0], b[0], k)
    column = xp.arange(k, dtype=xp.int64, device=device(a[0]))[None, :]
    live = [
        column < held[:, None] for _, _, held in (a, b)
    ]  # a marked side has held k + 1: all live, ignored below
    keys = xp.concat(
        [xp.where(m, s[0], xp.full_like(s[0], xp.inf)) for m, s in zip(live, (a, b), strict=True)],
        axis=1,
    )
    counts = xp.concat(
        [xp.where(m, s[1], xp.zeros_like(s[1])) for m, s in zip(live, (a, b), strict=True)], axis=1
    )
    order = xp.argsort(keys, axis=1, stable=True)  # a's before b's: each sum is a's count plus b's
    ranked = xp.take_along_axis(keys, order, axis=1)
    values, summed, held = _grouped(
        xp,
        ranked,
        xp.isfinite(ranked),
        xp.reshape(xp.take_along_axis(counts, order, axis=1), (-1,)),
        k,
    )
    marked = (a[2] > k) | (b[2] > k)
    return (
        xp.where(marked[:, None], xp.zeros_like(values), values),
        xp.where(marked[:, None], xp.zeros_like(summed), summed),
        xp.where(marked, xp.full_like(held, k + 1), held),
    )


def _all_marked(xp: Namespace, values_a: Array, values_b: Array, k: int) -> tuple[Array, Array, Array]:
    """The merge of states marked in every feature, as the sorting merge gives it: no values, no counts, ``k + 1`` held."""
    shape, dev = (values_a.shape[0], k), device(values_a)
    return (
        xp.zeros(shape, dtype=xp.result_type(values_a, values_b), device=dev),
        xp.zeros(shape, dtype=xp.float64, device=dev),
        xp.full((shape[0],), k + 1, dtype=xp.int64, device=dev),
    )


def _grouped(
    xp: Namespace, ranked: Array, valid: Array, weights: Array | None, k: int
) -> tuple[Array, Array, Array]:
    """Distinct values, their summed weights (flat, row-major; None: ones) and numbers of rows sorted along axis 1."""
    n_features, width = ranked.shape
    dev = device(ranked)
    new = xp.concat(
        [xp.ones((n_features, 1), dtype=xp.bool, device=dev), ranked[:, 1:] != ranked[:, :-1]],
        axis=1,
    )
    new = valid & new
    ids = xp.cumulative_sum(
        xp.astype(new, xp.int64), axis=1
    )  # a value's 1-based number within its feature
    del new
    held = ids[:, -1] if width else xp.zeros((n_features,), dtype=xp.int64, device=dev)
    rows = xp.arange(n_features, dtype=xp.int64, device=dev)[:, None]
    # Past k values (or past the finite ones) everything lands in one spare bin, sliced off.
    spare = xp.asarray(n_features * k, dtype=xp.int64, device=dev)
    flat = xp.reshape(xp.where(valid & (ids <= k), ids + (rows * k - 1), spare), (-1,))
    size = n_features * k + 1
    counts = (
        xp.astype(bincount(xp, flat, minlength=size), xp.float64)
        if weights is None
        else weighted_bincount(xp, flat, weights, minlength=size)
    )[: n_features * k]
    del flat
    # The g-th value of a feature: where its running number first reaches g (a search, exact).
    running = xp.reshape(ids + rows * (width + 1), (-1,))
    del ids
    wanted = xp.reshape(
        xp.arange(k, dtype=xp.int64, device=dev)[None, :] + 1 + rows * (width + 1), (-1,)
    )
    at = xp.clip(xp.searchsorted(running, wanted, side="left"), 0, max(n_features * width - 1, 0))
    del running
    values = (
        xp.reshape(xp.take(xp.reshape(ranked, (-1,)), at), (n_features, k)) + 0.0
    )  # -0.0 is 0.0
    counts = xp.reshape(counts, (n_features, k))
    over = held > k
    kept = (xp.arange(k, dtype=xp.int64, device=dev)[None, :] < held[:, None]) & ~over[:, None]
    return (
        xp.where(kept, values, xp.zeros_like(values)),
        xp.where(kept, counts, xp.zeros_like(counts)),
        xp.where(over, xp.full_like(held, k + 1), held),
    )


def distinct_quantile(
    values: np.ndarray,
    counts: np.ndarray,
    held: np.ndarray,
    below: np.ndarray,
    above: np.ndarray,
    q: Any,
    *,
    weighted: bool,
) -> np.ndarray:
    """Give ``numpy.quantile(..., method="inverted_cdf")`` of every feature whose distinct values are all kept."""
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    n_features, k = values.shape
    out = np.full((n_features, qs.size), np.nan)
    for d in np.flatnonzero(held <= k):
        n = int(held[d])
        cells = np.concatenate([[below[d]], counts[d, :n], [above[d]]]).astype(np.float64)
        cdf = np.cumsum(cells)
        if cdf[-1] <= 0:
            continue
        at = inverted_cdf_rank(qs, cdf[-1], np.float64 if weighted else np.int64)
        # Unweighted counts are integers in float64: the cumulative counts are exact.
        cell = np.minimum(np.searchsorted(cdf, at, side="left"), n + 1)
        out[d] = np.concatenate([[-np.inf], values[d, :n], [np.inf]])[cell]
    return out


#: Bins of the grid with every sketch bucket kept (16 kB a feature, 7 % of its state).
GRID_BINS = 2048
#: The step of a feature without finite values: below every other, so a merge's maximum ignores it.
_EMPTY_STEP = -(2**20)


def grid_bins(buckets_kept: int) -> int:
    """Bins of the dyadic grid beside ``buckets_kept`` buckets per sign: :data:`GRID_BINS`, an eighth of a narrow window."""
    # The narrow windows are wide data's, sized to fit a worker (4 kB a feature at the narrowest).
    # At least 2: a grid of one bin could never hold values on both sides of a multiple of its step.
    return GRID_BINS if buckets_kept >= 4 * GRID_BINS else max(2, buckets_kept // 8)


def empty_grid(xp: Namespace, n_features: int, bins: int, dtype: Any, dev: object = None) -> tuple[Array, Array, Array]:
    """The grid of no values: zero counts (D, bins), the empty step and first bin 0 (D,)."""
    return (xp.zeros((n_features, bins), dtype=dtype, device=dev),
            xp.full((n_features,), _EMPTY_STEP, dtype=xp.int64, device=dev),
            xp.zeros((n_features,), dtype=xp.int64, device=dev))


def _grid_steps(fmin: np.ndarray, fmax: np.ndarray, bins: int, at_least: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The finest step (at least ``at_least``) whose grid of ``bins`` holds ``[fmin, fmax]``, and its first bin."""
    some = fmin <= fmax
    lo, hi = np.where(some, fmin, 0.0), np.where(some, fmax, 0.0)
    # Below 2**(exponent - 53) a step would only split one float's ulp: the finest step considered.
    finest = np.frexp(np.maximum(np.abs(lo), np.abs(hi)))[1].astype(np.int64) - 53
    # A step of 2**(exponent(span) - bit_length(bins) - 1) leaves over 2 * bins bins: the search starts there.
    span_exponent = np.frexp(hi * 0.5 - lo * 0.5)[1].astype(np.int64) + 1  # halves: no overflow to inf
    step = np.maximum(np.where(hi > lo, span_exponent - bins.bit_length() - 1, finest), finest)
    if at_least is not None:
        step = np.maximum(step, at_least)
    while True:  # a few rounds: the start is at most three steps below the answer
        wide = np.floor(np.ldexp(hi, -step)) - np.floor(np.ldexp(lo, -step)) > bins - 1
        if not wide.any():
            break
        step = np.where(wide, step + 1, step)
    first = np.floor(np.ldexp(lo, -step)).astype(np.int64)
    return np.where(some, step, _EMPTY_STEP), np.where(some, first, 0)


def grid_chunk(x: Array, fmin: Array, fmax: Array, bins: int, weights: Array | None, dtype: Any,
               tail_blocks: tuple[int, int, np.ndarray, np.ndarray] | None = None) -> tuple[Array, Array, Array]:
    """A chunk's grid counts (D, bins), steps and first bins (D,), from its finite extrema.

    ``tail_blocks`` (a NumPy chunk's unweighted :func:`~daskbatch.stats.sketch_tails.tail_layout`) are filled too,
    in the same read of the chunk where its scales allow.
    """
    xp = namespace(x)
    step, first = _grid_steps(to_numpy(fmin), to_numpy(fmax), bins)
    n_features = x.shape[1]
    if isinstance(x, np.ndarray):  # the compiled loop: no temporaries the size of the chunk
        from daskbatch.stats.kernels import _numba_sketch, _sketch_table  # lazy: numba
        from daskbatch.stats.kernels.path import float32_block  # lazy: the kernels' package

        counts = np.zeros((n_features, bins), dtype=dtype)
        data = float32_block(x)
        w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        # Every 2**-step a normal float (finite data's): the grid and the tails' block minima in one sweep.
        if tail_blocks is not None and w is None and bool(np.all((-1022 <= -step) & (-step <= 1023))):
            _sketch_table.grid_tail_blocks(data, step, first, counts, *tail_blocks)
            return counts, step, first
        _sketch_table.grid_counts(data, w, step, first, counts)
        if tail_blocks is not None:
            _numba_sketch.tail_blocks(data, *tail_blocks)
        return counts, step, first
    dev = device(x)
    x = xp.astype(x, xp.float64)
    finite = xp.isfinite(x)
    flat = grid_index(x, step, first, bins) + xp.arange(n_features, dtype=xp.int64, device=dev)[None, :] * bins
    flat = xp.where(finite, flat, xp.full_like(flat, n_features * bins))  # NaN and ±inf: a bin past the last
    if weights is None:
        counts = bincount(xp, xp.reshape(flat, (-1,)), minlength=n_features * bins + 1)
    else:
        each = xp.reshape(xp.broadcast_to(weights[:, None], flat.shape), (-1,))
        counts = weighted_bincount(xp, xp.reshape(flat, (-1,)), each, minlength=n_features * bins + 1)
    counts = xp.reshape(xp.astype(counts[: n_features * bins], dtype), (n_features, bins))
    return counts, xp.asarray(step, device=dev), xp.asarray(first, device=dev)


def grid_index(x: Array, step: np.ndarray, first: np.ndarray, bins: int) -> Array:
    """The grid bin (0 .. bins - 1) of every value of the float64 block ``x`` (non-finite values: bin 0)."""
    xp, dev = namespace(x), device(x)
    # Scaled by 2**-step in two exact halves: one factor could overflow for the tiniest steps.
    scaled = np.where(step == _EMPTY_STEP, 0, step)  # a feature without finite values bins nothing
    half = scaled // 2
    scale_a = xp.asarray(np.ldexp(1.0, -half), device=dev)
    scale_b = xp.asarray(np.ldexp(1.0, -(scaled - half)), device=dev)
    index = xp.astype(xp.floor(xp.where(xp.isfinite(x), x, 0.0) * scale_a * scale_b), xp.int64)
    return xp.clip(index - xp.asarray(first, device=dev), 0, bins - 1)


def grid_merge(a: tuple[Array, Array, Array], b: tuple[Array, Array, Array], fmin: Array, fmax: Array,
               dtype: Any = None) -> tuple[Array, Array, Array]:
    """Two grids (counts, step, first) re-binned onto the finest that holds the union's ``[fmin, fmax]``, added."""
    xp = namespace(a[0], b[0])
    counts_a, counts_b = a[0], b[0]
    dtype = xp.result_type(counts_a, counts_b) if dtype is None else dtype
    n_features, bins = counts_a.shape
    steps = [to_numpy(a[1]), to_numpy(b[1])]
    step, first = _grid_steps(to_numpy(fmin), to_numpy(fmax), bins, at_least=np.maximum(*steps))
    firsts = [to_numpy(a[2]), to_numpy(b[2])]
    dev = device(counts_a)
    if all(np.array_equal(s, step) and np.array_equal(f, first) for s, f in zip(steps, firsts, strict=True)):
        return (xp.astype(counts_a, dtype) + xp.astype(counts_b, dtype), xp.asarray(step, device=dev),
                xp.asarray(first, device=dev))
    out = xp.zeros((n_features * bins,), dtype=xp.float64, device=dev)
    for counts, part_step, part_first in zip((counts_a, counts_b), steps, firsts, strict=True):
        # Bin i of a finer grid lies in bin (first_part + i) >> (step - step_part) of the coarser one
        # (an arithmetic shift floors negative bins too); an empty grid's bins hold nothing.
        shift = np.clip(step - part_step, 0, 62)
        index = ((part_first[:, None] + np.arange(bins)[None, :]) >> shift[:, None]) - first[:, None]
        flat = np.clip(index, 0, bins - 1) + np.arange(n_features)[:, None] * bins
        out += weighted_bincount(xp, xp.asarray(flat.reshape(-1), device=dev),
                                 xp.reshape(xp.astype(counts, xp.float64), (-1,)), minlength=n_features * bins)
    # float64 sums: exact for counts below 2**53
    return xp.reshape(xp.astype(out, dtype), (n_features, bins)), xp.asarray(step, device=dev), xp.asarray(first, device=dev)


def grid_fine(counts: np.ndarray, step: np.ndarray, first: np.ndarray, below: np.ndarray, above: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The grid as :func:`~daskbatch.stats.quantile.fine_quantile`'s fine histogram: -inf and +inf counts outside."""
    bins = counts.shape[1]
    cells = np.concatenate([below[:, None], counts, above[:, None]], axis=1)
    step = np.where(step == _EMPTY_STEP, 0, step)  # a feature without finite values: [0, bins], all empty
    ranges = np.stack([np.ldexp(first.astype(np.float64), step), np.ldexp((first + bins).astype(np.float64), step)],
                      axis=1)
    return cells, ranges
