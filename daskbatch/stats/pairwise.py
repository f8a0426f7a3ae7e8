"""Pairwise-complete co-moments: each covariance over the rows where both of its features are finite.

Per pair: count, mean, M2 and co-moment (as ``pandas.DataFrame.cov()``), formed per chunk as four
matrix products of centred values and their mask, merged with Chan's formulas pair by pair.
:class:`CrossPairwiseState` is one (I, J) tile of a covariance too wide for a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskbatch._common import Array, Namespace
from daskbatch.stats._base import State
from daskbatch.stats.declaration import KERNEL_PATHS, Footprint
from daskbatch.stats.numerics import (
    as_float64,
    device,
    namespace,
    pair_weight,
    positive_rows,
    rows_of,
    safe_divisor,
    with_rows,
)


@dataclass(frozen=True, eq=False)
class PairwiseCoMomentsState(State):
    """Per pair (i, j), (D, D): rows ``n`` where both are finite, feature i's mean ``shift[i] + mean[i, j]``, ``m2[i, j]``, ``c``."""

    n: Array
    shift: Array
    mean: Array
    m2: Array
    c: Array


@dataclass(frozen=True, eq=False)
class WeightedPairwiseCoMomentsState(PairwiseCoMomentsState):
    """A :class:`PairwiseCoMomentsState` of weighted rows: ``n`` is each pair's weight sum, ``rows`` its rows (D, D)."""

    rows: Array


@dataclass(frozen=True, eq=False)
class CrossPairwiseState(State):
    """One tile's pairs (Da, Db): weight sums ``n``, ``rows``, ``c``; each side's means and m2, feature by row (b's transposed)."""

    n: Array
    rows: Array
    shift_a: Array
    mean_a: Array
    m2_a: Array
    shift_b: Array
    mean_b: Array
    m2_b: Array
    c: Array


def empty_pairwise(xp: Namespace, n_features: int, dev: object = None) -> PairwiseCoMomentsState:
    """Build the identity of :func:`merge_pairwise`: the state of a chunk with no rows."""

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


def _shifted(x: Array) -> tuple[Array, Array, Array]:
    """The float64 mask of finite values, the values about each feature's chunk mean (0 where not finite), the means."""
    xp = namespace(x)
    n_features = x.shape[1]
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
    return mask, xp.where(finite, x - shift, zero), shift


def _prepared(x: Array, weights: Array | None) -> tuple[Array, Array, Array, Array, Array]:
    """The kept rows' mask, shifted values and shift, and both weighted by the rows' weights (the rows of weight 0 dropped)."""
    xp = namespace(x)
    w = None
    if weights is not None:
        x, _, w = positive_rows(xp, x, None, weights)
    if x.shape[0] == 0:  # every row of weight 0: the shift of no rows
        zeros = xp.zeros(x.shape, dtype=xp.float64, device=device(x))
        return (
            zeros,
            zeros,
            xp.zeros((x.shape[1],), dtype=xp.float64, device=device(x)),
            zeros,
            zeros,
        )
    mask, shifted, shift = _shifted(x)
    if w is None:
        return mask, shifted, shift, shifted, mask
    return mask, shifted, shift, shifted * w[:, None], mask * w[:, None]


def _side(
    weighted: Array, shifted: Array, other_mask: Array, n: Array
) -> tuple[Array, Array, Array]:
    """One side's sums ``(w y)ᵀm`` over the other side's mask, its means and sums of squared deviations about them."""
    xp = namespace(shifted)
    sums = xp.matmul(xp.matrix_transpose(weighted), other_mask)
    squares = xp.matmul(xp.matrix_transpose(weighted * shifted), other_mask)
    mean = sums / safe_divisor(xp, n)
    # Rounding can leave a sum of squares of a constant pair a hair below zero: it is zero.
    m2 = xp.maximum(squares - sums * mean, xp.zeros_like(squares))
    # inf - inf: keep +inf, the variance CoMoments and Moments report there
    return sums, mean, xp.where(squares == xp.inf, xp.full_like(m2, xp.inf), m2)


def pairwise_chunk(x: Array, weights: Array | None = None) -> PairwiseCoMomentsState:
    """Reduce one block to its pairwise co-moments: ``mᵀm``, ``yᵀm``, ``yᵀy``, ``(y²)ᵀm`` of centred values ``y`` and mask ``m``."""
    xp = namespace(x)
    n_features = x.shape[1]
    mask, shifted, shift, weighted, weighted_mask = _prepared(x, weights)
    if mask.shape[0] == 0:
        empty = empty_pairwise(xp, n_features, device(x))
        return empty if weights is None else with_rows(WeightedPairwiseCoMomentsState, empty, empty.n)
    n = xp.matmul(xp.matrix_transpose(weighted_mask), mask)
    sums, mean, m2 = _side(weighted, shifted, mask, n)
    c = xp.matmul(xp.matrix_transpose(weighted), shifted) - sums * xp.matrix_transpose(
        sums
    ) / safe_divisor(xp, n)
    overflowed = m2 == xp.inf
    if bool(
        xp.any(overflowed)
    ):  # a variance that overflowed is +inf, as CoMoments and Moments report it
        eye = xp.eye(n_features, dtype=xp.bool, device=device(x))
        c = xp.where(eye & overflowed, xp.full_like(c, xp.inf), c)
    state = PairwiseCoMomentsState(n=n, shift=shift, mean=mean, m2=m2, c=c)
    return (
        state if weights is None else with_rows(WeightedPairwiseCoMomentsState, state, xp.matmul(xp.matrix_transpose(mask), mask))
    )


def cross_pairwise_chunk(x: Array, split: int, weights: Array | None = None) -> CrossPairwiseState:
    """Reduce one block ``[x_a | x_b]`` to the pairwise co-moments of its first ``split`` columns with the others."""
    xp = namespace(x)
    width = x.shape[1]
    mask, shifted, shift, weighted, weighted_mask = _prepared(x, weights)
    sa, sb = slice(0, split), slice(split, width)
    if mask.shape[0] == 0:
        n = rows = mean_a = m2_a = c = xp.zeros((split, width - split), dtype=xp.float64, device=device(x))
        mean_b = m2_b = xp.matrix_transpose(n)
    else:
        n = xp.matmul(xp.matrix_transpose(weighted_mask[:, sa]), mask[:, sb])
        sums_a, mean_a, m2_a = _side(weighted[:, sa], shifted[:, sa], mask[:, sb], n)
        sums_b, mean_b, m2_b = _side(weighted[:, sb], shifted[:, sb], mask[:, sa], xp.matrix_transpose(n))
        products = xp.matmul(xp.matrix_transpose(weighted[:, sa]), shifted[:, sb])
        c = products - sums_a * xp.matrix_transpose(sums_b) / safe_divisor(xp, n)
        rows = n if weights is None else xp.matmul(xp.matrix_transpose(mask[:, sa]), mask[:, sb])
    return CrossPairwiseState(
        n=n,
        rows=rows,
        shift_a=shift[sa],
        mean_a=mean_a,
        m2_a=m2_a,
        shift_b=shift[sb],
        mean_b=mean_b,
        m2_b=m2_b,
        c=c,
    )


def _merge_side(
    xp: Namespace,
    n_a: Array,
    n_b: Array,
    pair: Array,
    a: tuple[Array, Array, Array],
    b: tuple[Array, Array, Array],
) -> tuple[Array, Array, Array, Array]:
    """Merge one side's (shift, mean, m2), feature by row: the shift, means, m2 of the union and the means' difference."""
    a_shift, a_mean, a_m2 = a
    b_shift, b_mean, b_m2 = b
    # A feature keeps a's shift where a saw it in any pair, else b's.
    shift = xp.where(xp.any(n_a > 0, axis=1), a_shift, b_shift)
    mean_a = (a_shift - shift)[:, None] + a_mean
    mean_b = (b_shift - shift)[:, None] + b_mean
    zeros = xp.zeros_like(a_mean)
    # zero against an empty side: no foreign shift leaks in
    delta = xp.where((n_a > 0) & (n_b > 0), mean_b - mean_a, zeros)
    mean = xp.where(
        n_a > 0,
        mean_a + delta * (n_b / safe_divisor(xp, n_a + n_b)),
        xp.where(n_b > 0, mean_b, zeros),
    )
    return shift, mean, a_m2 + b_m2 + pair * delta * delta, delta


def merge_pairwise(a: PairwiseCoMomentsState, b: PairwiseCoMomentsState) -> PairwiseCoMomentsState:
    """Combine the states of two disjoint sets of rows, pair by pair (Chan's formulas)."""
    xp = namespace(a.c, b.c)
    n = a.n + b.n
    pair = pair_weight(xp, a.n, b.n, n)
    shift, mean, m2, delta = _merge_side(
        xp, a.n, b.n, pair, (a.shift, a.mean, a.m2), (b.shift, b.mean, b.m2)
    )
    merged = PairwiseCoMomentsState(
        n=n, shift=shift, mean=mean, m2=m2, c=a.c + b.c + pair * delta * xp.matrix_transpose(delta)
    )
    if isinstance(a, WeightedPairwiseCoMomentsState) or isinstance(
        b, WeightedPairwiseCoMomentsState
    ):
        return with_rows(WeightedPairwiseCoMomentsState, merged, rows_of(a) + rows_of(b))
    return merged


def merge_cross_pairwise(a: CrossPairwiseState, b: CrossPairwiseState) -> CrossPairwiseState:
    """Combine the tile states of two disjoint sets of rows, pair by pair (Chan's formulas on both sides)."""
    xp = namespace(a.c, b.c)
    n = a.n + b.n
    pair = pair_weight(xp, a.n, b.n, n)
    shift_a, mean_a, m2_a, delta_a = _merge_side(
        xp, a.n, b.n, pair, (a.shift_a, a.mean_a, a.m2_a), (b.shift_a, b.mean_a, b.m2_a)
    )
    t = xp.matrix_transpose
    shift_b, mean_b, m2_b, delta_b = _merge_side(
        xp, t(a.n), t(b.n), t(pair), (a.shift_b, a.mean_b, a.m2_b), (b.shift_b, b.mean_b, b.m2_b)
    )
    return CrossPairwiseState(
        n=n,
        rows=a.rows + b.rows,
        shift_a=shift_a,
        mean_a=mean_a,
        m2_a=m2_a,
        shift_b=shift_b,
        mean_b=mean_b,
        m2_b=m2_b,
        c=a.c + b.c + pair * delta_a * t(delta_b),
    )


def pairwise_means(s: PairwiseCoMomentsState) -> Array:
    """Give each feature's mean over all its finite values (the diagonal pair), NaN without any."""
    xp = namespace(s.c)
    counts = xp.linalg.diagonal(s.n)
    return xp.where(
        counts > 0, s.shift + xp.linalg.diagonal(s.mean), xp.full_like(s.shift, xp.nan)
    )


#: Memory of the pairwise co-moments for the planner (``CoMoments(rows="pairwise")``), on every
#: kernel path alike since it always takes the array API: a float64 copy of the chunk, its mask,
#: zeros, shifted values and their squares (float64) and the finite flags (bool); a state of four
#: (D, D) matrices, beside it the four products and the cancelled co-moments of the chunk, and
#: about eight (D, D) temporaries in a merge. In feature tiles (too wide for one worker) a tile
#: pair's state holds seven (tile, tile) matrices (:class:`CrossPairwiseState`), its chunk six products.
PAIRWISE_FOOTPRINT = Footprint(
    name="cov",
    state=lambda d, bins, k, tile: (
        4 * d * d * 8 + d * 8 if tile is None or tile >= d else 7 * tile * tile * 8 + 2 * tile * 8
    ),
    float64_copies=dict.fromkeys(KERNEL_PATHS, 1),
    temporaries={path: {"float64": 4, "bool": 1} for path in KERNEL_PATHS},
    state_copies=dict.fromkeys(KERNEL_PATHS, 6),
    merge_temporaries=8,
)
