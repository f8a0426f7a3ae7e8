"""``describe``: every requested statistic of a (samples × features) array in one or two passes.

The verb over the engine: it checks the arguments, runs the passes
(:func:`daskbatch.engine.statistics_run.run_statistics`) and makes the :class:`Summary`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from daskbatch._typing import Device
from daskbatch.engine.checkpoint.lock import checkpoint_lock
from daskbatch.engine.planner import plan_describe
from daskbatch.engine.run_options import RunOptions
from daskbatch.engine.statistics_run import prepared_inputs, run_statistics
from daskbatch.runtime.joblog import logged_run
from daskbatch.stats.ranges import flag_out_of_range
from daskbatch.stats.spec import DEFAULT_STATS, configured
from daskbatch.summary import Summary

__all__ = ["RunOptions", "describe", "plan_describe"]


@logged_run("describe")
def describe(
    x: Any,
    label: Any = None,
    *,
    weights: Any = None,
    stats: str | Sequence[str] = DEFAULT_STATS,
    bins: int | None = None,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    ddof: int | None = None,
    bias: bool | None = None,
    nan_policy: Literal["omit", "propagate", "raise"] | None = None,
    mi_base: Literal["e", 2] | None = None,
    miller_madow: bool | None = None,
    feature_names: Sequence[str] | None = None,
    classes: Sequence[int] | None = None,
    target: Any = None,
    target_bins: int | Sequence[float] | None = None,
    groups: Any = None,
    missing: Literal["auto", "raise", "skip", "fill"] = "auto",
    like: Summary | None = None,
    run: RunOptions | None = None,
    plan: Any = "auto",
    checkpoint: str | os.PathLike[str] | None = None,
    force: bool = False,
    device: Device = "cpu",
    progress: bool | Literal["dask"] | Callable[[int, int | None, str], Any] = False,
    cache: bool | Literal["auto"] = "auto",
    split_every: int | None = None,
    cov_out: str | os.PathLike[str] | None = None,
    cancel: threading.Event | None = None,
) -> Summary:
    """Per-feature statistics of a (samples × features) array, reading each chunk once per pass.

    Parameters
    ----------
    x : dask.array.Array, numpy.ndarray, Dataset, or path / URL of a Zarr store
        Samples along axis 0, features along axis 1. Float, integer and bool
        dtypes are accepted; everything accumulates in float64.
    label : array of int, or name of an array in the same store, optional
        Class of every sample (any integers, e.g. ``{0, 1, 7}``), for mutual
        information and per-class moments.
    weights : array of float, or name of an array in the same store, optional
        A non-negative frequency weight per sample (see the README's "Sample
        weights"): an integer weight ``k`` counts its row ``k`` times, a
        weight of 0 leaves it out. Every built-in statistic is weighted:
        moments (``var`` divides by the weight sum less ``ddof``), covariance,
        histograms and their MI, the quantile sketch and per-class moments;
        ``count`` stays the number of values and ``Summary.weight_sum`` is
        their weight sum. A negative, NaN or infinite weight is an error
        naming its block and row. Not with a tiled covariance.
    stats : sequence of {"moments", "cov", "hist", "mi", "class_moments", "sketch"}
        What to compute. Moments are always included; ``"mi"`` is skipped
        when no label is given. ``"class_moments"`` (per-class count, mean
        and M2, the input of :func:`daskbatch.select`'s ANOVA F and chi2
        scores) needs a label and runs in the first pass; the default
        computes it when there is a label, so that ``select`` runs on it. ``"sketch"``
        (quantiles within 0.5 %, see :class:`~daskbatch.stats.Sketch`) is
        added whenever histogram ranges are found from the data.
        Names, or statistic objects of your own: anything with a plain ``name``,
        ``chunk(x, label=None) -> state``, ``merge(a, b) -> state`` and
        ``finalize(state)`` (see the README's "Your own statistic"); it is
        fused into the first pass and its result lands in ``summary.extra[name]``
        (kept by ``update``/``merge``, saved, and in ``to_xarray``/``to_dataframe``).
        A string ``"module:qualname"``, or a name registered in the
        ``daskbatch.statistics`` entry-point group, names such a statistic.
    bins : int, default 64
        Histogram bins per feature.
    range : (lo, hi), array of shape (D, 2), "minmax" or None
        Histogram range(s). When given, everything takes one pass. When not,
        a first pass (fused with the moments and co-moments) fills a quantile
        sketch, and the second pass counts over each feature's
        ``[0.1 %, 99.9 %]`` quantiles widened by the sketch's error bound and
        by 5 % of their span on each side (clipped to its min and max), left
        out of the quantiles: values beyond robust fences cut off from the
        rest (sentinels, 1e12, ±inf; see :mod:`daskbatch.stats.ranges`), so
        that extreme values cannot squeeze the rest into one bin; values
        outside are kept in the underflow and overflow counts. The second
        pass also counts a fine quantile histogram that makes
        :meth:`Summary.quantile` exact to one of its bins
        (:mod:`daskbatch.stats.quantile`). ``"minmax"``: each feature's min and max.
        More than 1 % of a feature's values outside its range raises a
        :class:`~daskbatch.RangeWarning` (see ``Summary.out_of_range_fraction``).
        When the sketch does not fit a worker (its state is 221 kB per
        feature), it keeps a window of 2,048 buckets per sign (33 kB per
        feature: 5,000 features fit a 2 GiB worker; see
        :class:`~daskbatch.stats.Sketch` for what a window that collapses
        bounds). Only when that does not fit either do ranges come from min
        and max, the last resort, with a :class:`~daskbatch.RangeWarning` saying so.
    ddof : int, default 1
        Delta degrees of freedom of variance and covariance.
    bias : bool, default True
        Biased skewness/kurtosis as ``scipy.stats`` defaults; False corrects them.
    nan_policy : {"omit", "propagate", "raise"}, default "omit"
        NaN values are left out (and counted), make a feature's moments NaN,
        or raise naming the features that hold them. Co-moments always use
        complete rows only and report their number as ``cov_count``.
    mi_base : {"e", 2}, default "e"
        Mutual information in nats or bits. It is the plug-in estimate on the
        ``bins`` in-range bins (``sklearn.metrics.mutual_info_score`` of the
        binned values), not scikit-learn's k-nearest-neighbour
        ``mutual_info_classif``: higher on small samples (its bias, median
        1.24x on breast_cancer at 64 bins), lower on heavy tails that
        equal-width bins crowd into a few bins (README, "Numbers you can trust").
    miller_madow : bool, default False
        Apply the Miller–Madow bias correction to mutual information.
    feature_names : sequence of str, optional
        Names for the features (else from the store, else ``f0, f1, ...``).
    classes : sequence of int, optional
        The class values of ``label``; a label outside them is an error naming
        the value and its rows. Default: what the store records, else the
        distinct values found by a scan of the label array alone (before the
        plan is made, so it knows the number of classes), at most
        ``daskbatch.max-classes``. They become the ``class`` coordinate of the
        summary (see :mod:`daskbatch.engine.class_labels`).
    target : array of real numbers or str, optional
        A continuous target, one value per sample (NumPy, dask, pandas
        Series; float, integer or bool, read as float64; finite), or the name of
        an array in the store ``x`` names, instead of
        a class ``label`` (give one or the other: a float label is refused,
        never cast to classes). The first pass then computes every feature's
        co-moments with it (``summary.target_*``, the input of
        ``select(score="f_regression" | "r_regression")``) and, when
        ``"mi"`` is asked for, a quantile sketch of the target; the second
        pass counts the (bin × target bin) tables of ``"mi"`` with the target
        cut at its own quantiles into ``target_bins`` equally populated bins
        (fewer where ties merge cuts; the cuts are in
        ``provenance["target"]["cuts"]``, the bins are the ``class``
        coordinate). ``"class_moments"`` needs a class label.
    target_bins : int or sequence of float, default 16
        Quantile bins of the target for ``"mi"`` (at least 2), or the cuts
        themselves (strictly increasing; a summary's
        ``provenance["target"]["cuts"]``: ``update``, ``merge`` and ``like=``
        use them so that both sides count the same target bins).
    groups : array of int, optional
        A group key per sample (any integers; at most ``daskbatch.max-classes``
        distinct values, declared with ``classes`` or found as for a label),
        in place of a label: the first pass computes every feature's moments
        within every group (``"class_moments"``, always added) and, with
        ``"hist"``, the histogram pass counts them per group, in the same
        passes as the rest. Read them as ``summary.group_count``,
        ``group_mean``, ``group_var``, ``group_hist`` or the
        ``summary.by_group()`` Dataset. Excludes ``label`` and ``target``.
    missing : {"auto", "raise", "skip", "fill"}, default "auto"
        Chunks absent from a store given by path: read them as the writer meant
        (the fill value, except in a store daskbatch wrote, where absent means
        lost and is refused), refuse, compute on the rows whose chunks are
        present, or read zarr's fill values (see :func:`daskbatch.open_dataset`;
        the summary's provenance lists and counts them).
    like : Summary, optional
        Count the histograms on this summary's bin edges (its ranges, bin
        count and class values), so that :func:`daskbatch.compare` can
        measure drift between the two. Excludes ``range``.

    run : RunOptions, optional
        How to run: plan, checkpoint, device, progress, cache, split_every,
        cov_out and cancel (see :class:`~daskbatch.RunOptions`, whose defaults apply).
    plan, checkpoint, force, device, progress, cache, split_every, cov_out, cancel : optional
        Shortcuts for the fields of ``run`` (give them there or here, not both).

    Returns
    -------
    Summary
        The statistics, their settings and the data's provenance.

    Notes
    -----
    Runs on the active Dask scheduler (the threaded one, or a ``distributed``
    client when one exists) and never starts a cluster by itself.
    """
    run = RunOptions.from_keywords(
        run, plan=plan, checkpoint=checkpoint, force=force, device=device, progress=progress, cache=cache,
        split_every=split_every, cov_out=cov_out, cancel=cancel,
    )
    if like is not None:
        range, bins, classes = _histograms_like(like, range, classes)  # noqa: A001 - describe's name
        if target is not None and "cuts" in like.provenance.get("target", {}):
            target_bins = like.provenance["target"]["cuts"]  # the reference's target bins too
    wanted = configured(stats, bins=bins, range=range, ddof=ddof, bias=bias, nan_policy=nan_policy, classes=classes,
                        base=mi_base, miller_madow=miller_madow, target_bins=target_bins)
    # Held across all passes, so that no other run slips in between two of them (each pass takes it too).
    with checkpoint_lock(run.checkpoint) if run.checkpoint is not None else contextlib.nullcontext():
        data, where = prepared_inputs(x, label, weights=weights, target=target, groups=groups,
                                      feature_names=feature_names, missing=missing, device=run.device)
        done = run_statistics(data, wanted, run, where=where, grouped=groups is not None, targeted=target is not None)
    summary = Summary.from_results(done.data.feature_names, done.results, done.provenance, mi_base=wanted.mi.base,
                                   miller_madow=wanted.mi.miller_madow, states=done.states)
    if summary.out_of_range_fraction is not None:
        summary.provenance["out_of_range"] = flag_out_of_range(summary.out_of_range_fraction, done.data.feature_names)
    return summary


def _histograms_like(
    like: Summary, range_: Any, classes: Sequence[int] | None
) -> tuple[np.ndarray, int, Sequence[int] | None]:
    """The reference summary's ranges, bin count and class values, for histograms on its edges."""
    if not isinstance(like, Summary):
        raise TypeError(f"like must be a Summary (db.describe or db.load_summary), got {type(like).__name__}")
    if like.hist_edges is None:
        raise ValueError("like= needs a summary with histograms (stats with 'hist' or 'mi')")
    if range_ is not None:
        raise ValueError("give range= or like=, not both: like= takes the reference summary's ranges")
    ranges = np.stack([like.hist_edges[:, 0], like.hist_edges[:, -1]], axis=1)
    if classes is None and like.classes is not None:
        classes = [int(c) for c in like.classes]
    return ranges, int(like.hist_edges.shape[1] - 1), classes
