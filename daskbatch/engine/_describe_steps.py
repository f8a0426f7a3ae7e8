"""The steps of :func:`~daskbatch.engine.statistics_run.run_statistics`, each a small function of its inputs."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np

from daskbatch import config
from daskbatch._version import __version__
from daskbatch._warnings import warn
from daskbatch.engine.checkpoint.manifest import recorded_layout
from daskbatch.engine.class_labels import resolve_classes
from daskbatch.engine.inputs import FeatureMatrix, to_device
from daskbatch.engine.passes import compute
from daskbatch.engine.reduce import resolve_split_every
from daskbatch.engine.tiled import tiled_covariance
from daskbatch.errors import OverflowWarning
from daskbatch.planning.resources import Resources
from daskbatch.planning.search import Plan
from daskbatch.runtime.capacity import active_client
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, Sketch
from daskbatch.stats._base import reads_weights
from daskbatch.stats.comoments import CoMomentsResult
from daskbatch.stats.declaration import Declaration
from daskbatch.stats.histogram import QuantileHistogram
from daskbatch.stats.kernels.preflight import check_gpu, warn_unless_gpu_kernels
from daskbatch.stats.ranges import histogram_ranges
from daskbatch.stats.registry import Kept
from daskbatch.stats.spec import counts_by_label

log = logging.getLogger("daskbatch.describe")


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


def _run_layout(plan: Any, split_every: int | None, checkpoint: Any, force: bool) -> _Layout:
    """The layout of this run: what the user asked for, else a checkpoint's recorded one, else the plan's."""
    # Resuming needs the grid and fan-in the checkpoint was written with (the
    # cluster, and with it the automatic plan, may have changed since), so
    # without a request of their own a resumed run takes the recorded layout
    # and says so (log and ``provenance["layout"]``). A layout the user asked
    # for explicitly (``split_every``, a Plan, Resources, or ``plan=None`` for the
    # input's blocks) is never overridden: when it differs from the checkpoint's,
    # the checkpoint's fingerprint refuses the run, naming every differing item.
    if split_every is not None:
        resolve_split_every(split_every)  # validate before anything else
    automatic = isinstance(plan, str) and plan == "auto"
    recorded = None
    if checkpoint is not None and not force and automatic:
        recorded = recorded_layout(checkpoint)
    if recorded is None:
        return _Layout(plan, None, split_every, "plan" if plan is not None else "input chunks")
    fan_in = split_every if split_every is not None else recorded["split_every"]
    log.info("resuming on the checkpoint's layout: chunk_rows=%s, split_every=%s", f"{recorded['chunk_rows']:,}", fan_in)
    return _Layout(None, recorded["chunk_rows"], fan_in, "checkpoint")


def _class_values_of(
    data: FeatureMatrix, wanted: tuple[Declaration, ...], classes: Any, split_every: int, progress: Any,
    negative: bool = False,
) -> tuple[tuple[int, ...] | None, str | None]:
    """The label's class values (declared, recorded, or a label-only scan) when a statistic needs them."""
    if not any(r.needs_label for r in wanted):
        return None, None
    title = "group-key scan" if negative else "label scan"  # negative keys are accepted for groups only
    return resolve_classes(data, classes, split_every=split_every, negative=negative,
                           compute=lambda d: compute(d, progress, title))


def _warn_unless_gpu_kernels() -> None:
    """Warn once when CuPy chunks will take the array-API path, checking where the chunks run (the workers)."""
    client = active_client()
    checks = [check_gpu()] if client is None else list(client.run(check_gpu).values())
    for check in checks:
        warn_unless_gpu_kernels(check, stacklevel=4)


def _planned(
    plan_statistics: Callable[..., Any], layout: _Layout, data: FeatureMatrix, names: tuple[Any, ...], *, bins: int, device: str,
    n_classes: tuple[int, ...] | None,
) -> Any:
    """The plan to run with (raising PlanError before any compute), or None to keep the input's chunks."""
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
        for line in chosen.explain().splitlines():  # a batch log records what the run was _planned for
            log.info("%s", line)
    return chosen


def _rechunked(data: FeatureMatrix, chunk_rows: int | None) -> FeatureMatrix:
    """``data`` with blocks of at most ``chunk_rows`` rows."""
    # Only blocks larger than that are split (memory, parallelism): merging
    # smaller blocks would add a concatenating copy and grow peak memory for no gain.
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


def _explicit_histogram(
    wanted: tuple[Declaration, ...], bins: int, range_: Any, n_features: int, class_values: tuple[int, ...] | None,
    cuts: tuple[float, ...] | None = None,
) -> Histogram:
    lo, hi = histogram_ranges(range_, n_features)
    # The class values are for the joint (bin x class) tables of 'mi' only ('class_moments' has its own).
    by_label = counts_by_label(wanted)
    if by_label and cuts is not None:  # a continuous target, cut where given
        return Histogram(bins=bins, lo=lo, hi=hi, by_label=True, target_cuts=cuts)
    return Histogram(bins=bins, lo=lo, hi=hi, by_label=by_label, classes=class_values if by_label else None)


def _first_pass(
    wanted: tuple[Declaration, ...], *, ddof: int, bias: bool, nan_policy: Literal["omit", "propagate", "raise"], tiled: bool,
    class_values: tuple[int, ...] | None, histogram: Histogram | None, custom: tuple[Any, ...] = (),
    sketch_window: tuple[int, str, float] | None = None, cov_rows: str = "complete",
) -> Bundle:
    """The statistics of the first pass, fused: each block is read and cast once for all of them."""
    built = {r.statistic for r in wanted}
    first: list[Any] = [Moments(ddof=ddof, bias=bias, nan_policy=nan_policy)]
    if CoMoments in built and not tiled:
        first.append(CoMoments(ddof=ddof, rows=cov_rows))
    if ClassMoments in built:  # by label: the runner passes the label to this bundle
        first.append(ClassMoments(ddof=ddof, classes=class_values))
    if Sketch in built:
        # int32 chunk counts even with every bucket kept: half the state to zero, count into and merge
        # (a chunk of 2**31 rows or more, and any merge that could pass int32, count in int64).
        first.append(Sketch(count_dtype="int32") if sketch_window is None else
                     Sketch(alpha=sketch_window[2], window=sketch_window[0], count_dtype=sketch_window[1]))
    if histogram is not None:
        first.append(histogram)
    return Bundle((*first, *custom))


def _kept_by_name(bundle: Bundle, states: tuple[Any, ...]) -> dict[str, Kept]:
    """Each statistic of ``bundle`` with its merged state, by name (the default sketch's counts as int64)."""
    return {s.name: _summary_counts(Kept(s, state)) for s, state in zip(bundle.stats, states, strict=True)}


def _summary_counts(kept: Kept) -> Kept:
    """The every-bucket sketch that counted in int32 (:func:`_first_pass`) as the summary keeps it: ``Sketch()``, int64."""
    stat = kept.statistic
    if type(stat) is not Sketch or stat.window is not None or stat.count_dtype != "int32":
        return kept
    # The int32 counts only spared the passes' memory traffic: summaries, their merges and
    # updates keep the default sketch's int64 counts, whatever counted them.
    counts = kept.state.counts
    state = dataclasses.replace(kept.state, counts=counts.astype(np.int64) if counts.dtype == np.int32 else counts)
    return Kept(dataclasses.replace(stat, count_dtype="int64"), state)


def _mergeable(kept: dict[str, Kept]) -> dict[str, Kept]:
    """The states a summary keeps: all but the fine quantile histogram's."""
    # Its ranges come from this run's first pass, so a merge or an update (one
    # pass on stored ranges) could not continue it: merged summaries read their
    # quantiles from the sketch (``Summary.quantile`` says which bound holds).
    return {name: k for name, k in kept.items() if not isinstance(k.statistic, QuantileHistogram)}


def _check_weighted(custom: tuple[Any, ...]) -> None:
    """Refuse, before any compute, a user's statistic without ``takes_weights`` (weights do not reach it)."""
    for stat in custom:
        if not reads_weights(stat):
            raise ValueError(f"statistic {stat.name!r} does not take sample weights (its chunk has no weights=)")


def _check_nan_policy(m: Any, nan_policy: str, data: FeatureMatrix) -> None:
    if nan_policy == "raise" and np.any(m.nan_count > 0):
        bad = np.flatnonzero(m.nan_count > 0)
        listed = ", ".join(f"{data.feature_names[i]} ({int(m.nan_count[i])})" for i in bad[:10])
        raise ValueError(f"{data.provenance['source']} holds NaN values in {bad.size} feature(s): {listed}")


def _warn_overflowing_moments(m: Any, data: FeatureMatrix) -> None:
    """Say once which features' variance overflows float64 (+inf, see stats.numerics.central_moment), with their extremes."""
    over = np.flatnonzero(np.isposinf(np.asarray(m.var)) & np.isfinite(np.asarray(m.finite_min))
                          & np.isfinite(np.asarray(m.finite_max)))
    if not over.size:
        return
    listed = ", ".join(f"{data.feature_names[i]} (min {float(m.finite_min[i]):.3g}, max {float(m.finite_max[i]):.3g})"
                       for i in over[:10])
    more = f" and {over.size - 10:,} more" if over.size > 10 else ""
    warn(OverflowWarning(
        f"the variance of {over.size:,} feature(s) overflows float64, so their var and std are inf and their skew "
        f"and kurtosis NaN: {listed}{more}; values ~1e154 or more from the mean are often sentinels standing for "
        "missing values"
    ))


@contextlib.contextmanager
def _describe_span(data: FeatureMatrix) -> Iterator[None]:
    """One ``distributed`` span per describe call, so the dashboard groups its tasks."""
    if active_client() is None:
        yield
        return
    from distributed import span  # lazy: distributed

    with span("daskbatch-describe"):
        yield


def _tiled_cov(data: FeatureMatrix, tile: int, cov_out: Any, ddof: int, split_every: int) -> tuple[Any, dict[str, Any]]:
    """Covariance tile by tile into Zarr (the D × D state does not fit one worker)."""
    import tempfile

    out = os.fspath(cov_out) if cov_out is not None else os.path.join(tempfile.mkdtemp(prefix="daskbatch-cov-"), "cov.zarr")
    if data.stage_rows is not None:  # the tiles' tasks take device blocks: move them block by block
        data = to_device(dataclasses.replace(data, stage_rows=None), "gpu", transfer="block")
    tc = tiled_covariance(
        data.x, tile=tile, out=out, ddof=ddof, split_every=split_every,
        feature_names=data.feature_names, protected=_protected_paths(data), weights=data.weights,
    )
    # The matrices stay in the store; the summary keeps the row count (and weight sum) and the path.
    weight_sum = None if tc.weight_sum is None else np.float64(tc.weight_sum)
    result = CoMomentsResult(n=np.float64(tc.n), mean=tc.mean, cov=None, corr=None, weight_sum=weight_sum)
    return result, {"path": out, "tile": tile}


def _protected_paths(data: FeatureMatrix, checkpoint: Any = None) -> dict[str, Any]:
    """Paths an output of this run must stay clear of: the input store and the checkpoint."""
    return {"the input store": data.provenance.get("path"), "the checkpoint directory": checkpoint}


def _version() -> str:
    return __version__
