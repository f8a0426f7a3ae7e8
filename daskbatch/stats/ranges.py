"""Histogram ranges that one stray value cannot wreck, and the check that flags ranges missing the data.

Ranges found from the data span the ``[TAIL, 1 - TAIL]`` quantiles of the
first pass's quantile sketch, widened by ``WIDEN`` of that span on each side and
clipped to the feature's ``[min, max]``. Values beyond land in the histogram's
underflow and overflow counts, so nothing is dropped, while a single value of
1e9 among values near 1 no longer squeezes them into one bin.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from daskbatch._warnings import warn
from daskbatch.errors import RangeWarning

__all__ = ["OUT_OF_RANGE_LIMIT", "TAIL", "WIDEN", "flag_out_of_range", "robust_ranges"]

#: Probability left out in each tail when a range is found from the sketch.
TAIL = 0.001
#: Widening of the quantile span on each side (fraction of the span).
WIDEN = 0.05
#: Fraction of a feature's values outside its histogram range that earns a RangeWarning.
OUT_OF_RANGE_LIMIT = 0.01


def robust_ranges(
    quantiles: np.ndarray, vmin: np.ndarray, vmax: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature (lo, hi) from the ``[TAIL, 1 - TAIL]`` quantiles, widened and clipped to ``[vmin, vmax]``.

    Parameters
    ----------
    quantiles : ndarray, shape (D, 2)
        The sketch's ``TAIL`` and ``1 - TAIL`` quantiles of each feature.
    vmin, vmax : ndarray, shape (D,)
        Finite extrema of each feature (NaN when it has none).

    Returns
    -------
    lo : ndarray, shape (D,)
        The lower end of each feature's range.
    hi : ndarray, shape (D,)
        The upper end. Where the quantiles span nothing (a feature that is
        almost constant, or whose tails are infinite), ``lo`` and ``hi`` are
        the extrema themselves, as ``range="minmax"`` gives.
    """
    q_lo, q_hi = quantiles[:, 0], quantiles[:, 1]
    with np.errstate(invalid="ignore", over="ignore"):
        span = q_hi - q_lo
        usable = np.isfinite(span) & (span > 0) & np.isfinite(vmin) & np.isfinite(vmax)
        lo = np.where(usable, np.maximum(q_lo - WIDEN * span, vmin), vmin)
        hi = np.where(usable, np.minimum(q_hi + WIDEN * span, vmax), vmax)
    return lo, hi


def flag_out_of_range(
    fraction: np.ndarray, feature_names: Sequence[str], *, limit: float = OUT_OF_RANGE_LIMIT
) -> list[str]:
    """Name the features with more than ``limit`` of their values outside the range; warn when any.

    Parameters
    ----------
    fraction : ndarray, shape (D,)
        ``Summary.out_of_range_fraction``.
    feature_names : sequence of str
        Names, in feature order.
    limit : float, default OUT_OF_RANGE_LIMIT
        Largest fraction that passes silently.

    Returns
    -------
    list of str
        The flagged features (empty when none).
    """
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
