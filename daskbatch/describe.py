"""``describe``: every requested statistic of a (samples × features) array in one or two passes."""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any, Literal

import dask
import numpy as np

from daskbatch.arguments import strict_int
from daskbatch.inputs import FeatureMatrix, as_feature_matrix, to_device
from daskbatch.outputs import check_output
from daskbatch.reduce import resolve_split_every, tree_reduce
from daskbatch.stats import STATISTICS, Bundle, CoMoments, Histogram, Moments
from daskbatch.summary import Summary

DEFAULT_STATS = ("moments", "cov", "hist", "mi")
NAN_POLICIES = ("omit", "propagate", "raise")


def normalize_stats(stats: str | Sequence[str]) -> tuple[str, ...]:
    """Validate statistic names (``"moments"`` is always computed and listed first)."""
    names = (stats,) if isinstance(stats, str) else tuple(stats)
    names = tuple(n.strip() for part in names for n in part.split(",") if n.strip())
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(f"unknown statistic(s) {unknown}; choose from {sorted(STATISTICS)}")
    return ("moments",) + tuple(n for n in dict.fromkeys(names) if n != "moments")


def histogram_ranges(
    range_: Any, n_features: int, vmin: np.ndarray | None = None, vmax: np.ndarray | None = None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-feature (lo, hi) from a user range, or from finite extrema found by a first pass.

    A global ``(lo, hi)`` applies to every feature; a (D, 2) array gives one range each.
    Found ranges follow ``numpy.histogram``: a constant feature gets ``(v - 0.5, v + 0.5)``
    (4096 float64 steps of ``v`` either side from ``|v| >= 2**40``, so that lo < hi always).
    """
    if range_ is not None:
        r = np.asarray(range_, dtype=np.float64)
        if r.shape == (2,):
            r = np.broadcast_to(r, (n_features, 2))
        if r.shape != (n_features, 2):
            raise ValueError(
                f"range must be (lo, hi) or one (lo, hi) per feature, shape ({n_features}, 2); got shape {r.shape}"
            )
        lo, hi = r[:, 0].copy(), r[:, 1].copy()
    else:
        assert vmin is not None and vmax is not None
        empty = ~np.isfinite(vmin) | ~np.isfinite(vmax)
        lo = np.where(empty, 0.0, vmin)
        hi = np.where(empty, 1.0, vmax)
        # A constant feature gets a range around its value: +-0.5 as numpy.histogram, widened to
        # 4096 float64 steps of v from |v| >= 2**40, where 0.5 would leave bins too few steps wide
        # (and from 2**53 no room at all: v - 0.5 == v).
        same = lo == hi
        ulp = np.abs(lo) - np.nextafter(np.abs(lo), 0.0)  # the step below |v| (np.spacing overflows at max)
        half = np.maximum(0.5, ulp * 4096)
        big = np.finfo(np.float64).max  # a constant at +-max keeps a finite range (its value on the edge)
        lo = np.where(same, np.maximum(lo, half - big) - half, lo)
        hi = np.where(same, np.minimum(hi, big - half) + half, hi)
    bad = ~(np.isfinite(lo) & np.isfinite(hi) & (lo < hi))
    if bad.any():
        d = int(np.argmax(bad))
        raise ValueError(f"histogram range of feature {d} must be finite with lo < hi; got ({lo[d]}, {hi[d]})")
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def _compute(delayed_obj: Any, progress: bool) -> Any:
    if not progress:
        return dask.compute(delayed_obj)[0]
    from daskbatch.cluster import active_client

    client = active_client()
    if client is None:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return dask.compute(delayed_obj)[0]
    from distributed import progress as dist_progress

    future = client.compute(delayed_obj)
    dist_progress(future)
    return future.result()


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
) -> Summary:
    """Per-feature statistics of a (samples × features) array, reading each chunk once per pass.

    Parameters
    ----------
    x : dask.array.Array, numpy.ndarray, Dataset, or path / URL of a Zarr store
        Samples along axis 0, features along axis 1. Float, integer and bool
        dtypes are accepted; everything accumulates in float64.
    label : array of int, or name of an array in the same store, optional
        Class of every sample (0..K-1), for mutual information.
    stats : sequence of {"moments", "cov", "hist", "mi"}
        What to compute. Moments are always included; ``"mi"`` is skipped
        when no label is given.
    bins : int, default 64
        Histogram bins per feature.
    range : (lo, hi) or array of shape (D, 2), optional
        Histogram range(s). When given, everything takes one pass; when not,
        a first pass finds each feature's min and max (fused with the moments
        and co-moments) and a second pass counts.
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
        either way.

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
    bins, ddof = strict_int(bins, "bins", minimum=1), strict_int(ddof, "ddof", minimum=0)
    data = to_device(as_feature_matrix(x, label, feature_names=feature_names), device)
    names = _stat_names(stats, data)
    want_hist = "hist" in names or "mi" in names
    if split_every is not None:
        resolve_split_every(split_every)  # validate before planning
    resumed = _resume_layout(checkpoint, force, plan)
    if resumed is not None:
        # Resume on the grid the checkpoint was written with, whatever this cluster would plan.
        plan, split_every = None, split_every if split_every is not None else resumed["split_every"]
        data.x = data.x.rechunk({0: resumed["chunk_rows"]})
    chosen = _apply_plan(plan, data, names, bins=bins, split_every=split_every, device=device)
    fan_in = resolve_split_every(split_every if split_every is not None or chosen is None else chosen.split_every)
    n_features = data.x.shape[1]

    moments = Moments(ddof=ddof, bias=bias, nan_policy=nan_policy)
    first: list[Any] = [moments]
    tiled = "cov" in names and chosen is not None and chosen.feature_tile is not None
    if "cov" in names and not tiled:
        first.append(CoMoments(ddof=ddof))
    if tiled and cov_out is not None:  # refuse an unusable cov_out before computing anything
        check_output(cov_out, kind="tiled_cov", what="cov_out", protected=_protected(data, checkpoint))
    histogram = None
    if want_hist and range is not None:
        lo, hi = histogram_ranges(range, n_features)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names)
        first.append(histogram)

    if cache and want_hist and range is None and checkpoint is None:
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
        lo, hi = histogram_ranges(None, n_features, m.finite_min, m.finite_max)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names)
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
        range_given=range is not None, cached=bool(cache and passes == 2 and checkpoint is None),
        plan=None if chosen is None else {
            "budget_bytes": chosen.budget_bytes, "task_bytes": chosen.task_bytes,
            "limited_by": chosen.limited_by, "resources": chosen.resources.describe(),
        },
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        daskbatch_version=_version(),
    )
    return Summary.from_results(
        data.feature_names, results, provenance, mi_base=mi_base, miller_madow=miller_madow
    )


def _tiled_cov(data: FeatureMatrix, tile: int, cov_out: Any, ddof: int, split_every: int) -> tuple[Any, dict[str, Any]]:
    """Covariance tile by tile into Zarr (the D × D state does not fit one worker)."""
    import tempfile

    from daskbatch.stats.comoments import CoMomentsResult
    from daskbatch.tiled_cov import tiled_covariance

    out = os.fspath(cov_out) if cov_out is not None else os.path.join(tempfile.mkdtemp(prefix="daskbatch-cov-"), "cov.zarr")
    tc = tiled_covariance(
        data.x, tile=tile, out=out, ddof=ddof, split_every=split_every,
        feature_names=data.feature_names, protected=_protected(data),
    )
    # The matrices stay in the store; the summary keeps the row count and the path.
    result = CoMomentsResult(n=np.float64(tc.n), mean=tc.mean, cov=None, corr=None)
    return result, {"path": out, "tile": tile}


def _protected(data: FeatureMatrix, checkpoint: Any = None) -> dict[str, Any]:
    """Paths an output of this run must stay clear of: the input store and the checkpoint."""
    return {"the input store": data.provenance.get("path"), "the checkpoint directory": checkpoint}


def _resume_layout(checkpoint: Any, force: bool, plan: Any) -> dict[str, int] | None:
    if checkpoint is None or force or plan != "auto":
        return None
    from daskbatch.checkpoint import recorded_layout

    return recorded_layout(checkpoint)


def plan_describe(
    x: Any,
    label: Any = None,
    *,
    stats: str | Sequence[str] = DEFAULT_STATS,
    bins: int = 64,
    split_every: int | None = None,
    resources: Any = "auto",
) -> Any:
    """The plan :func:`describe` makes for the same arguments, without computing anything.

    Useful before a cluster exists: to size a GPU worker's RMM pool, or to
    stop a batch job early (:class:`~daskbatch.PlanError`) when nothing fits.

    Parameters
    ----------
    x, label, stats, bins, split_every
        As in :func:`describe` (``mi`` is dropped without a label).
    resources : Resources or "auto", default "auto"
        The workers to plan for; ``"auto"``: those of the active client, else this machine.

    Returns
    -------
    Plan
    """
    data = as_feature_matrix(x, label)
    names = _stat_names(stats, data)
    if isinstance(resources, str) and resources == "auto":
        from daskbatch.cluster import resources_auto

        resources = resources_auto()
    return _plan_names(data, names, bins=bins, resources=resources, split_every=split_every)


def _stat_names(stats: str | Sequence[str], data: FeatureMatrix) -> tuple[str, ...]:
    """The statistics to compute: ``stats`` normalised, without ``mi`` when there is no label."""
    names = normalize_stats(stats)
    return names if data.label is not None else tuple(n for n in names if n != "mi")


def _plan_names(
    data: FeatureMatrix, names: tuple[str, ...], *, bins: int, resources: Any, split_every: int | None
) -> Any:
    """Plan the statistics ``names`` over ``data`` (from its store when there is one)."""
    from daskbatch import config
    from daskbatch.planner import plan as make_plan
    from daskbatch.planner import recorded_n_classes

    source = data.source if data.source is not None else data.x
    n_classes = None
    if "mi" in names:
        # The number of classes is found while counting; plan with what the store
        # records, else with a configured assumption (daskbatch.assumed-classes).
        n_classes = recorded_n_classes(source) or int(config.get("assumed-classes"))
    return make_plan(
        source, stats=names, bins=bins, n_classes=n_classes, resources=resources, split_every=split_every,
    )


def _apply_plan(
    plan: Any, data: FeatureMatrix, names: tuple[str, ...], *, bins: int, split_every: int | None, device: str
) -> Any:
    """Plan the run (raising PlanError before any compute) and rechunk ``data.x`` to it."""
    from daskbatch.planner import Plan
    from daskbatch.resources import Resources

    if plan is None:
        return None
    if isinstance(plan, Plan):
        chosen = plan
    elif plan == "auto" or isinstance(plan, Resources):
        resources = plan
        if plan == "auto":
            from daskbatch.cluster import resources_auto

            resources = resources_auto(device=device)
        chosen = _plan_names(data, names, bins=bins, resources=resources, split_every=split_every)
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
        if self.checkpoint is not None:
            from daskbatch.checkpoint import run_checkpointed

            return run_checkpointed(
                bundle, self.data, label, split_every=self.split_every, progress=self.progress,
                directory=self.checkpoint, force=self.force,
            )
        graph = tree_reduce(bundle, self.data.x, label, split_every=self.split_every)
        return _compute(graph, self.progress)


def _version() -> str:
    from daskbatch import __version__

    return __version__
