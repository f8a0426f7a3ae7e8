"""Per-feature relevance scores from a :class:`~daskbatch.Summary`, with no further pass over the data.

* ``f_classif``: ANOVA F and its p-value from the per-class moments, equal to
  ``sklearn.feature_selection.f_classif`` (which forms the same sums of
  squares as raw power sums; here they come from per-class M2 and means).
* ``chi2``: chi-squared of the per-class sums of non-negative features against
  their expectation under independence, equal to ``sklearn.feature_selection.chi2``.
* ``f_regression`` and ``r_regression``: the F-statistic and p-value, and
  the Pearson correlation, of every feature with a continuous target
  (``describe(x, target=y)``), equal to ``sklearn.feature_selection.f_regression``
  and ``r_regression`` (``center=True``, ``force_finite=True``), from the
  feature-target co-moments (sklearn forms them as raw power sums).
* ``mutual_info``: the binned mutual information already in ``summary.mi``
  (with a target: against the target's quantile bins).
* ``population_variance``: the ddof=0 variance ``VarianceThreshold`` uses.

Values are left out per feature as in the summary (NaN and ±inf are not
counted), so for data without them the per-class counts are the class sizes
sklearn uses. Classes with no value of a feature take no part in its tests,
as classes absent from ``y`` take no part in sklearn's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

__all__ = ["chi2", "f_classif", "f_regression", "mutual_info", "population_variance", "r_regression"]


def _class_arrays(summary: Any, score: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if summary.class_count is None:
        raise ValueError(
            f"score {score!r} needs per-class moments: describe(x, label, stats=[..., 'class_moments'])"
        )
    return (
        np.asarray(summary.class_count, dtype=np.float64),
        np.asarray(summary.class_mean, dtype=np.float64),
        np.asarray(summary.class_m2, dtype=np.float64),
    )


def f_classif(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """ANOVA F-value and p-value of every feature against the label.

    Parameters
    ----------
    summary : Summary
        With per-class moments (``stats=[..., "class_moments"]``).

    Returns
    -------
    f : ndarray of float64, shape (D,)
        The F-values.
    p : ndarray of float64, shape (D,)
        Their p-values. Both as ``sklearn.feature_selection.f_classif``. A constant feature has
        ``F = p = NaN`` (0 / 0); one constant within each class but not overall
        has ``F = inf``, ``p = 0``. sklearn reports the same wherever its sums of
        squares cancel exactly (say integer-valued features); elsewhere its
        ``sum(x**2) - sum(x)**2 / n`` leaves rounding noise where this has 0.
    """
    n, mean, m2 = _class_arrays(summary, "f")
    present = n > 0
    total = n.sum(axis=1)
    n_classes = present.sum(axis=1).astype(np.float64)
    # Means relative to the first present class: differences of nearby means stay exact.
    first = np.argmax(present, axis=1)
    ref = np.take_along_axis(mean, first[:, None], axis=1)
    rel = np.where(present, mean - ref, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        grand = (n * rel).sum(axis=1) / total
        ss_between = (n * (rel - grand[:, None]) ** 2).sum(axis=1)
        ss_within = np.where(present, m2, 0.0).sum(axis=1)
        ms_between = ss_between / (n_classes - 1.0)
        ms_within = ss_within / (total - n_classes)
        f = ms_between / ms_within
    return f, special.fdtrc(n_classes - 1.0, total - n_classes, f)


def chi2(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """Chi-squared statistic and p-value of every non-negative feature against the label.

    The observed value of (feature, class) is the sum of the feature over the
    class (``count * mean``); the expected one is the feature's total times the
    class's share of the samples.

    Parameters
    ----------
    summary : Summary
        With per-class moments (``stats=[..., "class_moments"]``).

    Returns
    -------
    chi2 : ndarray of float64, shape (D,)
        The statistics.
    p : ndarray of float64, shape (D,)
        Their p-values. Both as ``sklearn.feature_selection.chi2`` (NaN for a feature that sums to 0).

    Raises
    ------
    ValueError
        Naming the features with a negative minimum.
    """
    n, mean, _ = _class_arrays(summary, "chi2")
    negative = np.flatnonzero(np.asarray(summary.min) < 0)
    if negative.size:
        listed = ", ".join(f"{summary.feature_names[i]} (min {summary.min[i]:g})" for i in negative[:10])
        more = f" and {negative.size - 10} more" if negative.size > 10 else ""
        raise ValueError(f"chi2 needs non-negative features; negative values in {listed}{more}")
    present = n > 0
    observed = np.where(present, n * mean, 0.0)
    total = n.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = (n / total) * observed.sum(axis=1, keepdims=True)
        terms = (observed - expected) ** 2 / expected
    stat = np.where(present, terms, 0.0).sum(axis=1)
    return stat, special.chdtrc(present.sum(axis=1) - 1.0, stat)


def _target_arrays(summary: Any, score: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if summary.target_count is None:
        raise ValueError(f"score {score!r} needs a continuous target: describe(x, target=y)")
    return tuple(np.asarray(getattr(summary, f"target_{name}"), dtype=np.float64)  # type: ignore[return-value]
                 for name in ("count", "x_m2", "m2", "comoment"))


def r_regression(summary: Any) -> np.ndarray:
    """Pearson correlation of every feature with the target.

    Parameters
    ----------
    summary : Summary
        From ``describe(x, target=y)``.

    Returns
    -------
    numpy.ndarray
        One value per feature, as ``sklearn.feature_selection.r_regression``
        (``force_finite=True``: 0 where the feature or the target is constant).
    """
    _, x_m2, y_m2, c = _target_arrays(summary, "r_regression")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c / np.sqrt(x_m2 * y_m2)
    # Rounding may put |r| a hair above 1 for an exact linear relation.
    return np.where(np.isfinite(r), np.clip(r, -1.0, 1.0), 0.0)


def f_regression(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """F-statistic and p-value of the univariate linear regression of the target on every feature.

    Parameters
    ----------
    summary : Summary
        From ``describe(x, target=y)``.

    Returns
    -------
    f : ndarray of float64, shape (D,)
        ``r² / (1 - r²) · (n - 2)`` with ``n`` the rows where the feature is finite.
    p : ndarray of float64, shape (D,)
        Their p-values. Both as ``sklearn.feature_selection.f_regression``
        (``force_finite=True``: F = 0 and p = 1 for a constant feature, F =
        the largest float64 for an exact linear relation).
    """
    n = _target_arrays(summary, "f_regression")[0]
    r2 = r_regression(summary) ** 2
    dof = n - 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        f = r2 / (1.0 - r2) * dof
    p = special.fdtrc(1.0, dof, f)
    p = np.where(np.isinf(f), 0.0, p)
    f = np.where(np.isinf(f), np.finfo(np.float64).max, f)
    nan = np.isnan(f)
    return np.where(nan, 0.0, f), np.where(nan, 1.0, p)


def mutual_info(summary: Any) -> np.ndarray:
    """Give the binned mutual information of every feature with the label (``summary.mi``).

    Parameters
    ----------
    summary : Summary
        With ``mi`` computed.

    Returns
    -------
    numpy.ndarray
        One value per feature.
    """
    if summary.mi is None:
        raise ValueError("score 'mi' needs the joint histograms: describe(x, label, stats=[..., 'mi'])")
    return np.asarray(summary.mi, dtype=np.float64)


def population_variance(summary: Any, *, threshold: float | None = None) -> np.ndarray:
    """Compute the ddof=0 variance of every feature's finite values, as ``numpy.nanvar``.

    ``summary.var`` divides by ``n - ddof`` (``ddof`` from its provenance);
    this divides by ``n``.

    Parameters
    ----------
    summary : Summary
        A summary.
    threshold : float, optional
        With ``threshold == 0`` the smaller of the variance and the range
        (max - min) is returned, as ``VarianceThreshold`` does.

    Returns
    -------
    numpy.ndarray
        One value per feature.
    """
    ddof = int(summary.provenance.get("ddof", 1))
    n = np.asarray(summary.count, dtype=np.float64) - summary.posinf_count - summary.neginf_count
    var = np.asarray(summary.var, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # A single value has variance 0 though n - ddof may be 0.
        pop = np.where(n - ddof > 0, var * (n - ddof) / n, np.where(n >= 1, 0.0, np.nan))
    if threshold == 0:
        ptp = np.asarray(summary.max, dtype=np.float64) - summary.min
        pop = np.fmin(pop, ptp)
    return pop
