"""Histogram ranges, given or found so that stray values cannot wreck them, and the checks on them.

From the first pass's sketch: values cut off from the bulk by a wide run of empty buckets
(sentinels such as -999, 1e30) are detached; histogram ranges span the bulk's ``[TAIL, 1 - TAIL]``
quantiles, widened; :func:`fine_ranges` rounds to power-of-two bins; :func:`suspect_values` flags
extremes whose bucket spikes (perhaps a "missing" code).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import warn
from daskbatch.errors import RangeWarning
from daskbatch.stats.quantile import SketchResult
from daskbatch.stats.sketch_layout import sketch_quantile_at, slot_bounds

#: Probability left out in each tail when a range is found from the sketch.
TAIL = 0.001
#: Widening of the quantile span on each side (fraction of the span).
WIDEN = 0.05
#: Fraction of a feature's values outside its histogram range that earns a RangeWarning.
OUT_OF_RANGE_LIMIT = 0.01
#: Tukey's "far out" fences: values beyond ``FENCE`` interquartile ranges from the quartiles may be detached.
FENCE = 3.0
#: Features whose bulks' tail quantiles are read at a time (a block of padded runs of slots).
_BULK_ROWS = 256
#: A run of empty sketch buckets spanning more than this factor in magnitude detaches what lies beyond it.
GAP = 2.0
#: ... and more than this many times the fences' width in value (a small sample's sparse tail has gaps too).
SEPARATION = 3.0
#: Largest fraction of a feature's values that may be detached; beyond it nothing is.
MAX_DETACHED = 0.1
#: A range ends on the bulk's outer sketch bucket's edge where that bucket is at most this fraction of the bulk's extent.
SNAP = 0.05


def _resolution(sketch: SketchResult, v: np.ndarray) -> np.ndarray:
    """The sketch's error bound at its answers ``v`` (D, k): ``alpha·|v| / (1 - alpha)`` plus the zero slot's width."""
    # Nudged up by 1e-6 (relative): a bucket's edge computed in float64 must not fall short of the bound.
    # An answer from a window's first bucket that may have collapsed (a full window) is bounded by its
    # magnitude only: the values it stands for may lie anywhere between it and zero.
    floor = _collapse_floor(sketch)
    with np.errstate(invalid="ignore", over="ignore"):  # near +-max the bound is inf: no snapping there
        out: np.ndarray = np.abs(v) * (sketch.alpha / (1.0 - sketch.alpha) * (1.0 + 1e-6)) + sketch.min_magnitude
        side_floor = np.where(v > 0, floor[:, 1:2], floor[:, 0:1])
        out = np.where((v != 0) & (np.abs(v) <= side_floor), out + np.abs(v), out)
    return out


def _collapse_floor(sketch: SketchResult) -> np.ndarray:
    """:meth:`SketchResult.collapse_floor`, found once per result."""
    found = _FLOOR_FOUND.get(sketch)
    if found is None:
        found = _FLOOR_FOUND[sketch] = sketch.collapse_floor()
    return found


_FLOOR_FOUND: weakref.WeakKeyDictionary[SketchResult, np.ndarray] = weakref.WeakKeyDictionary()


def _bulk(filled: np.ndarray, s_lo: int, s_hi: int, gap: int, width: float,
          lower: np.ndarray, upper: np.ndarray) -> tuple[int, int]:
    """First and last non-empty slot of ``[s_lo, s_hi]`` grown over the non-empty slots ``filled`` until a detaching gap."""
    # A gap detaches when it spans more than ``gap`` slots (a factor ``GAP`` in
    # magnitude) and more than ``width`` (``SEPARATION`` fences' widths) in value: a sparse
    # tail of a small sample is not cut off, a sentinel far from the data is.
    below = np.append(filled[filled < s_lo], s_lo)
    above = np.insert(filled[filled > s_hi], 0, s_hi)
    wide = (np.diff(below) > gap) & (lower[below[1:]] - upper[below[:-1]] > width)
    cut = np.flatnonzero(wide)
    first = int(below[cut[-1] + 1]) if cut.size else int(below[0])
    wide = (np.diff(above) > gap) & (lower[above[1:]] - upper[above[:-1]] > width)
    cut = np.flatnonzero(wide)
    last = int(above[cut[0]]) if cut.size else int(above[-1])
    inside = filled[(filled >= first) & (filled <= last)]  # the fences' own slots may be empty
    return (int(inside[0]), int(inside[-1])) if inside.size else (first, last)


def _bulk_tails(sketch: SketchResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bulk's tail quantiles and bounds of ``sketch``, found once: describe's histogram and quantile ranges share them."""
    found = _BULK_FOUND.get(sketch)
    if found is None:
        found = _find_bulk_tails(sketch)
        for a in found:  # shared by every caller: nobody may change them
            a.flags.writeable = False
        _BULK_FOUND[sketch] = found
    return found


#: What :func:`_find_bulk_tails` found for each sketch result alive (a pure function of a frozen result:
#: a loop over the features that costs about a second per 2,000 of them).
_BULK_FOUND: weakref.WeakKeyDictionary[SketchResult, tuple[np.ndarray, np.ndarray, np.ndarray]] = (
    weakref.WeakKeyDictionary()
)


def _find_bulk_tails(sketch: SketchResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``TAIL`` and ``1 - TAIL`` quantiles of each feature's bulk (D, 2), and the smallest and largest value it may hold."""
    layout = sketch.layout
    vmin, vmax = np.asarray(sketch.finite_min), np.asarray(sketch.finite_max)
    q1, q3 = _spread(sketch)
    with np.errstate(invalid="ignore", over="ignore"):
        iqr = q3 - q1
        fences = np.column_stack([q1 - FENCE * iqr, q3 + FENCE * iqr])
    known = np.isfinite(fences).all(axis=1)
    fence_slots = layout.slots(np.where(known[:, None], fences, 0.0))
    gap = int(math.ceil(math.log(GAP) / layout.ln_gamma))
    lo_edge, hi_edge = slot_bounds(layout)
    tails = sketch.quantile([TAIL, 1.0 - TAIL])
    bulk_lo = np.full(vmin.shape[0], -np.inf)
    bulk_hi = np.full(vmin.shape[0], np.inf)
    all_counts, all_slots = sketch.runs()  # once, not once a feature
    bulks: list[tuple[int, np.ndarray, np.ndarray]] = []  # feature, its bulk's counts and their slots
    for d in np.flatnonzero(known):
        width = SEPARATION * float(fences[d, 1] - fences[d, 0])
        s_lo, s_hi = int(fence_slots[d, 0]), int(fence_slots[d, 1])
        held = all_counts[d] != 0  # the feature's non-empty slots, in order
        filled, counts = all_slots[d][held], all_counts[d][held]
        with np.errstate(over="ignore", invalid="ignore"):  # gaps between values near +-max overflow to inf: still gaps
            first, last = _bulk(filled, s_lo, s_hi, gap, width, lo_edge, hi_edge)
        in_bulk = (filled >= first) & (filled <= last)
        if counts[in_bulk].sum() < (1.0 - MAX_DETACHED) * counts.sum():
            continue  # so much beyond the fences is the data (or too few values to tell), not stray values
        bulks.append((int(d), counts[in_bulk], filled[in_bulk]))
        bulk_lo[d], bulk_hi[d] = lo_edge[first], hi_edge[last]
    # The bulks' tail quantiles, read for _BULK_ROWS features at a time (rows padded with empty slots).
    for start in range(0, len(bulks), _BULK_ROWS):
        part = bulks[start : start + _BULK_ROWS]
        longest = max(run.size for _, run, _ in part)
        counts = np.zeros((len(part), longest), dtype=part[0][1].dtype)
        slots = np.zeros((len(part), longest), dtype=np.int64)
        for i, (_, run, at) in enumerate(part):
            counts[i, : run.size] = run
            slots[i, : run.size] = at
            # Padded columns hold nothing, so no rank lands on them; their slots only need to stay in the layout.
            slots[i, run.size :] = at[-1] if at.size else 0
        rows = np.array([d for d, _, _ in part])
        tails[rows] = sketch_quantile_at(counts, slots, layout, vmin[rows], vmax[rows], [TAIL, 1.0 - TAIL])
    return tails, bulk_lo, bulk_hi


#: Pairs of probabilities tried in turn for the fences: the first whose quantiles are not both zero
#: (none: no fences, nothing is detached).
SPREADS = ((0.25, 0.75), (0.1, 0.9), (0.05, 0.95), (0.01, 0.99))


def _spread(sketch: SketchResult) -> tuple[np.ndarray, np.ndarray]:
    """Outer bounds of each feature's quartiles (or of wider quantiles where those are both zero: zero-heavy data)."""
    qs = sketch.quantile([p for pair in SPREADS for p in pair])
    with np.errstate(over="ignore"):  # quantiles near +-max widen to +-inf: no fence on that side
        bounds = np.stack([qs[:, 0::2] - _resolution(sketch, qs[:, 0::2]),
                           qs[:, 1::2] + _resolution(sketch, qs[:, 1::2])])
    spread = (qs[:, 0::2] != 0.0) | (qs[:, 1::2] != 0.0)
    pick = np.argmax(spread, axis=1)
    rows = np.arange(qs.shape[0])
    # Nothing but zeros out to the 1 % quantiles: no spread to build fences from, so nothing is detached.
    none = ~spread.any(axis=1)
    return np.where(none, -np.inf, bounds[0, rows, pick]), np.where(none, np.inf, bounds[1, rows, pick])


def robust_ranges(
    sketch: SketchResult, vmin: np.ndarray, vmax: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature (lo, hi): the bulk's ``[TAIL, 1 - TAIL]`` quantiles, widened, clipped to the bulk and ``[vmin, vmax]``."""
    tails, bulk_lo, bulk_hi = _bulk_tails(sketch)
    err = _resolution(sketch, tails)
    with np.errstate(invalid="ignore", over="ignore"):
        q_lo, q_hi = tails[:, 0] - err[:, 0], tails[:, 1] + err[:, 1]
        span = q_hi - q_lo
        usable = np.isfinite(span) & (tails[:, 1] > tails[:, 0]) & np.isfinite(vmin) & np.isfinite(vmax)
        # Where the bulk's outer sketch bucket is narrow next to the bulk, the range ends on that
        # bucket's edge, whether or not stray values lie beyond it: then one sentinel (which moves
        # [vmin, vmax] but not the bulk) leaves the range, and so the histogram and MI, as they were.
        # Where the bucket is wide (data far from zero), the extrema end the range instead.
        # Not the zero slot's edges (+-min_magnitude): a range of data >= 0 starts at 0, not -1e-30.
        extent = bulk_hi - bulk_lo  # inf where no bulk was found: then the extrema end the range
        at_edge_lo = np.isfinite(extent) & (np.abs(bulk_lo) > sketch.min_magnitude) & (
            2.0 * _resolution(sketch, bulk_lo[:, None])[:, 0] <= SNAP * extent)
        at_edge_hi = np.isfinite(extent) & (np.abs(bulk_hi) > sketch.min_magnitude) & (
            2.0 * _resolution(sketch, bulk_hi[:, None])[:, 0] <= SNAP * extent)
        lo = np.maximum(q_lo - WIDEN * span, np.where(at_edge_lo, bulk_lo, np.maximum(bulk_lo, vmin)))
        hi = np.minimum(q_hi + WIDEN * span, np.where(at_edge_hi, bulk_hi, np.minimum(bulk_hi, vmax)))
        usable &= lo < hi
    return np.where(usable, lo, vmin), np.where(usable, hi, vmax)


def fine_ranges(
    sketch: SketchResult, vmin: np.ndarray, vmax: np.ndarray, bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature (lo, hi) of the quantile histogram: it holds the exact ``TAIL`` and ``1 - TAIL`` quantiles of the bulk."""
    _, bulk_lo, bulk_hi = _bulk_tails(sketch)
    tails = sketch.quantile([TAIL, 1.0 - TAIL])
    err = _resolution(sketch, tails)
    with np.errstate(invalid="ignore", over="ignore"):
        lo = np.fmax(np.fmax(tails[:, 0] - err[:, 0], bulk_lo), vmin)
        hi = np.fmin(np.fmin(tails[:, 1] + err[:, 1], bulk_hi), vmax)
    out_lo, out_hi = np.zeros_like(lo), np.ones_like(hi)
    for d in range(lo.size):
        out_lo[d], out_hi[d] = dyadic_range(float(lo[d]), float(hi[d]), bins)
    return out_lo, out_hi


def around_constant(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give a range around each constant value: ``v ± 0.5`` as ``numpy.histogram``, wider where 0.5 is too few steps."""
    values = np.asarray(values, dtype=np.float64)
    ulp = np.abs(values) - np.nextafter(np.abs(values), 0.0)  # the step below |v| (np.spacing overflows at max)
    half = np.maximum(0.5, ulp * 4096)
    big = np.finfo(np.float64).max
    return np.maximum(values, half - big) - half, np.minimum(values, big - half) + half


def dyadic_range(lo: float, hi: float, bins: int) -> tuple[float, float]:
    """Grow ``[lo, hi]`` to ``bins`` bins of a power-of-two width, starting at a multiple of that width."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if not lo < hi:
        below, above = around_constant(np.array([lo]))
        return float(below[0]), float(above[0])
    width = 2.0 ** math.ceil(math.log2((hi - lo) / (bins - 1))) if bins > 1 else 2.0 ** math.ceil(math.log2(hi - lo))
    start = math.floor(lo / width) * width
    stop = start + bins * width
    if abs(start / width) < 2.0**52 and start <= lo and hi <= stop and math.isfinite(stop):
        return start, stop
    return lo, hi


def flag_out_of_range(
    fraction: np.ndarray, feature_names: Sequence[str], *, limit: float = OUT_OF_RANGE_LIMIT
) -> list[str]:
    """Name the features with more than ``limit`` of their values outside the range; warn when any."""
    bad = [int(i) for i in np.flatnonzero(fraction > limit)]
    names = [feature_names[i] for i in bad]
    if names:
        listed = ", ".join(f"{feature_names[i]} ({fraction[i]:.1%})" for i in bad[:5])
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        warn(
            f"{len(names)} of {len(feature_names)} feature(s) have more than {limit:.0%} of their values "
            f"outside the histogram range: {listed}{more}; give a wider range, or none to find it from the data",
            RangeWarning,
        )
    return names


def is_minmax(range_: Any) -> bool:
    """Tell whether ``range_`` asks for ranges from each feature's min and max (``"minmax"``)."""
    if isinstance(range_, str):
        if range_ != "minmax":
            raise ValueError(f"range must be (lo, hi), one (lo, hi) per feature, 'minmax' or None; got {range_!r}")
        return True
    return False


def histogram_ranges(
    range_: Any,
    n_features: int,
    vmin: np.ndarray | None = None,
    vmax: np.ndarray | None = None,
    sketch: Any = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Resolve per-feature (lo, hi) from a user range, or from what a first pass found."""
    if range_ is not None and not is_minmax(range_):
        r = np.asarray(range_, dtype=np.float64)
        if r.shape == (2,):
            r = np.broadcast_to(r, (n_features, 2))
        if r.shape != (n_features, 2):
            raise ValueError(
                f"range must be (lo, hi) or one (lo, hi) per feature, shape ({n_features}, 2); got shape {r.shape}"
            )
        lo, hi = r[:, 0].copy(), r[:, 1].copy()
    else:
        assert vmin is not None and vmax is not None
        empty = ~np.isfinite(vmin) | ~np.isfinite(vmax)
        if sketch is not None:
            vmin, vmax = robust_ranges(sketch, vmin, vmax)
        lo = np.where(empty, 0.0, vmin)
        hi = np.where(empty, 1.0, vmax)
        # A constant feature gets a range around its value (numpy.histogram's +-0.5, wider for huge values).
        same = lo == hi
        below, above = around_constant(lo)
        lo, hi = np.where(same, below, lo), np.where(same, above, hi)
    bad = ~(np.isfinite(lo) & np.isfinite(hi) & (lo < hi))
    if bad.any():
        d = int(np.argmax(bad))
        raise ValueError(f"histogram range of feature {d} must be finite with lo < hi; got ({lo[d]}, {hi[d]})")
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)

#: How many times the values of the most crowded neighbouring bin the extreme's bin must hold.
SPIKE_RATIO = 20.0
#: The fewest values in the extreme's bin, and the smallest fraction of the feature's counted values.
MIN_SPIKE_COUNT = 10
MIN_SPIKE_FRACTION = 0.001
#: Non-empty bins inward of the extreme's bin that it is compared with.
NEIGHBOUR_BINS = 3


@dataclass(frozen=True)
class SuspectValue:  # numpydoc ignore=PR02
    """A feature's minimum or maximum that piles up in its histogram bin: perhaps a sentinel."""

    feature: str
    value: float
    side: str
    bin_count: int
    neighbour_count: int

    def describe(self) -> str:
        """Say what was found in a few words, for warnings and tables."""
        return (
            f"{self.value:g} (the {self.side}): {self.bin_count:,} values in its bucket, at most "
            f"{self.neighbour_count:,} in the next ones"
        )


def suspect_values(
    names: Sequence[str],
    counts: np.ndarray,
    edges: np.ndarray,
    minimum: np.ndarray,
    maximum: np.ndarray,
    judged: np.ndarray,
) -> tuple[SuspectValue, ...]:
    """Find the features whose judged (D, 2) minimum or maximum piles up at the edge of their values."""
    counts = np.asarray(counts, dtype=np.float64)
    edges = np.broadcast_to(
        np.asarray(edges, dtype=np.float64), (counts.shape[0], counts.shape[1] + 1)
    )
    found = []
    for i, name in enumerate(names):
        for j, (side, value) in enumerate((("min", float(minimum[i])), ("max", float(maximum[i])))):
            if not judged[i, j]:
                continue
            spike = _spike(counts[i], edges[i], value, inward=1 if side == "min" else -1)
            if spike is not None:
                found.append(SuspectValue(str(name), value, side, *spike))
    return tuple(found)


def _spike(
    counts: np.ndarray, edges: np.ndarray, value: float, inward: int
) -> tuple[int, int] | None:
    """The counts of ``value``'s bin and of its busiest inward neighbour, if that bin is a spike, else None."""
    if not (np.isfinite(value) and edges[0] <= value <= edges[-1]):
        return None
    k = int(np.clip(np.searchsorted(edges, value, side="right") - 1, 0, counts.size - 1))
    inner = counts[k + 1 :] if inward > 0 else counts[:k][::-1]
    neighbours = inner[inner > 0][:NEIGHBOUR_BINS]
    if neighbours.size < NEIGHBOUR_BINS:
        return None  # too few distinct places to call one of them crowded
    spike, busiest = counts[k], float(neighbours.max())
    total = float(counts.sum())
    if spike < max(MIN_SPIKE_COUNT, MIN_SPIKE_FRACTION * total) or spike < SPIKE_RATIO * busiest:
        return None
    return int(spike), int(busiest)


def outside_fraction(underflow: np.ndarray, overflow: np.ndarray, hist_counts: np.ndarray) -> np.ndarray:
    """Each feature's share of its values (NaN left out; of their weight, with weights) outside its histogram range."""
    # The denominator from the histogram itself: with sample weights its counts are weight, the moments' count is not.
    outside = np.asarray(underflow, dtype=np.float64) + np.asarray(overflow, dtype=np.float64)
    total = np.sum(np.asarray(hist_counts, dtype=np.float64), axis=1) + outside
    return outside / np.where(total > 0, total, 1.0)
