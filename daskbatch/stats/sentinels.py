"""Values that look like sentinels: one value piled up at the edge of a feature's distribution.

A code for "missing" written as a number (−999, −9999, or 0 in a positive
feature) sits at one end of a feature's values, repeated far more often than
the values next to it. When it lies inside the histogram range it is not
flagged as outside it, yet it moves the mean, the variance and the mutual
information. :func:`suspect_values` finds such values from counts a summary
already holds, in bins of increasing value (the quantile sketch's buckets,
each within its relative accuracy of one value), and each feature's minimum
and maximum: the bin holding the minimum (or the maximum) must hold at least
``MIN_SPIKE_COUNT`` values and ``MIN_SPIKE_FRACTION`` of the feature's
counted values, and ``SPIKE_RATIO`` times as many as the most crowded of the
next ``NEIGHBOUR_BINS`` non-empty bins inward. A feature with fewer non-empty
bins than that (a binary or constant one) is not judged. Bins as wide as a
histogram's would call the dense end of a skewed feature a pile: give bins
that each hold about one value. Nothing is removed: the values are named,
for the user to decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_SPIKE_COUNT",
    "MIN_SPIKE_FRACTION",
    "NEIGHBOUR_BINS",
    "SPIKE_RATIO",
    "SuspectValue",
    "suspect_values",
]

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
    judged: np.ndarray | None = None,
) -> tuple[SuspectValue, ...]:
    """Find the features whose minimum or maximum piles up at the edge of their values (see the module's notes)."""
    counts = np.asarray(counts, dtype=np.float64)
    edges = np.broadcast_to(
        np.asarray(edges, dtype=np.float64), (counts.shape[0], counts.shape[1] + 1)
    )
    found = []
    for i, name in enumerate(names):
        for j, (side, value) in enumerate((("min", float(minimum[i])), ("max", float(maximum[i])))):
            if judged is not None and not judged[i, j]:
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
