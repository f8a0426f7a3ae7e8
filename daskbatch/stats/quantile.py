"""Approximate quantiles from per-feature histograms.

The rank ``q·N`` is located exactly in the cumulative counts, then the value
is interpolated linearly inside the cell that holds it. The answer therefore
lies in the same bin as the exact ``numpy.quantile(..., method="inverted_cdf")``
and is within one bin width of it. Underflow and overflow mass is spread over
``[min, lo]`` and ``[hi, max]`` when the extrema are finite.
"""

from __future__ import annotations

import numpy as np


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
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if qs.ndim != 1 or np.any((qs < 0) | (qs > 1)) or np.any(np.isnan(qs)):
        raise ValueError(f"quantile probabilities must lie in [0, 1], got {q!r}")
    n_features, n_bins = counts.shape
    lo, hi = edges[:, 0], edges[:, -1]
    left_end = np.where(np.isfinite(vmin) & (vmin < lo), vmin, lo)
    right_end = np.where(np.isfinite(vmax) & (vmax > hi), vmax, hi)
    cells = np.concatenate([underflow[:, None], counts, overflow[:, None]], axis=1).astype(np.float64)
    bounds = np.concatenate([left_end[:, None], edges, right_end[:, None]], axis=1)
    cdf = np.cumsum(cells, axis=1)
    total = cdf[:, -1]
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
        out[:, j] = np.where(total > 0, left + frac * (right - left), np.nan)
    return out[:, 0] if np.ndim(q) == 0 else out
