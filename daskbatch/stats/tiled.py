"""Cross co-moments of two groups of features: one (I, J) tile of a wide covariance matrix.

Used when a D x D :class:`~daskbatch.stats.comoments.CoMoments` state does not fit a worker; complete
rows are decided across all features (the caller's ``complete`` mask).
"""

from __future__ import annotations

from dataclasses import dataclass

from daskbatch._common import Array
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats._base import State
from daskbatch.stats.comoments import _corrected, _outer, centred, covariance_and_correlation
from daskbatch.stats.declaration import Declaration
from daskbatch.stats.numerics import (
    as_float64,
    device,
    handles_overflow,
    merge_shifted_means,
    namespace,
    pair_weight,
    rows_of,
    with_rows,
)
from daskbatch.stats.pairwise import (
    CrossPairwiseState,
    PairwiseCoMomentsState,
    cross_pairwise_chunk,
    merge_cross_pairwise,
    merge_pairwise,
    pairwise_chunk,
)


@dataclass(frozen=True, eq=False)
class CrossCoMomentsState(State):
    """``n`` complete rows (0-d); per side the mean ``shift + mean``; the cross co-moments ``c`` (Da, Db)."""

    n: Array
    shift_a: Array
    mean_a: Array
    shift_b: Array
    mean_b: Array
    c: Array


@dataclass(frozen=True, eq=False)
class WeightedCrossCoMomentsState(CrossCoMomentsState):
    """A :class:`CrossCoMomentsState` of weighted rows: ``n`` is their weight sum, ``rows`` their number (0-d)."""

    rows: Array


@dataclass(frozen=True, eq=False)
class CrossCoMomentsResult:
    """``n`` complete rows, the means of both sides, and their co-moment ``c`` (sum of products of deviations)."""

    n: Array
    mean_a: Array
    mean_b: Array
    c: Array
    weight_sum: Array | None = None


@dataclass(frozen=True)
class CrossCoMoments:
    """Co-moments between the first ``split`` columns of a chunk and the others (None: a diagonal tile), on ``rows``."""

    split: int | None = None
    rows: str = STATISTIC_DEFAULTS["rows"]
    name = "xcov"
    #: ``chunk`` takes sample weights (``weights=``).
    takes_weights = True

    def _sides(self, width: int) -> tuple[slice, slice]:
        if self.split is None:
            return slice(0, width), slice(0, width)
        return slice(0, self.split), slice(self.split, width)

    @handles_overflow
    def chunk(
        self, x: Array, label: Array | None = None, /, *, complete: Array | None = None, weights: Array | None = None
    ) -> CrossCoMomentsState:
        """Reduce one chunk over its ``complete`` rows (default: the rows with every value finite)."""
        if self.rows == "pairwise":  # each pair's own rows: no shared mask
            if self.split is None:
                return pairwise_chunk(x, weights)  # type: ignore[return-value]  # merged and finalized below
            return cross_pairwise_chunk(x, self.split, weights)  # type: ignore[return-value]
        xp = namespace(x)
        rows, width = x.shape
        sa, sb = self._sides(width)
        if rows == 0:  # the identity of merge
            zeros = xp.zeros((width,), dtype=xp.float64, device=device(x))
            c = xp.zeros((zeros[sa].shape[0], zeros[sb].shape[0]), dtype=xp.float64, device=device(x))
            n0 = xp.zeros((), dtype=xp.float64, device=device(x))
            empty = CrossCoMomentsState(n=n0, shift_a=zeros[sa], mean_a=zeros[sa], shift_b=zeros[sb], mean_b=zeros[sb],
                                        c=c)
            return empty if weights is None else with_rows(WeightedCrossCoMomentsState, empty, n0)
        if complete is None:
            complete = xp.all(xp.isfinite(as_float64(x)), axis=1)
        else:
            complete = xp.astype(complete, xp.bool)
        w = None if weights is None else xp.astype(weights, xp.float64)
        if w is not None:
            complete = complete & (w > 0)  # a row of weight 0 is as if absent, as CoMoments drops it
        n, shift, mean, dev, e = centred(xp, x, complete, w)
        if self.split is None:  # a diagonal tile keeps +inf where a sum of squares overflowed, as CoMoments does
            c = _corrected(xp, xp.matmul(xp.matrix_transpose(dev[:, sa]), dev[:, sb]), n * _outer(xp, e[sa], e[sb]))
        else:
            c = xp.matmul(xp.matrix_transpose(dev[:, sa]), dev[:, sb]) - n * _outer(xp, e[sa], e[sb])
        mean = mean + e
        state = CrossCoMomentsState(n=n, shift_a=shift[sa], mean_a=mean[sa], shift_b=shift[sb], mean_b=mean[sb], c=c)
        return state if weights is None else with_rows(WeightedCrossCoMomentsState, state, xp.sum(xp.astype(complete, xp.float64)))

    @handles_overflow
    def merge(self, a: CrossCoMomentsState, b: CrossCoMomentsState, /) -> CrossCoMomentsState:
        """Combine the states of two disjoint sets of rows."""
        if isinstance(a, PairwiseCoMomentsState):
            return merge_pairwise(a, b)  # type: ignore[arg-type,return-value]  # a diagonal pairwise tile
        if isinstance(a, CrossPairwiseState):
            return merge_cross_pairwise(a, b)  # type: ignore[arg-type,return-value]
        xp = namespace(a.c, b.c)
        n = a.n + b.n
        shift_a, mean_a, delta_a = merge_shifted_means(xp, a.n, b.n, a.shift_a, a.mean_a, b.shift_a, b.mean_a)
        shift_b, mean_b, delta_b = merge_shifted_means(xp, a.n, b.n, a.shift_b, a.mean_b, b.shift_b, b.mean_b)
        pair = pair_weight(xp, a.n, b.n, n)
        c = a.c + b.c + pair * _outer(xp, delta_a, delta_b)
        state = CrossCoMomentsState(n=n, shift_a=shift_a, mean_a=mean_a, shift_b=shift_b, mean_b=mean_b, c=c)
        # Weight sums merge like counts; the number of complete rows is carried beside them.
        if isinstance(a, WeightedCrossCoMomentsState) or isinstance(b, WeightedCrossCoMomentsState):
            return with_rows(WeightedCrossCoMomentsState, state, rows_of(a) + rows_of(b))
        return state

    @handles_overflow
    def finalize(self, s: CrossCoMomentsState, /) -> CrossCoMomentsResult:
        """Give the row count, means (NaN without rows) and co-moment of the tile."""
        xp = namespace(s.c)
        nan = xp.asarray(xp.nan, dtype=xp.float64, device=device(s.c))
        weighted = isinstance(s, WeightedCrossCoMomentsState)
        return CrossCoMomentsResult(
            n=rows_of(s) if weighted else s.n,  # a pairwise tile (rows of its own) keeps its weight sums
            mean_a=xp.where(s.n > 0, s.shift_a + s.mean_a, nan),
            mean_b=xp.where(s.n > 0, s.shift_b + s.mean_b, nan),
            c=s.c,
            weight_sum=s.n if weighted else None,
        )


@handles_overflow
def finalize_tile(
    s: CrossCoMomentsState | PairwiseCoMomentsState | CrossPairwiseState, var_a: Array, var_b: Array, ddof: int,
    diagonal: bool,
) -> tuple[Array, Array]:
    """Compute the covariance and correlation of one tile, as ``CoMoments.finalize`` does (pairwise: from its own sums)."""
    xp = namespace(s.c)
    if isinstance(s, PairwiseCoMomentsState):
        return covariance_and_correlation(s.c, s.n, s.m2, xp.matrix_transpose(s.m2), ddof, diagonal=True)
    if isinstance(s, CrossPairwiseState):
        return covariance_and_correlation(s.c, s.n, s.m2_a, xp.matrix_transpose(s.m2_b), ddof, diagonal=False)
    return covariance_and_correlation(s.c, s.n, var_a, var_b, ddof, diagonal=diagonal)


#: The covariance's tiles when the plan splits the features (their states only; the Summary opens the store).
DECLARATION = Declaration(
    "tiled_cov", None, states=(CrossCoMomentsState, WeightedCrossCoMomentsState, CrossPairwiseState), selectable=False,
)
