"""``describe``: every requested statistic of a (samples × features) array in one or two passes.

A straight pipeline, each step taking the previous one's (immutable) value:

    inputs -> statistics -> layout (plan, or the checkpoint's) -> rechunk -> device -> passes -> Summary
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np

from daskbatch import config
from daskbatch._arguments import strict_int
from daskbatch._warnings import warn
from daskbatch.engine.checkpoint.lock import holding_checkpoint_lock
from daskbatch.engine.devices import resolve_device
from daskbatch.engine.inputs import (
    FeatureMatrix,
    as_feature_matrix,
    as_weights,
    device_module,
    groups_as_label,
    to_device,
    with_target,
)
from daskbatch.engine.passes import PassRunner, compute
from daskbatch.engine.planner import plan_describe, plan_dropping_sketch, plan_statistics
from daskbatch.engine.reduce import resolve_split_every, to_host
from daskbatch.errors import RangeWarning
from daskbatch.io.outputs import check_output
from daskbatch.runtime.joblog import logged_run
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, Sketch
from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram
from daskbatch.stats.ranges import fine_ranges, flag_out_of_range
from daskbatch.stats.registry import Kept
from daskbatch.stats.sketch import WINDOW, WINDOWED_FOOTPRINT
from daskbatch.stats.spec import (
    DEFAULT_STATS,
    NAN_POLICIES,
    describe_names,
    footprint_of,
    grouped_names,
    histogram_ranges,
    is_minmax,
    normalize_stats,
    target_statistics,
    user_statistics,
)
from daskbatch.stats.target import target_cuts
from daskbatch.summary import Summary

__all__ = ["describe", "plan_describe"]

log = logging.getLogger(__name__)


@logged_run("describe")
@holding_checkpoint_lock
def describe(
    x: Any,
    label: Any = None,
    *,
    weights: Any = None,
    stats: str | Sequence[str] = DEFAULT_STATS,
    bins: int = 64,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    ddof: int = 1,
    bias: bool = True,
    nan_policy: Literal["omit", "propagate", "raise"] = "omit",
    split_every: int | None = None,
    mi_base: Literal["e", 2] = "e",
    miller_madow: bool = False,
    feature_names: Sequence[str] | None = None,
    progress: bool | Literal["dask"] | Callable[[int, int | None, str], Any] = False,
    checkpoint: str | os.PathLike[str] | None = None,
    force: bool = False,
    device: Literal["auto", "cpu", "gpu"] = "cpu",
    plan: Any = "auto",
    cov_out: str | os.PathLike[str] | None = None,
    cache: bool | Literal["auto"] = "auto",
    classes: Sequence[int] | None = None,
    target: Any = None,
    target_bins: int | Sequence[float] = 16,
    groups: Any = None,
    missing: Literal["auto", "raise", "skip", "fill"] = "auto",
    like: Summary | None = None,
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
        naming its block and row. Not with ``checkpoint`` or a tiled covariance.
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
    split_every : int, optional
        Fan-in of the merge tree (``daskbatch.split-every``, default 8).
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
    progress : bool, "dask" or callable, default False
        Show a progress bar per pass: a widget in Jupyter, a labelled line on
        stderr in a terminal, nothing otherwise (the passes' start, end and
        throughput are logged at INFO either way, and a line every 10 s where
        no bar is drawn). ``"dask"``: dask's own displays instead,
        :func:`distributed.progress` on each pass's futures under a
        ``distributed`` client, :class:`dask.diagnostics.ProgressBar` under the
        local schedulers. A callable is called as ``progress(done, total,
        phase)`` after every finished block, in the calling thread.
    checkpoint : path, optional
        Directory for merged partial states of completed block ranges. A
        re-run with the same inputs computes only what is missing and returns
        a result bitwise identical to an uninterrupted run.
    force : bool, default False
        Discard a checkpoint that belongs to other inputs instead of refusing.
    device : {"auto", "cpu", "gpu"}, default "cpu"
        ``"auto"``: the GPU when it passes the preflight and a chunk has at
        least ``daskbatch.gpu-min-batch-bytes``, else the CPU (logged, and
        ``provenance["device"]``). ``"gpu"`` moves each block to the GPU once (CuPy) and computes and
        merges states there. Blocks that already are CuPy arrays stay on the GPU
        either way. How host blocks travel is ``daskbatch.gpu-transfer``:
        ``"block"`` (a copy task per block) or ``"staged"`` (each chunk task
        copies its block in parts through pinned buffers, overlapping the copy
        of one part with the reduction of the previous).
    plan : "auto", Plan, Resources or None, default "auto"
        How to chunk and reduce. ``"auto"`` plans from the live cluster's
        workers (or this machine) with :func:`daskbatch.plan`, rechunks to its
        chunk rows and uses its ``split_every``; a :class:`~daskbatch.Resources`
        plans for that budget; a :class:`~daskbatch.Plan` is used as given;
        None keeps the input's chunks. A plan that cannot fit raises
        :class:`~daskbatch.PlanError` before anything is computed.
    cov_out : path, optional
        Where the tiled covariance goes when the plan tiles it (a D × D
        co-moment state too large for one worker): a Zarr group with ``cov``
        and ``corr`` written tile by tile by the workers. Default: a new
        temporary directory, named in ``summary.provenance["tiled_cov"]``.
    cache : bool or "auto", default "auto"
        When two passes are needed (no ``range``), keep the decoded chunks in
        memory (``persist``) so that each is read and decoded once; peak
        memory then grows with the data (distributed spills to disk when they
        do not fit). ``"auto"`` caches a store's chunks on the CPU when the plan
        says they take at most ``daskbatch.cache-fraction`` (default 0.25) of
        the workers' memory, and never with a checkpoint (a resumed run reads
        only what is missing) or ``plan=None``. The results are bitwise the
        same either way.
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
    cancel : threading.Event, optional
        Set from another thread, it stops the run at the next finished block:
        :class:`~daskbatch.Cancelled` (an ``Exception``). With ``checkpoint``
        the finished blocks are kept and the same call resumes.

    Returns
    -------
    Summary
        The statistics, their settings and the data's provenance.

    Notes
    -----
    Runs on the active Dask scheduler (the threaded one, or a ``distributed``
    client when one exists) and never starts a cluster by itself.
    """
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    if not isinstance(cache, bool) and cache != "auto":
        raise ValueError(f"cache must be True, False or 'auto', got {cache!r}")
    if like is not None:
        range, bins, classes = _histograms_like(like, range, classes)  # noqa: A001 - describe's name
        if target is not None and "cuts" in like.provenance.get("target", {}):
            target_bins = like.provenance["target"]["cuts"]  # the reference's target bins too
    bins, ddof = strict_int(bins, "bins", minimum=1), strict_int(ddof, "ddof", minimum=0)
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
    if device != "auto":
        device_module(device)  # a missing CuPy is named before anything is planned for the GPU
    if target is not None and label is not None:
        raise ValueError("give label= (classes) or target= (a continuous target), not both")
    if target is not None and weights is not None:
        raise ValueError("weights= with target= is not supported yet: the target's co-moments and sketch are unweighted")
    if groups is not None:
        label = groups_as_label(groups, label, target)
    data = as_feature_matrix(x, label, feature_names=feature_names, missing=missing)
    if target is not None:
        data = with_target(data, target)
    data = as_weights(weights, data)
    where = resolve_device(device, data.x)
    device = where.device  # type: ignore[assignment]  # "auto" resolved
    if device == "gpu":
        _warn_unless_gpu_kernels()
    names = describe_names(stats, labelled=data.label is not None, range_=range)
    if groups is not None:
        names = grouped_names(names)
    custom = user_statistics(stats)
    if data.weights is not None:
        _check_weighted(custom, checkpoint)
    layout = _layout(plan, split_every, checkpoint, force)
    if target is not None:
        names, fused, class_values, given_cuts = target_statistics(stats, names, target_bins)
        custom, classes_from = (*custom, *fused), "target quantiles" if class_values is not None else None
    else:
        given_cuts = None
        class_values, classes_from = _class_values(data, names, classes, layout.split_every_or_default, progress,
                                                   negative=groups is not None)
    target_mi = target is not None and "mi" in names
    found_cuts = target_mi and given_cuts is None  # cut at the quantiles the first pass finds
    chosen, planned = plan_dropping_sketch(
        lambda stats_: _planned(layout, data, (*stats_, *map(footprint_of, custom)), bins=bins, device=device,
                                n_classes=class_values),
        names, optional=_sketch_was_implied(stats, names),
    )
    sketch_window = None
    if WINDOWED_FOOTPRINT in planned:  # wide data: the sketch keeps a window of buckets per sign
        sketch_window = WINDOW
        planned = tuple("sketch" if s is WINDOWED_FOOTPRINT else s for s in planned)
    if planned != names:  # wider still: not even the windowed sketch that chooses robust ranges fits
        names, range = planned, "minmax"  # noqa: A001 - describe's name
        warn(RangeWarning(
            "histogram ranges from each feature's min and max, the last resort: the quantile sketch that chooses "
            "robust ranges does not fit a worker (its state is 33 kB per feature); give range= (--range) to choose them"
        ))
    fan_in = resolve_split_every(layout.split_every if layout.split_every is not None else
                                 chosen.split_every if chosen is not None else None)
    data = _rechunked(data, layout.chunk_rows if layout.chunk_rows is not None else
                      chosen.chunk_rows if chosen is not None else None)
    if class_values is not None and classes_from not in ("label scan", "target quantiles"):
        from daskbatch.engine.class_labels import checked_label

        assert data.label is not None
        data = dataclasses.replace(data, label=checked_label(data.label, data.x.chunks[0], class_values))
    if class_values is not None:  # checked just above, or found by scanning this very label
        data = dataclasses.replace(data, label_checked=True)
    data = to_device(data, device)  # the last hop: blocks move once, already in their final shape
    if cov_out is not None and chosen is not None and chosen.feature_tile is not None:
        # refuse an unusable cov_out before computing anything
        check_output(cov_out, kind="tiled_cov", what="cov_out", protected=_protected(data, checkpoint))

    tiled = "cov" in names and chosen is not None and chosen.feature_tile is not None
    if tiled and data.weights is not None:
        raise ValueError("weights= with a tiled covariance (features too many for one co-moment matrix) is not supported; "
                         "leave 'cov' out of stats")
    explicit = range is not None and not is_minmax(range)
    # The target's quantile bins come from the first pass: its mutual information needs a second.
    two_passes = ("hist" in names or "mi" in names) and (not explicit or found_cuts)
    cached = two_passes and checkpoint is None and _cache_blocks(cache, data, chosen, device)
    if cached:  # both passes read the decoded blocks (and the label's, 1/D of them) from memory
        import dask

        log.info("keeping the %s MiB of decoded blocks in memory for both passes (cache=%r)",
                 f"{data.x.nbytes / 2**20:,.0f}", cache)
        x, label, weights_ = dask.persist(data.x, data.label, data.weights)
        data = dataclasses.replace(data, x=x, label=label, weights=weights_)
    run = PassRunner(data, fan_in, progress, checkpoint, force, passes=2 if two_passes else 1, cancel=cancel)
    first = _first_pass(names, ddof=ddof, bias=bias, nan_policy=nan_policy, tiled=tiled, class_values=class_values,
                        histogram=_histogram(names, bins, range, data.x.shape[1], class_values, given_cuts)
                        if explicit and not found_cuts and ("hist" in names or "mi" in names) else None,
                        custom=custom, sketch_window=sketch_window)
    with _span(data):
        # The merged states are kept with the summary (it can then be merged and updated,
        # daskbatch.incremental); finalizing them here gives the results a finalizing pass gives.
        kept = _kept(first, run(first, finalize=False))
        results = {name: to_host(k.finalize()) for name, k in kept.items()}
        _check_nan_policy(results["moments"], nan_policy, data)
        if two_passes:
            sketch = results["sketch"] if range is None else None
            m = results["moments"]
            lo, hi = histogram_ranges(range, data.x.shape[1], m.finite_min, m.finite_max, sketch=sketch)
            log.debug("histogram ranges of %d features from %s", len(lo), "each feature's min and max" if range is not None
                      else "the sketch's 0.1-99.9 % quantiles widened by its error bound, values detached beyond "
                      "robust fences left out")
            by_class: dict[str, Any] = (
                {"target_cuts": given_cuts or target_cuts(results["target_sketch"], int(target_bins))}  # type: ignore[arg-type]
                if target_mi
                else {"classes": class_values if "mi" in names else None}
            )
            second: list[Any] = [Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names, **by_class)]
            if sketch is not None:  # the fine histogram that makes quantiles exact to one of its bins
                q_lo, q_hi = fine_ranges(sketch, m.finite_min, m.finite_max, QUANTILE_BINS)
                second.append(QuantileHistogram(bins=QUANTILE_BINS, lo=tuple(map(float, q_lo)),
                                                hi=tuple(map(float, q_hi))))
            kept.update(_kept(Bundle(tuple(second)), run(Bundle(tuple(second)), 2, finalize=False)))
            results.update((s.name, to_host(kept[s.name].finalize())) for s in second)
    provenance = dict(data.provenance)
    if groups is not None:
        provenance["grouped"] = True
    if target_mi:
        cuts = list(kept["hist"].statistic.target_cuts)
        provenance["target"] = {**provenance["target"], "bins": len(cuts) + 1, "cuts": cuts}
    if tiled:
        assert chosen is not None and chosen.feature_tile is not None
        results["cov"], provenance["tiled_cov"] = _tiled_cov(data, chosen.feature_tile, cov_out, ddof, fan_in)
    provenance.update(
        stats=list(names), bins=bins if "hist" in names or "mi" in names else None, ddof=ddof, bias=bias,
        nan_policy=nan_policy, split_every=fan_in, passes=2 if two_passes else 1, pass_seconds=list(run.seconds),
        chunk_rows=int(max(data.x.chunks[0])), n_chunks=int(data.x.numblocks[0]),
        range_given=explicit, classes_from=classes_from, miller_madow=miller_madow, device=device,
        device_reason=where.reason, cached=cached,
        layout=layout.source, plan=None if chosen is None else {
            "budget_bytes": chosen.budget_bytes, "task_bytes": chosen.task_bytes,
            "limited_by": chosen.limited_by, "resources": chosen.resources.describe(),
            "n_classes": chosen.n_classes,
        },
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        daskbatch_version=_version(),
        input_tokens=[_input_token(data)],  # merge and update refuse to count these rows twice
    )
    if "hist" in names or "mi" in names:
        provenance["range"] = "given" if explicit else "minmax" if range is not None else "quantiles"
    summary = Summary.from_results(data.feature_names, results, provenance, mi_base=mi_base, miller_madow=miller_madow,
                                   # a tiled covariance has none; weighted states are not saved or merged yet
                                   states=None if tiled or data.weights is not None else _mergeable(kept))
    if summary.out_of_range_fraction is not None:
        summary.provenance["out_of_range"] = flag_out_of_range(summary.out_of_range_fraction, data.feature_names)
    return summary


# ------------------------------------------------------------------ the steps


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How the blocks are laid out: decided once, from the checkpoint, the user or the plan.

    ``chunk_rows`` and ``split_every`` are None where the plan (or the input's
    chunks, or the configured fan-in) decides; ``plan`` is what to plan with
    (None: do not plan); ``source`` says which for the provenance.
    """

    plan: Any
    chunk_rows: int | None
    split_every: int | None
    source: str

    @property
    def split_every_or_default(self) -> int:
        return resolve_split_every(self.split_every)


def _layout(plan: Any, split_every: int | None, checkpoint: Any, force: bool) -> _Layout:
    """The layout of this run: what the user asked for, else a checkpoint's recorded one, else the plan's.

    Resuming needs the grid and fan-in the checkpoint was written with (the
    cluster, and with it the automatic plan, may have changed since), so
    without a request of their own a resumed run takes the recorded layout
    and says so (log and ``provenance["layout"]``). A layout the user asked
    for explicitly (``split_every``, a Plan, Resources, or ``plan=None`` for the
    input's blocks) is never overridden: when it differs from the checkpoint's,
    the checkpoint's fingerprint refuses the run, naming every differing item.
    """
    if split_every is not None:
        resolve_split_every(split_every)  # validate before anything else
    automatic = isinstance(plan, str) and plan == "auto"
    recorded = None
    if checkpoint is not None and not force and automatic:
        from daskbatch.engine.checkpoint.manifest import recorded_layout

        recorded = recorded_layout(checkpoint)
    if recorded is None:
        return _Layout(plan, None, split_every, "plan" if plan is not None else "input chunks")
    fan_in = split_every if split_every is not None else recorded["split_every"]
    log.info("resuming on the checkpoint's layout: chunk_rows=%s, split_every=%s", f"{recorded['chunk_rows']:,}", fan_in)
    return _Layout(None, recorded["chunk_rows"], fan_in, "checkpoint")


def _class_values(
    data: FeatureMatrix, names: tuple[str, ...], classes: Any, split_every: int, progress: Any, negative: bool = False,
) -> tuple[tuple[int, ...] | None, str | None]:
    """The label's class values (declared, recorded, or a label-only scan) when a statistic needs them."""
    if "mi" not in names and "class_moments" not in names:
        return None, None
    from daskbatch.engine.class_labels import resolve_classes

    return resolve_classes(data, classes, split_every=split_every, negative=negative,
                           compute=lambda d: compute(d, progress, "label scan"))


def _warn_unless_gpu_kernels() -> None:
    """Warn once when CuPy chunks will take the array-API path, checking where the chunks run (the workers)."""
    from daskbatch.runtime.capacity import active_client
    from daskbatch.stats.kernels.preflight import check_gpu, warn_unless_gpu_kernels

    client = active_client()
    checks = [check_gpu()] if client is None else list(client.run(check_gpu).values())
    for check in checks:
        warn_unless_gpu_kernels(check, stacklevel=4)


def _planned(
    layout: _Layout, data: FeatureMatrix, names: tuple[Any, ...], *, bins: int, device: str,
    n_classes: tuple[int, ...] | None,
) -> Any:
    """The plan to run with (raising PlanError before any compute), or None to keep the input's chunks."""
    from daskbatch.planning.resources import Resources
    from daskbatch.planning.search import Plan

    plan = layout.plan
    if plan is None:
        return None
    if isinstance(plan, Plan):
        chosen = plan
    elif (isinstance(plan, str) and plan == "auto") or isinstance(plan, Resources):
        chosen = plan_statistics(
            data, names, bins=bins, resources=plan, split_every=layout.split_every,
            n_classes=None if n_classes is None else len(n_classes), device=device,
        )
    else:
        raise TypeError(f"plan must be 'auto', a Plan, a Resources or None; got {plan!r}")
    if chosen.shape != tuple(data.x.shape):
        raise ValueError(f"the plan is for shape {chosen.shape} but the data have shape {tuple(data.x.shape)}")
    if isinstance(plan, Plan):  # whoever made it has logged it (daskbatch run does): once is enough
        log.debug("using the plan given: %s rows a chunk, split_every %d", f"{chosen.chunk_rows:,}", chosen.split_every)
    else:
        for line in chosen.explain().splitlines():  # a batch log records what the run was planned for
            log.info("%s", line)
    return chosen


def _rechunked(data: FeatureMatrix, chunk_rows: int | None) -> FeatureMatrix:
    """``data`` with blocks of at most ``chunk_rows`` rows.

    Only blocks larger than that are split (memory, parallelism): merging
    smaller blocks would add a concatenating copy and grow peak memory for no gain.
    """
    if chunk_rows is None or max(data.x.chunks[0]) <= chunk_rows:
        return data
    return dataclasses.replace(data, x=data.x.rechunk({0: chunk_rows}))


def _cache_blocks(cache: bool | str, data: FeatureMatrix, chosen: Any, device: str) -> bool:
    """Whether to keep the decoded blocks in memory between the two passes (``cache``; "auto": when they fit)."""
    if isinstance(cache, bool):
        return cache
    # Only blocks read from a store (an in-memory input has no second read to save), on the
    # host, and only with a plan, whose resources say how much memory the workers have.
    if data.source is None or device != "cpu" or data.stage_rows is not None or chosen is None:
        return False
    fraction = config.get("cache-fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
        raise ValueError(
            f"daskbatch.cache-fraction must be a number in [0, 1] (the share of the workers' memory that "
            f"describe's decoded blocks may take between its passes), got {fraction!r}"
        )
    workers = chosen.resources.memory_bytes * chosen.resources.n_workers
    fits = data.x.nbytes <= fraction * workers
    log.debug("cache='auto': the decoded blocks take %d bytes, %s %g of the workers' %d bytes: %s", data.x.nbytes,
              "within" if fits else "more than", fraction, workers, "cached" if fits else "read twice")
    return bool(fits)


def _histogram(
    names: tuple[str, ...], bins: int, range_: Any, n_features: int, class_values: tuple[int, ...] | None,
    cuts: tuple[float, ...] | None = None,
) -> Histogram:
    lo, hi = histogram_ranges(range_, n_features)
    # The class values are for the joint (bin x class) tables of 'mi' only ('class_moments' has its own).
    by_label = "mi" in names
    if by_label and cuts is not None:  # a continuous target, cut where given
        return Histogram(bins=bins, lo=lo, hi=hi, by_label=True, target_cuts=cuts)
    return Histogram(bins=bins, lo=lo, hi=hi, by_label=by_label, classes=class_values if by_label else None)


def _first_pass(
    names: tuple[str, ...], *, ddof: int, bias: bool, nan_policy: Literal["omit", "propagate", "raise"], tiled: bool,
    class_values: tuple[int, ...] | None, histogram: Histogram | None, custom: tuple[Any, ...] = (),
    sketch_window: int | None = None,
) -> Bundle:
    """The statistics of the first pass, fused: each block is read and cast once for all of them."""
    first: list[Any] = [Moments(ddof=ddof, bias=bias, nan_policy=nan_policy)]
    if "cov" in names and not tiled:
        first.append(CoMoments(ddof=ddof))
    if "class_moments" in names:  # by label: the runner passes the label to this bundle
        first.append(ClassMoments(ddof=ddof, classes=class_values))
    if "sketch" in names:
        first.append(Sketch(window=sketch_window))
    if histogram is not None:
        first.append(histogram)
    return Bundle((*first, *custom))


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


def _sketch_was_implied(stats: Any, names: tuple[str, ...]) -> bool:
    """Whether describe added the sketch itself (to find ranges) rather than the user asking for it."""
    return "sketch" in names and "sketch" not in normalize_stats(stats)


def _kept(bundle: Bundle, states: tuple[Any, ...]) -> dict[str, Kept]:
    """Each statistic of ``bundle`` with its merged state, by name."""
    return {s.name: Kept(s, state) for s, state in zip(bundle.stats, states, strict=True)}


def _mergeable(kept: dict[str, Kept]) -> dict[str, Kept]:
    """The states a summary keeps: all but the fine quantile histogram's.

    Its ranges come from this run's first pass, so a merge or an update (one
    pass on stored ranges) could not continue it: merged summaries read their
    quantiles from the sketch (``Summary.quantile`` says which bound holds).
    """
    return {name: k for name, k in kept.items() if not isinstance(k.statistic, QuantileHistogram)}


def _check_weighted(custom: tuple[Any, ...], checkpoint: Any) -> None:
    """Refuse, before any compute, what weights do not reach: a user's statistic without ``takes_weights``, checkpoints."""
    from daskbatch.stats._base import reads_weights

    for stat in custom:
        if not reads_weights(stat):
            raise ValueError(f"statistic {stat.name!r} does not take sample weights (its chunk has no weights=)")
    if checkpoint is not None:
        raise ValueError("weights= cannot be combined with checkpoint= yet: the checkpoint's fingerprint does not cover weights")


def _check_nan_policy(m: Any, nan_policy: str, data: FeatureMatrix) -> None:
    if nan_policy == "raise" and np.any(m.nan_count > 0):
        bad = np.flatnonzero(m.nan_count > 0)
        listed = ", ".join(f"{data.feature_names[i]} ({int(m.nan_count[i])})" for i in bad[:10])
        raise ValueError(f"{data.provenance['source']} holds NaN values in {bad.size} feature(s): {listed}")


@contextlib.contextmanager
def _span(data: FeatureMatrix) -> Iterator[None]:
    """One ``distributed`` span per describe call, so the dashboard groups its tasks."""
    from daskbatch.runtime.capacity import active_client

    if active_client() is None:
        yield
        return
    from distributed import span

    with span("daskbatch-describe"):
        yield


def _tiled_cov(data: FeatureMatrix, tile: int, cov_out: Any, ddof: int, split_every: int) -> tuple[Any, dict[str, Any]]:
    """Covariance tile by tile into Zarr (the D × D state does not fit one worker)."""
    import tempfile

    from daskbatch.engine.tiled import tiled_covariance
    from daskbatch.stats.comoments import CoMomentsResult

    out = os.fspath(cov_out) if cov_out is not None else os.path.join(tempfile.mkdtemp(prefix="daskbatch-cov-"), "cov.zarr")
    if data.stage_rows is not None:  # the tiles' tasks take device blocks: move them block by block
        data = to_device(dataclasses.replace(data, stage_rows=None), "gpu", transfer="block")
    tc = tiled_covariance(
        data.x, tile=tile, out=out, ddof=ddof, split_every=split_every,
        feature_names=data.feature_names, protected=_protected(data),
    )
    # The matrices stay in the store; the summary keeps the row count and the path.
    result = CoMomentsResult(n=np.float64(tc.n), mean=tc.mean, cov=None, corr=None)
    return result, {"path": out, "tile": tile}


def _input_token(data: FeatureMatrix) -> str:
    """The content token of the input (:func:`daskbatch.incremental.input_token`)."""
    from daskbatch.incremental import input_token

    return input_token(data)


def _protected(data: FeatureMatrix, checkpoint: Any = None) -> dict[str, Any]:
    """Paths an output of this run must stay clear of: the input store and the checkpoint."""
    return {"the input store": data.provenance.get("path"), "the checkpoint directory": checkpoint}


def _version() -> str:
    from daskbatch._version import __version__

    return __version__
