"""What a summary should say about numbers it holds that may mislead: the table's lines and describe's warnings."""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.stats.sentinels import SuspectValue, suspect_values
from daskbatch.stats.sketch import Sketch
from daskbatch.stats.sketch_layout import collapse_floor, slot_bounds

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
    """Say what the complete-rows covariance of ``summary`` left out, when that is much."""
    prov = summary.provenance
    if (
        summary.cov_count is None
        or prov.get("cov_rows", "complete") != "complete"
        or not summary.n_features
    ):
        return None
    # The rows the statistics saw: ``count`` (±inf included) and ``nan_count`` hold each of a feature's
    # values once (a row of weight 0 is not seen at all: the weighted complete rows are not short of it).
    count = np.asarray(summary.count, dtype=np.float64)
    rows, used = int(np.max(count + np.asarray(summary.nan_count))), int(summary.cov_count)
    finite = count - np.asarray(summary.posinf_count) - np.asarray(summary.neginf_count)
    empty = np.flatnonzero(finite == 0)
    if rows == 0 or (not empty.size and rows - used <= DROPPED_ROWS_LIMIT * rows):
        return None
    names = [summary.feature_names[i] for i in empty[:LISTED]]
    more = f" and {empty.size - LISTED:,} more" if empty.size > LISTED else ""
    why = f"; no finite value in {', '.join(names)}{more}" if empty.size else ""
    # A tiled covariance (too wide for one worker) refuses the pairwise one: naming it would mislead.
    if prov.get("tiled_cov"):
        remedy = "a tiled covariance counts complete rows only"
    elif empty.size == finite.size:  # no pair has a row either: no option would help
        remedy = "no feature has a finite value to correlate"
    else:
        remedy = f"{PAIRWISE_OPTION} uses each pair's own rows"
    return (
        f"covariance and correlation use only the {used:,} of {rows:,} rows finite in every feature "
        f"({(rows - used) / rows:.1%} left out{why}): {remedy}"
    )


def summary_suspect_values(summary: Any) -> tuple[SuspectValue, ...] | None:
    """Find the suspect values of ``summary`` from its quantile sketch, minima and maxima."""
    counts, spec = summary.sketch_counts, summary.provenance.get("sketch")
    if counts is None or not isinstance(spec, dict) or np.ndim(counts) != 2:
        return None
    kept = spec.get("window")
    layout = Sketch(
        float(spec["alpha"]),
        float(spec["min_magnitude"]),
        float(spec["max_magnitude"]),
        None if kept is None else int(kept),
    )
    first, width = int(spec["first_slot"]), counts.shape[1]
    if width == 0:  # no finite value in any feature (an all-NaN store): no pile to judge
        return ()
    lower, upper = slot_bounds(layout)
    edges = np.concatenate([lower[first : first + width], upper[first + width - 1 : first + width]])
    slots = np.arange(first, first + width, dtype=np.int64)[None, :]
    # Only which buckets hold anything decides a collapse: weighted counts (floats, up to 2**1000) need no cast.
    floor = collapse_floor((np.asarray(counts) > 0).astype(np.int64), slots, layout)  # (D, 2): 0 where not collapsed
    extremes = np.stack([np.asarray(summary.min), np.asarray(summary.max)], axis=1)
    magnitude = np.abs(extremes)
    beyond_floor = magnitude > np.where(extremes < 0, floor[:, :1], floor[:, 1:])
    judged = (magnitude < layout.max_magnitude) & ((extremes == 0) | beyond_floor)
    return suspect_values(summary.feature_names, counts, edges, summary.min, summary.max, judged)


def suspect_message(found: tuple[SuspectValue, ...]) -> str | None:
    """Name the suspect values in one line."""
    if not found:
        return None
    listed = "; ".join(f"{s.feature} {s.describe()}" for s in found[:LISTED])
    more = f"; and {len(found) - LISTED:,} more" if len(found) > LISTED else ""
    return (
        f"{len(found):,} value{'' if len(found) == 1 else 's'} repeated far more often than "
        f"{'its' if len(found) == 1 else 'their'} neighbours at the edge of a feature (a code for "
        f"missing values, or a floor or ceiling of the measurement?), counted as data: {listed}{more} "
        "(summary.suspect_values)"
    )
