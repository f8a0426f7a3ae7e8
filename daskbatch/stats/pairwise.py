"""Pairwise-complete co-moments: each covariance over the rows where both of its features are finite.

``CoMoments(rows="pairwise")`` keeps, for every pair of features (i, j),
the state of the rows where both are finite: their number ``n[i, j]``, the
mean of feature i over them ``shift[i] + mean[i, j]`` (feature j's is
``mean[j, i]``: the same rows), the sum of squared deviations of feature i
over them ``m2[i, j]``, and the co-moment ``c[i, j]``. These are what
``pandas.DataFrame.cov()`` and ``corr()`` compute pair by pair.

A chunk forms them out of core in one pass, as four matrix products (BLAS on
the CPU, cuBLAS through CuPy) of the chunk, centred about a per-chunk shift
(each feature's mean over its finite values in the chunk), and of its mask of
finite values: with ``y`` the shifted values (0 where not finite) and ``m``
the mask, ``n = mᵀm``, the sums ``s = yᵀm``, ``p = yᵀy`` and ``q = (y²)ᵀm``.
The shift makes the pair's mean about it small (a fraction of a standard
deviation for data missing at random), so the co-moment ``p - s sᵀ / n`` and
``q - s² / n`` lose little to cancellation even for data far from zero.
States merge with Chan's formulas, elementwise over the pairs:
``c = c_a + c_b + n_a n_b / n · δ_i δ_j`` with ``δ`` the difference of the
pair's means, as :class:`~daskbatch.stats.comoments.CoMoments` does for the
complete rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskbatch._common import Array, Namespace
from daskbatch.stats._base import State
from daskbatch.stats.backend import device, matrix_diagonal, namespace
from daskbatch.stats.declaration import KERNEL_PATHS, Footprint
from daskbatch.stats.numerics import as_float64, safe_divisor


@dataclass(frozen=True, eq=False)
class PairwiseCoMomentsState(State):
    """Per pair (i, j): rows ``n`` where both are finite, feature i's mean ``shift[i] + mean[i, j]`` and ``m2[i, j]``, co-moment ``c``.

    Every matrix is (D, D); ``shift`` is (D,). ``n`` and ``c`` are symmetric,
    ``mean`` and ``m2`` are not (row i holds feature i's values on each pair).
    """

    n: Array
    shift: Array
    mean: Array
    m2: Array
    c: Array


def empty_pairwise(xp: Namespace, n_features: int, dev: object = None) -> PairwiseCoMomentsState:
    """Build the identity of :func:`merge_pairwise`: the state of a chunk with no rows.

    Parameters
    ----------
    xp : namespace
        The array namespace to allocate in.
    n_features : int
        Number of features.
    dev : device, optional
        The device to allocate on.

    Returns
    -------
    PairwiseCoMomentsState
        The empty state.
    """

    def _zeros() -> Array:
        """A fresh (D, D) float64 zero matrix."""
        return xp.zeros((n_features, n_features), dtype=xp.float64, device=dev)

    return PairwiseCoMomentsState(
        n=_zeros(),
        shift=xp.zeros((n_features,), dtype=xp.float64, device=dev),
        mean=_zeros(),
        m2=_zeros(),
        c=_zeros(),
    )


def pairwise_chunk(x: Array) -> PairwiseCoMomentsState:
    """Reduce one block to its pairwise co-moments (four matrix products, see the module's notes).

    Parameters
    ----------
    x : array
        The block, (rows, features).

    Returns
    -------
    PairwiseCoMomentsState
        The block's state.
    """
    xp = namespace(x)
    rows, n_features = x.shape
    if rows == 0:
        return empty_pairwise(xp, n_features, device(x))
    x = as_float64(x)
    finite = xp.isfinite(x)
    mask = xp.astype(finite, xp.float64)
    zero = xp.zeros_like(x)
    count = xp.sum(mask, axis=0)
    # Each feature's mean over its finite values in the chunk: what makes the products small. Taken
    # about the feature's first finite value (exact for a constant feature, whose deviations are then
    # exactly 0) and summed as deviations / count, which cannot overflow where the deviations do not.
    first_row = xp.argmax(xp.astype(finite, xp.int8), axis=0)
    flat = first_row * n_features + xp.arange(n_features, device=device(x))
    first = xp.where(count > 0, xp.take(xp.reshape(x, (-1,)), flat), xp.zeros_like(count))
    shift = first + xp.sum(xp.where(finite, (x - first) / safe_divisor(xp, count), zero), axis=0)
    shifted = xp.where(finite, x - shift, zero)
    del zero
    masked_t = xp.matrix_transpose(mask)
    shifted_t = xp.matrix_transpose(shifted)
    n = xp.matmul(masked_t, mask)
    sums = xp.matmul(
        shifted_t, mask
    )  # sums[i, j]: feature i over the rows where i and j are finite
    products = xp.matmul(shifted_t, shifted)
    squares = xp.matmul(xp.matrix_transpose(shifted * shifted), mask)
    n_safe = safe_divisor(xp, n)
    mean = sums / n_safe
    c = products - sums * xp.matrix_transpose(sums) / n_safe
    # Rounding can leave a sum of squares of a constant pair a hair below zero: it is zero.
    m2 = xp.maximum(squares - sums * mean, xp.zeros_like(squares))
    overflowed = squares == xp.inf
    if bool(
        xp.any(overflowed)
    ):  # inf - inf: keep +inf, the variance CoMoments and Moments report there
        inf = xp.full_like(m2, xp.inf)
        m2 = xp.where(overflowed, inf, m2)
        eye = xp.eye(n_features, dtype=xp.bool, device=device(x))
        c = xp.where(eye & overflowed, inf, c)
    return PairwiseCoMomentsState(n=n, shift=shift, mean=mean, m2=m2, c=c)


def merge_pairwise(a: PairwiseCoMomentsState, b: PairwiseCoMomentsState) -> PairwiseCoMomentsState:
    """Combine the states of two disjoint sets of rows, pair by pair (Chan's formulas).

    Parameters
    ----------
    a, b : PairwiseCoMomentsState
        The states to combine.

    Returns
    -------
    PairwiseCoMomentsState
        The state of the union.
    """
    xp = namespace(a.c, b.c)
    # A feature keeps a's shift where a saw it at all (its diagonal count), else b's.
    shift = xp.where(matrix_diagonal(xp, a.n) > 0, a.shift, b.shift)
    mean_a = (a.shift - shift)[:, None] + a.mean
    mean_b = (b.shift - shift)[:, None] + b.mean
    n = a.n + b.n
    both = (a.n > 0) & (b.n > 0)
    zeros = xp.zeros_like(a.c)
    delta = xp.where(
        both, mean_b - mean_a, zeros
    )  # zero against an empty side: no foreign shift leaks in
    n_safe = safe_divisor(xp, n)
    mean = xp.where(a.n > 0, mean_a + delta * (b.n / n_safe), xp.where(b.n > 0, mean_b, zeros))
    weight = a.n * b.n / n_safe
    m2 = a.m2 + b.m2 + weight * delta * delta
    c = a.c + b.c + weight * delta * xp.matrix_transpose(delta)
    return PairwiseCoMomentsState(n=n, shift=shift, mean=mean, m2=m2, c=c)


def pairwise_means(s: PairwiseCoMomentsState) -> Array:
    """Give each feature's mean over all its finite values (the diagonal pair), NaN without any.

    Parameters
    ----------
    s : PairwiseCoMomentsState
        A merged state.

    Returns
    -------
    array
        The means, (D,).
    """
    xp = namespace(s.c)
    counts = matrix_diagonal(xp, s.n)
    return xp.where(
        counts > 0, s.shift + matrix_diagonal(xp, s.mean), xp.full_like(s.shift, xp.nan)
    )


def pairwise_scales(s: PairwiseCoMomentsState) -> tuple[Array, Array]:
    """Give the sums of squared deviations of both features of every pair, over that pair's rows.

    Parameters
    ----------
    s : PairwiseCoMomentsState
        A merged state.

    Returns
    -------
    m2_i : array
        Feature i's, (D, D).
    m2_j : array
        Feature j's, (D, D).
    """
    xp = namespace(s.c)
    return s.m2, xp.matrix_transpose(s.m2)


#: Memory of the pairwise co-moments for the planner (``CoMoments(rows="pairwise")``), on every
#: kernel path alike since it always takes the array API: a float64 copy of the chunk, its mask,
#: zeros, shifted values and their squares (float64) and the finite flags (bool); a state of four
#: (D, D) matrices, beside it the four products and the cancelled co-moments of the chunk, and
#: about eight (D, D) temporaries in a merge. Planned without feature tiles: the tiles count
#: complete rows only, so a pairwise covariance that does not fit a worker is refused.
PAIRWISE_FOOTPRINT = Footprint(
    name="cov",
    state=lambda d, bins, k, tile: 4 * d * d * 8 + d * 8,
    float64_copies=dict.fromkeys(KERNEL_PATHS, 1),
    temporaries={path: {"float64": 4, "bool": 1} for path in KERNEL_PATHS},
    state_copies=dict.fromkeys(KERNEL_PATHS, 6),
    merge_temporaries=8,
)
