"""Where a sketch puts every value, and how its counts are read back as quantiles.

:class:`SketchLayout` holds a :class:`~daskbatch.stats.sketch.Sketch`'s parameters and what follows:
bucket keys, slots, windows. Outside the magnitude range: ``|v| < min_magnitude`` counts as zero,
beyond ``max_magnitude`` an overflow bucket answers the exact extreme; ``±inf`` have own slots.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import Array, Namespace
from daskbatch.stats.numerics import bincount, device, namespace, weighted_bincount

#: Features merged at a time by the array-API merge (its temporaries stay this many rows).
MERGE_ROWS = 256


@dataclass(frozen=True)
class SketchLayout:
    """The parameters of a sketch and the bucket layout they fix (the base of :class:`~daskbatch.stats.sketch.Sketch`)."""

    alpha: float = 0.005
    min_magnitude: float = 1e-30
    max_magnitude: float = 1e30
    window: int | None = None

    @property
    def buckets_kept(self) -> int:
        """Count the buckets a state keeps per feature and sign: ``window``, or all of them."""
        return min(self.window, self.n_buckets) if self.window is not None else self.n_buckets

    def __post_init__(self) -> None:
        flags = [name for name in ("alpha", "min_magnitude", "max_magnitude") if isinstance(getattr(self, name), bool)]
        if flags:  # True would be taken as 1.0
            raise TypeError(f"{flags[0]} must be a number, got {getattr(self, flags[0])!r} (a bool)")
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
        """Compute ``log(gamma)``, the log of the bucket growth factor (log1p: accurate at small ``alpha``)."""
        return math.log1p(2.0 * self.alpha / (1.0 - self.alpha))

    @property
    def key_range(self) -> tuple[int, int]:
        """Give the smallest key, ``ceil(log_gamma min_magnitude)``, and the overflow key one above that of ``max_magnitude``."""
        return (
            math.ceil(math.log(self.min_magnitude) / self.ln_gamma),
            math.ceil(math.log(self.max_magnitude) / self.ln_gamma) + 1,
        )

    @property
    def n_buckets(self) -> int:
        """Count the buckets per sign, the overflow bucket included."""
        k_min, k_max = self.key_range
        return k_max - k_min + 1

    @property
    def n_slots(self) -> int:
        """Count the value slots of the full layout: both signs' buckets, zero and ±inf (NaN not included)."""
        return 2 * self.n_buckets + 3

    @property
    def width(self) -> int:
        """Count the int64 counts a state keeps per feature: both windows, ±inf, zero and NaN (``2 * window + 4``)."""
        return 2 * self.buckets_kept + 4

    def slots(self, x: Array) -> Array:
        """Find the int64 slot (R, D) of the full layout of every value of the float64 block ``x``; NaN gets ``n_slots``."""
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
        """First key of the window that holds keys ``lo..hi`` (``hi < 0``: empty), collapsing the lowest beyond ``window``."""
        # Never above ``n_buckets - window``: a window does not reach past the
        # overflow key, and one that holds every bucket always starts at 0 (its
        # merges are additions).
        w = self.buckets_kept
        first = xp.minimum(xp.maximum(lo, hi - (w - 1)), xp.full_like(lo, self.n_buckets - w))
        return xp.where(hi >= 0, first, xp.full_like(first, self.n_buckets))

    def _xp_counts(self, x: Array, weights: Array | None, count_dtype: str) -> tuple[Array, Array, Array, Array]:
        """Counts (D, width), offsets and finite extrema of a float64 block, with array-API calls (CuPy)."""
        xp = namespace(x)
        n_features = x.shape[1]
        dev = device(x)
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
            counts = xp.astype(counts, getattr(xp, count_dtype), copy=False)
        else:
            each = xp.reshape(xp.broadcast_to(weights[:, None], flat.shape), (-1,))
            counts = weighted_bincount(xp, xp.reshape(flat, (-1,)), each, minlength=n_features * width)
        del flat
        finite = xp.isfinite(x)
        inf = xp.full_like(x, xp.inf)
        fmin, fmax = xp.min(xp.where(finite, x, inf), axis=0), xp.max(xp.where(finite, x, -inf), axis=0)
        del finite, inf
        return xp.reshape(counts, (n_features, width)), xp.stack(offsets, axis=1), fmin, fmax

    def _xp_merge(self, counts_a: Array, offset_a: Array, counts_b: Array, offset_b: Array) -> tuple[Array, Array]:
        """Merged window counts and offsets of two states, with array-API calls, :data:`MERGE_ROWS` features at a time."""
        # Written into the result: no temporary grows with the whole state.
        xp = namespace(counts_a, counts_b)
        w = self.buckets_kept
        n_features, width = counts_a.shape
        # int64 counts, float64 sums of weights where either state is weighted
        counts = xp.zeros((n_features, width), dtype=xp.result_type(counts_a, counts_b), device=device(counts_a))
        offsets = []
        for start in range(0, n_features, MERGE_ROWS):
            rows = slice(start, min(start + MERGE_ROWS, n_features))
            a, b = counts_a[rows, :], counts_b[rows, :]
            off_a, off_b = offset_a[rows, :], offset_b[rows, :]
            offset = self._window(xp, xp.minimum(off_a, off_b), xp.maximum(self._top(xp, a, off_a), self._top(xp, b, off_b)))
            if bool(xp.all(offset == off_a)) and bool(xp.all(offset == off_b)):
                counts[rows, :] = a + b
            else:
                parts = [
                    _shift(xp, a[:, side * w : (side + 1) * w], offset[:, side] - off_a[:, side])
                    + _shift(xp, b[:, side * w : (side + 1) * w], offset[:, side] - off_b[:, side])
                    for side in (0, 1)
                ]
                counts[rows, :] = xp.concat([*parts, a[:, 2 * w :] + b[:, 2 * w :]], axis=1)
            offsets.append(offset)
        return counts, xp.concat(offsets, axis=0) if offsets else xp.asarray(offset_a, copy=True)

    def _top(self, xp: Namespace, counts: Array, offset: Array) -> Array:
        """Largest populated key of each feature and sign (D, 2), -1 where a window is empty."""
        w = self.buckets_kept
        i = xp.arange(w, dtype=xp.int64, device=device(counts))
        tops = []
        for side in (0, 1):
            held = counts[:, side * w : (side + 1) * w] > 0
            last = xp.max(xp.where(held, i[None, :], xp.full_like(i, -1)[None, :]), axis=1)
            tops.append(xp.where(last >= 0, offset[:, side] + last, last))
        return xp.stack(tops, axis=1)


def collapse_floor(counts: np.ndarray, slots: np.ndarray, sketch: SketchLayout) -> np.ndarray:
    """Find the windows that may have collapsed, from counts in value order and their slots of the full layout."""
    n = sketch.n_buckets
    k_min, _ = sketch.key_range
    slots = np.broadcast_to(slots, counts.shape)
    held = counts > 0
    big = np.iinfo(np.int64).max
    out = np.zeros((counts.shape[0], 2))
    for side, (lo_slot, hi_slot) in enumerate(((1, n), (n + 2, 2 * n + 1))):
        mask = held & (slots >= lo_slot) & (slots <= hi_slot)
        # initial=: a sketch of no finite value (every feature all NaN) has no columns at all.
        first = np.min(slots, axis=1, where=mask, initial=big)  # where=: no (D, L) int64 copy per side
        last = np.max(slots, axis=1, where=mask, initial=-1)
        full = (last >= 0) & (last - first >= sketch.buckets_kept - 1)
        # The smallest magnitude: the last negative slot (key n - slot), the first positive one.
        key = (n - last) if side == 0 else (first - (n + 2))
        with np.errstate(over="ignore"):
            top = np.exp((key + k_min) * sketch.ln_gamma) * (1.0 + 1e-9)
        out[:, side] = np.where(full, top, 0.0)
    return out


def _window_slots(offset: np.ndarray, n: int, w: int, columns: slice | np.ndarray = slice(None)) -> np.ndarray:
    """Slots of the full layout of a result's ``columns`` (all by default, or a (D, L) array of columns per feature)."""
    offset = np.asarray(offset, dtype=np.int64)
    c = np.arange(2 * w + 3, dtype=np.int64)[columns] if isinstance(columns, slice) else columns
    # Columns 1..w: the negative window, largest magnitude first (key k sits in slot n - k);
    # w + 2..2w + 1: the positive one; 0, w + 1 and 2w + 2: -inf, zero and +inf.
    neg = np.clip(n - (offset[:, :1] + (w - c)), 1, n)
    pos = np.clip(n + 2 + offset[:, 1:] + (c - (w + 2)), n + 2, 2 * n + 1)
    out = np.where(c <= w, neg, pos)
    out = np.where(c == 0, 0, out)
    out = np.where(c == w + 1, n + 1, out)
    return np.where(c == 2 * w + 2, 2 * n + 2, out)


def _held_runs(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give the non-empty columns of each feature in order, (D, L), and which are real."""
    # In row-major order: each row's columns in order (a flat search is ~6x faster than np.nonzero on 2-D).
    rows, columns = np.divmod(np.flatnonzero(counts.ravel() != 0), counts.shape[1])
    held = np.bincount(rows, minlength=counts.shape[0])
    starts = np.cumsum(held) - held
    inside = np.arange(int(held.max(initial=0)))[None, :] < held[:, None]
    out = np.zeros(inside.shape, dtype=np.int64)
    out[rows, np.arange(rows.size) - starts[rows]] = columns
    last = np.zeros((counts.shape[0], 1), dtype=np.int64)
    some = np.flatnonzero(held)
    last[some, 0] = out[some, held[some] - 1]
    return np.where(inside, out, last), inside


#: Cumulative counts times probabilities :func:`sketch_quantile_at` compares at a time (its temporaries).
_QUANTILE_BLOCK = 2**22


def probabilities(q: float | Any) -> np.ndarray:
    """The probabilities ``q`` (a number or 1-D) as float64 (P,), checked to lie in [0, 1]."""
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if qs.ndim != 1 or np.any(np.isnan(qs)) or np.any((qs < 0) | (qs > 1)):
        raise ValueError(f"quantile probabilities must lie in [0, 1], got {q!r}")
    return qs


def inverted_cdf_rank(qs: np.ndarray, total: Any, dtype: Any) -> np.ndarray:
    """Give the rank that ``numpy.quantile(..., method="inverted_cdf")`` looks up in a cumulative count."""
    total = np.asarray(total, dtype=np.float64)  # a number, or an array that broadcasts against qs
    rank: np.ndarray = (np.maximum(np.ceil(qs * total), 1.0) if np.dtype(dtype).kind in "iu"
                        else np.maximum(qs * total, np.finfo(np.float64).tiny))
    return rank


@functools.lru_cache(maxsize=16)  # 27,600 values a layout, read once per quantile call
def sketch_values(sketch: SketchLayout) -> np.ndarray:
    """Give the value every slot of the full layout answers, in slot order."""
    k_min, k_top = sketch.key_range
    keys = np.arange(k_min, k_top, dtype=np.float64)
    # gamma**k * (1 - alpha) = 2 gamma**k / (gamma + 1): within alpha of all of (gamma**(k-1), gamma**k].
    mid = np.exp(keys * sketch.ln_gamma) * (1.0 - sketch.alpha)
    values = np.concatenate([[-np.inf, np.nan], -mid[::-1], [0.0], mid, [np.nan, np.inf]])
    values.flags.writeable = False  # cached: shared by every caller
    return values


def slot_bounds(sketch: SketchLayout) -> tuple[np.ndarray, np.ndarray]:
    """Give the smallest and largest value every slot may hold, in slot order."""
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
    sketch: SketchLayout,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | Any,
) -> np.ndarray:
    """Estimate quantiles ``q`` of every feature from a run of consecutive slots' counts (host NumPy)."""
    width = counts.shape[1]
    if first_slot + width > sketch.n_slots:
        raise ValueError(f"{width} sketch slots from slot {first_slot} exceed the layout's {sketch.n_slots}")
    slots = np.arange(first_slot, first_slot + width, dtype=np.int64)[None, :]
    return sketch_quantile_at(counts, slots, sketch, vmin, vmax, q)


def sketch_quantile_at(
    counts: np.ndarray,
    slots: np.ndarray,
    sketch: SketchLayout,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | Any,
) -> np.ndarray:
    """Estimate quantiles ``q`` of every feature from counts in value order and the slot of every column (host NumPy)."""
    qs = probabilities(q)
    n_features, width = counts.shape
    values = sketch_values(sketch)
    lo = np.where(np.isfinite(vmin), vmin, -np.inf)[:, None]
    hi = np.where(np.isfinite(vmax), vmax, np.inf)[:, None]
    overflow_neg, overflow_pos = 1, sketch.n_slots - 2
    out = np.full((n_features, qs.size), np.nan)
    # Features a block at a time: the cumulative counts (and the comparisons with the ranks) stay small.
    step = max(1, _QUANTILE_BLOCK // max(1, width * qs.size))
    for start in range(0, n_features, step):
        rows = slice(start, min(start + step, n_features))
        cdf = np.cumsum(counts[rows], axis=1, dtype=np.int64 if counts.dtype.kind in "iu" else np.float64)
        total = cdf[:, -1] if width else np.zeros(cdf.shape[0], dtype=cdf.dtype)
        rank = inverted_cdf_rank(qs[None, :], total[:, None], counts.dtype)
        # numpy's inverted_cdf: the first column whose cumulative count reaches the rank (searchsorted, side="left")
        # A search per feature: a table of comparisons (features x ranks x columns) cost ~10x more at 64 features.
        below = np.empty(rank.shape, dtype=np.intp)
        for i in range(cdf.shape[0]):
            below[i] = np.searchsorted(cdf[i], rank[i], side="left")
        column = np.minimum(below, max(width - 1, 0))
        slot = np.take_along_axis(slots[rows] if slots.shape[0] > 1 else np.broadcast_to(slots, cdf.shape), column,
                                  axis=1) if width else np.zeros_like(column)
        v = values[slot]
        v = np.where(slot == overflow_neg, lo[rows], np.where(slot == overflow_pos, hi[rows], v))
        with np.errstate(invalid="ignore"):
            v = np.where(np.isfinite(v), np.clip(v, lo[rows], hi[rows]), v)
        out[rows] = np.where((total > 0)[:, None], v, np.nan)
    return out[:, 0] if np.ndim(q) == 0 else out


def _shift(xp: Namespace, counts: Array, by: Array) -> Array:
    """Move each row of the window ``counts`` (D, W) down by ``by`` (D,) columns: those pushed below 0 add into 0."""
    # Column ``j`` of the result is the sum of source columns ``j + by`` (all
    # of those ``<= by`` for ``j = 0``), read as differences of the prefix
    # sums: a gather, since the array API has no scatter-add.
    d, w = counts.shape
    dev = device(counts)
    zero = xp.zeros((d, 1), dtype=counts.dtype, device=dev)
    # In the counts' dtype: an int32 prefix sum stays below the rows counted, which a merge keeps below 2**31.
    prefix = xp.reshape(xp.concat([zero, xp.cumulative_sum(counts, axis=1, dtype=counts.dtype)], axis=1), (-1,))
    j = xp.arange(w, dtype=xp.int64, device=dev)[None, :]
    row = xp.arange(d, dtype=xp.int64, device=dev)[:, None] * (w + 1)
    upper = xp.clip(j + by[:, None] + 1, 0, w) + row
    lower = xp.where(j == 0, row, xp.clip(j + by[:, None], 0, w) + row)
    shape = (d, w)
    return xp.reshape(xp.take(prefix, xp.reshape(upper, (-1,))), shape) - xp.reshape(
        xp.take(prefix, xp.reshape(lower, (-1,))), shape
    )
