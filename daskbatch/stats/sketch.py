"""Per-feature quantile sketches with a relative-error bound (logarithmic buckets, as DDSketch).

A value ``v`` with ``min_magnitude <= |v| <= max_magnitude`` falls into the
bucket ``k = ceil(log_gamma |v|)`` of its sign, ``gamma = (1 + alpha) / (1 - alpha)``;
bucket ``k`` holds ``(gamma**(k-1), gamma**k]`` and answers ``gamma**k * (1 - alpha)``,
which is within ``alpha`` (relative) of every value in it (Masson, Rim & Lee,
"DDSketch", VLDB 2019). A quantile is read at the exact rank, so it is within
``alpha`` of ``numpy.quantile(..., method="inverted_cdf")``.

The bucket layout is fixed by the parameters alone, so the states of any two
chunks line up without rebinning: merging adds int64 counts (and takes the
minimum and maximum of the extrema), and any chunking and merge order gives
bitwise identical states. The price is memory: ``2 * n_buckets + 4`` int64
counts per feature (about 27,600 slots, 221 KB, with the defaults).

Outside the magnitude range the bound does not hold:

* ``0 < |v| < min_magnitude`` counts as zero (absolute error below ``min_magnitude``);
* ``|v|`` beyond the bucket of ``max_magnitude`` goes to an overflow bucket
  of its sign, which answers the finite extreme of that side (tracked exactly);
* ``±inf`` have buckets of their own at both ends (a quantile that lands on
  them is ``±inf``, as numpy's); NaN is counted apart and left out, as
  :class:`~daskbatch.stats.moments.Moments` does with ``nan_policy="omit"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._typing import Array, Namespace
from daskbatch.stats import kernels
from daskbatch.stats._base import State, as_float64, positive_rows
from daskbatch.stats.backend import bincount, device, namespace, to_numpy, weighted_bincount
from daskbatch.stats.footprint import Footprint

__all__ = ["Sketch", "SketchResult", "SketchState", "sketch_quantile", "sketch_values", "slot_bounds"]


@dataclass(frozen=True, eq=False)
class SketchState(State):
    """Mergeable per-feature sketch.

    ``counts`` (D, slots + 1) int64 holds, in increasing order of value, the
    slots ``[-inf, negative buckets (largest magnitude first), zero, positive
    buckets, +inf]`` and last the NaN count. ``fmin``/``fmax`` (D,) float64 are
    the finite extrema (``+inf``/``-inf`` when a feature has none).
    """

    counts: Array
    fmin: Array
    fmax: Array


@dataclass(frozen=True, eq=False)
class SketchResult:
    """A finalized sketch: ``counts`` (D, slots) int64 in value order, NaN counts and finite extrema.

    ``finite_min``/``finite_max`` are NaN for a feature without finite values.
    The parameters of the :class:`Sketch` that made it ride along so that
    :meth:`quantile` can read it.
    """

    counts: Array
    nan_count: Array
    finite_min: Array
    finite_max: Array
    alpha: float
    min_magnitude: float
    max_magnitude: float

    def quantile(self, q: float | Any) -> np.ndarray:
        """Estimate quantiles ``q`` of every feature, within ``alpha`` of the exact ``inverted_cdf`` ones.

        Parameters
        ----------
        q : float or array_like
            Probabilities in [0, 1].

        Returns
        -------
        numpy.ndarray
            Shape (D,) for a scalar ``q``, else (D, len(q)); NaN for a feature without values.
        """
        sketch = Sketch(self.alpha, self.min_magnitude, self.max_magnitude)
        return sketch_quantile(
            to_numpy(self.counts), 0, sketch, to_numpy(self.finite_min), to_numpy(self.finite_max), q
        )


@dataclass(frozen=True)
class Sketch:  # numpydoc ignore=PR02
    """Relative-error quantile sketch of every feature, mergeable by adding counts.

    Parameters
    ----------
    alpha : float, default 0.005
        Relative accuracy: every quantile of a value with magnitude in
        ``[min_magnitude, max_magnitude]`` is within ``alpha`` of the exact one.
    min_magnitude, max_magnitude : float, default 1e-30 and 1e30
        The magnitudes that get buckets; see the module notes for the rest.
        Memory grows with ``log(max_magnitude / min_magnitude) / alpha``.
    """

    alpha: float = 0.005
    min_magnitude: float = 1e-30
    max_magnitude: float = 1e30
    name = "sketch"
    #: ``chunk`` takes sample weights (``weights=``): float64 weighted counts.
    takes_weights = True

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.min_magnitude < self.max_magnitude < math.inf:
            raise ValueError(
                "magnitudes must satisfy 0 < min_magnitude < max_magnitude < inf, "
                f"got ({self.min_magnitude!r}, {self.max_magnitude!r})"
            )

    # ------------------------------------------------------------- layout
    @property
    def ln_gamma(self) -> float:
        """Compute ``log(gamma)``, via log1p for accuracy at small ``alpha``.

        Returns
        -------
        float
            The log of the bucket growth factor.
        """
        return math.log1p(2.0 * self.alpha / (1.0 - self.alpha))

    @property
    def key_range(self) -> tuple[int, int]:
        """Give the smallest and largest bucket key: ``ceil(log_gamma min_magnitude)`` and the overflow key.

        The overflow key, one above ``ceil(log_gamma max_magnitude)``, collects
        every larger magnitude.

        Returns
        -------
        k_min : int
            The smallest key.
        k_max : int
            The overflow key.
        """
        return (
            math.ceil(math.log(self.min_magnitude) / self.ln_gamma),
            math.ceil(math.log(self.max_magnitude) / self.ln_gamma) + 1,
        )

    @property
    def n_buckets(self) -> int:
        """Count the buckets per sign, the overflow bucket included.

        Returns
        -------
        int
            Buckets per sign.
        """
        k_min, k_max = self.key_range
        return k_max - k_min + 1

    @property
    def n_slots(self) -> int:
        """Count the value slots per feature: both signs' buckets, zero and ±inf (NaN not included).

        Returns
        -------
        int
            Slots per feature.
        """
        return 2 * self.n_buckets + 3

    def empty(self, xp: Namespace, n_features: int, dev: object = None) -> SketchState:
        """Build the identity of :meth:`merge`: the state of a chunk with no rows.

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
        SketchState
            The empty state.
        """
        return SketchState(
            counts=xp.zeros((n_features, self.n_slots + 1), dtype=xp.int64, device=dev),
            fmin=xp.full((n_features,), xp.inf, dtype=xp.float64, device=dev),
            fmax=xp.full((n_features,), -xp.inf, dtype=xp.float64, device=dev),
        )

    def slots(self, x: Array) -> Array:
        """Find the slot of every value of the float64 ``x``.

        Parameters
        ----------
        x : array
            The block, float64 (R, D).

        Returns
        -------
        array
            The int64 slots (R, D); NaN gets ``n_slots``.
        """
        xp = namespace(x)
        n = self.n_buckets
        k_min, k_max = self.key_range
        a = xp.abs(x)
        bucketed = (a >= self.min_magnitude) & (a < xp.inf)
        logs = xp.log(xp.where(bucketed, a, xp.ones_like(a))) / self.ln_gamma
        del a
        # Clamp before the cast: larger magnitudes go to the overflow bucket.
        key = xp.astype(xp.clip(xp.ceil(logs), float(k_min), float(k_max)), xp.int64) - k_min
        del logs
        slot = xp.where(x > 0, key + (n + 2), n - key)
        del key
        slot = xp.where(bucketed, slot, xp.full_like(slot, n + 1))  # zero and tiny magnitudes
        slot = xp.where(x == xp.inf, xp.full_like(slot, 2 * n + 2), slot)
        slot = xp.where(x == -xp.inf, xp.zeros_like(slot), slot)
        return xp.where(xp.isnan(x), xp.full_like(slot, 2 * n + 3), slot)

    # ------------------------------------------------------- the contract
    def chunk(self, x: Array, label: Array | None = None, /, *, weights: Array | None = None) -> SketchState:
        """Count one block's values into the buckets.

        Parameters
        ----------
        x : array
            The block, (rows, features).
        label : array or None
            Ignored: the sketch does not read labels.
        weights : array, optional
            Non-negative finite weight of each row: the counts become float64
            sums of weights (the numba loop on the CPU, the array-API path on GPUs).

        Returns
        -------
        SketchState
            The block's counts and finite extrema.
        """
        xp = namespace(x)
        if weights is not None:
            x, _, weights = positive_rows(xp, x, None, weights)
        rows, n_features = x.shape
        dev = device(x)
        if rows == 0:
            empty = self.empty(xp, n_features, dev)
            return empty if weights is None else SketchState(xp.astype(empty.counts, xp.float64), empty.fmin, empty.fmax)
        if kernels.route(x) == "cpu":  # compiled CPU loop (daskbatch/kernels), same state; no GPU kernel yet
            k_min, k_max = self.key_range
            counts, fmin, fmax = kernels.sketch(
                x, self.ln_gamma, self.min_magnitude, k_min, k_max, self.n_buckets, weights
            )
            return SketchState(counts=counts, fmin=fmin, fmax=fmax)
        x = as_float64(x)
        width = self.n_slots + 1
        flat = self.slots(x) + xp.arange(n_features, dtype=xp.int64, device=dev) * width
        if weights is None:
            counts = bincount(xp, xp.reshape(flat, (-1,)), minlength=n_features * width)
        else:
            each = xp.reshape(xp.broadcast_to(weights[:, None], flat.shape), (-1,))
            counts = weighted_bincount(xp, xp.reshape(flat, (-1,)), each, minlength=n_features * width)
        del flat
        finite = xp.isfinite(x)
        inf = xp.full_like(x, xp.inf)
        return SketchState(
            counts=xp.reshape(counts, (n_features, width)),
            fmin=xp.min(xp.where(finite, x, inf), axis=0),
            fmax=xp.max(xp.where(finite, x, -inf), axis=0),
        )

    def merge(self, a: SketchState, b: SketchState, /) -> SketchState:
        """Add the counts of two states and combine their extrema.

        Parameters
        ----------
        a, b : SketchState
            The states to combine.

        Returns
        -------
        SketchState
            The state of the union.
        """
        xp = namespace(a.counts, b.counts)
        return SketchState(
            counts=a.counts + b.counts, fmin=xp.minimum(a.fmin, b.fmin), fmax=xp.maximum(a.fmax, b.fmax)
        )

    def finalize(self, s: SketchState, /) -> SketchResult:
        """Split a state into value-slot counts, NaN counts and finite extrema.

        Parameters
        ----------
        s : SketchState
            The state of all the rows.

        Returns
        -------
        SketchResult
            The sketch of every feature.
        """
        xp = namespace(s.counts)
        some = s.fmin <= s.fmax
        nan = xp.full_like(s.fmin, xp.nan)
        return SketchResult(
            counts=s.counts[:, : self.n_slots],
            nan_count=s.counts[:, self.n_slots],
            finite_min=xp.where(some, s.fmin, nan),
            finite_max=xp.where(some, s.fmax, nan),
            alpha=float(self.alpha),
            min_magnitude=float(self.min_magnitude),
            max_magnitude=float(self.max_magnitude),
        )


def inverted_cdf_rank(qs: np.ndarray, total: Any, dtype: Any) -> np.ndarray:
    """Give the rank that ``numpy.quantile(..., method="inverted_cdf")`` looks up in a cumulative count.

    Integer counts: ``max(ceil(q * n), 1)``; float (weighted) counts: ``q * W``,
    at least the smallest positive weight, so that ``q = 0`` finds the first non-empty slot.

    Parameters
    ----------
    qs : ndarray
        Probabilities.
    total : number
        The total count (or weight).
    dtype : dtype
        The dtype of the counts.

    Returns
    -------
    ndarray
        The ranks, float64.
    """
    if np.dtype(dtype).kind in "iu":
        return np.maximum(np.ceil(qs * float(total)), 1.0)
    return np.maximum(qs * float(total), np.finfo(np.float64).tiny)


def sketch_values(sketch: Sketch) -> np.ndarray:
    """Give the value every slot answers, in slot order.

    The two overflow slots (1 and ``n_slots - 2``) hold NaN: they answer the
    feature's finite extremes, which :func:`sketch_quantile` fills in.

    Parameters
    ----------
    sketch : Sketch
        The sketch's layout.

    Returns
    -------
    ndarray
        The values, float64 of length ``n_slots``.
    """
    k_min, k_top = sketch.key_range
    keys = np.arange(k_min, k_top, dtype=np.float64)
    # gamma**k * (1 - alpha) = 2 gamma**k / (gamma + 1): within alpha of all of (gamma**(k-1), gamma**k].
    mid = np.exp(keys * sketch.ln_gamma) * (1.0 - sketch.alpha)
    return np.concatenate([[-np.inf, np.nan], -mid[::-1], [0.0], mid, [np.nan, np.inf]])


def slot_bounds(sketch: Sketch) -> tuple[np.ndarray, np.ndarray]:
    """Give the smallest and largest value every slot may hold, in slot order.

    The bounds are inclusive and nudged outwards by 1e-9 (relative), since a
    value on a bucket's edge may be counted in its neighbour (rounding of the
    log). The overflow slots reach to ``∓inf``, the ``±inf`` slots are ``±inf``.

    Parameters
    ----------
    sketch : Sketch
        The sketch's layout.

    Returns
    -------
    lower : ndarray
        Smallest value of each slot, float64 of length ``n_slots``.
    upper : ndarray
        Largest value of each slot.
    """
    k_min, k_top = sketch.key_range
    top = np.exp(np.arange(k_min, k_top, dtype=np.float64) * sketch.ln_gamma)  # bucket k: (gamma**(k-1), gamma**k]
    bottom = np.concatenate([[sketch.min_magnitude], top[:-1]]) * (1.0 - 1e-9)
    top = top * (1.0 + 1e-9)
    inf = np.array([np.inf])
    # [-inf, negative overflow, negative buckets, zero, positive buckets, positive overflow, +inf]
    lower = np.concatenate([-inf, -inf, -top[::-1], [-sketch.min_magnitude], bottom, top[-1:], inf])
    upper = np.concatenate([-inf, -top[-1:], -bottom[::-1], [sketch.min_magnitude], top, inf, inf])
    return lower, upper


def sketch_quantile(
    counts: np.ndarray,
    first_slot: int,
    sketch: Sketch,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | Any,
) -> np.ndarray:
    """Estimate quantiles ``q`` of every feature from sketch counts (host NumPy).

    Parameters
    ----------
    counts : ndarray, shape (D, W)
        Slots ``first_slot .. first_slot + W - 1`` of the sketch's value slots
        (a window that holds every non-zero count; ``W = n_slots`` and
        ``first_slot = 0`` for a whole sketch).
    first_slot : int
        Slot of the first column of ``counts``.
    sketch : Sketch
        The layout the counts were made with.
    vmin, vmax : ndarray, shape (D,)
        Extrema of each feature: the overflow slots answer them, and finite
        estimates are clipped into them (NaN or infinite extrema clip nothing).
    q : float or array_like
        Probabilities in [0, 1].

    Returns
    -------
    ndarray
        Shape (D,) for a scalar ``q``, else (D, len(q)). The value of the slot
        holding rank ``max(ceil(q * n), 1)``, as ``numpy.quantile(...,
        method="inverted_cdf")``; NaN where a feature has no values.
    """
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if qs.ndim != 1 or np.any(np.isnan(qs)) or np.any((qs < 0) | (qs > 1)):
        raise ValueError(f"quantile probabilities must lie in [0, 1], got {q!r}")
    n_features, width = counts.shape
    values = sketch_values(sketch)[first_slot : first_slot + width]
    if values.size != width:
        raise ValueError(f"{width} sketch slots from slot {first_slot} exceed the layout's {sketch.n_slots}")
    lo = np.where(np.isfinite(vmin), vmin, -np.inf)
    hi = np.where(np.isfinite(vmax), vmax, np.inf)
    overflow_neg, overflow_pos = 1 - first_slot, sketch.n_slots - 2 - first_slot
    out = np.full((n_features, qs.size), np.nan)
    for d in range(n_features):
        cdf = np.cumsum(counts[d], dtype=np.int64 if counts.dtype.kind in "iu" else np.float64)
        total = cdf[-1] if width else 0
        if total == 0:
            continue
        rank = inverted_cdf_rank(qs, total, counts.dtype)
        slot = np.searchsorted(cdf, rank, side="left")
        v = values[slot]
        v = np.where(slot == overflow_neg, lo[d], np.where(slot == overflow_pos, hi[d], v))
        finite = np.isfinite(v)
        out[d] = np.where(finite, np.clip(v, lo[d], hi[d]), v)
    return out[:, 0] if np.ndim(q) == 0 else out


#: int64 counts per feature of the default sketch (both signs' log and overflow buckets,
#: zero, ±inf and NaN).
SKETCH_SLOTS = Sketch().n_slots + 1

#: Memory of :class:`Sketch` for the planner: the array API makes a float64 copy and
#: magnitudes, logs, keys, slots and masks; the bincount output sits next to the state.
#: The second pass's quantile histogram (QUANTILE_BINS int64 a feature, 16 kB) replaces
#: the sketch's state there, so the sketch's first-pass footprint is the larger one.
FOOTPRINT = Footprint(
    name="sketch",
    state=lambda d, bins, k, tile: d * SKETCH_SLOTS * 8 + 2 * d * 8,  # counts, finite extrema
    # no GPU kernel: on the GPU the array-API code runs
    float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 1},
    temporaries={
        "compiled": {},
        "array-api": {"float64": 3, "int64": 3, "bool": 3},
        "gpu-compiled": {"float64": 3, "int64": 3, "bool": 3},
    },
    state_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 1},
)
