"""``describe``: every requested statistic of a (samples × features) array in one or two passes.

The verb over the engine: it checks the arguments, runs the passes
(:func:`daskbatch.engine.pipeline.run_statistics`) and makes the :class:`Summary`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch._common import warn
from daskbatch.engine.checkpoint_files import checkpoint_lock
from daskbatch.engine.pipeline import run_statistics
from daskbatch.engine.run_options import RunOptions
from daskbatch.errors import CompleteRowsWarning, DataError, SuspectValueWarning
from daskbatch.runtime.capacity import logged_run
from daskbatch.stats.spec import DEFAULT_STATS, configured, normalize_stats
from daskbatch.summary import Summary
from daskbatch.summary.reprs import covariance_message, summary_suspect_values, suspect_message

__all__ = ["describe"]


class FeatureCountError(DataError):  # numpydoc ignore=PR02
    """Settings made for another number of features than the data has (a reference summary's, per-feature ranges).

    Parameters
    ----------
    given : int
        The features the settings were made for.
    data : int
        The features of the data.
    message : str
        The one-line message.
    """

    def __init__(self, given: int, data: int, message: str) -> None:
        super().__init__(message)
        self.given, self.data = given, data


def describe(
    x: Any,
    label: Any = None,
    *,
    stats: str | Sequence[Any] = DEFAULT_STATS,
    bins: int | None = None,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    classes: Sequence[int] | None = None,
    weights: Any = None,
    target: Any = None,
    groups: Any = None,
    run: RunOptions | None = None,
) -> Summary:
    """Per-feature statistics of a (samples × features) array, reading each chunk once per pass.

    Parameters
    ----------
    x : dask.array.Array, numpy.ndarray, Dataset, path / URL of a Zarr store, or zarr.Group / zarr.Array
        Samples along axis 0, features along axis 1 (any real dtype; accumulated in float64).
    label : array of int, or name of an array in the same store, optional
        Class of every sample, for mutual information and per-class moments.
    stats : str or sequence of names and statistic objects
        ``"moments"`` (always), ``"cov"``, ``"hist"``, ``"mi"``, ``"class_moments"``, ``"sketch"``,
        or objects that carry their parameters (:class:`~daskbatch.stats.Moments`,
        :class:`~daskbatch.stats.Histogram`, :class:`~daskbatch.stats.MutualInformation`, ...);
        the label's are skipped without one. A user's statistic lands in ``summary.extra[name]``.
    bins, range, classes : optional
        Shortcuts for the statistics' parameters of those names (a
        :class:`~daskbatch.Histogram`'s bins and range, the class values);
        ``ddof`` and the others are the statistic objects' own
        (``stats=["cov", db.Moments(ddof=0)]``).
    weights : array of float, or name of an array in the same store, optional
        A non-negative frequency weight per sample (README, "Sample weights").
    target : array of real numbers or str, optional
        A continuous target in place of ``label`` (its co-moments, its
        quantile-binned mutual information; README, "Continuous targets").
    groups : array of int, optional
        Group keys in place of ``label``: every statistic by group (README, "Groups").
    run : RunOptions, optional
        How to run and read: plan, checkpoint, device, progress, cache,
        split_every, cov_out, cancel, and ``like``, ``feature_names`` and
        ``missing`` (see :class:`~daskbatch.RunOptions`).

    Returns
    -------
    Summary
        The statistics, their settings and the data's provenance.
    """
    # The one log line of the call (rows, features, time, passes, peak memory), written as it ends.
    with logged_run("describe"):
        if run is None:
            run = RunOptions()
        elif not isinstance(run, RunOptions):
            raise TypeError(f"run must be a daskbatch.RunOptions, got {type(run).__name__}")
        shortcuts: dict[str, Any] = {}
        if run.like is not None:
            like = run.like
            range, bins, classes, stats = _histograms_like(like, range, classes, stats)  # noqa: A001 - describe's name
            if target is not None and "cuts" in like.provenance.get("target", {}):
                shortcuts["target_bins"] = like.provenance["target"]["cuts"]  # the reference's target bins too
        wanted = configured(stats, bins=bins, range=range, classes=classes, **shortcuts)
        # Held across all passes, so that no other run slips in between two of them (each pass takes it too).
        with checkpoint_lock(run.checkpoint) if run.checkpoint is not None else contextlib.nullcontext():
            done = run_statistics(x, label, wanted, run, weights=weights, target=target, groups=groups,
                                  check_features=lambda n: _check_feature_count(n, range, run.like))  # before a read
        summary = Summary.from_results(done.data.feature_names, done.results, done.provenance, mi_base=wanted.mi.base,
                                       miller_madow=wanted.mi.miller_madow, states=done.states,
                                       categorical_state=done.categorical)
        _warn_untrustworthy(summary)
        return summary


def _warn_untrustworthy(summary: Summary) -> None:
    """Warn once about a complete-rows covariance that left out many rows, and about suspect values."""
    # The unlabelled arrays, made once for both: a pandas Series of each count would import pandas (0.3 s) for a
    # warning's test.
    arrays = summary.arrays
    dropped = covariance_message(arrays)
    if dropped is not None:
        warn(CompleteRowsWarning(dropped))
    suspect = suspect_message(summary_suspect_values(arrays) or ())  # what summary.suspect_values gives
    if suspect is not None:
        warn(SuspectValueWarning(suspect))


def _check_feature_count(n_features: int, range_: Any, like: Summary | None) -> None:
    """Refuse a reference summary, or one (lo, hi) per feature, made for another number of features."""
    if like is not None and len(like.feature_names) != n_features:
        given = len(like.feature_names)
        raise FeatureCountError(given, n_features, f"the reference summary (like) has {given:,} features and the "
                                f"data {n_features:,}: compare data with the same features")
    shape: tuple[int, ...] = np.shape(range_) if range_ is not None and not isinstance(range_, str) else ()
    if len(shape) == 2 and shape[1] == 2 and shape[0] != n_features:
        raise FeatureCountError(shape[0], n_features, f"range must be one (lo, hi) per feature, or one for all: "
                                f"it gives {shape[0]:,} and the data has {n_features:,} features")


def _histograms_like(
    like: Summary, range_: Any, classes: Sequence[int] | None, stats: Any
) -> tuple[np.ndarray, int, Sequence[int] | None, Any]:
    """The reference summary's ranges, bin count and class values, and ``stats`` with its sketch (merge needs it)."""
    if not isinstance(like, Summary):
        raise TypeError(f"RunOptions(like=...) must be a Summary (db.describe or db.load_summary), got {type(like).__name__}")
    like = like.arrays  # positional: the edges' first and last columns
    if like.hist_edges is None:
        raise ValueError("RunOptions(like=...) needs a summary with histograms (stats with 'hist' or 'mi')")
    if range_ is not None:
        raise ValueError("give range= or RunOptions(like=...), not both: like takes the reference summary's ranges")
    ranges = np.stack([like.hist_edges[:, 0], like.hist_edges[:, -1]], axis=1)
    if classes is None and like.classes is not None:
        classes = [int(c) for c in like.classes]
    if "sketch" in like.provenance.get("stats", ()) and "sketch" not in normalize_stats(stats):
        stats = (*([stats] if isinstance(stats, str) else stats), "sketch")
    return ranges, int(like.hist_edges.shape[1] - 1), classes, stats
