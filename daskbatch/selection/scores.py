"""Per-feature relevance scores from a :class:`~daskbatch.Summary`, with no further pass over the data."""

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
    """ANOVA F-value and p-value of every feature against the label."""
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
    """Chi-squared statistic and p-value of every non-negative feature against the label."""
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
    """Pearson correlation of every feature with the target."""
    _, x_m2, y_m2, c = _target_arrays(summary, "r_regression")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c / np.sqrt(x_m2 * y_m2)
    # Rounding may put |r| a hair above 1 for an exact linear relation.
    return np.where(np.isfinite(r), np.clip(r, -1.0, 1.0), 0.0)


def f_regression(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """F-statistic and p-value of the univariate linear regression of the target on every feature."""
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
    """Give the binned mutual information of every feature with the label (``summary.mi``)."""
    if summary.mi is None:
        raise ValueError("score 'mi' needs the joint histograms: describe(x, label, stats=[..., 'mi'])")
    return np.asarray(summary.mi, dtype=np.float64)


def population_variance(summary: Any, *, threshold: float | None = None) -> np.ndarray:
    """Compute the ddof=0 variance of every feature's finite values, as ``numpy.nanvar``."""
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
