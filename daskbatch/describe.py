"""``describe``: every requested statistic of a (samples × features) array in one or two passes."""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from typing import Any, Literal

import dask
import numpy as np

from daskbatch.engine.checkpoint.run import holding_checkpoint_lock
from daskbatch.engine.inputs import FeatureMatrix, as_feature_matrix, to_device
from daskbatch.engine.reduce import resolve_split_every, tree_reduce
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, Sketch
from daskbatch.stats.ranges import TAIL, flag_out_of_range
from daskbatch.stats.spec import (
    DEFAULT_STATS,
    NAN_POLICIES,
    histogram_ranges,
    is_minmax,
    normalize_stats,
)
from daskbatch.summary import Summary


def _compute(delayed_obj: Any, progress: bool) -> Any:
    if not progress:
        return dask.compute(delayed_obj)[0]
    from daskbatch.runtime.cluster import active_client

    client = active_client()
    if client is None:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return dask.compute(delayed_obj)[0]
    from distributed import progress as dist_progress

    future = client.compute(delayed_obj)
    dist_progress(future)
    return future.result()


@holding_checkpoint_lock
def describe(
    x: Any,
    label: Any = None,
    *,
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
    progress: bool = False,
    checkpoint: str | os.PathLike[str] | None = None,
    force: bool = False,
    device: Literal["cpu", "gpu"] = "cpu",
    plan: Any = "auto",
    cov_out: str | os.PathLike[str] | None = None,
    cache: bool = False,
    classes: Sequence[int] | None = None,
    missing: Literal["raise", "skip", "fill"] = "raise",
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
    stats : sequence of {"moments", "cov", "hist", "mi", "class_moments", "sketch"}
        What to compute. Moments are always included; ``"mi"`` is skipped
        when no label is given. ``"class_moments"`` (per-class count, mean
        and M2, the input of :func:`daskbatch.select`'s ANOVA F and chi2
        scores) needs a label and runs in the first pass. ``"sketch"``
        (quantiles within 0.5 %, see :class:`~daskbatch.stats.Sketch`) is
        added whenever histogram ranges are found from the data.
    bins : int, default 64
        Histogram bins per feature.
    range : (lo, hi), array of shape (D, 2), "minmax" or None
        Histogram range(s). When given, everything takes one pass. When not,
        a first pass (fused with the moments and co-moments) fills a quantile
        sketch, and the second pass counts over each feature's
        ``[0.1 %, 99.9 %]`` quantiles widened by 5 % of their span on each side
        (clipped to its min and max), so that a few extreme values cannot
        squeeze the rest into one bin; values outside are kept in the
        underflow and overflow counts. ``"minmax"``: each feature's min and max.
        More than 1 % of a feature's values outside its range raises a
        :class:`~daskbatch.RangeWarning` (see ``Summary.out_of_range_fraction``).
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
        Mutual information in nats or bits.
    miller_madow : bool, default False
        Apply the Miller–Madow bias correction to mutual information.
    feature_names : sequence of str, optional
        Names for the features (else from the store, else ``f0, f1, ...``).
    progress : bool, default False
        Show a progress bar (distributed's when a client is active).
    checkpoint : path, optional
        Directory for merged partial states of completed block ranges. A
        re-run with the same inputs computes only what is missing and returns
        a result bitwise identical to an uninterrupted run.
    force : bool, default False
        Discard a checkpoint that belongs to other inputs instead of refusing.
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
    cache : bool, default False
        When two passes are needed (no ``range``), keep the decoded chunks in
        memory (``persist``) so that each is read and decoded once. Faster when
        the data fit in the workers' memory (distributed spills to disk
        otherwise); peak memory then grows with the data.
    device : {"cpu", "gpu"}, default "cpu"
        ``"gpu"`` moves each block to the GPU once (CuPy) and computes and
        merges states there. Blocks that already are CuPy arrays stay on the GPU
        either way. How host blocks travel is ``daskbatch.gpu-transfer``:
        ``"block"`` (a copy task per block) or ``"staged"`` (each chunk task
        copies its block in parts through pinned buffers, overlapping the copy
        of one part with the reduction of the previous).
    classes : sequence of int, optional
        The class values of ``label``; a label outside them is an error naming
        the value and its rows. Default: what the store records, else the
        distinct values found by a scan of the label array alone (before the
        plan is made, so it knows the number of classes), at most
        ``daskbatch.max-classes``. They become the ``class`` coordinate of the
        summary (see :mod:`daskbatch.engine.class_labels`).
    missing : {"raise", "skip", "fill"}, default "raise"
        Chunks absent from a store given by path: refuse, compute on the rows
        whose chunks are present, or read zarr's fill values (see
        :func:`daskbatch.open_dataset`; the summary's provenance lists them).

    Returns
    -------
    Summary

    Notes
    -----
    Runs on the active Dask scheduler (the threaded one, or a ``distributed``
    client when one exists) and never starts a cluster by itself.
    """
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    data = to_device(as_feature_matrix(x, label, feature_names=feature_names, missing=missing), device)
    names = _stat_names(stats, data, range)
    want_hist = "hist" in names or "mi" in names
    if split_every is not None:
        resolve_split_every(split_every)  # validate before planning
    resumed = _resume_layout(checkpoint, force, plan)
    if resumed is not None:
        # Resume on the grid the checkpoint was written with, whatever this cluster would plan.
        plan, split_every = None, split_every if split_every is not None else resumed["split_every"]
        data.x = data.x.rechunk({0: resumed["chunk_rows"]})
    class_values, classes_from = None, None
    if "mi" in names or "class_moments" in names:
        from daskbatch.engine.class_labels import resolve_classes

        class_values, classes_from = resolve_classes(
            data, classes, split_every=resolve_split_every(split_every), compute=lambda d: _compute(d, progress)
        )
    chosen = _apply_plan(
        plan, data, names, bins=bins, split_every=split_every, device=device,
        n_classes=None if class_values is None else len(class_values),
    )
    fan_in = resolve_split_every(split_every if split_every is not None or chosen is None else chosen.split_every)
    if class_values is not None and classes_from != "label scan":
        from daskbatch.engine.class_labels import checked_label

        assert data.label is not None
        data.label = checked_label(data.label, data.x.chunks[0], class_values)
    n_features = data.x.shape[1]

    moments = Moments(ddof=ddof, bias=bias, nan_policy=nan_policy)
    first: list[Any] = [moments]
    tiled = "cov" in names and chosen is not None and chosen.feature_tile is not None
    if "cov" in names and not tiled:
        first.append(CoMoments(ddof=ddof))
    if "class_moments" in names:  # by label: the runner passes the label to this bundle
        first.append(ClassMoments(ddof=ddof, classes=class_values))
    if "sketch" in names:
        first.append(Sketch())
    histogram = None
    explicit = range is not None and not is_minmax(range)
    if want_hist and explicit:
        lo, hi = histogram_ranges(range, n_features)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names, classes=class_values)
        first.append(histogram)

    if cache and want_hist and not explicit and checkpoint is None:
        data.x = data.x.persist()  # both passes read the decoded blocks from memory
    run = _Runner(data, fan_in, progress, checkpoint, force)
    results = dict(zip((s.name for s in first), run(Bundle(tuple(first))), strict=True))
    m = results["moments"]
    if nan_policy == "raise" and np.any(m.nan_count > 0):
        bad = np.flatnonzero(m.nan_count > 0)
        listed = ", ".join(f"{data.feature_names[i]} ({int(m.nan_count[i])})" for i in bad[:10])
        raise ValueError(f"{data.provenance['source']} holds NaN values in {bad.size} feature(s): {listed}")
    passes = 1
    if want_hist and histogram is None:
        tails = results["sketch"].quantile([TAIL, 1.0 - TAIL]) if range is None else None
        lo, hi = histogram_ranges(range, n_features, m.finite_min, m.finite_max, quantiles=tails)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names, classes=class_values)
        (results["hist"],) = run(Bundle((histogram,)))
        passes = 2

    provenance = dict(data.provenance)
    if tiled:
        assert chosen is not None
        results["cov"], provenance["tiled_cov"] = _tiled_cov(data, chosen.feature_tile, cov_out, ddof, fan_in)
    provenance.update(
        stats=list(names), bins=bins if want_hist else None, ddof=ddof, bias=bias,
        nan_policy=nan_policy, split_every=fan_in, passes=passes,
        chunk_rows=int(max(data.x.chunks[0])), n_chunks=int(data.x.numblocks[0]),
        range_given=explicit, classes_from=classes_from, cached=bool(cache and passes == 2 and checkpoint is None),
        plan=None if chosen is None else {
            "budget_bytes": chosen.budget_bytes, "task_bytes": chosen.task_bytes,
            "limited_by": chosen.limited_by, "resources": chosen.resources.describe(),
            "n_classes": chosen.n_classes,
        },
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        daskbatch_version=_version(),
    )
    if want_hist:
        provenance["range"] = "given" if explicit else "minmax" if range is not None else "quantiles"
    summary = Summary.from_results(
        data.feature_names, results, provenance, mi_base=mi_base, miller_madow=miller_madow
    )
    if summary.out_of_range_fraction is not None:
        summary.provenance["out_of_range"] = flag_out_of_range(summary.out_of_range_fraction, data.feature_names)
    return summary


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
        feature_names=data.feature_names, overwrite=True,
    )
    # The matrices stay in the store; the summary keeps the row count and the path.
    result = CoMomentsResult(n=np.float64(tc.n), mean=tc.mean, cov=None, corr=None)
    return result, {"path": out, "tile": tile}


def _resume_layout(checkpoint: Any, force: bool, plan: Any) -> dict[str, int] | None:
    if checkpoint is None or force or plan != "auto":
        return None
    from daskbatch.engine.checkpoint.run import recorded_layout

    return recorded_layout(checkpoint)


def plan_describe(
    x: Any,
    label: Any = None,
    *,
    stats: str | Sequence[str] = DEFAULT_STATS,
    bins: int = 64,
    range: Any = None,  # noqa: A002 - describe's name
    split_every: int | None = None,
    resources: Any = "auto",
    classes: Sequence[int] | None = None,
) -> Any:
    """The plan :func:`describe` makes for the same arguments, without computing anything.

    Useful before a cluster exists: to size a GPU worker's RMM pool, or to
    stop a batch job early (:class:`~daskbatch.PlanError`) when nothing fits.

    Parameters
    ----------
    x, label, stats, bins, range, split_every
        As in :func:`describe` (``mi`` is dropped without a label; without
        ``range`` the quantile sketch is planned for).
    resources : Resources or "auto", default "auto"
        The workers to plan for; ``"auto"``: those of the active client, else this machine.
    classes : sequence of int, optional
        The label's class values (their number sizes the ``mi`` tables); else
        what the store records, else ``daskbatch.assumed-classes``.

    Returns
    -------
    Plan
    """
    data = as_feature_matrix(x, label)
    names = _stat_names(stats, data, range)
    if isinstance(resources, str) and resources == "auto":
        from daskbatch.runtime.cluster import resources_auto

        resources = resources_auto()
    n_classes = None
    if classes is not None and "mi" in names:
        from daskbatch.engine.class_labels import max_classes
        from daskbatch.stats.classes import validate_classes

        n_classes = len(validate_classes(classes, max_classes()))
    return _plan_names(data, names, bins=bins, resources=resources, split_every=split_every, n_classes=n_classes)


def _stat_names(stats: str | Sequence[str], data: FeatureMatrix, range_: Any = None) -> tuple[str, ...]:
    """The statistics to compute: ``stats`` normalised, without ``mi`` when there is no label,
    with ``sketch`` when histogram ranges are to be found from the data (``range_`` None)."""
    names = normalize_stats(stats)
    if "class_moments" in names and data.label is None:
        raise ValueError("statistic 'class_moments' needs a label (describe(x, label, ...))")
    if data.label is None:
        names = tuple(n for n in names if n != "mi")
    if range_ is None and ("hist" in names or "mi" in names) and "sketch" not in names:
        names += ("sketch",)
    return names


def _plan_names(
    data: FeatureMatrix, names: tuple[str, ...], *, bins: int, resources: Any, split_every: int | None,
    n_classes: int | None = None,
) -> Any:
    """Plan the statistics ``names`` over ``data`` (from its store when there is one)."""
    from daskbatch import config
    from daskbatch.planning.search import recorded_n_classes
    from daskbatch.plans import plan as make_plan

    source = data.source if data.source is not None else data.x
    if ("mi" in names or "class_moments" in names) and n_classes is None:
        # Classes not known yet (plan_describe reads nothing): plan with what the
        # store records, else with a configured assumption (daskbatch.assumed-classes).
        n_classes = recorded_n_classes(source) or int(config.get("assumed-classes"))
    elif "mi" not in names and "class_moments" not in names:
        n_classes = None
    return make_plan(
        source, stats=names, bins=bins, n_classes=n_classes, resources=resources, split_every=split_every,
    )


def _apply_plan(
    plan: Any, data: FeatureMatrix, names: tuple[str, ...], *, bins: int, split_every: int | None, device: str,
    n_classes: int | None = None,
) -> Any:
    """Plan the run (raising PlanError before any compute) and rechunk ``data.x`` to it."""
    from daskbatch.planning.resources import Resources
    from daskbatch.planning.search import Plan

    if plan is None:
        return None
    if isinstance(plan, Plan):
        chosen = plan
    elif plan == "auto" or isinstance(plan, Resources):
        resources = plan
        if plan == "auto":
            from daskbatch.runtime.cluster import resources_auto

            resources = resources_auto(device=device)
        chosen = _plan_names(
            data, names, bins=bins, resources=resources, split_every=split_every, n_classes=n_classes
        )
    else:
        raise TypeError(f"plan must be 'auto', a Plan, a Resources or None; got {plan!r}")
    if chosen.shape != tuple(data.x.shape):
        raise ValueError(f"the plan is for shape {chosen.shape} but the data have shape {tuple(data.x.shape)}")
    # Only split blocks larger than planned (memory, parallelism): merging smaller
    # blocks would add a concatenating copy and grow peak memory for no gain.
    if max(data.x.chunks[0]) > chosen.chunk_rows:
        data.x = data.x.rechunk({0: chosen.chunk_rows})
    return chosen


class _Runner:
    """Runs one pass (a Bundle) over the data, through a checkpoint directory when asked."""

    def __init__(
        self, data: FeatureMatrix, split_every: int, progress: bool,
        checkpoint: str | os.PathLike[str] | None, force: bool,
    ) -> None:
        self.data, self.split_every, self.progress = data, split_every, progress
        self.checkpoint, self.force = checkpoint, force

    def __call__(self, bundle: Bundle) -> tuple[Any, ...]:
        needs_label = any(getattr(s, "by_label", False) for s in bundle.stats)
        label = self.data.label if needs_label else None
        stat: Any = bundle
        if self.data.stage_rows is not None:  # host blocks, staged to the GPU inside each chunk task
            from daskbatch.engine.staged import Staged

            stat = Staged(bundle, self.data.stage_rows)
        if self.checkpoint is not None:
            from daskbatch.engine.checkpoint.run import run_checkpointed

            return run_checkpointed(
                stat, self.data, label, split_every=self.split_every, progress=self.progress,
                directory=self.checkpoint, force=self.force,
            )
        graph = tree_reduce(stat, self.data.x, label, split_every=self.split_every)
        return _compute(graph, self.progress)


def _version() -> str:
    from daskbatch._version import __version__

    return __version__
