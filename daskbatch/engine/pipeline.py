"""The pipeline of :func:`daskbatch.describe`, read top to bottom: inputs -> layout (plan) -> passes -> results."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import logging
import os
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from daskbatch import config
from daskbatch._common import Device, warn
from daskbatch._version import __version__
from daskbatch.config import resolve_split_every
from daskbatch.engine.checkpoint import run_checkpointed_profile
from daskbatch.engine.fingerprint import checksum_token, listing_token
from daskbatch.engine.inputs import (
    FeatureMatrix,
    as_feature_matrix,
    device_module,
    to_device,
)
from daskbatch.engine.passes import PassRunner, compute
from daskbatch.engine.planner import lay_out, max_classes
from daskbatch.engine.reduce import TASK_PREFIXES
from daskbatch.engine.run_options import RunOptions, gpu_failure, resolve_device
from daskbatch.engine.tiled_cov import tiled_covariance
from daskbatch.errors import GPUFallbackWarning, OverflowWarning
from daskbatch.io.outputs import check_output
from daskbatch.planning.plan import Plan
from daskbatch.planning.search import DeviceChoice
from daskbatch.runtime.capacity import active_client, note_pass
from daskbatch.runtime.progress import Progress
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, Sketch
from daskbatch.stats._base import reads_weights
from daskbatch.stats.categorical import CategoricalProfile, profile_blocks
from daskbatch.stats.classes import ClassValues, ContentDigest
from daskbatch.stats.comoments import CoMomentsResult
from daskbatch.stats.declaration import Declaration
from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram, SweptBundle
from daskbatch.stats.kernels.ahead import prepare as compile_ahead
from daskbatch.stats.kernels.ahead import release_unused as release_compile_helper
from daskbatch.stats.kernels.preflight import check_gpu, warn_unless_gpu_kernels
from daskbatch.stats.ranges import (
    fine_ranges,
    flag_out_of_range,
    histogram_ranges,
    is_minmax,
    outside_fraction,
)
from daskbatch.stats.registry import Kept
from daskbatch.stats.spearman import RankMap, Spearman
from daskbatch.stats.spec import (
    COV,
    Configured,
    counts_by_label,
    counts_histograms,
    describe_statistics,
    grouped_statistics,
    names_of,
    user_statistics,
)
from daskbatch.stats.target import target_cuts

__all__ = ["Computed", "input_token", "listed_token", "run_statistics"]

log = logging.getLogger("daskbatch.describe")


@dataclasses.dataclass(frozen=True)
class Computed:
    """What :func:`run_statistics` returns: the data as computed, host results, the states a summary keeps, provenance."""

    data: FeatureMatrix
    results: dict[str, Any]
    states: dict[str, Kept] | None  # None with a tiled covariance, which keeps none
    provenance: dict[str, Any]
    categorical: Kept | None = None  # the non-numeric columns' profile and its merged state


# -- inputs


def _blocks_on_gpu(a: Any) -> bool:
    """Whether a dask array's blocks are CuPy arrays (its meta says so; nothing is read)."""
    return type(getattr(a, "_meta", None)).__module__.split(".")[0] == "cupy"


def _prepared_inputs(
    x: Any, label: Any, *, weights: Any, target: Any, groups: Any, feature_names: Any, missing: Any, device: Device,
) -> tuple[FeatureMatrix, DeviceChoice]:
    """Open the inputs of a ``describe`` run and choose its device (``"auto"`` resolved)."""
    if device != "auto":
        device_module(device)  # a missing CuPy is named before anything is planned for the GPU
    if target is not None and label is not None:
        raise ValueError("label= with target= is not supported (the target takes the label's place): describe the "
                         "classes and the target in two runs, describe(x, label=...) and describe(x, target=...)")
    if target is not None and weights is not None:
        raise ValueError("weights= with target= is not supported yet: the target's co-moments and sketch are unweighted")
    data = as_feature_matrix(x, label, feature_names=feature_names, missing=missing, target=target, groups=groups,
                             weights=weights)
    x = data.x  # the device is chosen from the array's shape and chunks, not the array (nothing of it is read)
    rows, features = (int(n) for n in x.shape)
    where = resolve_device(device, (rows, features), x.dtype.itemsize, int(x.chunks[0][0]) if x.chunks[0] else 0,
                           on_gpu=_blocks_on_gpu(x))
    if where.device == "gpu":  # warn once when CuPy chunks take the array-API path, checked where they run
        client = active_client()
        for check in [check_gpu()] if client is None else list(client.run(check_gpu).values()):
            warn_unless_gpu_kernels(check, stacklevel=4)
    return data, where


def run_statistics(
    x: Any, label: Any, stats: Configured, run: RunOptions, *, weights: Any = None, target: Any = None,
    groups: Any = None, check_features: Callable[[int], None] | None = None, where: DeviceChoice | None = None,
) -> Computed:
    """Open ``x`` (its label, weights, target or groups) and compute ``stats`` of it in one or two passes.

    ``check_features`` is given the number of features before any data is read; ``where``: the device chosen
    already (else ``run.device``, ``"auto"`` resolved). When ``"auto"``'s GPU fails, the run is done again on the
    CPU.
    """
    try:
        return _run_statistics(x, label, stats, run, weights=weights, target=target, groups=groups,
                               check_features=check_features, where=where)
    finally:
        release_compile_helper()  # started for a run that failed before its first chunk task: it ends, not waits


def _run_statistics(
    x: Any, label: Any, stats: Configured, run: RunOptions, *, weights: Any, target: Any, groups: Any,
    check_features: Callable[[int], None] | None, where: DeviceChoice | None,
) -> Computed:
    """Open the inputs, choose the device and compute (on the CPU again when ``"auto"``'s GPU fails)."""
    opened = functools.partial(_prepared_inputs, x, label, weights=weights, target=target, groups=groups,
                               feature_names=run.feature_names, missing=run.missing)
    data, where = (opened(device=run.device) if where is None else (opened(device="cpu")[0], where))
    if check_features is not None:
        check_features(int(data.x.shape[1]))
    # When the GPU was daskbatch's choice and fails the way a GPU fails (engine.run_options.gpu_failure), the whole
    # run is done once more on the CPU with a GPUFallbackWarning, and the provenance says so. With device="gpu",
    # CuPy blocks (they cannot move back) or a checkpoint (its states were made on the GPU) the error is raised.
    grouped, targeted = groups is not None, target is not None
    computed = functools.partial(_computed, data, stats, run, grouped=grouped, targeted=targeted)
    on_host = not _blocks_on_gpu(data.x)
    try:
        return computed(where=where)
    except Exception as exc:
        fallback = where.device == "gpu" and run.device == "auto" and on_host and run.checkpoint is None
        reason = gpu_failure(exc) if fallback else None
        if reason is None:
            raise
    text = f"describe: the run on the GPU failed, {reason}; running it again on the CPU"
    log.warning(text)
    warn(text, GPUFallbackWarning)
    if data.block_read is not None and data.source is not None:  # the failed pass abandoned its event: arm anew
        from daskbatch.io.chunk_grid import armed_block_read  # lazy: zarr

        computed = functools.partial(computed, block_read=armed_block_read(data.source.zarr_x))
    done = computed(where=DeviceChoice("cpu", f"device='auto' fell back from the GPU: {reason}"))
    done.provenance["device_fallback"] = reason
    return done


def _computed(
    data: FeatureMatrix, stats: Configured, run: RunOptions, *, where: DeviceChoice, grouped: bool, targeted: bool,
    block_read: Any = None,
) -> Computed:
    """Compute ``stats`` of ``data`` on ``where``'s device (``block_read``: the store's event armed anew)."""
    if block_read is not None:
        data = dataclasses.replace(data, block_read=block_read)
    if data.x.shape[1] == 0:  # a table of text, categories or times only: their profile is the summary
        return _profile_only(data, run, data.label if not grouped and not targeted else None)
    device, range_, bins, moments = where.device, stats.histogram.range, stats.histogram.bins, stats.moments
    if device == "cpu" and active_client() is None:  # a new install: the compile helper imports while this plans
        compile_ahead(getattr(data.x, "_meta", None))
    # -- the statistics
    wanted = describe_statistics(stats, labelled=data.label is not None, range_=range_)
    if grouped:
        wanted = grouped_statistics(wanted)
    custom = user_statistics(stats)
    for stat in custom if data.weights is not None else ():
        if not reads_weights(stat):  # before any compute: weights would not reach it
            raise ValueError(f"statistic {stat.name!r} does not take sample weights (its chunk has no weights=)")

    # -- the layout: the user's, else a resumed checkpoint's, else the plan's; the classes; the blocks to run
    laid = lay_out(data, stats, wanted, custom, run, grouped=grouped, targeted=targeted, device=device,
                   compute=lambda graph, title: compute(graph, run.progress, title))
    wanted, custom, chosen, plan_record, layout = laid.wanted, laid.custom, laid.chosen, laid.plan_record, laid.layout
    class_values, classes_from, given_cuts = laid.class_values, laid.classes_from, laid.given_cuts
    target_mi, found_cuts, ranked, range_, fan_in = laid.target_mi, laid.found_cuts, laid.ranked, laid.range_, laid.fan_in
    sketch_window, found_classes = laid.sketch_window, laid.record_for_classes is not None
    # The last hop: blocks move once, already in their final shape (on the CPU they stay where they are).
    data = laid.data if device == "cpu" else to_device(laid.data, device)
    tiled = COV in wanted and chosen is not None and chosen.feature_tile is not None
    if run.cov_out is not None and tiled:  # refuse an unusable cov_out before computing anything
        check_output(run.cov_out, kind="tiled_cov", what="cov_out", protected=_protected_paths(data, run.checkpoint))

    # -- the passes: the first fused, the second (histograms) on ranges found from the first's results
    explicit = range_ is not None and not is_minmax(range_)
    binned_later = counts_histograms(wanted) and (not explicit or found_cuts)  # target bins need a first pass
    two_passes = binned_later or ranked
    cached = two_passes and run.checkpoint is None and _cache_blocks(run.cache, data, chosen, device)
    if cached:  # both passes read the decoded blocks (and the label's, 1/D of them) from memory
        log.info("keeping the %s MiB of decoded blocks in memory for both passes (cache=%r)",
                 f"{data.x.nbytes / 2**20:,.0f}", run.cache)
    runner = PassRunner(data, fan_in, run.progress, run.checkpoint, run.force, passes=2 if two_passes else 1,
                        cancel=run.cancel, keep_blocks=cached)
    histogram = None
    if explicit and not found_cuts and counts_histograms(wanted):
        lo, hi = histogram_ranges(range_, data.x.shape[1])
        by_label = counts_by_label(wanted)  # the class values are for the joint tables of 'mi' only
        histogram = (Histogram(bins=bins, lo=lo, hi=hi, by_label=True, target_cuts=given_cuts)
                     if by_label and given_cuts is not None else
                     Histogram(bins=bins, lo=lo, hi=hi, by_label=by_label, classes=class_values if by_label else None))
    first = _first_pass(wanted, ddof=moments.ddof, bias=moments.bias, nan_policy=moments.nan_policy, tiled=tiled,
                        class_values=class_values, histogram=histogram, custom=custom, sketch_window=sketch_window,
                        cov_rows=stats.cov.rows)
    if found_classes:  # the label's class values, found as the first pass reads it: no scan of their own before it
        first = Bundle((*first.stats, ClassValues(max_classes=max_classes())))
    # The rows' token (merge and update refuse to count them twice): a store's chunk checksums, read on a thread
    # while the pass runs (through obstore from the chunks it fetched, from s3fs a request a chunk, else all before
    # its first read); without those, a hash of each storage chunk as the first pass reads it (no pass of its own).
    from daskbatch.io.object_store import read_stamp  # lazy: zarr

    token, token_read, zarr_x, first_read = None, None, getattr(data.source, "zarr_x", None), data.block_read
    if first_read is not None:  # armed as the store opened (io.chunk_grid.armed_block_read)
        # From an object store its requests wait for the pass's first block (before it, they would delay it).
        reading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="daskbatch-token")
        since = read_stamp()  # the chunks this pass reads whole through obstore give their trailers: no request
        token_read = reading.submit(lambda: input_token(data, fetched_since=since) if first_read.wait() else None)
        reading.shutdown(wait=False)  # its one thread ends with the read
    elif (token := input_token(data)) is None:  # in memory it is known now
        first = Bundle((*first.stats, ContentDigest(piece_rows=int(zarr_x.chunks[0]) if zarr_x is not None else 0)))

    def second_pass(results: dict[str, Any], kept: dict[str, Kept]) -> Bundle | None:
        """Check the first pass's results; the second pass's statistics on what they give (None: one pass)."""
        nonlocal class_values
        if found_classes:  # the first pass's class values: the second pass's tables have a column each
            kept.pop(ClassValues.name)
            class_values = tuple(int(v) for v in np.asarray(results.pop(ClassValues.name)))
            assert laid.record_for_classes is not None
            if plan_record is not None:  # what the plan is for the classes found (its layout is the same)
                plan_record.update(laid.record_for_classes(len(class_values)) or {})
        m = results[Moments.name]
        _check_moments(m, moments.nan_policy, data)
        if not two_passes:
            return None
        ranks = (Spearman(RankMap.from_sketch(kept[Sketch.name].statistic, kept[Sketch.name].state)),) if ranked else ()
        if not binned_later:
            return Bundle(ranks)
        sketch = results[Sketch.name] if range_ is None else None
        lo, hi = histogram_ranges(range_, data.x.shape[1], m.finite_min, m.finite_max, sketch=sketch)
        log.debug("histogram ranges of %d features from %s", len(lo), "each feature's min and max"
                  if range_ is not None else "the sketch's 0.1-99.9 % quantiles widened by its error bound, "
                  "values detached beyond robust fences left out")
        by_class: dict[str, Any] = (
            {"target_cuts": given_cuts or target_cuts(results["target_sketch"], int(stats.mi.target_bins))}
            if target_mi else {"classes": class_values if counts_by_label(wanted) else None}
        )
        second: list[Any] = [Histogram(bins=bins, lo=lo, hi=hi, by_label=counts_by_label(wanted), **by_class)]
        if sketch is not None:  # the fine histogram that makes quantiles exact to one of its bins
            q_lo, q_hi = fine_ranges(sketch, m.finite_min, m.finite_max, QUANTILE_BINS)
            second.append(QuantileHistogram(bins=QUANTILE_BINS, lo=tuple(map(float, q_lo)), hi=tuple(map(float, q_hi))))
        return SweptBundle((*second, *ranks))  # both histograms read each value once

    try:
        kept, results, data = runner.run(first, second_pass)  # data: the blocks kept in memory when cached
    except BaseException:
        if first_read is not None:
            first_read.abandon()  # a failed pass has no token: its thread stops reading (the exit waits for it)
        raise
    finally:
        if first_read is not None:
            first_read.set()  # no block read (a resumed run's) or a failed pass: the thread never waits on
    if token_read is not None:
        token = token_read.result()
    elif token is None:
        digest = kept.pop(ContentDigest().name)
        results.pop(digest.statistic.name)
        token = input_token(data, read_digest=digest.statistic.finalize(digest.state))

    # -- the results and their provenance
    provenance = dict(data.provenance)
    profiled = None
    if data.frames:  # the non-numeric columns: one tree reduction of their own over the input's row blocks
        by_class = data.label if class_values is not None and not grouped and not targeted else None  # mi, chi2
        profiled = Kept(CategoricalProfile(), _profile_state(data, by_class, fan_in, run))
        provenance["categorical"] = profiled.finalize()
    if grouped:
        provenance["grouped"] = True
    if target_mi:
        cuts = list(kept[Histogram.name].statistic.target_cuts)
        provenance["target"] = {**provenance["target"], "bins": len(cuts) + 1, "cuts": cuts}
    if tiled:
        assert chosen is not None and chosen.feature_tile is not None
        results[CoMoments.name], provenance["tiled_cov"] = _tiled_cov(data, chosen.feature_tile, run.cov_out,
                                                                      stats.cov.ddof, fan_in, stats.cov.rows)
    provenance.update(
        stats=list(names_of(wanted)), bins=bins if counts_histograms(wanted) else None, ddof=moments.ddof,
        bias=moments.bias, nan_policy=moments.nan_policy, split_every=fan_in, passes=2 if two_passes else 1,
        pass_seconds=list(runner.seconds), chunk_rows=int(max(data.x.chunks[0])), n_chunks=int(data.x.numblocks[0]),
        range_given=explicit, classes_from=classes_from, miller_madow=stats.mi.miller_madow, device=device,
        device_reason=where.reason, cached=cached, layout=layout, plan=plan_record,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), daskbatch_version=__version__,
        input_tokens=[token],  # merge and update refuse to count these rows twice
    )
    if counts_histograms(wanted):
        provenance["range"] = "given" if explicit else "minmax" if range_ is not None else "quantiles"
    if Histogram.name in results:  # the features with many values outside their range, named once, here
        h = results[Histogram.name]
        fraction = outside_fraction(h.underflow, h.overflow, h.counts)
        provenance["out_of_range"] = flag_out_of_range(fraction, data.feature_names)
    if COV in wanted:
        provenance["cov_rows"] = stats.cov.rows
    # A tiled covariance has no mergeable state. The fine quantile histogram's ranges are this run's
    # own: a merge or an update could not continue it (the sketch's dyadic grid does).
    states = None if tiled else {
        name: k for name, k in kept.items() if not isinstance(k.statistic, QuantileHistogram | Spearman)
    }
    return Computed(data=data, results=results, states=states, provenance=provenance, categorical=profiled)


# -- the steps' helpers


def _profile_only(data: FeatureMatrix, run: RunOptions, label: Any) -> Computed:
    """The summary's parts for data of no numeric feature: the non-numeric columns' profile (by ``label``)."""
    fan_in = resolve_split_every(run.split_every)
    profiled = Kept(CategoricalProfile(), _profile_state(data, label, fan_in, run))
    note_pass(int(data.x.shape[0]), 0)  # the run's log line counts its one pass over the rows
    provenance = {
        **data.provenance, "categorical": profiled.finalize(), "stats": [], "split_every": fan_in,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "daskbatch_version": __version__, "input_tokens": [input_token(data)],
    }
    return Computed(data=data, results={}, states={}, provenance=provenance, categorical=profiled)


def _profile_state(data: FeatureMatrix, label: Any, fan_in: int, run: RunOptions) -> Any:
    """The merged state of the non-numeric columns' profile: computed, or through the run's checkpoint."""
    profile = CategoricalProfile()
    if run.checkpoint is None:
        graph = profile_blocks(data.frames, fan_in, profile, TASK_PREFIXES["chunk"], label)
        return compute(graph, run.progress, "non-numeric columns")
    rows = sum(int(r) for r, _ in data.frames)
    with Progress("non-numeric columns", len(data.frames), rows=rows, cancel=run.cancel,
                  progress=run.progress) as bar:
        return run_checkpointed_profile(profile, data, label, split_every=fan_in, progress=bar,
                                        directory=run.checkpoint, force=run.force)


def _cache_blocks(cache: bool | str, data: FeatureMatrix, chosen: Plan | None, device: str) -> bool:
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


def _check_moments(m: Any, nan_policy: str, data: FeatureMatrix) -> None:
    """Refuse NaN under ``nan_policy="raise"``; say once which features' variance overflows float64."""
    if nan_policy == "raise" and np.any(m.nan_count > 0):
        bad = np.flatnonzero(m.nan_count > 0)
        listed = ", ".join(f"{data.feature_names[i]} ({int(m.nan_count[i])})" for i in bad[:10])
        raise ValueError(f"{data.provenance['source']} holds NaN values in {bad.size} feature(s): {listed}")
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


def _tiled_cov(
    data: FeatureMatrix, tile: int, cov_out: Any, ddof: int, split_every: int, rows: str,
) -> tuple[Any, dict[str, Any]]:
    """Covariance tile by tile into Zarr (the D x D state does not fit one worker)."""
    import tempfile

    out = os.fspath(cov_out) if cov_out is not None else os.path.join(tempfile.mkdtemp(prefix="daskbatch-cov-"), "cov.zarr")
    if data.stage_rows is not None:  # the tiles' tasks take device blocks: move them block by block
        data = to_device(dataclasses.replace(data, stage_rows=None), "gpu", transfer="block")
    tc = tiled_covariance(
        data.x, tile=tile, out=out, ddof=ddof, split_every=split_every,
        feature_names=data.feature_names, protected=_protected_paths(data), weights=data.weights, rows=rows,
    )
    # The matrices stay in the store; the summary keeps the row count (and weight sum) and the path.
    weight_sum = None if tc.weight_sum is None else np.float64(tc.weight_sum)
    result = CoMomentsResult(n=np.float64(tc.n), mean=tc.mean, cov=None, corr=None, weight_sum=weight_sum)
    return result, {"path": out, "tile": tile}


def _protected_paths(data: FeatureMatrix, checkpoint: Any = None) -> dict[str, Any]:
    """Paths an output of this run must stay clear of: the input store and the checkpoint."""
    return {"the input store": data.provenance.get("path"), "the checkpoint directory": checkpoint}


# -- what identifies the rows: describe records it, merge and update refuse rows a summary holds already


def input_token(data: Any, read_digest: str | None = None, fetched_since: int | None = None) -> str | None:
    """The rows' content token: a store's chunk checksums, else ``read_digest``, else dask's name (None: not yet).

    ``fetched_since``: the chunks read whole from an object store since this read stamp give their checksums.
    """
    # The content's, never the path's or the files' times: a copy of a store has the same token.
    source = getattr(data, "source", None) or data
    zx = getattr(source, "zarr_x", None)
    if zx is None:
        return f"in-memory {getattr(data, 'x', data).name}"
    if (token := checksum_token(zx, fetched_since)) is not None:
        return f"store x {token}"
    return None if read_digest is None else f"store x read {read_digest}"


def listed_token(data: Any) -> str | None:
    """The token of summaries saved before content tokens: a hash of the store's ``x`` listing (None in memory)."""
    source = getattr(data, "source", None) or data
    zx = getattr(source, "zarr_x", None)
    return None if zx is None else f"store x {listing_token(zx)}"
