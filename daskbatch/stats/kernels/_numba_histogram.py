"""The compiled histogram counting: slot counts (or sums of row weights) per feature and class."""

from __future__ import annotations

import numpy as np

from daskbatch.stats.kernels._numba import (
    _choose,
    _empty,
    _greatest,
    _jit,
    _jit_inline,
    _least,
    _load,
    _weight,
)

#: 2**63: a float floor at or beyond it (or NaN) became int64's INT_MIN in the former ``math.floor`` slot.
_INT_LIMIT = 2.0**63


# The slot of ``v`` less one (-1 under, ``bins`` over, ``bins + 1`` NaN), as a float. _count_rows picks one of the
# two at compile time from the type of its ``ranged``: None for any range, True where _ranged() holds; both give the
# former loop's slot bit for bit (tests/test_histogram_fast.py), the second cheaper.


@_jit_inline
def _slot_any_range(v, lo, hi, step, scale, bins):  # noqa: ANN001, ANN202
    """The slot of ``v`` less one, for any range."""
    top = float(bins - 1)
    # np.floor, not math.floor: the latter's int64 result (the x86 "indefinite"
    # INT_MIN for NaN, ±inf and beyond ±2**63, clipped to 0 below) keeps the loop
    # scalar; the float expression gives the same slot for every value.
    f = np.floor((v - lo) * scale)
    f = _choose(abs(f) < _INT_LIMIT, f, 0.0)  # where math.floor gave INT_MIN (NaN included)
    f = _choose(f < top, f, top)
    f = _choose(f > 0.0, f, 0.0)
    f = _choose(v < f * step + lo, f - 1.0, f)
    f = _choose((v >= (f + 1.0) * step + lo) & (f < top), f + 1.0, f)
    f = _choose(v < lo, -1.0, f)
    f = _choose(v > hi, float(bins), f)
    return _choose(v != v, float(bins + 1), f)


@_jit_inline
def _slot_in_range(v, lo, hi, step, scale, bins):  # noqa: ANN001, ANN202
    """The slot of ``v`` less one, where :func:`_ranged` holds."""
    top = float(bins - 1)
    # (v - lo) * scale < 2**63 for v <= hi (_ranged), so the INT_MIN guard never
    # fires there; above hi or at NaN the last two lines overwrite f anyway.
    f = np.floor((v - lo) * scale)
    f = _choose(f < top, f, top)
    f = _choose(f > 0.0, f, 0.0)
    # Both edges from the unsettled f: when v moves down it is below edge f, which
    # is what the former loop's second test compared it with, so it cannot move up.
    # No test for v < lo: there f is 0 and edge 0 is lo (0 * step is +0), so v moves to -1.
    e0 = f * step + lo
    e1 = (f + 1.0) * step + lo
    f = _choose(v < e0, f - 1.0, _choose((v >= e1) & (f < top), f + 1.0, f))
    f = _choose(v > hi, float(bins), f)
    return _choose(v != v, float(bins + 1), f)


def _ranged(lo: np.ndarray, hi: np.ndarray, step: np.ndarray, scale: np.ndarray) -> bool:
    """Whether every feature's range lets :func:`_slot_in_range` drop the guards of :func:`_slot_any_range`."""
    # In NumPy, not compiled: D values, and one compile fewer on the first call. The comparisons
    # are written so that NaN fails every test.
    with np.errstate(all="ignore"):  # inf - inf, inf * 0: NaN, which fails below
        width = hi - lo
        ok = (0.0 < step) & (step < np.inf) & (0.0 < scale) & (scale < np.inf) & (np.abs(width) < np.inf)
        return bool(np.all(ok & (width * scale < _INT_LIMIT)))


@_jit
def _count_rows(x, lo, hi, step, scale, bins, classes, labelled, labels, counts, weights, ranged, base, slot):  # noqa: ANN001, ANN202
    """The row loop of :func:`count_grids`, compiled once per kind of ``ranged`` (None or True), whatever the grids."""
    rows, d = x.shape
    grids = lo.shape[0]
    by_label = labels.shape[0] > 0
    row = _empty(d, np.float64)
    for i in range(rows):
        # The row read and converted once (a second grid's loop read it again: 15 % more time for two) ...
        for j in range(d):
            row[j] = _load(x[i, j])
        # ... its slots on each grid, branch-free so that the loop vectorises ...
        for g in range(grids):
            kf, b = classes[g], bins[g]
            for j in range(d):
                # Decided as numba compiles: it drops the branch that the type of `ranged` rules out.
                if ranged is None:
                    f = _slot_any_range(row[j], lo[g, j], hi[g, j], step[g, j], scale[g, j], b)
                else:
                    f = _slot_in_range(row[j], lo[g, j], hi[g, j], step[g, j], scale[g, j], b)
                slot[g, j] = np.uint64(f * kf + base[g, j])
        # ... then one scattered increment per value and grid, in the class column of the grids split by label.
        k = np.uint64(labels[i] if by_label else 0)
        wi = _weight(weights, i)
        for g in range(grids):
            kg = k * labelled[g]
            for j in range(d):
                counts[slot[g, j] + kg] += wi


def histogram_counts(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, step: np.ndarray, scale: np.ndarray,
    bins: int, labels: np.ndarray, n_classes: int, counts: np.ndarray, weights: np.ndarray | None,
) -> None:
    """Add to ``counts`` (D·(bins + 3)·K, flat) the counts of slot ``[under, bins…, over, nan]`` × class."""
    count_grids(x, lo[None], hi[None], step[None], scale[None], [bins], [n_classes], [labels.shape[0] > 0],
                labels, counts, weights)


def count_grids(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, step: np.ndarray, scale: np.ndarray,
    bins: list[int], n_classes: list[int], labelled: list[bool], labels: np.ndarray, counts: np.ndarray,
    weights: np.ndarray | None,
) -> None:
    """Count G histograms of ``x`` in one sweep: grid g's ranges are row g of ``lo``, ``hi``, ``step``, ``scale`` (G, D).

    ``counts`` is flat: grid g's table (D·(bins[g] + 3)·n_classes[g]) follows those of the grids before it; the
    grids with ``labelled[g]`` count in the class column ``labels`` gives, the others in their one column.
    """
    # The choice is made here, not in compiled code: the general loop (a degenerate or
    # overflowing range) compiles only when a chunk needs it, not on every first call.
    ranged = True if _ranged(lo, hi, step, scale) else None
    d = x.shape[1]
    grid_bins = np.asarray(bins, dtype=np.int64)
    classes = np.asarray(n_classes, dtype=np.int64)
    sizes = d * (grid_bins + 3) * classes
    # Flat index of slot 0 (under) of feature j, plus K for the -1 that the slot loops return there, after the grids
    # before. The index is then one float multiply-add and one conversion, exact below 2**53 (far beyond any
    # counts array), instead of two 64-bit integer multiplies per value.
    offsets = np.cumsum(sizes) - sizes
    features = np.arange(d, dtype=np.int64)
    base = (offsets[:, None] + (features[None, :] * (grid_bins[:, None] + 3) + 1) * classes[:, None]).astype(np.float64)
    # Unsigned, so that indexing with it needs no wraparound of negative indices.
    slot = np.empty((len(grid_bins), d), dtype=np.uint64)
    _count_rows(x, np.ascontiguousarray(lo), np.ascontiguousarray(hi), np.ascontiguousarray(step),
                np.ascontiguousarray(scale), grid_bins, classes.astype(np.float64),
                np.asarray(labelled, dtype=np.uint64), labels, counts, weights, ranged, base, slot)


@_jit
def two_cdf_sweep(points, weights, order, kinds, totals, out):  # noqa: ANN001, ANN201
    """``out[r]`` = KS lower and upper bounds and Wasserstein-1 of two CDF enclosures, as ``two_sample._sweep``."""
    # kinds[c]: column c carries a lower (1) or upper (2) bound of the first enclosure, 3 / 4 of the
    # second, 0 nothing; totals (2, D) their counts. Bounds are read at the last point of each run.
    n_rows, width = points.shape
    above = _empty((2, width), np.float64)
    for r in range(n_rows):
        # Backward: each enclosure's least upper bound from the points strictly above.
        high_a, high_b = np.inf, np.inf
        for p in range(width - 1, -1, -1):
            above[0, p], above[1, p] = high_a, high_b
            c = order[r, p]
            if kinds[c] == 2:
                high_a = _least(high_a, weights[r, c])
            elif kinds[c] == 4:
                high_b = _least(high_b, weights[r, c])
        n_a, n_b = totals[0, r], totals[1, r]
        low_a, low_b, lower, upper, area = 0.0, 0.0, 0.0, -np.inf, 0.0
        for p in range(width):
            c = order[r, p]
            x = points[r, c]
            if kinds[c] == 1:
                low_a = _greatest(low_a, weights[r, c])
            elif kinds[c] == 3:
                low_b = _greatest(low_b, weights[r, c])
            x_next = points[r, order[r, p + 1]] if p + 1 < width else np.nan
            if x_next == x:  # not the end of its run (a NaN ends its own)
                continue
            la, lb = low_a / n_a, low_b / n_b
            ha = _greatest(_least(above[0, p], n_a), low_a) / n_a
            hb = _greatest(_least(above[1, p], n_b), low_b) / n_b
            lower = max(lower, la - hb, lb - ha)
            upper = max(upper, ha - lb, hb - la)
            if np.isfinite(x) and np.isfinite(x_next):
                area += 0.5 * abs((la + ha) - (lb + hb)) * (x_next - x)
        out[r, 0], out[r, 1], out[r, 2] = lower, upper, area
