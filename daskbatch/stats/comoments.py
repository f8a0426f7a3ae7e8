"""Covariance and Pearson correlation matrices from mergeable co-moments.

Complete rows only (``rows="pairwise"``: :mod:`daskbatch.stats.pairwise`). A chunk is one GEMM on
centred float64 data; states merge with ``C = C_a + C_b + n_a n_b / n · δδᵀ``. Only the upper
triangle is read (GPU kernels fill just that); finalize and saving mirror it once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from daskbatch._common import Array, Namespace, strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import kernels
from daskbatch.stats._base import State
from daskbatch.stats.declaration import Declaration, Finished, Footprint, Variable, ddof_setting
from daskbatch.stats.kernels import _gpu
from daskbatch.stats.kernels.path import centring_rows
from daskbatch.stats.numerics import (
    as_float64,
    device,
    handles_overflow,
    merge_shifted_means,
    namespace,
    pair_weight,
    positive_rows,
    rows_of,
    safe_divisor,
    with_rows,
)
from daskbatch.stats.pairwise import (
    PairwiseCoMomentsState,
    WeightedPairwiseCoMomentsState,
    merge_pairwise,
    pairwise_chunk,
    pairwise_means,
)


@dataclass(frozen=True, eq=False)
class CoMomentsState(State):
    """``n`` complete rows (0-d), their mean ``shift + mean`` (D,) and co-moment matrix ``c`` (D, D).

    ``c`` is read from its upper triangle (i <= j) only; below it the GPU
    kernels leave zeros (see the module's notes).
    """

    n: Array
    shift: Array
    mean: Array
    c: Array

    def canonical(self) -> CoMomentsState:
        """Give the state (same class) with ``c`` mirrored from its upper triangle, the layout saved on disk."""  # numpydoc ignore=RT01
        return dataclasses.replace(self, c=mirrored(self.c))


def mirrored(c: Array) -> Array:  # numpydoc ignore=PR01,RT01
    """Mirror the upper triangle of ``c`` onto the lower one (an exactly symmetric ``c`` comes back unchanged)."""
    xp = namespace(c)
    i = xp.arange(c.shape[0], device=device(c))
    return xp.where(i[:, None] <= i[None, :], c, xp.matrix_transpose(c))


@dataclass(frozen=True, eq=False)
class WeightedCoMomentsState(CoMomentsState):
    """A :class:`CoMomentsState` of weighted rows: ``n`` is the weight sum of the complete rows, ``rows`` their number (0-d)."""

    rows: Array


@dataclass(frozen=True, eq=False)
class CoMomentsResult:
    """Covariance and correlation (D, D) from ``n`` complete rows, and their means (D,).

    With sample weights ``weight_sum`` is the weight sum of those rows (else None). Pairwise
    (``CoMoments(rows="pairwise")``) ``pair_counts`` (D, D) holds the rows of each pair, ``n``
    the fewest of them, ``mean`` each feature's mean over all its finite values, and with
    weights ``weight_sum`` (D, D) each pair's weight sum.
    """

    n: Array
    mean: Array
    cov: Array
    corr: Array
    weight_sum: Array | None = None
    pair_counts: Array | None = None


def empty_comoments(xp: Namespace, n_features: int, dev: object = None) -> CoMomentsState:
    """Build the identity of :meth:`CoMoments.merge`: the state of a chunk with no rows."""  # numpydoc ignore=PR01,RT01
    zeros = xp.zeros((n_features,), dtype=xp.float64, device=dev)
    return CoMomentsState(
        n=xp.zeros((), dtype=xp.float64, device=dev),
        shift=zeros,
        mean=zeros,
        c=xp.zeros((n_features, n_features), dtype=xp.float64, device=dev),
    )


def _outer(xp: Namespace, a: Array, b: Array) -> Array:
    return a[:, None] * b[None, :]


def centred(
    xp: Namespace, x: Array, complete: Array, w: Array | None = None
) -> tuple[Array, Array, Array, Array, Array]:  # numpydoc ignore=PR01,RT01
    """Centre the rows of ``x`` marked ``complete`` (corrected two-pass), with frequency weights ``w`` if given."""
    if x.dtype != xp.float64:  # centred never writes into x, so float64 input needs no copy
        x = as_float64(x)
    wc = None if w is None else xp.where(complete, w, xp.zeros_like(w))  # other rows weigh nothing
    n = xp.sum(xp.astype(complete, xp.float64)) if wc is None else xp.sum(wc)
    first = xp.argmax(xp.astype(complete, xp.int8), keepdims=True)
    shift = xp.where(n > 0, xp.take(x, first, axis=0)[0, :], xp.zeros_like(x[0, :]))
    keep = complete[:, None]
    zero = xp.zeros_like(x)
    y_shift = xp.where(keep, x - shift, zero)
    n_safe = safe_divisor(xp, n)
    # Weighted column sums as matrix-vector products: no weighted copy of the block.
    approx_mean = (xp.sum(y_shift, axis=0) if wc is None else xp.matmul(wc, y_shift)) / n_safe
    dev = xp.where(keep, y_shift - approx_mean, zero)
    e = (xp.sum(dev, axis=0) if wc is None else xp.matmul(wc, dev)) / n_safe
    return n, shift, approx_mean, dev if wc is None else dev * xp.sqrt(wc)[:, None], e


def covariance_and_correlation(
    c: Array, n: Array, m2_a: Array, m2_b: Array, ddof: int, *, diagonal: bool
) -> tuple[Array, Array]:
    """Covariance and Pearson correlation from co-moments ``c`` of ``n`` rows (per feature, or pairwise per pair)."""  # numpydoc ignore=PR01,RT01
    xp = namespace(c)
    dof = n - ddof
    nan = xp.full_like(c, xp.nan)
    cov = xp.where(dof > 0, c / safe_divisor(xp, dof), nan)
    per_pair = m2_a.ndim == 2
    scale_a, scale_b = _inverse_sqrt(xp, m2_a), _inverse_sqrt(xp, m2_b)
    corr = xp.clip(c * (scale_a * scale_b if per_pair else _outer(xp, scale_a, scale_b)), -1.0, 1.0)
    if diagonal:  # exactly 1 for a varying feature with itself
        eye = xp.eye(m2_a.shape[0], dtype=xp.bool, device=device(c))
        corr = xp.where(eye & (m2_a > 0 if per_pair else (m2_a > 0)[:, None]), xp.ones_like(corr), corr)
    return cov, xp.where(n > 1, corr, nan)


def _inverse_sqrt(xp: Namespace, m2: Array) -> Array:
    """Invert the square roots of ``m2`` (sums of squared deviations), NaN where a feature does not vary or overflowed."""
    # An overflowed sum (+inf) would give 1/inf = 0, a correlation of 0 that nothing measured: NaN instead.
    varies = (m2 > 0) & (m2 < xp.inf)
    return xp.where(varies, 1.0 / xp.sqrt(xp.where(varies, m2, xp.ones_like(m2))), xp.nan)


#: What ``CoMoments(rows=...)`` takes: the rows complete in every feature, or in both features of each pair.
ROWS = ("complete", "pairwise")


@dataclass(frozen=True)
class CoMoments:  # numpydoc ignore=PR02
    """Sample covariance and Pearson correlation over axis 0, of the complete rows or pairwise-complete ones.

    Parameters
    ----------
    ddof : int, default 1
        Delta degrees of freedom of the covariance.
    rows : {"complete", "pairwise"}, default "complete"
        The rows each covariance uses. ``"complete"``: the rows finite in every
        feature, one count for the whole matrix (a positive semi-definite
        matrix; one all-NaN feature leaves no rows). ``"pairwise"``: for each
        pair, the rows where both are finite, as ``pandas.DataFrame.cov()``
        and ``corr()`` (:mod:`daskbatch.stats.pairwise`); a count per pair
        (``CoMomentsResult.pair_counts``), four matrix products a chunk
        instead of one, and no compiled kernels (the array API: NumPy or
        CuPy). With sample weights, each pair's weighted covariance over its
        own rows, weighted as below.

    Notes
    -----
    With sample weights (``chunk(x, weights=w)``) they are frequency weights,
    as in :class:`~daskbatch.stats.moments.Moments`: the covariance is the
    weighted co-moment over ``W - ddof`` (``W`` the weight sum of the complete
    rows), which is ``numpy.cov(x, fweights=w, ddof=ddof)`` for integer
    weights and ``numpy.cov(x, aweights=w, ddof=0) * W / (W - ddof)`` for any.
    (``numpy.cov(aweights=w, ddof=1)`` divides by ``W - sum(w**2) / W``,
    reliability weights: not these.) Weighted host blocks take the numba
    centring; CuPy blocks the array-API path (cuBLAS), not the CUDA kernels.
    """

    ddof: int = STATISTIC_DEFAULTS["ddof"]
    rows: str = STATISTIC_DEFAULTS["rows"]
    name = "cov"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu", "numba-cuda"})
    #: Its state is the same for a block and the block's float32 copy (``Bundle.chunk`` gives 1- and 2-byte values so).
    takes_float32_copy = True
    #: Couples all features: a chunk must span every column.
    joint = True
    #: ``chunk`` takes sample weights (``weights=``).
    takes_weights = True

    def __post_init__(self) -> None:
        """Refuse a ``rows`` that is neither way of choosing rows, or a ddof that is no integer (``True``), in one line."""
        object.__setattr__(self, "ddof", strict_int(self.ddof, "ddof"))
        if self.rows not in ROWS:
            raise ValueError(f"CoMoments(rows={self.rows!r}): rows must be one of {ROWS}")

    @handles_overflow
    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> CoMomentsState:
        """Reduce one block to its co-moments state.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            Ignored: the co-moments do not read labels.
        weights : array, optional
            Non-negative finite frequency weight of each row (see Notes).

        Returns
        -------
        CoMomentsState
            The block's state (a :class:`WeightedCoMomentsState` with weights).
        """
        xp = namespace(x)
        if self.rows == "pairwise":
            return pairwise_chunk(x, weights)  # type: ignore[return-value]  # its own state, merged and finalized below
        if weights is not None:
            return _weighted_chunk(*positive_rows(xp, x, None, weights)[::2])
        rows, n_features = x.shape
        if rows == 0:
            return empty_comoments(xp, n_features, device(x))
        path = kernels.kernel_path(x, self)
        if path.compiled:  # compiled centring + one GEMM, same state (daskbatch/stats/kernels)
            return CoMomentsState(*kernels.comoments(x, path))
        x = as_float64(x)
        complete = xp.all(xp.isfinite(x), axis=1)
        n, shift, approx_mean, dev, e = centred(xp, x, complete)
        c = _corrected(xp, xp.matmul(xp.matrix_transpose(dev), dev), n * _outer(xp, e, e))
        return CoMomentsState(n=n, shift=shift, mean=approx_mean + e, c=c)

    @handles_overflow
    def merge(self, a: CoMomentsState, b: CoMomentsState, /) -> CoMomentsState:
        """Combine the states of two disjoint sets of rows.

        Parameters
        ----------
        a, b : CoMomentsState
            The states to combine.

        Returns
        -------
        CoMomentsState
            The state of the union.
        """
        if isinstance(a, PairwiseCoMomentsState) and isinstance(b, PairwiseCoMomentsState):
            return merge_pairwise(a, b)  # type: ignore[return-value]
        xp = namespace(a.c, b.c)
        n = a.n + b.n
        shift, mean, delta = merge_shifted_means(xp, a.n, b.n, a.shift, a.mean, b.shift, b.mean)
        pair = pair_weight(xp, a.n, b.n, n)
        c = a.c + b.c + pair * _outer(xp, delta, delta)
        # Weight sums merge like counts; the number of complete rows is carried beside them.
        if isinstance(a, WeightedCoMomentsState) or isinstance(b, WeightedCoMomentsState):
            return WeightedCoMomentsState(n=n, shift=shift, mean=mean, c=c, rows=rows_of(a) + rows_of(b))
        return CoMomentsState(n=n, shift=shift, mean=mean, c=c)

    @handles_overflow
    def finalize(self, s: CoMomentsState, /) -> CoMomentsResult:
        """Compute the covariance and correlation from a state.

        Parameters
        ----------
        s : CoMomentsState
            The state of all the rows.

        Returns
        -------
        CoMomentsResult
            Complete-case count, mean, covariance and correlation.
        """
        if isinstance(s, PairwiseCoMomentsState):
            return _finalize_pairwise(s, self.ddof)
        xp = namespace(s.c)
        c = mirrored(s.c)  # once here rather than in every chunk (GPU states hold the upper triangle)
        diag = xp.linalg.diagonal(c)
        cov, corr = covariance_and_correlation(c, s.n, diag, diag, self.ddof, diagonal=True)
        mean = xp.where(s.n > 0, s.shift + s.mean, xp.full_like(s.mean, xp.nan))
        if isinstance(s, WeightedCoMomentsState):
            return CoMomentsResult(n=s.rows, mean=mean, cov=cov, corr=corr, weight_sum=s.n)
        return CoMomentsResult(n=s.n, mean=mean, cov=cov, corr=corr)


def _finalize_pairwise(s: PairwiseCoMomentsState, ddof: int) -> CoMomentsResult:
    """Covariance and correlation of every pair over its own rows; ``n`` is the fewest rows any pair had."""
    xp = namespace(s.c)
    # Feature i's sums of squares on each pair are row i of m2, feature j's its transpose.
    cov, corr = covariance_and_correlation(s.c, s.n, s.m2, xp.matrix_transpose(s.m2), ddof, diagonal=True)
    rows = rows_of(s)
    fewest = xp.min(rows) if rows.shape[0] else xp.zeros((), dtype=xp.float64, device=device(s.c))
    weight_sum = s.n if isinstance(s, WeightedPairwiseCoMomentsState) else None  # each pair's
    return CoMomentsResult(n=fewest, mean=pairwise_means(s), cov=cov, corr=corr, weight_sum=weight_sum,
                           pair_counts=rows)


def _corrected(xp: Namespace, products: Array, correction: Array) -> Array:
    """``products - correction``, its diagonal +inf where a feature's sum of squares overflowed, as the moments' ``m2``."""
    # There the correction is inf too (inf - inf: NaN); stats.numerics.central_moment keeps the variance +inf.
    # Looked for on the diagonal first: the common case adds no (D, D) temporary to the two the planner counts.
    overflowed = xp.linalg.diagonal(products) == xp.inf
    c = products - correction
    del products, correction  # the caller's temporaries: freed before the rare mask below
    if not bool(xp.any(overflowed)):
        return c
    eye = xp.eye(c.shape[0], dtype=xp.bool, device=device(c))
    return xp.where(eye & overflowed[None, :], xp.asarray(xp.inf, dtype=c.dtype, device=device(c)), c)


def _weighted_chunk(x: Array, w: Array) -> WeightedCoMomentsState:
    """The weighted state of a block whose weights are all positive (corrected two-pass, weighted sums)."""
    xp = namespace(x)
    n_features = x.shape[1]
    if x.shape[0] == 0:
        empty = empty_comoments(xp, n_features, device(x))
        return with_rows(WeightedCoMomentsState, empty, empty.n)
    path = kernels.kernel_path(x, CoMoments, weighted=True)
    if path.compiled:  # the unweighted chunks' blocked centring with weighted sums (numba), or compiled centring + cuBLAS SYRK
        n, shift, mean, c, rows = kernels.weighted_comoments(x, w, path)
        return WeightedCoMomentsState(n=n, shift=shift, mean=mean, c=c, rows=rows)
    x = as_float64(x)
    complete = xp.all(xp.isfinite(x), axis=1)
    total, shift, approx_mean, scaled, e = centred(xp, x, complete, w)
    # sqrt(w) on both sides: one symmetric product (BLAS syrk), as for unweighted blocks.
    c = _corrected(xp, xp.matmul(xp.matrix_transpose(scaled), scaled), total * _outer(xp, e, e))
    rows = xp.sum(xp.astype(complete, xp.float64))
    return WeightedCoMomentsState(n=total, shift=shift, mean=approx_mean + e, c=c, rows=rows)


def _comoment_state_bytes(d: int, bins: int, k: int | None, tile: int | None) -> int:
    if tile is not None and tile < d:
        return tile * tile * 8 + 2 * (2 * tile) * 8  # tile-pair block + two vectors for each side
    return d * d * 8 + 2 * d * 8


#: Memory of :class:`CoMoments` for the planner: the array API makes 4 chunk-sized float64
#: temporaries (zeros, shifted and centred blocks, one expression temporary) and a
#: float64 copy; the compiled kernel centres :func:`~daskbatch.stats.kernels.path.centring_rows`
#: rows at a time instead, flagging the complete rows of one block only (on the GPU, of the
#: chunk). The array-API path keeps the complete-row mask and its casts; both keep the GEMM
#: result and outer-product correction next to the state.
FOOTPRINT = Footprint(
    name="cov",
    state=_comoment_state_bytes,
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
    temporaries={"compiled": {}, "array-api": {"float64": 4}, "gpu-compiled": {}},
    # gpu: the incomplete-row flags (uint8); SYRK adds into the state in place
    row_bytes={"compiled": 0, "array-api": 16, "gpu-compiled": 1},
    state_copies={"compiled": 2, "array-api": 2, "gpu-compiled": 0},
    merge_temporaries=3,  # the outer product and its scaled copy
    centring_rows=centring_rows,
    device_buffers=_gpu.comoments_buffer_bytes,
)


def _pair_setting(summary: Any) -> dict[str, Any]:
    """The rows a covariance or correlation counted, as ``complete_rows``."""
    return {} if summary.cov_count is None else {"complete_rows": int(summary.cov_count)}


def _cov_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The covariance and correlation matrices, and the rows they counted."""
    if "cov" not in done.results:
        return {}
    c = done.results["cov"]
    if getattr(c, "weight_sum", None) is not None and c.pair_counts is None:  # pairwise: one per pair
        done.provenance["cov_weight_sum"] = float(c.weight_sum)
    return {"cov": c.cov, "corr": c.corr, "cov_count": int(c.n)}


_PAIR = ("feature", "feature2")
DECLARATION = Declaration(
    "cov", CoMoments, states=(CoMomentsState, WeightedCoMomentsState, PairwiseCoMomentsState, WeightedPairwiseCoMomentsState), footprint=FOOTPRINT,
    variables={
        "cov": Variable(_PAIR, "covariance over the complete rows",
                        settings=lambda s: {**ddof_setting(s), **_pair_setting(s)}),
        "corr": Variable(_PAIR, "Pearson correlation over the complete rows", "1", settings=_pair_setting),
        "cov_count": Variable(None, "rows of the covariance"),
    },
    summarize=_cov_variables,
    kernels=("daskbatch.stats.kernels:comoments", "daskbatch.stats.kernels:weighted_comoments"),
)
