"""Mutual information between each feature (binned) and a class label, from joint counts."""

from __future__ import annotations

import math
from typing import Literal

from daskbatch._typing import Array
from daskbatch.stats.backend import namespace


def mutual_information(
    joint: Array, *, base: Literal["e", 2] = "e", miller_madow: bool = False
) -> Array:
    """Plug-in mutual information of each feature's (bin × class) contingency table.

    Parameters
    ----------
    joint : array of int, shape (D, B, K)
        Counts of rows per (feature, bin, class).
    base : {"e", 2}, default "e"
        Nats (``"e"``) or bits (``2``).
    miller_madow : bool, default False
        Add the Miller–Madow bias correction ``(m_x + m_y - m_xy - 1) / 2N`` in
        nats, with ``m`` the number of non-empty cells of each marginal and of
        the joint table (the first-order bias of each plug-in entropy).

    Returns
    -------
    array of float64, shape (D,)
        ``I(X_d; Y) = Σ p(x, y) log(p(x, y) / (p(x) p(y)))``; 0 for a table with
        fewer than two rows' worth of information, NaN for an empty table.
        Equals ``sklearn.metrics.mutual_info_score`` on the same binned data.

    Notes
    -----
    The plug-in estimate is biased upwards by about ``(B - 1)(K - 1) / 2N``
    nats (the Miller–Madow term removes that to first order): on small
    samples it reads higher than scikit-learn's k-nearest-neighbour
    ``mutual_info_classif`` (breast_cancer, 569 rows, 64 bins: median 1.24x),
    while equal-width bins under-read heavy-tailed features (Pareto, 200,000
    rows: 0.09x).
    ``describe`` passes the in-range bins only, so that values outside the
    histogram range (sentinels, 1e12, ±inf) cannot act as a label-independent
    spike that pulls the estimate towards 0.
    """
    xp = namespace(joint)
    t = xp.astype(joint, xp.float64)
    n = xp.sum(t, axis=(1, 2))
    px = xp.sum(t, axis=2)
    py = xp.sum(t, axis=1)
    nonzero = t > 0
    ones = xp.ones_like(t)
    safe = xp.where(nonzero, t, ones)
    n_safe = xp.where(n > 0, n, xp.ones_like(n))
    # log(p_xy / (p_x p_y)) = log n_xy + log N - log n_x - log n_y, zero cells contribute nothing.
    log_ratio = (
        xp.log(safe)
        + xp.log(n_safe)[:, None, None]
        - xp.log(xp.where(nonzero, px[:, :, None] * ones, ones))
        - xp.log(xp.where(nonzero, py[:, None, :] * ones, ones))
    )
    mi = xp.sum(xp.where(nonzero, t * log_ratio, xp.zeros_like(t)), axis=(1, 2)) / n_safe
    mi = xp.where(mi > 0, mi, xp.zeros_like(mi))
    if miller_madow:
        m_x = xp.sum(xp.astype(px > 0, xp.float64), axis=1)
        m_y = xp.sum(xp.astype(py > 0, xp.float64), axis=1)
        m_xy = xp.sum(xp.astype(nonzero, xp.float64), axis=(1, 2))
        mi = mi + (m_x + m_y - m_xy - 1.0) / (2.0 * n_safe)
    if base == 2:
        mi = mi / math.log(2.0)
    elif base != "e":
        raise ValueError(f"base must be 'e' or 2, got {base!r}")
    return xp.where(n > 0, mi, xp.full_like(mi, xp.nan))
