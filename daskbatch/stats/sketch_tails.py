"""The ``k`` smallest and ``k`` largest finite values of each feature, kept exactly beside the sketch.

A merged sketch reads its quantiles in a dyadic grid over ``[min, max]``: in a
heavy tail (lognormal, at 60,000 rows) each bin holds one value or none and is
several % of the IQR wide, so the 0.999 quantile after ``merge`` or ``update``
was 1-2 % of the IQR off. The values themselves are cheap to keep: ``k`` per
end and feature (2 kB a feature at ``k = 128``), merged exactly (the ``k``
smallest of the union are among the ``k`` smallest of each part). A quantile
whose rank lies among them (``q <= k / n`` or ``q >= 1 - k / n``) is then the
data value at that rank, as ``numpy.quantile(..., method="inverted_cdf")``,
after any chunking, merge and update. Unweighted states only: a weighted rank
is a share of a weight sum, which the kept values alone cannot place.

``low`` (D, k) holds the smallest finite values in increasing order, ``+inf``
where a feature has fewer than ``k``; ``high`` (D, k) the largest in
decreasing order, ``-inf`` past them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace
from daskbatch.stats.numerics import device, namespace, to_numpy
from daskbatch.stats.sketch_layout import inverted_cdf_rank

#: Finite values kept at each end of every feature with every sketch bucket kept.
TAIL_VALUES = 128


def tail_values(buckets_kept: int) -> int:
    """Values kept per end beside ``buckets_kept`` buckets per sign: :data:`TAIL_VALUES`, none in a narrow window."""
    # The narrow windows are wide data's, sized to fit a worker (under 5 kB a feature at the narrowest).
    return TAIL_VALUES if buckets_kept >= 16 * TAIL_VALUES else 0


def empty_tails(xp: Namespace, n_features: int, k: int, dev: object = None) -> tuple[Array, Array]:
    """The tails of no values: ``+inf`` low and ``-inf`` high, (D, k) each."""
    shape = (n_features, k)
    return (
        xp.full(shape, xp.inf, dtype=xp.float64, device=dev),
        xp.full(shape, -xp.inf, dtype=xp.float64, device=dev),
    )


def tails_chunk(x: Array, k: int) -> tuple[Array, Array]:
    """A block's ``k`` smallest and largest finite values per feature (rows x D)."""
    xp = namespace(x)
    rows, n_features = x.shape
    if k == 0:  # a narrow window keeps none
        return empty_tails(xp, n_features, 0, device(x))
    if isinstance(x, np.ndarray):  # the compiled scan: two max-heaps of k values per feature
        from daskbatch.stats.kernels._numba_sketch import tail_heaps  # lazy: numba
        from daskbatch.stats.kernels.path import numba_view  # lazy: the kernels' package

        low, neg_high = np.full((n_features, k), np.inf), np.full((n_features, k), np.inf)
        data, lut = numba_view(x)
        tail_heaps(data, lut, low, neg_high)
        low.sort(axis=1)
        neg_high.sort(axis=1)
        return low, -neg_high
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
    """Give the exact ``inverted_cdf`` quantiles whose rank lies among the kept values; NaN elsewhere.

    Parameters
    ----------
    low, high : array
        (D, k): the kept smallest (increasing) and largest (decreasing) finite values.
    finite, below, above : numpy.ndarray
        (D,) integer counts: the finite values, ``-inf`` and ``+inf``.
    q : float or array_like
        Probabilities in [0, 1].

    Returns
    -------
    numpy.ndarray
        (D, len(q)).
    """
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
