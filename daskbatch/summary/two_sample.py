"""Two-sample tests from two summaries: KS with its error bound, χ² on binned counts, Wasserstein-1, rebinning."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.stats.kernels import enabled
from daskbatch.stats.sketch_layout import slot_bounds
from daskbatch.summary.views import sketch_layout

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary

#: Relative widening of a cell boundary: a value on it may have been counted on either side.
_EDGE_SLACK = 1e-9
#: Entries of one array of a sweep over a block of features (bounds memory: ~8 bytes each, a few arrays).
_BLOCK_ENTRIES = 1 << 21


@dataclass(frozen=True)
class CdfBounds:
    """Enclosures of every feature's empirical CDF (counts, not probabilities), one row per feature."""

    at_least_from: np.ndarray
    at_least: np.ndarray
    at_most_below: np.ndarray
    at_most: np.ndarray
    n: np.ndarray

    def rows(self, index: np.ndarray) -> CdfBounds:
        """The enclosures of the features ``index``."""
        return CdfBounds(*(getattr(self, f.name)[index] for f in fields(self)))


def cdf_bounds(summary: Summary) -> CdfBounds:
    """Enclose each feature's empirical CDF with everything ``summary`` keeps (``n`` NaN: it keeps no counts)."""
    totals, parts = _sketch_parts(summary)
    cells = []  # (counts with the below- and above-range cells, lower edge, upper edge) of every histogram kept
    if summary.hist_counts is not None and summary.hist_edges is not None:
        cells.append((histogram_cells(summary), summary.hist_edges))
    if summary.quantile_counts is not None and summary.quantile_range is not None:
        cells.append((summary.quantile_counts, _uniform_edges(summary.quantile_range, summary.quantile_counts)))
    kept = (summary.states or {}).get("sketch")
    # The dyadic grid stands in for the quantile histogram where a summary has none (merged, updated).
    if summary.quantile_counts is None and kept is not None:
        counts, ranges = kept.statistic.fine_grid(kept.state)
        cells.append((counts, _uniform_edges(ranges, counts)))
    for counts, edges in cells:
        counts = np.asarray(counts, dtype=np.float64)
        total = counts.sum(axis=1)
        totals = np.where(np.isnan(totals), total, totals)
        # Only counts of the same values enclose the same CDF (a merged summary's histograms may lack some).
        same = (total > 0) & np.isclose(total, totals, rtol=1e-12, atol=0)
        parts.append(_cell_part(counts, np.asarray(edges, dtype=np.float64), same))
    parts = parts or [(np.empty((summary.n_features, 0)),) * 4]  # no counts kept: bounds of no place
    at_least_from, at_least, at_most_below, at_most = (np.concatenate([p[i] for p in parts], axis=1) for i in range(4))
    return CdfBounds(at_least_from, at_least, at_most_below, at_most, totals)


def histogram_cells(summary: Summary) -> np.ndarray:
    """Counts of [below range, bins..., above range] per feature, float64."""
    assert summary.hist_counts is not None
    under = summary.underflow if summary.underflow is not None else np.zeros(summary.n_features)
    over = summary.overflow if summary.overflow is not None else np.zeros(summary.n_features)
    return np.concatenate([under[:, None], summary.hist_counts, over[:, None]], axis=1).astype(np.float64)


def _part(
    where: np.ndarray, at_least_from: Any, at_least: Any, at_most_below: Any, at_most: Any
) -> tuple[np.ndarray, ...]:
    """A part of :class:`CdfBounds`: the bounds given where ``where`` holds, bounding nothing elsewhere."""
    return (
        np.where(where, at_least_from, np.nan),
        np.where(where, at_least, 0.0),
        np.where(where, at_most_below, np.nan),
        np.where(where, at_most, np.inf),
    )


def _sketch_parts(summary: Summary) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]]]:
    """Each feature's non-NaN count (NaN: no sketch) and the parts of its sketch's buckets, extrema and distinct values."""
    spec = summary.provenance.get("sketch")
    if summary.sketch_counts is None or summary.sketch_extrema is None or not isinstance(spec, dict):
        return np.full(summary.n_features, np.nan), []
    lower, upper = slot_bounds(sketch_layout(spec))
    last = len(lower) - 1
    first, width = int(spec["first_slot"]), summary.sketch_counts.shape[1]
    lower, upper = lower[first : first + width], upper[first : first + width]
    counts = np.asarray(summary.sketch_counts)  # wide (every slot of the window): read, never converted
    below = counts[:, 0].astype(np.float64) if first == 0 and width else np.zeros(len(counts))  # -inf: slot 0
    above = counts[:, -1].astype(np.float64) if first + width - 1 == last and width else np.zeros(len(counts))
    totals = counts.sum(axis=1, dtype=np.float64)
    exact, parts = _distinct_parts(summary, below)
    # The values of a slot lie within its (widened) bounds: each feature's held slots, packed to the left.
    held = counts > 0
    held[exact] = False
    per_row = np.count_nonzero(held, axis=1)
    rows, slots = np.nonzero(held)
    place = np.arange(len(slots)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    shape = (len(counts), int(per_row.max(initial=0)))
    inside = np.zeros(shape, dtype=bool)
    held_counts, slot_upper, slot_lower = np.zeros((3, *shape))
    inside[rows, place] = True
    held_counts[rows, place] = counts[rows, slots]  # float64
    slot_upper[rows, place], slot_lower[rows, place] = upper[slots], lower[slots]
    cum = np.cumsum(held_counts, axis=1)
    parts.append(_part(inside, slot_upper, cum, slot_lower, cum - held_counts))
    fmin, fmax = (np.asarray(summary.sketch_extrema[:, i], dtype=np.float64)[:, None] for i in (0, 1))
    extrema = np.isfinite(fmin) & ~exact[:, None]
    parts.append(_part(extrema, fmax, (totals - above)[:, None], fmin, below[:, None]))
    return totals, parts


def _distinct_parts(summary: Summary, below: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]]]:
    """Which features' distinct values the sketch's state keeps all of, and their exact CDFs."""
    kept = (summary.states or {}).get("sketch")
    if kept is None:
        return np.zeros(summary.n_features, dtype=bool), []
    state = kept.state
    held = np.asarray(state.distinct_held)
    exact = (held <= state.distinct.shape[1]) & (held > 0)
    width = int(held[exact].max(initial=0))  # the places beyond are no feature's
    values = np.asarray(state.distinct[:, :width], dtype=np.float64)
    counts = np.asarray(state.distinct_counts[:, :width], dtype=np.float64)
    inside = exact[:, None] & (np.arange(values.shape[1])[None, :] < held[:, None])
    cum = below[:, None] + np.cumsum(np.where(inside, counts, 0.0), axis=1)
    # F is exact: the count at or below v from v on, the count below v up to it.
    return exact, [_part(inside, values, cum, values, cum - counts)]


def _uniform_edges(ranges: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The edges of equal bins on each row's range, as many as ``counts`` has inner cells."""
    ranges = np.asarray(ranges, dtype=np.float64)
    steps = np.linspace(0.0, 1.0, counts.shape[1] - 1)
    return ranges[:, :1] + (ranges[:, 1:] - ranges[:, :1]) * steps[None, :]


def _cell_part(counts: np.ndarray, edges: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, ...]:
    """The bounds of histograms with their below- and above-range cells (rows ``kept``): the count through cell ``j`` at ``edges[:, j]``."""
    cum = np.cumsum(counts, axis=1)[:, :-1]
    with np.errstate(invalid="ignore", over="ignore"):
        slack = _EDGE_SLACK * (np.abs(edges) + np.abs(edges[:, -1:] - edges[:, :1]))
        slack = np.where(
            np.isfinite(slack), slack, 0.0
        )  # an infinite edge has no neighbour to confuse
        return _part(kept[:, None], edges + slack, cum, edges - slack, cum)


def _row_blocks(rows: np.ndarray, width: int) -> Iterator[np.ndarray]:
    """``rows`` in groups small enough that a sweep's arrays stay near :data:`_BLOCK_ENTRIES` entries each."""
    step = max(1, _BLOCK_ENTRIES // max(width, 1))
    for start in range(0, len(rows), step):
        yield rows[start : start + step]


def _gather(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values`` (D, M) taken row by row at ``order`` (D, K): ``take_along_axis`` through one flat index."""
    flat = order + (np.arange(len(order)) * values.shape[1])[:, None]
    return values.ravel().take(flat)


def _sweep(
    points: np.ndarray, weights: np.ndarray, spans: list[tuple[int, int, int]], n: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sort each row of ``points`` (D, M); give the order, the sorted points, where runs of equal ones end, and the bounds."""
    order = np.argsort(points, axis=1, kind="stable")  # the rows are runs already sorted: merges
    x, weight = _gather(points, order), _gather(weights, order)
    run_ends = np.ones(x.shape, dtype=bool)
    run_ends[:, :-1] = x[:, 1:] != x[:, :-1]
    kind = _kinds(spans, points.shape[1]).take(
        order
    )  # which span and half each sorted point came from
    low, high = np.empty((2, len(spans), *x.shape))
    for s in range(len(spans)):
        np.maximum.accumulate(np.where(kind == 2 * s + 1, weight, 0.0), axis=1, out=low[s])
        falling = np.where(kind == 2 * s + 2, weight, np.inf)[:, ::-1]
        # The bounds from points strictly above: the minimum from the next place on.
        high[s, :, -1] = np.inf
        np.minimum.accumulate(falling[:, :-1], axis=1, out=high[s, :, -2::-1])
    total = n[:, :, None]
    high = np.maximum(np.minimum(high, total), low)
    return order, x, run_ends, low / total, high / total


def _two_cdf_sweep(
    points: np.ndarray, weights: np.ndarray, spans: list[tuple[int, int, int]], totals: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KS lower and upper bound and Wasserstein-1 of two enclosures per row, in NumPy (the kernels switched off)."""
    _, x, run_ends, low, high = _sweep(points, weights, spans, totals)
    differ = np.where(run_ends, np.maximum(low[0] - high[1], low[1] - high[0]), -np.inf)
    lower = np.maximum(0.0, np.max(differ, axis=1))
    differ = np.where(run_ends, np.maximum(high[0] - low[1], high[1] - low[0]), -np.inf)
    upper = np.max(differ, axis=1)
    # Both CDFs are flat from the end of one run to the next point: the integral of their gap is exact.
    finite = np.isfinite(x)
    gap = 0.5 * np.abs((low[0] + high[0]) - (low[1] + high[1]))[:, :-1]
    steps = np.diff(np.where(finite, x, 0.0), axis=1)
    counted = run_ends[:, :-1] & finite[:, 1:] & finite[:, :-1]
    return lower, upper, np.sum(np.where(counted, gap * steps, 0.0), axis=1)


def _kinds(spans: list[tuple[int, int, int]], width: int) -> np.ndarray:
    """What each column carries: ``2s + 1`` span ``s``'s lower bounds, ``2s + 2`` its upper ones, 0 nothing."""
    kinds = np.zeros(width, dtype=np.int8)
    for s, (start, middle, end) in enumerate(spans):
        kinds[start:middle], kinds[middle:end] = 2 * s + 1, 2 * s + 2
    return kinds


def ks_and_wasserstein(reference: CdfBounds, new: CdfBounds) -> dict[str, np.ndarray]:
    """KS statistic (middle of its bounds), error bound, bounds, asymptotic p-value, and Wasserstein-1, per feature."""
    from scipy.stats import kstwobign  # lazy: scipy

    names = ("ks", "ks_error", "ks_lower", "ks_upper", "wasserstein")
    out = {k: np.full(len(reference.n), np.nan) for k in names}
    valid = np.flatnonzero((reference.n > 0) & (new.n > 0))
    places_a, places_b = reference.at_least.shape[1], new.at_least.shape[1]
    width = 1 + 2 * (places_a + places_b)  # a start at -inf, then each enclosure's two halves
    spans = [(1, 1 + places_a, 1 + 2 * places_a), (1 + 2 * places_a, 1 + 2 * places_a + places_b, width)]
    for rows in _row_blocks(valid, width):
        a, b = reference.rows(rows), new.rows(rows)
        start = np.full((len(rows), 1), -np.inf)
        points = np.concatenate([start, a.at_least_from, a.at_most_below, b.at_least_from, b.at_most_below], axis=1)
        weights = np.concatenate([np.zeros_like(start), a.at_least, a.at_most, b.at_least, b.at_most], axis=1)
        totals = np.stack([a.n, b.n])
        if enabled():
            from daskbatch.stats.kernels._numba_histogram import two_cdf_sweep  # lazy: numba

            order = np.argsort(points, axis=1, kind="stable")  # the rows are runs already sorted
            found = np.empty((len(rows), 3))
            two_cdf_sweep(points, weights, order, _kinds(spans, width), totals, found)
            lower, upper, area = found.T
        else:
            lower, upper, area = _two_cdf_sweep(points, weights, spans, totals)
        out["ks_lower"][rows], out["ks_upper"][rows] = lower, upper
        out["ks"][rows], out["ks_error"][rows] = 0.5 * (lower + upper), 0.5 * (upper - lower)
        out["wasserstein"][rows] = area
    with np.errstate(invalid="ignore"):
        effective = reference.n * new.n / (reference.n + new.n)
        out["ks_pvalue"] = kstwobign.sf(out["ks"] * np.sqrt(effective))
    return out


def rebinned_cells(bounds: CdfBounds, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts of [below range, bins..., above range] on ``edges`` read from CDF bounds, and each feature's error bound."""
    n_features, n_edges = edges.shape
    cells, error = np.full((n_features, n_edges + 1), np.nan), np.full(n_features, np.nan)
    valid = np.flatnonzero(bounds.n > 0)
    places = bounds.at_least.shape[1]
    spans = [(0, places, 2 * places)]
    for rows in _row_blocks(valid, 2 * places + n_edges):
        b = bounds.rows(rows)
        at = np.concatenate([np.nextafter(edges[rows, :-1], -np.inf), edges[rows, -1:]], axis=1)
        points = np.concatenate([b.at_least_from, b.at_most_below, at], axis=1)
        weights = np.concatenate([b.at_least, b.at_most, np.zeros_like(at)], axis=1)
        order, _, run_ends, low, high = _sweep(points, weights, spans, b.n[None])
        # Each edge's bounds: those at the end of the run its point sorted into.
        width = order.shape[1]
        last = np.where(run_ends, np.arange(width), width)[:, ::-1]
        last = np.minimum.accumulate(last, axis=1)[:, ::-1]
        place = np.empty_like(order)
        np.put_along_axis(place, order, np.arange(width)[None, :], axis=1)
        place = _gather(last, place[:, 2 * places :])
        low, high = _gather(low[0], place), _gather(high[0], place)
        middle = np.maximum.accumulate(0.5 * (low + high), axis=1)
        ones = np.ones((len(rows), 1))
        cells[rows] = (
            np.diff(np.concatenate([ones * 0.0, middle, ones], axis=1), axis=1) * b.n[:, None]
        )
        error[rows] = np.max(0.5 * (high - low), axis=1)
    return cells, error


def chi2_test(reference: np.ndarray, new: np.ndarray) -> dict[str, np.ndarray]:
    """Two-sample χ² on the cells (D, K) of both, cells empty in both left out: statistic, degrees of freedom, p-value."""
    from scipy.stats import chi2  # lazy: scipy

    a, b = np.asarray(reference, dtype=np.float64), np.asarray(new, dtype=np.float64)
    n_a, n_b = a.sum(axis=1, keepdims=True), b.sum(axis=1, keepdims=True)
    column = a + b
    # A feature without values on both sides divides 0 by 0 here: NaN, made so below.
    with np.errstate(divide="ignore", invalid="ignore"):
        share_a = n_a / (n_a + n_b)
        expect_a, expect_b = column * share_a, column * (1.0 - share_a)
        terms = np.where(
            column > 0, (a - expect_a) ** 2 / expect_a + (b - expect_b) ** 2 / expect_b, 0.0
        )
    stat = terms.sum(axis=1)
    dof = np.count_nonzero(column > 0, axis=1) - 1.0
    valid = (n_a[:, 0] > 0) & (n_b[:, 0] > 0) & np.isfinite(stat)
    stat, dof = np.where(valid, stat, np.nan), np.where(valid, dof, np.nan)
    # One occupied cell in all: nothing can differ (p = 1).
    pvalue = np.where(dof > 0, chi2.sf(stat, np.maximum(dof, 1.0)), np.where(valid, 1.0, np.nan))
    return {"chi2": stat, "chi2_dof": dof, "chi2_pvalue": pvalue}


def false_discovery(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values of the finite ones (NaN stays NaN)."""
    from scipy.stats import false_discovery_control  # lazy: scipy

    adjusted = np.full(len(pvalues), np.nan)
    finite = np.isfinite(pvalues)
    if finite.any():
        adjusted[finite] = false_discovery_control(np.clip(pvalues[finite], 0.0, 1.0), method="bh")
    return adjusted
