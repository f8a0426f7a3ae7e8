"""What a summary should say about numbers it holds that may mislead: the table's lines and describe's warnings.

* **Complete-rows covariance.** ``CoMoments`` (``rows="complete"``, the
  default) uses only the rows finite in every feature. When that leaves out
  more than ``DROPPED_ROWS_LIMIT`` of the rows, or a feature has no finite
  value at all (then no row is complete and every entry is NaN), the summary
  says so and names the pairwise option, which uses each pair's own rows.
* **Suspect values.** A feature's minimum or maximum piled up at the edge of
  its histogram, perhaps a sentinel such as −999 (:mod:`daskbatch.stats.sentinels`).

The same lines go to the summary's table (:mod:`daskbatch.summary.reprs`) and,
once, to warnings when :func:`daskbatch.describe` returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.stats.sentinels import SuspectValue, suspect_values

__all__ = [
    "DROPPED_ROWS_LIMIT",
    "PAIRWISE_OPTION",
    "covariance_message",
    "summary_suspect_values",
    "suspect_message",
]

#: Fraction of the rows the complete-rows covariance may leave out before the summary says so.
DROPPED_ROWS_LIMIT = 0.10
#: How to ask for the pairwise covariance, in Python and on the command line.
PAIRWISE_OPTION = "stats=[..., db.stats.CoMoments(rows='pairwise')] (--cov pairwise)"
#: Names listed in one line before "and N more".
LISTED = 8


def covariance_message(summary: Any) -> str | None:
    """Say what the complete-rows covariance of ``summary`` left out, when that is much.

    Parameters
    ----------
    summary : Summary
        A summary.

    Returns
    -------
    str or None
        One line, or None when the covariance is pairwise, absent, or left out
        at most ``DROPPED_ROWS_LIMIT`` of the rows and no feature is all NaN.
    """
    prov = summary.provenance
    if (
        summary.cov_count is None
        or prov.get("cov_rows", "complete") != "complete"
        or "rows" not in prov
    ):
        return None
    rows, used = int(prov["rows"]), int(summary.cov_count)
    empty = np.flatnonzero(np.asarray(summary.count) == 0)
    if rows == 0 or (not empty.size and rows - used <= DROPPED_ROWS_LIMIT * rows):
        return None
    names = [summary.feature_names[i] for i in empty[:LISTED]]
    more = f" and {empty.size - LISTED:,} more" if empty.size > LISTED else ""
    why = f"; no finite value in {', '.join(names)}{more}" if empty.size else ""
    return (
        f"covariance and correlation use only the {used:,} of {rows:,} rows finite in every feature "
        f"({(rows - used) / rows:.1%} left out{why}): {PAIRWISE_OPTION} uses each pair's own rows"
    )


def summary_suspect_values(summary: Any) -> tuple[SuspectValue, ...] | None:
    """Find the suspect values of ``summary`` from its histograms, minima and maxima.

    The fine quantile histogram (2048 bins, when the summary has one) is read
    first: it tells a pile of one value from a crowded bin of many; the
    histogram then judges the extremes it left alone.

    Parameters
    ----------
    summary : Summary
        A summary.

    Returns
    -------
    tuple of SuspectValue or None
        The values (see :func:`daskbatch.stats.sentinels.suspect_values`), by
        feature; None without histograms.
    """
    histograms = _histograms(summary)
    if not histograms:
        return None
    found: dict[tuple[str, str], SuspectValue] = {}
    for counts, edges in histograms:
        for value in suspect_values(summary.feature_names, counts, edges, summary.min, summary.max):
            found.setdefault((value.feature, value.side), value)
    order = {name: i for i, name in enumerate(summary.feature_names)}
    return tuple(sorted(found.values(), key=lambda v: (order[v.feature], v.side != "min")))


def _histograms(summary: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (counts, edges) of the summary's fine quantile histogram and its histogram, those it has."""
    found = []
    fine, fine_range = summary.quantile_counts, summary.quantile_range
    if fine is not None and fine_range is not None and np.ndim(fine) == 2:
        bins = fine.shape[1] - 2  # the underflow and overflow cells around the bins
        steps = np.arange(bins + 1, dtype=np.float64) / bins
        lo, hi = np.asarray(fine_range, dtype=np.float64).T
        found.append((fine[:, 1:-1], lo[:, None] + (hi - lo)[:, None] * steps[None, :]))
    counts, edges = summary.hist_counts, summary.hist_edges
    if counts is not None and edges is not None and np.ndim(counts) == 2 and np.ndim(edges) == 2:
        found.append((counts, edges))
    return found


def suspect_message(found: tuple[SuspectValue, ...]) -> str | None:
    """Name the suspect values in one line.

    Parameters
    ----------
    found : tuple of SuspectValue
        What :func:`summary_suspect_values` found.

    Returns
    -------
    str or None
        The line, or None when there are none.
    """
    if not found:
        return None
    listed = "; ".join(f"{s.feature} {s.describe()}" for s in found[:LISTED])
    more = f"; and {len(found) - LISTED:,} more" if len(found) > LISTED else ""
    return (
        f"{len(found):,} value{'' if len(found) == 1 else 's'} repeated far more often than "
        f"{'its' if len(found) == 1 else 'their'} neighbours at the edge of a feature (a sentinel for "
        f"missing?), counted as data: {listed}{more} (summary.suspect_values)"
    )
