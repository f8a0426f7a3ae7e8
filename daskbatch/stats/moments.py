"""Per-feature moments: counts, mean, variance, skewness, kurtosis, min and max.

Chunks are reduced in float64 by a corrected two-pass about the first finite value of each feature
and merged with the updates of Chan et al. (1979) and Pébay (2008). The mean is kept as
``shift + mean`` with ``shift`` a data value, so merges keep ~15 digits on ``1e8 + N(0, 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from daskbatch._common import Array, Namespace, strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats import kernels
from daskbatch.stats._base import State
from daskbatch.stats.declaration import (
    Declaration,
    Footprint,
    Variable,
    bias_setting,
    count,
    ddof_setting,
)
from daskbatch.stats.kernels import _gpu
from daskbatch.stats.numerics import (
    RATIO_FORM_FROM,
    as_float64,
    central_moment,
    device,
    exact_extremes,
    handles_overflow,
    is_exact,
    merge_extreme,
    merge_shifted_means,
    merged_by_ratios,
    namespace,
    positive_rows,
    rows_of,
    safe_divisor,
    with_rows,
)

NanPolicy = Literal["omit", "propagate", "raise"]


@dataclass(frozen=True, eq=False)
class MomentsState(State):
    """Mergeable per-feature state; every field is a float64 vector of length D.

    ``n`` counts finite values; ``shift + mean`` is their mean; ``m2``, ``m3``,
    ``m4`` are sums of powers of deviations from it. ``fmin``/``fmax`` are the
    finite extrema, in int64/uint64 for blocks of those dtypes (exact, see
    :mod:`daskbatch.stats.numerics`); NaN and ±inf values are counted apart.
    """

    n: Array
    shift: Array
    mean: Array
    m2: Array
    m3: Array
    m4: Array
    fmin: Array
    fmax: Array
    nan_count: Array
    posinf_count: Array
    neginf_count: Array


@dataclass(frozen=True, eq=False)
class WeightedMomentsState(MomentsState):
    """A :class:`MomentsState` of frequency-weighted rows: ``n`` is the weight sum of the finite values, ``rows`` their number."""

    rows: Array


@dataclass(frozen=True, eq=False)
class MomentsResult:
    """Finalized per-feature moments (vectors of length D, on the state's device)."""

    count: Array
    nan_count: Array
    posinf_count: Array
    neginf_count: Array
    mean: Array
    var: Array
    std: Array
    skew: Array
    kurtosis: Array
    min: Array
    max: Array
    finite_min: Array
    finite_max: Array
    #: Weight sum of the finite values of each feature with sample weights, else None.
    weight_sum: Array | None = None


def empty_moments(xp: Namespace, n_features: int, dev: object = None) -> MomentsState:
    """Build the identity of :meth:`Moments.merge`: the state of a chunk with no rows."""  # numpydoc ignore=PR01,RT01
    zeros = xp.zeros((n_features,), dtype=xp.float64, device=dev)
    inf = xp.full((n_features,), xp.inf, dtype=xp.float64, device=dev)
    return MomentsState(
        n=zeros, shift=zeros, mean=zeros, m2=zeros, m3=zeros, m4=zeros,
        fmin=inf, fmax=-inf, nan_count=zeros, posinf_count=zeros, neginf_count=zeros,
    )


def first_finite(xp: Namespace, x: Array, finite: Array) -> Array:
    """Find, per column, the first finite value of ``x`` (0 where a column has none)."""  # numpydoc ignore=PR01,RT01
    rows, cols = x.shape
    first_row = xp.argmax(xp.astype(finite, xp.int8), axis=0)
    flat = first_row * cols + xp.arange(cols, dtype=first_row.dtype, device=device(x))
    values = xp.take(xp.reshape(x, (-1,)), flat)
    return xp.where(xp.isfinite(values), values, xp.zeros_like(values))


#: Integers beyond this magnitude do not all convert to float64 exactly.
_EXACT_INT = 2**53


def _exact_reference(xp: Namespace, x: Array) -> Array | None:
    """A per-feature int64 reference that float64 holds exactly, for int64 blocks beyond 2**53; else None."""
    # ``x - ref`` is exact in int64 and small: float64 keeps every digit of the spread
    # (values near 2**63 are 2048 apart in float64: their std came out 512 instead of 288).
    if x.dtype != xp.int64:
        return None
    lo, hi = xp.min(x, axis=0), xp.max(x, axis=0)
    if not (bool(xp.any(hi > _EXACT_INT)) or bool(xp.any(lo < -_EXACT_INT))):
        return None
    # The first row, rounded down to a multiple of 2048: at most 52 significant bits below 2**63.
    ref = (x[0, :] // 2048) * 2048
    # A spread beyond 2**62 about it could overflow int64; such data have a std the rounding cannot hurt.
    spread = xp.maximum(as_float64(hi) - as_float64(ref), as_float64(ref) - as_float64(lo))
    return None if bool(xp.any(spread > 2.0**62)) else ref


def _shifted_by(s: MomentsState, ref: Array) -> MomentsState:
    """The state of ``x`` from that of ``x - ref``: the exact reference becomes the shift."""
    return replace(s, shift=ref, mean=s.shift + s.mean, fmin=s.fmin + ref, fmax=s.fmax + ref)


def _weighted_chunk(x: Array, w: Array) -> WeightedMomentsState:
    """The weighted state of a block whose weights are all positive: the array-API path (NumPy, CuPy)."""
    xp = namespace(x)
    x = as_float64(x)
    finite = xp.isfinite(x)
    zero = xp.zeros_like(x)
    wf = xp.where(finite, w[:, None], zero)  # the weight of each finite value, 0 elsewhere
    total = xp.sum(wf, axis=0)
    shift = first_finite(xp, x, finite)
    y_shift = xp.where(finite, x - shift, zero)
    w_safe = safe_divisor(xp, total)
    approx_mean = xp.sum(wf * y_shift, axis=0) / w_safe
    dev = xp.where(finite, y_shift - approx_mean, zero)
    del y_shift
    # Moments.chunk's corrected two-pass with weighted sums (counts become weight sums).
    wdev = wf * dev
    s1 = xp.sum(wdev, axis=0)
    s2 = xp.sum(wdev * dev, axis=0)
    s3 = xp.sum(wdev * dev * dev, axis=0)
    s4 = xp.sum(wdev * dev * dev * dev, axis=0)
    del wdev, dev
    state = _state_from_sums(xp, x, finite, total, w_safe, shift, approx_mean, (s1, s2, s3, s4))
    return with_rows(WeightedMomentsState, state, xp.sum(xp.astype(finite, xp.float64), axis=0))


def _state_from_sums(
    xp: Namespace, x: Array, finite: Array, n: Array, n_safe: Array, shift: Array, approx_mean: Array,
    sums: tuple[Array, Array, Array, Array],
) -> MomentsState:
    """The state of a float64 block from the power sums ``s1..s4`` of its deviations from ``approx_mean``."""
    s1, s2, s3, s4 = sums
    # Corrected two-pass: the residual mean `e` of the deviations fixes the
    # rounding of `approx_mean` (Chan, Golub & LeVeque 1983, eq. 1.7).
    e = s1 / n_safe
    m2 = s2 - n * e * e
    m3 = s3 - 3.0 * e * s2 + 2.0 * n * e**3
    m4 = s4 - 4.0 * e * s3 + 6.0 * e * e * s2 - 3.0 * n * e**4
    inf = xp.full_like(x, xp.inf)
    return MomentsState(
        n=n,
        shift=shift,
        mean=approx_mean + e,
        m2=central_moment(xp, m2, s2),
        m3=m3,
        m4=central_moment(xp, m4, s4),
        fmin=xp.min(xp.where(finite, x, inf), axis=0),
        fmax=xp.max(xp.where(finite, x, -inf), axis=0),
        nan_count=xp.sum(xp.astype(xp.isnan(x), xp.float64), axis=0),
        posinf_count=xp.sum(xp.astype(x == xp.inf, xp.float64), axis=0),
        neginf_count=xp.sum(xp.astype(x == -xp.inf, xp.float64), axis=0),
    )


@dataclass(frozen=True)
class Moments:  # numpydoc ignore=PR02
    """Count, NaN/inf counts, mean, variance, skewness, excess kurtosis, min and max over axis 0.

    Parameters
    ----------
    ddof : int, default 1
        Delta degrees of freedom of the variance (divides by ``n - ddof``;
        the array API calls it ``correction``).
    bias : bool, default True
        Biased skewness and kurtosis, like ``scipy.stats.skew``/``kurtosis``
        defaults; ``False`` applies the usual small-sample corrections.
    nan_policy : {"omit", "propagate", "raise"}, default "omit"
        ``"omit"`` ignores NaN values; ``"propagate"`` makes every moment of a
        feature with a NaN NaN. ``"raise"`` is enforced by the caller, which
        knows where the data came from; here it behaves like ``"omit"``.

    Notes
    -----
    With sample weights (``chunk(x, weights=w)``) the weights are frequency
    weights: an integer weight ``k`` counts its row ``k`` times, so the
    variance divides the weighted sum of squared deviations by ``W - ddof``
    (``W`` the weight sum) and the bias corrections of ``bias=False`` use
    ``W`` for ``n``. A row of weight 0 is as if absent; ``count`` stays the
    number of values (rows of positive weight) and the result's ``weight_sum``
    is ``W``. Weighted host blocks take a numba loop; weighted CuPy blocks
    take the array-API code, not the CUDA kernels.

    ±inf values count towards ``count``, ``min`` and ``max``; the mean of a
    feature with infinities is ±inf (NaN if both signs occur) and its higher
    moments are NaN, as with ``numpy.nanmean``/``nanvar``. A feature with no
    finite value has NaN moments.
    """

    ddof: int = STATISTIC_DEFAULTS["ddof"]
    bias: bool = STATISTIC_DEFAULTS["bias"]
    nan_policy: NanPolicy = STATISTIC_DEFAULTS["nan_policy"]
    name = "moments"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu", "numba-cuda"})
    #: Its state is the same for a block and the block's float32 copy (``Bundle.chunk`` gives 1- and 2-byte values so).
    takes_float32_copy = True
    #: ``chunk`` takes sample weights (``weights=``).
    takes_weights = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "ddof", strict_int(self.ddof, "ddof"))  # True is not a ddof of 1

    @handles_overflow
    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> MomentsState:
        """Reduce one block to its moments state.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            Ignored: the moments do not read labels.
        weights : array, optional
            Non-negative finite frequency weight of each row (see Notes).

        Returns
        -------
        MomentsState
            The block's state (a :class:`WeightedMomentsState` with weights).
        """
        xp = namespace(x)
        if weights is not None:
            x, _, weights = positive_rows(xp, x, None, weights)
        rows, n_features = x.shape
        if rows == 0:
            empty = empty_moments(xp, n_features, device(x))
            return empty if weights is None else with_rows(WeightedMomentsState, empty, empty.n)
        ref = _exact_reference(xp, x)
        state = self._chunk(x, weights) if ref is None else _shifted_by(self._chunk(x - ref, weights), as_float64(ref))
        extremes = exact_extremes(xp, x)
        return state if extremes is None else replace(state, fmin=extremes[0], fmax=extremes[1])

    def _chunk(self, x: Array, weights: Array | None = None) -> MomentsState:
        """The state of a non-empty block (weighted when ``weights`` is given)."""
        if weights is None:
            return self._chunk_unweighted(x)
        if kernels.kernel_path(x, self, weighted=True).compiled:  # compiled CPU or GPU loop (daskbatch/stats/kernels)
            fields = kernels.weighted_moments(x, weights)
            return with_rows(WeightedMomentsState, MomentsState(*fields[1:]), fields[0])
        return _weighted_chunk(x, weights)

    def _chunk_unweighted(self, x: Array) -> MomentsState:
        """The state of a non-empty block, reduced in float64."""
        xp = namespace(x)
        path = kernels.kernel_path(x, self)
        if path.compiled:  # compiled CPU or GPU loop, same state (daskbatch/stats/kernels)
            return MomentsState(*kernels.moments(x, path))
        x = as_float64(x)
        finite = xp.isfinite(x)
        zero = xp.zeros_like(x)
        count = xp.sum(xp.astype(finite, xp.float64), axis=0)
        shift = first_finite(xp, x, finite)
        # Deviations from the reference value; non-finite entries become exact zeros.
        y_shift = xp.where(finite, x - shift, zero)
        del zero
        n_safe = safe_divisor(xp, count)
        approx_mean = xp.sum(y_shift, axis=0) / n_safe
        dev = xp.where(finite, y_shift - approx_mean, y_shift)
        del y_shift
        s1 = xp.sum(dev, axis=0)
        sq = dev * dev
        s2 = xp.sum(sq, axis=0)
        s3 = xp.sum(sq * dev, axis=0)
        s4 = xp.sum(sq * sq, axis=0)
        del sq, dev
        return _state_from_sums(xp, x, finite, count, n_safe, shift, approx_mean, (s1, s2, s3, s4))

    @handles_overflow
    def merge(self, a: MomentsState, b: MomentsState, /) -> MomentsState:
        """Combine the states of two disjoint sets of rows.

        Parameters
        ----------
        a, b : MomentsState
            The states to combine.

        Returns
        -------
        MomentsState
            The state of the union (weighted when either side is).
        """
        xp = namespace(a.mean, b.mean)
        na, nb = a.n, b.n
        n = na + nb
        n_safe = safe_divisor(xp, n)
        shift, mean, delta = merge_shifted_means(xp, na, nb, a.shift, a.mean, b.shift, b.mean)
        d2 = delta * delta
        nab = na * nb
        m2 = a.m2 + b.m2 + d2 * nab / n_safe
        m3 = (
            a.m3 + b.m3
            + d2 * delta * nab * (na - nb) / (n_safe * n_safe)
            + 3.0 * delta * (na * b.m2 - nb * a.m2) / n_safe
        )
        m4 = (
            a.m4 + b.m4
            + d2 * d2 * nab * (na * na - nab + nb * nb) / (n_safe * n_safe * n_safe)
            + 6.0 * d2 * (na * na * b.m2 + nb * nb * a.m2) / (n_safe * n_safe)
            + 4.0 * delta * (na * b.m3 - nb * a.m3) / n_safe
        )
        # Weight sums whose products overflow merge by ratios (no host sync to ask whether any do).
        large = n >= RATIO_FORM_FROM
        m2, m3, m4 = (
            xp.where(large, by_ratio, v)
            for by_ratio, v in zip(merged_by_ratios(a, b, n_safe, delta), (m2, m3, m4), strict=True)
        )
        # A side whose fourth moment overflowed (central_moment) has an m3 of inf - inf: m4 stays +inf.
        m4 = xp.where((a.m4 == xp.inf) | (b.m4 == xp.inf), xp.full_like(m4, xp.inf), m4)
        merged = MomentsState(
            n=n,
            shift=shift,
            mean=mean,
            m2=m2,
            m3=m3,
            m4=m4,
            fmin=merge_extreme(xp, a.fmin, b.fmin, smallest=True),
            fmax=merge_extreme(xp, a.fmax, b.fmax, smallest=False),
            nan_count=a.nan_count + b.nan_count,
            posinf_count=a.posinf_count + b.posinf_count,
            neginf_count=a.neginf_count + b.neginf_count,
        )
        # Weight sums merge like counts (above); the number of values is carried beside them.
        if isinstance(a, WeightedMomentsState) or isinstance(b, WeightedMomentsState):
            return with_rows(WeightedMomentsState, merged, rows_of(a) + rows_of(b))
        return merged

    @handles_overflow
    def finalize(self, s: MomentsState, /) -> MomentsResult:
        """Compute the moments from a state.

        Parameters
        ----------
        s : MomentsState
            The state of all the rows.

        Returns
        -------
        MomentsResult
            Counts, mean, variance, skewness, kurtosis, min and max per feature.
        """
        xp = namespace(s.mean)
        nan = xp.full_like(s.mean, xp.nan)
        inf = xp.full_like(s.mean, xp.inf)
        n = s.n
        has_pos, has_neg = s.posinf_count > 0, s.neginf_count > 0
        has_inf = has_pos | has_neg
        mean = xp.where(n > 0, s.shift + s.mean, nan)
        mean = xp.where(has_pos & ~has_neg, inf, xp.where(has_neg & ~has_pos, -inf, mean))
        mean = xp.where(has_pos & has_neg, nan, mean)

        dof = n - self.ddof
        var = xp.where((dof > 0) & ~has_inf, s.m2 / safe_divisor(xp, dof), nan)
        n_safe = safe_divisor(xp, n)
        m2 = s.m2 / n_safe
        varies = (m2 > 0) & ~has_inf
        m2_safe = xp.where(varies, m2, xp.ones_like(m2))
        skew = xp.where(varies, (s.m3 / n_safe) / m2_safe**1.5, nan)
        kurt = xp.where(varies, (s.m4 / n_safe) / (m2_safe * m2_safe) - 3.0, nan)
        if not self.bias:
            # Adjusted Fisher-Pearson skewness and unbiased excess kurtosis (scipy's bias=False).
            # Past RATIO_FORM_FROM (weight sums) the corrections are 1 in float64, and n * n overflows.
            small = n < RATIO_FORM_FROM
            skew = xp.where(n > 2, xp.where(small, skew * xp.sqrt(n * (n - 1.0)) / safe_divisor(xp, n - 2.0), skew), nan)
            kurt_den = safe_divisor(xp, (n - 2.0) * (n - 3.0))
            kurt = xp.where(n > 3, xp.where(small, ((n + 1.0) * kurt + 6.0) * (n - 1.0) / kurt_den, kurt), nan)

        count = rows_of(s) + s.posinf_count + s.neginf_count
        fmin, fmax = as_float64(s.fmin), as_float64(s.fmax)
        vmin = xp.where(has_neg, -inf, xp.where(n > 0, fmin, xp.where(has_pos, inf, nan)))
        vmax = xp.where(has_pos, inf, xp.where(n > 0, fmax, xp.where(has_neg, -inf, nan)))
        if self.nan_policy == "propagate":
            poisoned = s.nan_count > 0
            mean, var, skew, kurt, vmin, vmax = (
                xp.where(poisoned, nan, v) for v in (mean, var, skew, kurt, vmin, vmax)
            )
        if is_exact(s.fmin) and bool(xp.all(n > 0)):  # integers: no inf, no NaN; exact in their dtype
            vmin, vmax = s.fmin, s.fmax
        return MomentsResult(
            count=count,
            nan_count=s.nan_count,
            posinf_count=s.posinf_count,
            neginf_count=s.neginf_count,
            mean=mean,
            var=var,
            std=xp.sqrt(var),
            skew=skew,
            kurtosis=kurt,
            min=vmin,
            max=vmax,
            finite_min=xp.where(n > 0, fmin, nan),
            finite_max=xp.where(n > 0, fmax, nan),
            weight_sum=s.n if isinstance(s, WeightedMomentsState) else None,
        )


#: Memory of :class:`Moments` for the planner: the array API peaks at ~3-4 float64 + 2 bool an element
#: (tracemalloc on NumPy); the compiled loops work element by element; the state holds ~11 vectors.
FOOTPRINT = Footprint(
    name="moments",
    state=lambda d, bins, k, tile: 11 * d * 8,
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 0},
    temporaries={"compiled": {}, "array-api": {"float64": 4, "bool": 3}, "gpu-compiled": {}},
    merge_temporaries=1,  # ~20 vectors of one merge
    device_buffers=_gpu.moments_buffer_bytes,
)


_F = ("feature",)
DECLARATION = Declaration(
    "moments", Moments, states=(MomentsState, WeightedMomentsState), footprint=FOOTPRINT,
    variables={
        "count": count(_F, "number of values that are not NaN", "float64"),
        "nan_count": count(_F, "number of NaN values", "float64"),
        "posinf_count": count(_F, "number of +inf values", "float64"),
        "neginf_count": count(_F, "number of -inf values", "float64"),
        "mean": Variable(_F, "mean"),
        "std": Variable(_F, "standard deviation", settings=ddof_setting),
        "var": Variable(_F, "variance", settings=ddof_setting),
        "min": Variable(_F, "minimum"),
        "max": Variable(_F, "maximum"),
        "skew": Variable(_F, "skewness (Fisher-Pearson)", settings=bias_setting),
        "kurtosis": Variable(_F, "excess kurtosis (Fisher)", settings=bias_setting),
        "weight_sum": Variable(_F, "sum of the sample weights of the finite values"),
    },
    kernels=("daskbatch.stats.kernels:moments", "daskbatch.stats.kernels:weighted_moments"),
)
