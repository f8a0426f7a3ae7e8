"""Two-sample tests from two summaries: KS with its error bound, χ² on binned counts, Wasserstein-1, rebinning.

Every count a summary keeps (the quantile sketch's buckets, its distinct values, its dyadic grid,
the quantile histogram, the histograms, the finite extrema) says where the feature's empirical
CDF ``F`` may lie: a count ``c`` of the values at or below a cell boundary ``t`` gives ``F(x) >= c``
for ``x`` at or above ``t`` and ``F(x) <= c`` below it. The pointwise largest of the first kind
and smallest of the second are step functions that enclose ``F`` everywhere
(:class:`CdfBounds`); every boundary is widened by a relative 1e-9, since a value on it may be
counted on either side (rounding of the logarithm or of the bin arithmetic). Two such enclosures
bound ``sup |F_ref - F_new|`` from below and above: the KS statistic is reported as the middle of
the two, with half their distance as its error bound. Where a feature's distinct values are all
kept (at most about a thousand), its CDF is exact, and so is the KS statistic of two such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from daskbatch.stats.sketch import Sketch, slot_bounds

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary

__all__ = [
    "CdfBounds",
    "cdf_bounds",
    "chi2_test",
    "false_discovery",
    "ks_and_wasserstein",
    "rebinned_cells",
]

#: Relative widening of a cell boundary: a value on it may have been counted on either side.
_EDGE_SLACK = 1e-9


@dataclass(frozen=True)
class CdfBounds:
    """An enclosure of one feature's empirical CDF (counts, not probabilities).

    ``F(x) >= at_least[i]`` for ``x >= at_least_from[i]`` and ``F(x) <= at_most[j]`` for
    ``x < at_most_below[j]``; ``n`` is the number of non-NaN values (``F(+inf)``).
    """

    at_least_from: np.ndarray
    at_least: np.ndarray
    at_most_below: np.ndarray
    at_most: np.ndarray
    n: float

    def between(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bound of the CDF (a probability) at every point of ``x``."""
        if self.n <= 0:
            return np.full(x.shape, np.nan), np.full(x.shape, np.nan)
        order = np.argsort(self.at_least_from, kind="stable")
        starts, rising = self.at_least_from[order], np.maximum.accumulate(self.at_least[order])
        i = np.searchsorted(starts, x, side="right") - 1
        low = np.where(i >= 0, rising[np.maximum(i, 0)], 0.0)
        order = np.argsort(self.at_most_below, kind="stable")
        ends = self.at_most_below[order]
        falling = np.minimum.accumulate(self.at_most[order][::-1])[::-1]
        j = np.searchsorted(ends, x, side="right")  # the first boundary above x
        high = np.where(j < len(ends), falling[np.minimum(j, len(ends) - 1)], self.n)
        high = np.minimum(high, self.n)
        return low / self.n, np.maximum(high, low) / self.n

    @property
    def breaks(self) -> np.ndarray:
        """Every point where a bound may step."""
        return np.concatenate([self.at_least_from, self.at_most_below])


def cdf_bounds(summary: Summary) -> list[CdfBounds | None]:
    """Enclose each feature's empirical CDF with everything ``summary`` keeps (None: it keeps no counts)."""
    parts: list[list[tuple[np.ndarray, ...]]] = [[] for _ in range(summary.n_features)]
    totals = _sketch_parts(summary, parts)
    cells = []  # (counts with the below- and above-range cells, lower edge, upper edge) of every histogram kept
    if summary.hist_counts is not None and summary.hist_edges is not None:
        under = summary.underflow if summary.underflow is not None else np.zeros(summary.n_features)
        over = summary.overflow if summary.overflow is not None else np.zeros(summary.n_features)
        counts = np.concatenate([under[:, None], summary.hist_counts, over[:, None]], axis=1)
        cells.append((counts, summary.hist_edges))
    if summary.quantile_counts is not None and summary.quantile_range is not None:
        cells.append(
            (
                summary.quantile_counts,
                _uniform_edges(summary.quantile_range, summary.quantile_counts),
            )
        )
    kept = (summary.states or {}).get("sketch")
    # The dyadic grid stands in for the quantile histogram where a summary has none (merged, updated).
    if (
        summary.quantile_counts is None
        and kept is not None
        and getattr(kept.state, "grid", None) is not None
    ):
        counts, ranges = kept.statistic.fine_grid(kept.state)
        cells.append((counts, _uniform_edges(ranges, counts)))
    for counts, edges in cells:
        counts = np.asarray(counts, dtype=np.float64)
        for d in range(summary.n_features):
            total = float(counts[d].sum())
            expected = totals[d]
            if expected is None:
                totals[d] = expected = total
            # Only counts of the same values enclose the same CDF (a merged summary's histograms may lack some).
            if total > 0 and np.isclose(total, expected, rtol=1e-12, atol=0):
                parts[d].append(_cell_part(counts[d], np.asarray(edges[d], dtype=np.float64)))
    bounds: list[CdfBounds | None] = []
    for d in range(summary.n_features):
        n = totals[d]
        if not parts[d] or n is None:
            bounds.append(None)
            continue
        a_from, a, b_below, b = (np.concatenate([p[i] for p in parts[d]]) for i in range(4))
        bounds.append(CdfBounds(a_from, a, b_below, b, n))
    return bounds


def _sketch_parts(
    summary: Summary, parts: list[list[tuple[np.ndarray, ...]]]
) -> list[float | None]:
    """Add the sketch's buckets, extrema and distinct values to ``parts``; give each feature's non-NaN count."""
    totals: list[float | None] = [None] * summary.n_features
    spec = summary.provenance.get("sketch")
    if (
        summary.sketch_counts is None
        or summary.sketch_extrema is None
        or not isinstance(spec, dict)
    ):
        return totals
    window = spec.get("window")
    layout = Sketch(
        float(spec["alpha"]),
        float(spec["min_magnitude"]),
        float(spec["max_magnitude"]),
        None if window is None else int(window),
    )
    lower, upper = slot_bounds(layout)
    first, width = int(spec["first_slot"]), summary.sketch_counts.shape[1]
    lower, upper = lower[first : first + width], upper[first : first + width]
    counts = np.asarray(summary.sketch_counts, dtype=np.float64)
    below = counts[:, 0] if first == 0 and width else np.zeros(len(counts))  # -inf has slot 0
    last = len(slot_bounds(layout)[0]) - 1
    above = (
        counts[:, -1] if first + width - 1 == last and width else np.zeros(len(counts))
    )  # +inf the last
    exact = _distinct_parts(summary, below)
    for d in range(summary.n_features):
        held = np.flatnonzero(counts[d] > 0)
        totals[d] = float(counts[d].sum())
        exact_cdf = exact[d]
        if exact_cdf is not None:
            parts[d].append(exact_cdf)
            continue
        cum = np.cumsum(counts[d, held])
        # The values of a slot lie within its (widened) bounds.
        parts[d].append((upper[held], cum, lower[held], cum - counts[d, held]))
        fmin, fmax = summary.sketch_extrema[d]
        if np.isfinite(fmin):
            parts[d].append(
                (
                    np.array([fmax]),
                    np.array([totals[d] - above[d]]),
                    np.array([fmin]),
                    np.array([below[d]]),
                )
            )
    return totals


def _distinct_parts(summary: Summary, below: np.ndarray) -> list[tuple[np.ndarray, ...] | None]:
    """The exact CDF of every feature whose distinct values the sketch's state keeps all of, else None."""
    kept = (summary.states or {}).get("sketch")
    state = None if kept is None else kept.state
    if (
        state is None
        or state.distinct is None
        or state.distinct_counts is None
        or state.distinct_held is None
    ):
        return [None] * summary.n_features
    values, counts = np.asarray(state.distinct), np.asarray(state.distinct_counts, dtype=np.float64)
    held = np.asarray(state.distinct_held)
    out: list[tuple[np.ndarray, ...] | None] = []
    for d in range(summary.n_features):
        n = int(held[d])
        if n > values.shape[1] or n == 0:
            out.append(None)
            continue
        cum = below[d] + np.cumsum(counts[d, :n])
        v = values[d, :n]
        # F is exact: the count at or below v from v on, the count below v up to it.
        out.append((v, cum, v, cum - counts[d, :n]))
    return out


def _uniform_edges(ranges: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The edges of equal bins on each row's range, as many as ``counts`` has inner cells."""
    ranges = np.asarray(ranges, dtype=np.float64)
    steps = np.linspace(0.0, 1.0, counts.shape[1] - 1)
    return ranges[:, :1] + (ranges[:, 1:] - ranges[:, :1]) * steps[None, :]


def _cell_part(counts: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """The bounds of a histogram with its below- and above-range cells: the count through cell ``j`` at ``edges[j]``."""
    cum = np.cumsum(counts)[:-1]
    with np.errstate(invalid="ignore", over="ignore"):
        slack = _EDGE_SLACK * (np.abs(edges) + np.abs(edges[-1] - edges[0]))
    slack = np.where(np.isfinite(slack), slack, 0.0)  # an infinite edge has no neighbour to confuse
    return edges + slack, cum, edges - slack, cum


def ks_and_wasserstein(
    reference: list[CdfBounds | None], new: list[CdfBounds | None]
) -> dict[str, np.ndarray]:
    """KS statistic (middle of its bounds), error bound, bounds, asymptotic p-value, and Wasserstein-1, per feature.

    The Wasserstein-1 distance ``∫ |F_ref(x) - F_new(x)| dx`` (equal to ``∫ |Q_ref(p) - Q_new(p)| dp``)
    takes each CDF as the middle of its enclosure: a step function exact where the distinct values
    are kept and, elsewhere, stepping at every sketch bucket (``alpha`` relative width, out to the
    extrema, so heavy tails are read bucket by bucket) and every quantile-histogram bin; the
    integral of the difference of two step functions is then exact.
    """
    from scipy.stats import kstwobign  # lazy: scipy

    names = ("ks", "ks_error", "ks_lower", "ks_upper", "ks_pvalue", "wasserstein")
    out = {k: np.full(len(reference), np.nan) for k in names}
    for d, (a, b) in enumerate(zip(reference, new, strict=True)):
        if a is None or b is None or a.n <= 0 or b.n <= 0:
            continue
        x = np.unique(np.concatenate([[-np.inf], a.breaks, b.breaks]))
        low_a, high_a = a.between(x)
        low_b, high_b = b.between(x)
        lower = max(0.0, float(np.max(np.maximum(low_a - high_b, low_b - high_a))))
        upper = float(np.max(np.maximum(high_a - low_b, high_b - low_a)))
        out["ks_lower"][d], out["ks_upper"][d] = lower, upper
        out["ks"][d], out["ks_error"][d] = 0.5 * (lower + upper), 0.5 * (upper - lower)
        effective = a.n * b.n / (a.n + b.n)
        out["ks_pvalue"][d] = kstwobign.sf(out["ks"][d] * np.sqrt(effective))
        finite = np.isfinite(x)
        gap = 0.5 * np.abs((low_a + high_a) - (low_b + high_b))[finite]
        out["wasserstein"][d] = float(np.sum(gap[:-1] * np.diff(x[finite])))
    return out


def rebinned_cells(
    bounds: list[CdfBounds | None], edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Counts of [below range, bins..., above range] on ``edges`` read from CDF bounds, and each feature's error bound.

    The histograms' cells are ``[e_k, e_k+1)``, the last closed, with ``< e_0`` and ``> e_last``
    beside them (``numpy.histogram``'s): so the CDF is read just below every edge but the last
    and at the last, as the middle of its bounds; the error bound is the largest half-width, a
    bound on every cumulative probability so read (on every cell's, twice that).
    """
    n_features, n_edges = edges.shape
    cells, error = np.full((n_features, n_edges + 1), np.nan), np.full(n_features, np.nan)
    for d, b in enumerate(bounds):
        if b is None or b.n <= 0:
            continue
        at = np.concatenate([np.nextafter(edges[d, :-1], -np.inf), edges[d, -1:]])
        low, high = b.between(at)
        middle = np.maximum.accumulate(0.5 * (low + high))
        cells[d] = np.diff(np.concatenate([[0.0], middle, [1.0]])) * b.n
        error[d] = float(np.max(0.5 * (high - low)))
    return cells, error


def chi2_test(reference: np.ndarray, new: np.ndarray) -> dict[str, np.ndarray]:
    """Two-sample χ² on the cells (D, K) of both, cells empty in both left out: statistic, degrees of freedom, p-value."""
    from scipy.stats import chi2  # lazy: scipy

    a, b = np.asarray(reference, dtype=np.float64), np.asarray(new, dtype=np.float64)
    n_a, n_b = a.sum(axis=1, keepdims=True), b.sum(axis=1, keepdims=True)
    column = a + b
    share_a = n_a / (n_a + n_b)
    with np.errstate(divide="ignore", invalid="ignore"):
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
