"""Per-feature quantile sketches with a relative-error bound (logarithmic buckets, as DDSketch).

A value ``v`` with ``min_magnitude <= |v| <= max_magnitude`` falls into the
bucket ``k = ceil(log_gamma |v|)`` of its sign, ``gamma = (1 + alpha) / (1 - alpha)``;
bucket ``k`` holds ``(gamma**(k-1), gamma**k]`` and answers ``gamma**k * (1 - alpha)``,
which is within ``alpha`` (relative) of every value in it (Masson, Rim & Lee,
"DDSketch", VLDB 2019). A quantile is read at the exact rank, so it is within
``alpha`` of ``numpy.quantile(..., method="inverted_cdf")``.

The bucket keys are fixed by the parameters alone (``2 * n_buckets + 3``
value slots, about 27,600 with the defaults), but a state stores only a
*window* of ``window`` consecutive buckets per feature and sign (a "collapsing
lowest dense store", as DDSketch's): its ``offset`` is the key of the window's
first bucket, the lowest populated key (but never above ``n_buckets - window``,
so that the default window of every bucket always starts at 0 and merges by
addition). With the default 2,048 buckets and
alpha, a window spans a factor ``gamma**2048`` (about 10**8.9) in magnitude, so
data within any 10**6 dynamic range per sign never collapse, and a state
takes 33 kB per feature instead of 221 kB (164 MB at 5,000 features).

**Collapse.** When a sign's populated keys span more than ``window``
buckets, the *lowest-magnitude* buckets are added into the window's first
bucket: the window keeps the ``window`` buckets below the largest populated
key. Every rank whose value lies in a kept bucket keeps the ``alpha`` bound;
a rank whose value lies in a collapsed bucket (a magnitude below
``gamma**offset``, about ``max|v| * 10**-8.9`` by default) is answered by the
first bucket, so its error is bounded only in absolute terms, by
``gamma**offset`` (not by ``alpha |v|``). The large magnitudes, the tails that
robust ranges and outliers live in, are never collapsed.

**Merges** align the two windows' offsets and add int64 counts (float64 sums
of weights for a weighted sketch, ``chunk(..., weights=w)``) and take the
minimum and maximum of the extrema. A merged window is a function of the
multiset of keys alone (the lowest key, or the largest less ``window - 1``
after a collapse), so any chunking and merge order gives bitwise identical
states, collapsed or not.

Outside the magnitude range the bound does not hold:

* ``0 < |v| < min_magnitude`` counts as zero (absolute error below ``min_magnitude``);
* ``|v|`` beyond the bucket of ``max_magnitude`` goes to an overflow bucket
  of its sign, which answers the finite extreme of that side (tracked exactly);
* ``±inf`` have slots of their own at both ends (a quantile that lands on
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

__all__ = [
    "WINDOW", "Sketch", "SketchResult", "SketchState", "collapse_floor", "sketch_quantile", "sketch_quantile_at",
    "sketch_values", "slot_bounds",
]

#: Buckets per feature and sign that ``describe`` keeps where a sketch of every bucket does not fit.
WINDOW = 2048
#: Features merged at a time by the array-API merge (its temporaries stay this many rows).
MERGE_ROWS = 256


@dataclass(frozen=True, eq=False)
class SketchState(State):
    """Mergeable per-feature sketch: a window of buckets per sign, and the special slots.

    ``counts`` (D, 2 W + 4) int64 holds the negative window (W buckets of
    increasing magnitude), the positive window (likewise), then the counts of
    ``-inf``, zero (and magnitudes below ``min_magnitude``), ``+inf`` and NaN
    (float64 sums of the rows' weights when weighted).
    ``offset`` (D, 2) int64 is the bucket key (counted from the smallest key,
    0 based) of the first bucket of the negative and the positive window,
    ``n_buckets`` for an empty window. ``fmin``/``fmax`` (D,) float64 are the
    finite extrema (``+inf``/``-inf`` when a feature has none).
    """

    counts: Array
    offset: Array
    fmin: Array
    fmax: Array


@dataclass(frozen=True, eq=False)
class SketchResult:
    """A finalized sketch: per feature, its ``2 W + 3`` window slots in value order, NaN counts and finite extrema.

    ``counts`` (D, 2 W + 3) int64 (float64 when weighted) holds ``-inf``, the negative window (largest
    magnitude first), zero, the positive window and ``+inf``; ``offset`` (D, 2)
    the windows' first keys, as in :class:`SketchState`; :meth:`slots` maps
    every column to its slot of the full layout. ``finite_min``/``finite_max``
    are NaN for a feature without finite values. The parameters of the
    :class:`Sketch` that made it ride along so that :meth:`quantile` can read it.
    """

    counts: Array
    offset: Array
    nan_count: Array
    finite_min: Array
    finite_max: Array
    alpha: float
    min_magnitude: float
    max_magnitude: float
    window: int

    @property
    def layout(self) -> Sketch:
        """Give the :class:`Sketch` that made this result.

        Returns
        -------
        Sketch
            Its parameters.
        """
        return Sketch(self.alpha, self.min_magnitude, self.max_magnitude, self.window)

    def slots(self) -> np.ndarray:
        """Give the slot of the full layout (:func:`sketch_values`, :func:`slot_bounds`) of every column of ``counts``.

        Columns of a window beyond the layout's ends hold no counts; they
        are mapped onto the nearest end slot of their sign.

        Returns
        -------
        numpy.ndarray
            The int64 slots (D, 2 W + 3), increasing along each row where counts are held.
        """
        return _window_slots(to_numpy(self.offset), self.layout.n_buckets, self.window)

    def collapse_floor(self) -> np.ndarray:
        """Give, per feature and sign, the magnitude at or below which answers may come from a collapsed bucket.

        Returns
        -------
        numpy.ndarray
            The float64 (D, 2), negative and positive side: the upper magnitude
            of the window's first bucket where the window is full (it may
            have collapsed: answers at or below it are bounded by it, not by
            ``alpha``), 0 elsewhere.
        """
        return collapse_floor(to_numpy(self.counts), self.slots(), self.layout)

    def dense(self, d: int, include: tuple[int, ...] = ()) -> tuple[int, np.ndarray]:
        """Give feature ``d``'s counts over a contiguous run of slots of the full layout.

        Parameters
        ----------
        d : int
            The feature.
        include : tuple of int, default ()
            Slots the run must reach as well (empty columns are added).

        Returns
        -------
        first : int
            The slot of the run's first column.
        counts : numpy.ndarray
            The int64 counts from the first to the last populated (or included) slot.
        """
        counts = to_numpy(self.counts[d : d + 1, :])[0]
        slots = _window_slots(to_numpy(self.offset[d : d + 1, :]), self.layout.n_buckets, self.window)[0]
        held = counts > 0
        ends = np.concatenate([slots[held], np.asarray(include, dtype=np.int64)])
        if ends.size == 0:
            return 0, np.zeros(0, dtype=counts.dtype)
        first = int(ends.min())
        out = np.zeros(int(ends.max()) - first + 1, dtype=counts.dtype)
        out[slots[held] - first] = counts[held]  # held slots are distinct
        return first, out

    def quantile(self, q: float | Any) -> np.ndarray:
        """Estimate quantiles ``q`` of every feature, within ``alpha`` of the exact ``inverted_cdf`` ones.

        Ranks in buckets collapsed into a window's first bucket (see the
        module notes) are within ``gamma**offset`` in absolute terms only.

        Parameters
        ----------
        q : float or array_like
            Probabilities in [0, 1].

        Returns
        -------
        numpy.ndarray
            Shape (D,) for a scalar ``q``, else (D, len(q)); NaN for a feature without values.
        """
        return sketch_quantile_at(
            to_numpy(self.counts), self.slots(), self.layout,
            to_numpy(self.finite_min), to_numpy(self.finite_max), q,
        )


def collapse_floor(counts: np.ndarray, slots: np.ndarray, sketch: Sketch) -> np.ndarray:
    """Find the windows that may have collapsed, from counts in value order and their slots of the full layout.

    A window collapsed only if its populated slots span all its ``window``
    buckets; then its smallest-magnitude bucket may hold any smaller magnitude.

    Parameters
    ----------
    counts : numpy.ndarray
        The int64 counts (D, C), in value order.
    slots : numpy.ndarray
        The int64 (D, C) or (1, C): the slot of the full layout of each column.
    sketch : Sketch
        The layout (its ``window`` tells a full window).

    Returns
    -------
    numpy.ndarray
        The float64 (D, 2): for the negative and positive side, the upper
        magnitude of the smallest-magnitude populated bucket where the window
        is full, else 0.
    """
    n = sketch.n_buckets
    k_min, _ = sketch.key_range
    slots = np.broadcast_to(slots, counts.shape)
    held = counts > 0
    big = np.iinfo(np.int64).max
    out = np.zeros((counts.shape[0], 2))
    for side, (lo_slot, hi_slot) in enumerate(((1, n), (n + 2, 2 * n + 1))):
        mask = held & (slots >= lo_slot) & (slots <= hi_slot)
        first = np.min(np.where(mask, slots, big), axis=1)
        last = np.max(np.where(mask, slots, -1), axis=1)
        full = (last >= 0) & (last - first >= sketch.buckets_kept - 1)
        # The smallest magnitude: the last negative slot (key n - slot), the first positive one.
        key = (n - last) if side == 0 else (first - (n + 2))
        with np.errstate(over="ignore"):
            top = np.exp((key + k_min) * sketch.ln_gamma) * (1.0 + 1e-9)
        out[:, side] = np.where(full, top, 0.0)
    return out


def _window_slots(offset: np.ndarray, n: int, w: int) -> np.ndarray:
    """Slots of the full layout of a result's columns, from the windows' offsets (D, 2)."""
    offset = np.asarray(offset, dtype=np.int64)
    i = np.arange(w, dtype=np.int64)
    neg = np.clip(n - (offset[:, :1] + i[::-1]), 1, n)  # key k of the negative side sits in slot n - k
    pos = np.clip(n + 2 + offset[:, 1:] + i, n + 2, 2 * n + 1)
    col = np.ones((offset.shape[0], 1), dtype=np.int64)
    return np.concatenate([0 * col, neg, (n + 1) * col, pos, (2 * n + 2) * col], axis=1)


@dataclass(frozen=True)
class Sketch:  # numpydoc ignore=PR02
    """Relative-error quantile sketch of every feature, mergeable by aligning windows and adding counts.

    Parameters
    ----------
    alpha : float, default 0.005
        Relative accuracy: every quantile of a value with magnitude in
        ``[min_magnitude, max_magnitude]`` is within ``alpha`` of the exact one
        (unless its bucket was collapsed: see the module notes).
    min_magnitude, max_magnitude : float, default 1e-30 and 1e30
        The magnitudes that get buckets; see the module notes for the rest.
    window : int, optional
        Buckets kept per feature and sign; the state takes ``2 * window + 6``
        int64 and float64 per feature. A sign whose populated buckets span a
        factor beyond ``gamma**window`` collapses its smallest magnitudes.
        Default: all ``n_buckets`` (nothing ever collapses, 221 kB a feature);
        ``describe`` takes :data:`WINDOW` (33 kB a feature) where that does
        not fit a worker.
    """

    alpha: float = 0.005
    min_magnitude: float = 1e-30
    max_magnitude: float = 1e30
    window: int | None = None
    name = "sketch"
    #: The compiled kernels it has (read by :func:`~daskbatch.stats.kernels.path.kernel_path`).
    compiled_kernels = frozenset({"numba-cpu"})
    #: ``chunk`` takes sample weights (``weights=``): float64 weighted counts.
    takes_weights = True

    @property
    def buckets_kept(self) -> int:
        """Count the buckets a state keeps per feature and sign: ``window``, or all of them.

        Returns
        -------
        int
            The window's width.
        """
        return min(self.window, self.n_buckets) if self.window is not None else self.n_buckets

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.min_magnitude < self.max_magnitude < math.inf:
            raise ValueError(
                "magnitudes must satisfy 0 < min_magnitude < max_magnitude < inf, "
                f"got ({self.min_magnitude!r}, {self.max_magnitude!r})"
            )
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int | np.integer) or self.window < 2
        ):
            raise ValueError(f"window must be an integer of at least 2 buckets, got {self.window!r}")

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
        """Count the value slots of the full layout: both signs' buckets, zero and ±inf (NaN not included).

        Returns
        -------
        int
            Slots of the full layout.
        """
        return 2 * self.n_buckets + 3

    @property
    def width(self) -> int:
        """Count the int64 counts a state keeps per feature: both windows, ±inf, zero and NaN.

        Returns
        -------
        int
            ``2 * window + 4``.
        """
        return 2 * self.buckets_kept + 4

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
            counts=xp.zeros((n_features, self.width), dtype=xp.int64, device=dev),
            offset=xp.full((n_features, 2), self.n_buckets, dtype=xp.int64, device=dev),
            fmin=xp.full((n_features,), xp.inf, dtype=xp.float64, device=dev),
            fmax=xp.full((n_features,), -xp.inf, dtype=xp.float64, device=dev),
        )

    def slots(self, x: Array) -> Array:
        """Find the slot of the full layout of every value of the float64 ``x``.

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
        key, bucketed = self._keys(x)
        slot = xp.where(x > 0, key + (n + 2), n - key)
        del key
        slot = xp.where(bucketed, slot, xp.full_like(slot, n + 1))  # zero and tiny magnitudes
        slot = xp.where(x == xp.inf, xp.full_like(slot, 2 * n + 2), slot)
        slot = xp.where(x == -xp.inf, xp.zeros_like(slot), slot)
        return xp.where(xp.isnan(x), xp.full_like(slot, 2 * n + 3), slot)

    def _keys(self, x: Array) -> tuple[Array, Array]:
        """Bucket keys (0 based, int64) of the float64 ``x`` and where a value has one (a finite magnitude in range)."""
        xp = namespace(x)
        k_min, k_max = self.key_range
        a = xp.abs(x)
        bucketed = (a >= self.min_magnitude) & (a < xp.inf)
        logs = xp.log(xp.where(bucketed, a, xp.ones_like(a))) / self.ln_gamma
        del a
        # Clamp before the cast: larger magnitudes go to the overflow bucket.
        return xp.astype(xp.clip(xp.ceil(logs), float(k_min), float(k_max)), xp.int64) - k_min, bucketed

    def _window(self, xp: Namespace, lo: Array, hi: Array) -> Array:
        """First key of the window that holds keys ``lo..hi`` (``hi < 0``: empty), collapsing the lowest beyond ``window``.

        Never above ``n_buckets - window``: a window does not reach past the
        overflow key, and one that holds every bucket always starts at 0 (its
        merges are additions).
        """
        w = self.buckets_kept
        first = xp.minimum(xp.maximum(lo, hi - (w - 1)), xp.full_like(lo, self.n_buckets - w))
        return xp.where(hi >= 0, first, xp.full_like(first, self.n_buckets))

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
            if weights is None:
                return empty
            return SketchState(counts=xp.astype(empty.counts, xp.float64), offset=empty.offset, fmin=empty.fmin,
                               fmax=empty.fmax)
        if kernels.kernel_path(x, self).compiled:  # compiled CPU loop (daskbatch/stats/kernels), same state
            k_min, k_max = self.key_range
            counts, offset, fmin, fmax = kernels.sketch(
                x, self.ln_gamma, self.min_magnitude, k_min, k_max, self.n_buckets, self.buckets_kept, weights
            )
            return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax)
        x = as_float64(x)
        n, w = self.n_buckets, self.buckets_kept
        key, bucketed = self._keys(x)
        pos = bucketed & (x > 0)
        neg = bucketed & (x < 0)
        offsets = []
        column = xp.full_like(key, 2 * w + 1)  # zero and tiny magnitudes
        for side, mask in enumerate((neg, pos)):
            lo = xp.min(xp.where(mask, key, xp.full_like(key, n)), axis=0)
            first = self._window(xp, lo, xp.max(xp.where(mask, key, xp.full_like(key, -1)), axis=0))
            offsets.append(first)
            # Keys below the window's first are collapsed into it.
            local = xp.clip(key - first[None, :], 0, w - 1) + side * w
            column = xp.where(mask, local, column)
            del local
        del key, pos, neg
        column = xp.where(x == -xp.inf, xp.full_like(column, 2 * w), column)
        column = xp.where(x == xp.inf, xp.full_like(column, 2 * w + 2), column)
        column = xp.where(xp.isnan(x), xp.full_like(column, 2 * w + 3), column)
        width = self.width
        flat = column + xp.arange(n_features, dtype=xp.int64, device=dev) * width
        del column
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
            offset=xp.stack(offsets, axis=1),
            fmin=xp.min(xp.where(finite, x, inf), axis=0),
            fmax=xp.max(xp.where(finite, x, -inf), axis=0),
        )

    def merge(self, a: SketchState, b: SketchState, /) -> SketchState:
        """Align the windows of two states, add their counts and combine their extrema.

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
        fmin, fmax = xp.minimum(a.fmin, b.fmin), xp.maximum(a.fmax, b.fmax)
        if self.buckets_kept == self.n_buckets:  # every bucket kept: every window starts at 0 (or is empty)
            return SketchState(counts=a.counts + b.counts, offset=xp.minimum(a.offset, b.offset), fmin=fmin, fmax=fmax)
        if kernels.kernel_path(a.counts, self).compiled and kernels.kernel_path(b.counts, self).compiled:
            counts, offset = kernels.sketch_merge(a.counts, a.offset, b.counts, b.offset, self.n_buckets, self.buckets_kept)
            return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax)
        # Blocks of features, written into the result: no temporary grows with the whole state.
        n_features, width = a.counts.shape
        # int64 counts, float64 sums of weights where either state is weighted
        counts = xp.zeros((n_features, width), dtype=xp.result_type(a.counts, b.counts), device=device(a.counts))
        offsets = []
        for start in range(0, n_features, MERGE_ROWS):
            rows = slice(start, min(start + MERGE_ROWS, n_features))
            part_a = SketchState(counts=a.counts[rows, :], offset=a.offset[rows, :], fmin=a.fmin, fmax=a.fmax)
            part_b = SketchState(counts=b.counts[rows, :], offset=b.offset[rows, :], fmin=b.fmin, fmax=b.fmax)
            block, offset = self._merge_rows(xp, part_a, part_b)
            counts[rows, :] = block
            offsets.append(offset)
        offset = xp.concat(offsets, axis=0) if offsets else xp.asarray(a.offset, copy=True)
        return SketchState(counts=counts, offset=offset, fmin=fmin, fmax=fmax)

    def _merge_rows(self, xp: Namespace, a: SketchState, b: SketchState) -> tuple[Array, Array]:
        """Merged counts and offsets of a block of features (the array-API merge)."""
        w = self.buckets_kept
        offset = self._window(xp, xp.minimum(a.offset, b.offset), xp.maximum(self._top(xp, a), self._top(xp, b)))
        if bool(xp.all(offset == a.offset)) and bool(xp.all(offset == b.offset)):
            return a.counts + b.counts, offset
        parts = [
            _shift(xp, a.counts[:, side * w : (side + 1) * w], offset[:, side] - a.offset[:, side])
            + _shift(xp, b.counts[:, side * w : (side + 1) * w], offset[:, side] - b.offset[:, side])
            for side in (0, 1)
        ]
        return xp.concat([*parts, a.counts[:, 2 * w :] + b.counts[:, 2 * w :]], axis=1), offset

    def _top(self, xp: Namespace, s: SketchState) -> Array:
        """Largest populated key of each feature and sign (D, 2), -1 where a window is empty."""
        w = self.buckets_kept
        i = xp.arange(w, dtype=xp.int64, device=device(s.counts))
        tops = []
        for side in (0, 1):
            held = s.counts[:, side * w : (side + 1) * w] > 0
            last = xp.max(xp.where(held, i[None, :], xp.full_like(i, -1)[None, :]), axis=1)
            tops.append(xp.where(last >= 0, s.offset[:, side] + last, last))
        return xp.stack(tops, axis=1)

    def finalize(self, s: SketchState, /) -> SketchResult:
        """Put a state's slots in value order and split off the NaN counts and the finite extrema.

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
        w = self.buckets_kept
        some = s.fmin <= s.fmax
        nan = xp.full_like(s.fmin, xp.nan)
        c = s.counts
        counts = xp.concat(
            [c[:, 2 * w : 2 * w + 1], xp.flip(c[:, :w], axis=1), c[:, 2 * w + 1 : 2 * w + 2], c[:, w : 2 * w],
             c[:, 2 * w + 2 : 2 * w + 3]],
            axis=1,
        )
        return SketchResult(
            counts=counts,
            offset=s.offset,
            nan_count=c[:, 2 * w + 3],
            finite_min=xp.where(some, s.fmin, nan),
            finite_max=xp.where(some, s.fmax, nan),
            alpha=float(self.alpha),
            min_magnitude=float(self.min_magnitude),
            max_magnitude=float(self.max_magnitude),
            window=int(self.buckets_kept),
        )


def _shift(xp: Namespace, counts: Array, by: Array) -> Array:
    """Move each row of the window ``counts`` (D, W) down by ``by`` (D,) columns: those pushed below 0 add into 0.

    Column ``j`` of the result is the sum of source columns ``j + by`` (all
    of those ``<= by`` for ``j = 0``), read as differences of the prefix
    sums: a gather, since the array API has no scatter-add.
    """
    d, w = counts.shape
    dev = device(counts)
    zero = xp.zeros((d, 1), dtype=counts.dtype, device=dev)
    prefix = xp.reshape(xp.concat([zero, xp.cumulative_sum(counts, axis=1)], axis=1), (-1,))  # (D, W + 1)
    j = xp.arange(w, dtype=xp.int64, device=dev)[None, :]
    row = xp.arange(d, dtype=xp.int64, device=dev)[:, None] * (w + 1)
    upper = xp.clip(j + by[:, None] + 1, 0, w) + row
    lower = xp.where(j == 0, row, xp.clip(j + by[:, None], 0, w) + row)
    shape = (d, w)
    return xp.reshape(xp.take(prefix, xp.reshape(upper, (-1,))), shape) - xp.reshape(
        xp.take(prefix, xp.reshape(lower, (-1,))), shape
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
    """Give the value every slot of the full layout answers, in slot order.

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
    """Estimate quantiles ``q`` of every feature from a run of consecutive slots' counts (host NumPy).

    Parameters
    ----------
    counts : ndarray, shape (D, W)
        Slots ``first_slot .. first_slot + W - 1`` of the full layout (a run
        that holds every non-zero count, as :meth:`SketchResult.dense` or a
        saved summary gives).
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
        As :func:`sketch_quantile_at`.
    """
    width = counts.shape[1]
    if first_slot + width > sketch.n_slots:
        raise ValueError(f"{width} sketch slots from slot {first_slot} exceed the layout's {sketch.n_slots}")
    slots = np.arange(first_slot, first_slot + width, dtype=np.int64)[None, :]
    return sketch_quantile_at(counts, slots, sketch, vmin, vmax, q)


def sketch_quantile_at(
    counts: np.ndarray,
    slots: np.ndarray,
    sketch: Sketch,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | Any,
) -> np.ndarray:
    """Estimate quantiles ``q`` of every feature from counts in value order and the slot of every column (host NumPy).

    Parameters
    ----------
    counts : ndarray, shape (D, C)
        Counts, in increasing order of value along each row.
    slots : ndarray of int, shape (D, C) or (1, C)
        The slot of the full layout each column counts (the same for every
        feature when one row).
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
    values = sketch_values(sketch)
    lo = np.where(np.isfinite(vmin), vmin, -np.inf)
    hi = np.where(np.isfinite(vmax), vmax, np.inf)
    overflow_neg, overflow_pos = 1, sketch.n_slots - 2
    shared = slots.shape[0] == 1
    out = np.full((n_features, qs.size), np.nan)
    for d in range(n_features):
        cdf = np.cumsum(counts[d], dtype=np.int64 if counts.dtype.kind in "iu" else np.float64)
        total = cdf[-1] if width else 0
        if total == 0:
            continue
        rank = inverted_cdf_rank(qs, total, counts.dtype)  # numpy's inverted_cdf rank, 1-based
        slot = slots[0 if shared else d, np.searchsorted(cdf, rank, side="left")]
        v = values[slot]
        v = np.where(slot == overflow_neg, lo[d], np.where(slot == overflow_pos, hi[d], v))
        finite = np.isfinite(v)
        out[d] = np.where(finite, np.clip(v, lo[d], hi[d]), v)
    return out[:, 0] if np.ndim(q) == 0 else out


#: int64 counts and offsets per feature of the default sketch's state (both windows, -inf, zero,
#: +inf and NaN, and the two windows' first keys).
SKETCH_SLOTS = Sketch().width + 2


def footprint_for(window: int | None) -> Footprint:
    """Give the planner's footprint of a :class:`Sketch` with ``window`` buckets per sign (None: all).

    The array API makes a float64 copy and magnitudes, logs, keys, columns and
    masks; the bincount output sits next to the state. A merge of NumPy states
    is one compiled loop into the result; the array-API merge builds prefix
    sums and gather indices for :data:`MERGE_ROWS` features at a time. The second
    pass's quantile histogram (QUANTILE_BINS int64 a feature, 16 kB) replaces
    the sketch's state there, so the sketch's first-pass footprint is the larger one.

    Parameters
    ----------
    window : int or None
        ``Sketch.window``.

    Returns
    -------
    Footprint
        Its memory, for :mod:`daskbatch.planning`.
    """
    slots = Sketch(window=window).width + 2
    return Footprint(
        name="sketch",
        state=lambda d, bins, k, tile: d * slots * 8 + 2 * d * 8,  # counts, offsets, finite extrema
        # no GPU kernel: on the GPU the array-API code runs
        float64_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 1},
        temporaries={
            "compiled": {},
            "array-api": {"float64": 3, "int64": 3, "bool": 3},
            "gpu-compiled": {"float64": 3, "int64": 3, "bool": 3},
        },
        state_copies={"compiled": 0, "array-api": 1, "gpu-compiled": 1},
        merge_temporaries=0,  # a merge writes into its result, MERGE_ROWS features at a time
    )


#: The default sketch's footprint (every bucket kept: 221 kB a feature).
FOOTPRINT = footprint_for(None)
#: The footprint of the sketch with :data:`WINDOW` buckets per sign (33 kB a feature), which
#: ``describe`` plans for when the default does not fit.
WINDOWED_FOOTPRINT = footprint_for(WINDOW)
