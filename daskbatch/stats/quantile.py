"""Quantiles read from counts: a finished sketch (:class:`SketchResult`), histograms, or both.

:func:`fine_quantile` reads each rank in the second pass's fine histogram and the sketch: within
``min(w, 2·alpha/(1 - alpha)·|v|)`` of ``numpy.quantile(..., method="inverted_cdf")`` inside the fine
range, ``alpha·|v|`` outside (measured errors: ``benchmarks/RESULTS.md``). :func:`histogram_quantile`
interpolates within one bin of a plain histogram.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.numerics import to_numpy
from daskbatch.stats.sketch_distinct import distinct_quantile
from daskbatch.stats.sketch_layout import (
    SketchLayout,
    _held_runs,
    _window_slots,
    collapse_floor,
    inverted_cdf_rank,
    probabilities,
    sketch_quantile,
    sketch_quantile_at,
    slot_bounds,
)


@dataclass(frozen=True, eq=False)
class SketchResult:
    """A finalized sketch: per feature, its ``2 W + 3`` window slots in value order, NaN counts and finite extrema.

    ``counts`` (D, 2 W + 3) int64 (float64 when weighted) holds ``-inf``, the negative window (largest
    magnitude first), zero, the positive window and ``+inf``; ``offset`` (D, 2)
    the windows' first keys, as in :class:`~daskbatch.stats.sketch.SketchState`; :meth:`slots` maps
    every column to its slot of the full layout. ``finite_min``/``finite_max``
    are NaN for a feature without finite values. The parameters of the
    :class:`~daskbatch.stats.sketch.Sketch` that made it ride along so that :meth:`quantile` can read it.
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
    #: The distinct values (and their counts and number, ``k + 1`` when too many), as :class:`~daskbatch.stats.sketch.SketchState`'s.
    distinct: Array | None = None
    distinct_counts: Array | None = None
    distinct_held: Array | None = None

    @property
    def layout(self) -> SketchLayout:
        """Give the layout the counts were made with: the sketch's parameters."""  # numpydoc ignore=RT01
        return SketchLayout(self.alpha, self.min_magnitude, self.max_magnitude, self.window)

    def slots(self, columns: slice = slice(None)) -> np.ndarray:
        """Give the read-only int64 slots (D, 2 W + 3) of the full layout of ``columns`` of ``counts`` (window ends map to the nearest end slot)."""  # numpydoc ignore=PR01,RT01
        if columns == slice(None):
            return self._slots
        return _window_slots(to_numpy(self.offset), self.layout.n_buckets, self.window, columns)

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """Give each feature's non-empty columns in value order, (D, L) counts and slots, zero-padded on the right; read-only, found once."""  # numpydoc ignore=RT01
        return self._runs

    @functools.cached_property
    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`runs`, found once."""
        counts = to_numpy(self.counts)
        columns, inside = _held_runs(counts)
        run = np.where(inside, np.take_along_axis(counts, columns, axis=1), np.zeros((), dtype=counts.dtype))
        slots = _window_slots(to_numpy(self.offset), self.layout.n_buckets, self.window, columns)
        for a in (run, slots):
            a.flags.writeable = False
        return run, slots

    @functools.cached_property
    def _slots(self) -> np.ndarray:
        """:meth:`slots`, found once (a frozen result's slots never change)."""
        slots = _window_slots(to_numpy(self.offset), self.layout.n_buckets, self.window)
        slots.flags.writeable = False
        return slots

    def collapse_floor(self) -> np.ndarray:
        """Give (D, 2), per sign, the magnitude at or below which a full window's answers are bounded by it, not ``alpha`` (else 0)."""  # numpydoc ignore=RT01
        return collapse_floor(*self.runs(), self.layout)  # empty columns change no floor

    def quantile(self, q: float | Any) -> np.ndarray:
        """Estimate quantiles ``q`` of every feature, within ``alpha`` of the exact ``inverted_cdf`` ones.

        Ranks in buckets collapsed into a window's first bucket (see
        :mod:`daskbatch.stats.sketch`) are within ``gamma**offset`` in absolute terms only.

        Parameters
        ----------
        q : float or array_like
            Probabilities in [0, 1].

        Returns
        -------
        numpy.ndarray
            Shape (D,) for a scalar ``q``, else (D, len(q)); NaN for a feature without values.
        """
        values = sketch_quantile_at(  # no rank lands on an empty column
            *self.runs(), self.layout,
            to_numpy(self.finite_min), to_numpy(self.finite_max), q,
        )
        exact = self.exact_quantile(q)
        return values if exact is None else np.where(np.isnan(exact), values, exact)

    def exact_quantile(self, q: float | Any) -> np.ndarray | None:
        """Give the exact ``inverted_cdf`` quantiles of features whose distinct values are all kept (NaN elsewhere; None without them)."""  # numpydoc ignore=PR01,RT01
        if self.distinct is None or self.distinct_counts is None or self.distinct_held is None:
            return None
        counts = to_numpy(self.counts)
        exact = distinct_quantile(
            to_numpy(self.distinct), to_numpy(self.distinct_counts), to_numpy(self.distinct_held),
            counts[:, 0], counts[:, -1], q, weighted=counts.dtype.kind == "f",
        )
        return exact[:, 0] if np.ndim(q) == 0 else exact



def histogram_quantile(
    counts: np.ndarray,
    edges: np.ndarray,
    underflow: np.ndarray,
    overflow: np.ndarray,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | np.ndarray,
) -> np.ndarray:
    """Interpolate quantiles ``q`` (scalar or 1-D, in [0, 1]) of each feature from its histogram.

    Parameters
    ----------
    counts : ndarray, shape (D, B)
        In-range bin counts.
    edges : ndarray, shape (D, B + 1)
        Bin edges.
    underflow, overflow : ndarray, shape (D,)
        Counts below the first and above the last edge.
    vmin, vmax : ndarray, shape (D,)
        Feature minimum and maximum (where out-of-range mass is placed).
    q : float or array_like
        Probabilities in [0, 1].

    Returns
    -------
    ndarray
        Shape (D,) or (D, len(q)); NaN for a feature without values.
    """
    qs = probabilities(q)
    n_features, n_bins = counts.shape
    lo, hi = edges[:, 0], edges[:, -1]
    left_end = np.where(np.isfinite(vmin) & (vmin < lo), vmin, lo)
    right_end = np.where(np.isfinite(vmax) & (vmax > hi), vmax, hi)
    cells = np.concatenate([underflow[:, None], counts, overflow[:, None]], axis=1).astype(np.float64)
    bounds = np.concatenate([left_end[:, None], edges, right_end[:, None]], axis=1)
    cdf = np.cumsum(cells, axis=1)
    total = cdf[:, -1]
    floor = np.where(np.isfinite(vmin), vmin, -np.inf)  # answers stay inside [min, max]
    ceiling = np.where(np.isfinite(vmax), vmax, np.inf)
    out = np.full((n_features, qs.size), np.nan)
    for j, p in enumerate(qs):
        rank = p * total
        # First non-empty cell whose cumulative count reaches the rank.
        reach = (cdf >= rank[:, None]) & (cells > 0)
        cell = np.argmax(reach, axis=1)
        rows = np.arange(n_features)
        before = cdf[rows, cell] - cells[rows, cell]
        frac = np.clip((rank - before) / np.where(cells[rows, cell] > 0, cells[rows, cell], 1.0), 0.0, 1.0)
        left, right = bounds[rows, cell], bounds[rows, cell + 1]
        # A given range may reach far beyond the data: a bin holding them all is wider than they are.
        v = np.clip(left + frac * (right - left), floor, ceiling)
        out[:, j] = np.where(total > 0, v, np.nan)
    return out[:, 0] if np.ndim(q) == 0 else out


def fine_quantile(
    sketch_counts: np.ndarray,
    first_slot: int,
    sketch: SketchLayout,
    vmin: np.ndarray,
    vmax: np.ndarray,
    q: float | Any,
    *,
    fine: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:  # numpydoc ignore=PR01,RT01
    """Estimate quantiles ``q`` of each feature from its sketch, refined by its quantile histogram when given."""
    values = np.atleast_2d(sketch_quantile(sketch_counts, first_slot, sketch, vmin, vmax, np.atleast_1d(q)))
    values = _extremes_at_their_ranks(values, sketch_counts, first_slot, sketch, vmin, vmax, q)
    if fine is None:
        return values[:, 0] if np.ndim(q) == 0 else values
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    counts, ranges = np.asarray(fine[0]), np.asarray(fine[1], dtype=np.float64)
    n_features, width = counts.shape
    bins = width - 2
    lower, upper = slot_bounds(sketch)
    lower, upper = lower[first_slot : first_slot + sketch_counts.shape[1]], upper[first_slot : first_slot + sketch_counts.shape[1]]
    step = (ranges[:, 1] - ranges[:, 0]) / bins
    zero = sketch.n_buckets + 1 - first_slot
    slots = np.arange(first_slot, first_slot + sketch_counts.shape[1])[None, :]
    collapsed = collapse_floor(sketch_counts, slots, sketch) > 0
    weighted = counts.dtype.kind == "f" or sketch_counts.dtype.kind == "f"
    for d in range(n_features):
        cdf = np.cumsum(counts[d])
        total = cdf[-1]
        # Weighted counts are sums of floats in different orders: equal up to rounding.
        same = np.isclose(total, sketch_counts[d].sum(), rtol=1e-12, atol=0) if weighted else (
            int(total) == int(sketch_counts[d].sum()))
        if total == 0 or not same:
            continue  # no values, or not the same rows: the sketch alone
        rank = qs * total
        at = inverted_cdf_rank(qs, total, np.float64 if weighted else np.int64)
        # The first non-empty cell whose cumulative count reaches the rank holds the exact quantile.
        cell = np.searchsorted(cdf, at, side="left")
        inside = (cell >= 1) & (cell <= bins)
        before = cdf[cell] - counts[d, cell]
        frac = np.clip((rank - before) / np.where(counts[d, cell] > 0, counts[d, cell], 1), 0.0, 1.0)
        left = ranges[d, 0] + (cell - 1) * step[d]
        right = np.where(cell == bins, ranges[d, 1], ranges[d, 0] + cell * step[d])
        v = left + frac * (right - left)
        slot = np.searchsorted(np.cumsum(sketch_counts[d]), at, side="left")
        low, up = lower, upper
        if collapsed[d].any():  # a full window's smallest-magnitude bucket may hold any smaller magnitude
            low, up = lower.copy(), upper.copy()
            held = np.flatnonzero(sketch_counts[d])
            if collapsed[d, 0]:
                up[held[held < zero].max()] = 0.0
            if collapsed[d, 1]:
                low[held[held > zero].min()] = 0.0
        # Where bin and bucket hold the same count they hold the same values: an integer on the
        # bin's left edge inside the bucket is then the value itself (integer data, pixels).
        atom = (np.floor(left) == left) & (counts[d, cell] == sketch_counts[d, slot])
        atom &= (low[slot] <= left) & (left <= up[slot])
        v = np.where(atom, left, np.clip(v, low[slot], up[slot]))
        v = np.where(slot == zero, 0.0, v)  # the zero slot holds zeros (and magnitudes below min_magnitude)
        lo = vmin[d] if np.isfinite(vmin[d]) else -np.inf
        hi = vmax[d] if np.isfinite(vmax[d]) else np.inf
        values[d] = np.where(inside, np.clip(v, lo, hi), values[d])
    values = _extremes_at_their_ranks(values, sketch_counts, first_slot, sketch, vmin, vmax, q)
    return values[:, 0] if np.ndim(q) == 0 else values


def _extremes_at_their_ranks(values: np.ndarray, sketch_counts: np.ndarray, first_slot: int, sketch: SketchLayout,
                             vmin: np.ndarray, vmax: np.ndarray, q: Any) -> np.ndarray:
    """``values`` with the ranks of the first and last finite value answered by the exact extrema (unweighted counts)."""
    if sketch_counts.dtype.kind == "f" or sketch_counts.shape[1] == 0:
        return values  # weighted ranks are fractions of a weight: no rank is the extreme's alone
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    total = sketch_counts.sum(axis=1, dtype=np.int64)
    # The run holds every non-zero count: -inf (slot 0) and +inf (the last slot) are in it when held.
    last = sketch.n_slots - 1 - first_slot
    below = sketch_counts[:, 0] if first_slot == 0 else np.zeros_like(total)
    above = sketch_counts[:, last] if last < sketch_counts.shape[1] else np.zeros_like(total)
    at = inverted_cdf_rank(qs[None, :], total[:, None], np.int64)
    values = np.where((at == below[:, None] + 1) & np.isfinite(vmin)[:, None], vmin[:, None], values)
    return np.where((at == (total - above)[:, None]) & np.isfinite(vmax)[:, None], vmax[:, None], values)
