"""The ``k`` smallest and ``k`` largest finite values of each feature, kept exactly beside the sketch.

A quantile whose rank lies among them is the data value itself, after any chunking or merge.
Unweighted states only. ``low`` (D, k) ascends, ``+inf``-padded; ``high`` (D, k) descends, ``-inf``-padded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace
from daskbatch.stats.numerics import device, namespace, to_numpy
from daskbatch.stats.sketch_layout import inverted_cdf_rank

#: Finite values kept at each end of every feature with every sketch bucket kept.
TAIL_VALUES = 128
#: Rows of the blocks whose per-feature least values the compiled tails keep: at least these, and
#: at most :data:`TAIL_BLOCKS` blocks a chunk (a larger chunk has longer blocks, and the same work arrays).
TAIL_BLOCK_ROWS = 32
TAIL_BLOCKS = 2048
#: Candidates per column, in units of k, that a block's count stores as it goes (more: read again to store them).
STORED_CANDIDATES = 4


def tails_scratch_bytes(n_features: int, k: int) -> int:
    """The bytes the compiled tails of one block take besides it and its block minima: candidates and ends."""
    # Per end and feature, up to about 4k candidates (float64: a bound from few blocks lets more in), in
    # three copies while they are cut to k. The block minima (2 x 2 float64 per 32 rows and feature: one
    # byte a value at most) scale with the block and are counted among the sketch's temporaries.
    return 0 if k == 0 else 2 * n_features * 3 * 8 * 4 * k


def tail_values(buckets_kept: int) -> int:
    """Values kept per end beside ``buckets_kept`` buckets per sign: :data:`TAIL_VALUES`, none in a narrow window."""
    return TAIL_VALUES if buckets_kept >= 16 * TAIL_VALUES else 0


def empty_tails(xp: Namespace, n_features: int, k: int, dev: object = None) -> tuple[Array, Array]:
    """The tails of no values: ``+inf`` low and ``-inf`` high, (D, k) each."""
    shape = (n_features, k)
    return (
        xp.full(shape, xp.inf, dtype=xp.float64, device=dev),
        xp.full(shape, -xp.inf, dtype=xp.float64, device=dev),
    )


def tails_chunk(x: Array, k: int, blocks: TailBlocks | None = None) -> tuple[Array, Array]:
    """A block's ``k`` smallest and largest finite values per feature (rows x D); ``blocks``: its filled :func:`tail_layout`."""
    xp = namespace(x)
    rows, n_features = x.shape
    if k == 0:  # a narrow window keeps none
        return empty_tails(xp, n_features, 0, device(x))
    if isinstance(x, np.ndarray):
        return _tails_compiled(x, k, blocks)
    # The array API has no partial sort: a sort of the block (CuPy), of its rows or k, the fewer.
    finite = xp.isfinite(x)
    kept = min(k, rows)  # the array API refuses a slice past the end
    low = xp.matrix_transpose(
        xp.sort(xp.where(finite, x, xp.full_like(x, xp.inf)), axis=0)[:kept, :]
    )
    high = xp.matrix_transpose(
        xp.sort(xp.where(finite, x, xp.full_like(x, -xp.inf)), axis=0, descending=True)[:kept, :]
    )
    missing = k - low.shape[1]
    if missing <= 0:
        return low, high
    # fewer rows than k: +inf and -inf after them
    pad_low, pad_high = empty_tails(xp, n_features, missing, device(low))
    return xp.concat([low, pad_low], axis=1), xp.concat([high, pad_high], axis=1)


def _tails_compiled(x: np.ndarray, k: int, blocks: TailBlocks | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`tails_chunk` of a NumPy block: the k least of its columns ``x`` and ``-x``, read where they can lie."""
    from daskbatch.stats.kernels import _numba_sketch as kernels  # lazy: numba
    from daskbatch.stats.kernels.path import float32_block  # lazy: the kernels' package

    n_features = x.shape[1]
    data = float32_block(x)
    block, fine, bound, n_cand, cand = tail_bounds(data, k, blocks)
    columns = fine.shape[1] // 2
    if bound is None:  # fewer blocks than k bound nothing: each column's heap, in row order
        ends = np.empty((columns, k))
        for column in range(columns):
            kernels.tail_replay(data, block, ends, column, fine)
        ends.sort(axis=1)
        return ends[:n_features], -ends[n_features:]
    width = max(int(n_cand.max(initial=0)), k)
    if width > cand.shape[1]:  # a column has more candidates than were stored while counted: all of them, again
        cand = np.empty((columns, width))
        n_cand[:] = 0
        kernels.tail_candidates(data, block, fine, bound, cand, n_cand)
    ends = np.where(np.arange(width) < n_cand[:, None], cand[:, :width], np.inf)
    if width > k:
        ends = np.partition(ends, k - 1, axis=1)[:, :k]
    ends = np.where(ends == np.inf, bound[:, None], ends)
    # Equal values have equal bits but for 0.0 and -0.0: which of them stays in a column whose kept
    # values hold a zero is the row order's, as the heaps always filled.
    for c in np.flatnonzero((ends == 0.0).any(axis=1)):
        kernels.tail_replay(data, block, ends, c, fine)
    ends.sort(axis=1)
    return ends[:n_features], -ends[n_features:]


#: Rows a block, blocks a coarse block, and the block minima ``fine`` and ``coarse`` of :func:`tail_layout`.
TailBlocks = tuple[int, int, np.ndarray, np.ndarray]


def tail_layout(rows: int, n_features: int, k: int) -> TailBlocks:
    """The blocks of a chunk's compiled tails, their minima still to fill (``tail_blocks`` or, with the grid, ``grid_tail_blocks``)."""
    block = max(TAIL_BLOCK_ROWS, -(-rows // TAIL_BLOCKS))
    n_blocks = -(-rows // block)
    per_coarse = max(1, rows // (2 * k * block))  # 2k coarse blocks or more
    columns = 2 * n_features
    return block, per_coarse, np.empty((n_blocks, 2 * columns)), np.full((-(-n_blocks // per_coarse), columns), np.inf)


def tail_bounds(
    data: np.ndarray, k: int, blocks: TailBlocks | None = None
) -> tuple[int, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Rows a block, the blocks' least values, a bound per column ``x`` then ``-x`` (None: fewer blocks than ``k``), values below it, the first of them."""
    from daskbatch.stats.kernels import _numba_sketch as kernels  # lazy: numba

    rows, n_features = data.shape
    if blocks is None:  # else filled in the grid's sweep of the chunk
        blocks = tail_layout(rows, n_features, k)
        kernels.tail_blocks(data, *blocks)
    block, _, fine, coarse = blocks
    columns = 2 * n_features
    n_cand = np.zeros(columns, dtype=np.int64)
    if coarse.shape[0] < k:
        return block, fine, None, n_cand, np.empty((columns, 0))
    # A bound per column with k values at or below it (the k-th least of k blocks' minima): the
    # values below it, filled up with it, hold the k least.
    bound = np.partition(coarse, k - 1, axis=0)[k - 1]
    room = k * block  # the values below a bound that fewer than k blocks hold
    # Stored while counted, up to STORED_CANDIDATES x k a column (the scratch tails_scratch_bytes counts),
    # not room's 4 MB at 64 features: the usual count (~1.5k) needs no second read to store them.
    cand = np.empty((columns, STORED_CANDIDATES * k))
    kernels.tail_candidates(data, block, fine, bound, cand, n_cand)
    trend = np.flatnonzero(n_cand > room)
    # More than k blocks below a bound (a trend): the k-th least of all blocks' minima, read again.
    if trend.size:
        bound[trend] = np.partition(fine[:, trend], k - 1, axis=0)[k - 1]
        scan = np.full(columns, -np.inf)
        scan[trend], n_cand[trend] = bound[trend], 0
        kernels.tail_candidates(data, block, fine, scan, cand, n_cand)  # stored from their start again
    return block, fine, bound, n_cand, cand


def merge_tails(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
    """The tails of the union of two sets of rows: the ``k`` smallest and largest of both."""
    xp = namespace(a[0], b[0])
    k = min(a[0].shape[1], b[0].shape[1])
    low = xp.sort(xp.concat([a[0], b[0]], axis=1), axis=1)[:, :k]
    high = xp.sort(xp.concat([a[1], b[1]], axis=1), axis=1, descending=True)[:, :k]
    return low, high


def tails_quantile(
    low: Any, high: Any, finite: np.ndarray, below: np.ndarray, above: np.ndarray, q: Any
) -> np.ndarray:
    """Give the exact quantiles (D, len(q)) whose rank lies among the kept values (NaN elsewhere) from counts of finite, -inf, +inf."""
    low, high = to_numpy(low), to_numpy(high)
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    k = low.shape[1]
    finite, below = np.asarray(finite, dtype=np.int64), np.asarray(below, dtype=np.int64)
    total = finite + below + np.asarray(above, dtype=np.int64)
    out = np.full((low.shape[0], qs.size), np.nan)
    for d in np.flatnonzero(finite > 0):
        # The 1-based rank among the finite values (-inf first): inside them, one of the kept ones or not.
        j = inverted_cdf_rank(qs, total[d], np.int64).astype(np.int64) - below[d]
        inside = (j >= 1) & (j <= finite[d])
        from_low = inside & (j <= k)
        from_high = inside & ~from_low & (finite[d] - j < k)
        out[d, from_low] = low[d, j[from_low] - 1]
        out[d, from_high] = high[d, finite[d] - j[from_high]]
    return out
