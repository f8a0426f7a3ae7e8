"""Which built-in statistics a run computes: what a label, groups or a continuous target add or leave out.

From the statistics asked for (:func:`~daskbatch.stats.spec.requested`),
:func:`describe_statistics` decides what :func:`daskbatch.describe` computes,
:func:`grouped_statistics` what ``groups=`` adds and :func:`target_statistics`
what ``target=`` changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch._arguments import strict_int
from daskbatch.stats.spec import (
    CLASS_MOMENTS,
    DEFAULT_STATS,
    MI,
    SKETCH,
    Requested,
    counts_by_label,
    counts_histograms,
    names_of,
    requested,
)
from daskbatch.stats.target import TargetMoments, TargetSketch, checked_cuts


def describe_names(stats: str | Sequence[str], *, labelled: bool, range_: Any = None) -> tuple[str, ...]:
    """List what :func:`daskbatch.describe` computes for ``stats``.

    ``stats`` normalised (moments first), without ``mi`` (and the default's
    ``class_moments``) when there is no label, and with ``sketch`` wherever
    histograms are counted (it finds their ranges when ``range_`` is None, and
    answers the quantiles). ``class_moments`` asked for without a label is an error.

    Parameters
    ----------
    stats : str or sequence of str
        The requested statistics.
    labelled : bool
        Whether there is a label.
    range_ : object, optional
        The histogram range argument.

    Returns
    -------
    tuple of str
        The statistic names to compute.
    """
    return names_of(describe_statistics(stats, labelled=labelled, range_=range_))


def describe_statistics(stats: Any, *, labelled: bool, range_: Any = None) -> tuple[Requested, ...]:
    """What :func:`describe_names` names, as the statistics' declarations.

    Parameters
    ----------
    stats : str or sequence
        The requested statistics.
    labelled : bool
        Whether there is a label.
    range_ : object, optional
        The histogram range argument.

    Returns
    -------
    tuple of Requested
        The statistics to compute.
    """
    wanted = requested(stats)
    if not labelled:
        refused = [r.name for r in wanted if r.needs_class_label]
        if refused and not _the_default(wanted):
            raise ValueError(f"statistic {refused[0]!r} needs a label (describe(x, label, ...))")
        wanted = tuple(r for r in wanted if not r.needs_label)
    # The sketch finds the histogram ranges; with ranges given it still answers the quantiles (its grid).
    if counts_histograms(wanted) and SKETCH not in wanted:
        wanted += (SKETCH,)
    return wanted


def _the_default(wanted: tuple[Requested, ...]) -> bool:
    """Tell whether ``wanted`` is the default, whose label statistics are skipped without a label (a sketch aside)."""
    return tuple(r for r in wanted if r is not SKETCH) == requested(DEFAULT_STATS)


def grouped_statistics(wanted: tuple[Requested, ...]) -> tuple[Requested, ...]:
    """Add what ``describe(x, groups=g)`` computes by group to ``wanted``.

    The per-group moments always, and with histograms the histograms by group
    (the histograms by label, ``mi``).

    Parameters
    ----------
    wanted : tuple of Requested
        From :func:`describe_statistics`.

    Returns
    -------
    tuple of Requested
        With ``class_moments`` (and ``mi`` when histograms are counted).
    """
    added = (CLASS_MOMENTS, MI) if counts_histograms(wanted) else (CLASS_MOMENTS,)
    return (*wanted, *(r for r in added if r not in wanted))


def target_statistics(
    stats: Any, wanted: tuple[Requested, ...], target_bins: Any
) -> tuple[tuple[Requested, ...], tuple[Any, ...], tuple[int, ...] | None, tuple[float, ...] | None]:
    """Decide what a run with a continuous target (``describe(x, target=y)``) computes.

    Parameters
    ----------
    stats : str or sequence
        The requested statistics.
    wanted : tuple of Requested
        From :func:`describe_statistics` (with the target in the label's place).
    target_bins : int or sequence of float
        Quantile bins of the target, or its cuts.

    Returns
    -------
    wanted : tuple of Requested
        Without the statistics of a class label (``class_moments``).
    fused : tuple
        The target's statistics for the first pass: its co-moments with every
        feature, and with ``mi`` its quantile sketch (also when the cuts are
        given, so that summaries of both kinds merge).
    class_values : tuple of int or None
        The target bins' numbers, the classes of ``mi``'s tables (None without ``mi``).
    cuts : tuple of float or None
        The cuts when given.
    """
    given = None
    if isinstance(target_bins, (int, np.integer)):
        n_bins = strict_int(target_bins, "target_bins", minimum=2)
    else:
        given = checked_cuts(target_bins)
        n_bins = len(given) + 1
    refused = [r.name for r in requested(stats) if r.needs_class_label]
    if refused and not _the_default(requested(stats)):
        raise ValueError(f"statistic {refused[0]!r} needs a class label; with target= select ranks by "
                         "'f_regression', 'r_regression' or 'mi'")
    wanted = tuple(r for r in wanted if not r.needs_class_label)
    if not counts_by_label(wanted):
        return wanted, (TargetMoments(),), None, given
    return wanted, (TargetMoments(), TargetSketch()), tuple(range(n_bins)), given
