"""Mutual information between each feature (binned) and a class label, from joint counts.

:class:`MutualInformation` is the statistic users ask for (``"mi"``, with its
estimator's base and correction); what the passes count for it is the joint
(bin × class) table of a :class:`~daskbatch.stats.Histogram` by label
(:meth:`MutualInformation.joint`), and :func:`mutual_information` reads it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from daskbatch._common import Array, strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats.declaration import Declaration, Finished, Variable, count
from daskbatch.stats.histogram import MI_FOOTPRINT, Histogram
from daskbatch.stats.numerics import namespace

__all__ = ["DECLARATION", "MI_BASES", "MutualInformation", "mutual_information"]

MI_BASES = ("e", 2)


@dataclass(frozen=True)
class MutualInformation:  # numpydoc ignore=PR02
    """Mutual information of every feature (binned) with the label, from (bin × class) joint tables.

    The plug-in estimate on the ``bins`` in-range bins
    (``sklearn.metrics.mutual_info_score`` of the binned values), not
    scikit-learn's k-nearest-neighbour ``mutual_info_classif``: higher on small
    samples (its bias, median 1.24x on breast_cancer at 64 bins), lower on
    heavy tails that equal-width bins crowd into a few bins (README, "Numbers
    you can trust"). Computed only with a label or a continuous target.

    Parameters
    ----------
    bins : int, default 64
        Bins per feature of the joint tables (the same as the histogram's, which they replace).
    range : (lo, hi), array of shape (D, 2), "minmax" or None, default None
        The bins' ranges, as :class:`~daskbatch.stats.Histogram`'s ``range``.
    base : {"e", 2}, default "e"
        Mutual information in nats or bits.
    miller_madow : bool, default False
        Apply the Miller–Madow bias correction (see :func:`mutual_information`).
    classes : sequence of int, optional
        The label's class values (one table column each); default: found as
        :func:`daskbatch.describe`'s ``classes`` says.
    target_bins : int or sequence of float, default 16
        With a continuous target: its quantile bins (at least 2), or the cuts
        themselves (strictly increasing), the classes of the tables.
    """

    bins: int = STATISTIC_DEFAULTS["bins"]
    range: Any = field(default=None, compare=False)  # noqa: A003 - numpy.histogram's name
    base: Literal["e", 2] = STATISTIC_DEFAULTS["base"]
    miller_madow: bool = STATISTIC_DEFAULTS["miller_madow"]
    classes: tuple[int, ...] | None = None
    target_bins: Any = STATISTIC_DEFAULTS["target_bins"]
    name = "mi"

    def __post_init__(self) -> None:
        if self.base not in MI_BASES:
            raise ValueError(f"base must be 'e' or 2, got {self.base!r}")
        if not isinstance(self.miller_madow, bool):
            raise TypeError(f"miller_madow must be True or False, got {self.miller_madow!r}")
        if self.classes is not None:  # hashable, as the other statistics' parameters
            object.__setattr__(self, "classes", tuple(int(c) for c in self.classes))
        object.__setattr__(self, "bins", strict_int(self.bins, "bins", minimum=1))  # True is not one bin
        if isinstance(self.target_bins, numbers.Integral):  # a bool too: refused
            object.__setattr__(self, "target_bins", strict_int(self.target_bins, "target_bins"))
        else:
            object.__setattr__(self, "target_bins", tuple(float(c) for c in self.target_bins))

    def joint(self, lo: tuple[float, ...], hi: tuple[float, ...], **by_class: Any) -> Histogram:
        """Make the histogram by label whose joint tables this estimate reads.

        Parameters
        ----------
        lo, hi : tuple of float
            Each feature's range, resolved.
        **by_class
            ``classes`` or ``target_cuts`` of :class:`~daskbatch.stats.Histogram`.

        Returns
        -------
        Histogram
            With ``by_label=True``.
        """
        return Histogram(bins=self.bins, lo=lo, hi=hi, by_label=True, **by_class)

    def finalize(self, histogram: Any) -> Array:
        """Estimate the mutual information from the finalized histogram by label.

        Only its in-range bins count: values outside (sentinels, 1e12, inf: a
        label-independent spike) would pull the estimate towards 0; they are
        reported as ``out_of_range_fraction``.

        Parameters
        ----------
        histogram : HistogramResult
            The histogram by label, ``joint`` (D, bins + 2, K).

        Returns
        -------
        array of float64, shape (D,)
            The mutual information, in this statistic's ``base``.
        """
        return self.information(histogram.joint[:, 1:-1, :])

    def information(self, joint: Array) -> Array:
        """Estimate the mutual information from the in-range joint counts.

        Parameters
        ----------
        joint : array of int, shape (D, B, K)
            Counts of rows per (feature, bin, class).

        Returns
        -------
        array of float64, shape (D,)
            As :func:`mutual_information` with this statistic's ``base`` and ``miller_madow``.
        """
        return mutual_information(joint, base=self.base, miller_madow=self.miller_madow)


def mutual_information(
    joint: Array, *, base: Literal["e", 2] = STATISTIC_DEFAULTS["base"], miller_madow: bool = STATISTIC_DEFAULTS["miller_madow"]
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


def _mi_variables(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """The joint tables of the histogram by label, the MI it finalizes, and the label's class values."""
    h = done.results.get("hist")
    if h is None or h.joint is None:
        return {}
    mi = done.statistics.get("mi") or MutualInformation()
    classes = getattr(h, "classes", None)
    if classes is None:
        classes = np.arange(h.joint.shape[2], dtype=np.int64)
    done.provenance.update(
        n_classes=int(h.joint.shape[2]), mi_units="bits" if mi.base == 2 else "nats"
    )
    return {
        "joint_counts": h.joint,
        "mi": mi.finalize(h),
        "classes": np.asarray(classes, dtype=np.int64),
    }


def _mi_units(summary: Any) -> dict[str, Any]:
    """The unit of the MI, from the provenance."""
    return {"units": "bit" if summary.provenance.get("mi_units") == "bits" else "nat"}


#: Counted as the histogram by label (its joint tables, in place of ``hist``), finalized here.
DECLARATION = Declaration(
    "mi",
    MutualInformation,
    footprint=MI_FOOTPRINT,
    needs_label=True,
    needs_ranges=True,
    by_label=True,
    variables={
        "joint_counts": count(
            ("feature", "slot", "class"),
            "counts per (feature, histogram slot, class)",
            settings=lambda s: {
                "comment": "slot -1: below the histogram range, 0..bins-1: the bins, bins: above it"
            },
        ),
        "mi": Variable(("feature",), "mutual information with the label", settings=_mi_units),
        "classes": Variable(None, "label value"),
    },
    summarize=_mi_variables,
)
