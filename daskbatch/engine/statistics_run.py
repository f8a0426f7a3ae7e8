"""The passes of :func:`daskbatch.describe`: from its inputs to finalized results, merged states and provenance.

A straight pipeline, each step taking the previous one's (immutable) value:

    inputs -> statistics -> layout (plan, or the checkpoint's) -> rechunk -> device -> passes -> results

The caller (``describe``, above this layer) plans with the function it passes
as ``planner`` and makes the :class:`~daskbatch.Summary` from what this returns.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
from typing import Any

from daskbatch._typing import Device
from daskbatch._warnings import warn
from daskbatch.engine import _describe_steps as steps
from daskbatch.engine.class_labels import checked_label
from daskbatch.engine.devices import gpu_failure, resolve_device
from daskbatch.engine.inputs import FeatureMatrix, as_feature_matrix, device_module, to_device
from daskbatch.engine.passes import PassRunner
from daskbatch.engine.planner import plan_dropping_sketch, plan_statistics, sketch_in_plan
from daskbatch.engine.reduce import resolve_split_every, to_host
from daskbatch.engine.row_identity import input_token
from daskbatch.engine.row_inputs import as_weights, refuse_beside_groups, with_groups, with_target
from daskbatch.engine.run_options import RunOptions
from daskbatch.errors import GPUFallbackWarning, PlanError, RangeWarning
from daskbatch.io.outputs import check_output
from daskbatch.planning.devices import DeviceChoice
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments, Sketch
from daskbatch.stats.content_digest import ContentDigest
from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram
from daskbatch.stats.pairwise import PAIRWISE_FOOTPRINT
from daskbatch.stats.ranges import fine_ranges, histogram_ranges, is_minmax
from daskbatch.stats.registry import Kept
from daskbatch.stats.sketch_windows import WINDOWS, state_bytes_per_feature
from daskbatch.stats.spec import (
    COV,
    SKETCH,
    Configured,
    counts_by_label,
    counts_histograms,
    footprint_of,
    names_of,
    requested,
    user_statistics,
)
from daskbatch.stats.target import target_cuts
from daskbatch.stats.wanted import describe_statistics, grouped_statistics, target_statistics

__all__ = ["Computed", "prepared_inputs", "run_statistics"]

log = logging.getLogger("daskbatch.describe")


@dataclasses.dataclass(frozen=True)
class Computed:  # numpydoc ignore=PR02
    """What :func:`run_statistics` returns: the results, the states a summary keeps, and the provenance.

    Parameters
    ----------
    data : FeatureMatrix
        The inputs as computed (rechunked, on their device).
    results : dict
        Finalized results by statistic name, on the host.
    states : dict or None
        The merged states a summary keeps (None with a tiled covariance, which keeps none).
    provenance : dict
        Where the data came from and how they were computed.
    """

    data: FeatureMatrix
    results: dict[str, Any]
    states: dict[str, Kept] | None
    provenance: dict[str, Any]


def prepared_inputs(
    x: Any, label: Any, *, weights: Any, target: Any, groups: Any, feature_names: Any, missing: Any, device: Device,
) -> tuple[FeatureMatrix, DeviceChoice]:
    """Open the inputs of a ``describe`` run and choose its device (``"auto"`` resolved).

    Parameters
    ----------
    x, label, weights, target, groups, feature_names, missing : object
        As :func:`daskbatch.describe` takes them.
    device : {"auto", "cpu", "gpu"}
        The device asked for.

    Returns
    -------
    data : FeatureMatrix
        The inputs.
    where : DeviceChoice
        The device and why.
    """
    if device != "auto":
        device_module(device)  # a missing CuPy is named before anything is planned for the GPU
    if target is not None and label is not None:
        raise ValueError("label= with target= is not supported (the target takes the label's place): describe the "
                         "classes and the target in two runs, describe(x, label=...) and describe(x, target=...)")
    if target is not None and weights is not None:
        raise ValueError("weights= with target= is not supported yet: the target's co-moments and sketch are unweighted")
    if groups is not None:
        refuse_beside_groups(label, target)
    data = as_feature_matrix(x, label, feature_names=feature_names, missing=missing)
    if target is not None:
        data = with_target(data, target)
    if groups is not None:
        data = with_groups(data, groups)
    data = as_weights(weights, data)
    where = resolve_device(device, data.x)
    if where.device == "gpu":
        steps._warn_unless_gpu_kernels()
    return data, where


def run_statistics(
    data: FeatureMatrix, stats: Configured, run: RunOptions, *, where: DeviceChoice, grouped: bool, targeted: bool,
) -> Computed:
    """Compute ``stats`` of ``data`` in one or two passes, again on the CPU if ``device="auto"``'s GPU fails.

    When the GPU was daskbatch's choice (``run.device == "auto"``) and the run
    there fails the way a GPU fails (:func:`daskbatch.engine.devices.gpu_failure`:
    CuPy missing, out of memory, a CUDA error), the whole run is done once more
    on the CPU with a :class:`~daskbatch.errors.GPUFallbackWarning`, and the
    provenance records ``device="cpu"`` and ``device_fallback`` (the failure).
    With ``device="gpu"`` (the user's choice), blocks that are CuPy arrays
    already, or a checkpoint (whose states were made on the GPU), the error is raised.

    Parameters
    ----------
    data : FeatureMatrix
        From :func:`prepared_inputs`.
    stats : Configured
        The statistics asked for, with their parameters (:func:`daskbatch.stats.spec.configured`).
    run : RunOptions
        How to run.
    where : DeviceChoice
        The device, resolved.
    grouped : bool
        The label holds group keys (``describe(groups=...)``).
    targeted : bool
        The label is a continuous target (``describe(target=...)``).

    Returns
    -------
    Computed
        The results, states and provenance.
    """
    compute = functools.partial(_computed, data, stats, run, grouped=grouped, targeted=targeted)
    on_host = type(getattr(data.x, "_meta", None)).__module__.split(".")[0] != "cupy"  # CuPy blocks cannot move back
    try:
        return compute(where=where)
    except Exception as exc:
        # With a checkpoint the GPU's partial states stay on disk for a resume on the GPU:
        # a CPU run would meet a fingerprint made for the GPU, so the GPU's error is the one to see.
        fallback = where.device == "gpu" and run.device == "auto" and on_host and run.checkpoint is None
        reason = gpu_failure(exc) if fallback else None
        if reason is None:
            raise
    text = f"describe: the run on the GPU failed, {reason}; running it again on the CPU"
    log.warning(text)
    warn(text, GPUFallbackWarning)
    done = compute(where=DeviceChoice("cpu", f"device='auto' fell back from the GPU: {reason}"))
    done.provenance["device_fallback"] = reason
    return done


def _computed(
    data: FeatureMatrix, stats: Configured, run: RunOptions, *, where: DeviceChoice, grouped: bool, targeted: bool,
) -> Computed:
    """Compute ``stats`` of ``data`` in one or two passes on ``where``'s device (see :func:`run_statistics`)."""
    device, range_, bins = where.device, stats.histogram.range, stats.histogram.bins
    moments = stats.moments
    wanted = describe_statistics(stats, labelled=data.label is not None, range_=range_)
    if grouped:
        wanted = grouped_statistics(wanted)
    custom = user_statistics(stats)
    if data.weights is not None:
        steps._check_weighted(custom)
    layout = steps._run_layout(run.plan, run.split_every, run.checkpoint, run.force)
    if targeted:
        wanted, fused, class_values, given_cuts = target_statistics(stats, wanted, stats.mi.target_bins)
        custom, classes_from = (*custom, *fused), "target quantiles" if class_values is not None else None
    else:
        given_cuts = None
        class_values, classes_from = steps._class_values_of(data, wanted, stats.mi.classes, layout.split_every_or_default,
                                                   run.progress, negative=grouped)
    target_mi = targeted and counts_by_label(wanted)
    found_cuts = target_mi and given_cuts is None  # cut at the quantiles the first pass finds
    pairwise = COV in wanted and stats.cov.rows == "pairwise"
    # The pairwise state is four (D, D) matrices and never tiled: planned with its own footprint.
    planned_as = {COV.name: PAIRWISE_FOOTPRINT} if pairwise else {}
    chosen, planned = plan_dropping_sketch(
        lambda stats_: steps._planned(plan_statistics, layout, data,
                                      (*(planned_as.get(s, s) for s in stats_), *map(footprint_of, custom)),
                                      bins=bins, device=device, n_classes=class_values),
        names_of(wanted), optional=SKETCH in wanted and SKETCH not in requested(stats),
    )
    planned, sketch_window = sketch_in_plan(planned)  # wide data: a window of buckets per sign, the widest that fits
    dropped = planned != names_of(wanted)  # wider still: not even the narrowest windowed sketch fits
    wanted = tuple(r for r in wanted if r.name in planned)
    if dropped and range_ is None:  # no given range: the last resort, said (a given one is kept)
        range_ = "minmax"
        warn(RangeWarning(
            "histogram ranges from each feature's min and max, the last resort (one outlier stretches a range): "
            f"the quantile sketch that chooses robust ranges does not fit a worker even with {WINDOWS[-1][0]:,} "
            f"buckets per sign ({state_bytes_per_feature(*WINDOWS[-1][:2]):,} bytes a feature); give range= (--range) "
            "to choose them, or raise the worker's memory"
        ))
    fan_in = resolve_split_every(layout.split_every if layout.split_every is not None else
                                 chosen.split_every if chosen is not None else None)
    data = steps._rechunked(data, layout.chunk_rows if layout.chunk_rows is not None else
                      chosen.chunk_rows if chosen is not None else None)
    if class_values is not None and classes_from not in ("label scan", "target quantiles"):
        assert data.label is not None
        data = dataclasses.replace(data, label=checked_label(data.label, data.x.chunks[0], class_values))
    if class_values is not None:  # checked just above, or found by scanning this very label
        data = dataclasses.replace(data, label_checked=True)
    data = to_device(data, device)  # the last hop: blocks move once, already in their final shape
    if run.cov_out is not None and chosen is not None and chosen.feature_tile is not None:
        # refuse an unusable cov_out before computing anything
        check_output(run.cov_out, kind="tiled_cov", what="cov_out", protected=steps._protected_paths(data, run.checkpoint))

    tiled = COV in wanted and chosen is not None and chosen.feature_tile is not None
    if pairwise and tiled:  # before any compute: the tiles share one mask of complete rows
        raise PlanError(f"cov rows='pairwise' of {data.x.shape[1]:,} features needs the covariance tile by tile "
                        "(its state does not fit a worker), and the tiles count complete rows only; give fewer "
                        "features or more memory per worker")
    if pairwise and data.weights is not None:
        raise ValueError("cov rows='pairwise' with sample weights is not implemented: the pairwise covariance "
                         "counts each row once")
    explicit = range_ is not None and not is_minmax(range_)
    # The target's quantile bins come from the first pass: its mutual information needs a second.
    two_passes = counts_histograms(wanted) and (not explicit or found_cuts)
    cached = two_passes and run.checkpoint is None and steps._cache_blocks(run.cache, data, chosen, device)
    if cached:  # both passes read the decoded blocks (and the label's, 1/D of them) from memory
        log.info("keeping the %s MiB of decoded blocks in memory for both passes (cache=%r)",
                 f"{data.x.nbytes / 2**20:,.0f}", run.cache)
    runner = PassRunner(data, fan_in, run.progress, run.checkpoint, run.force, passes=2 if two_passes else 1,
                        cancel=run.cancel, keep_blocks=cached)
    first = steps._first_pass(wanted, ddof=moments.ddof, bias=moments.bias, nan_policy=moments.nan_policy, tiled=tiled,
                        class_values=class_values,
                        histogram=steps._explicit_histogram(wanted, bins, range_, data.x.shape[1], class_values, given_cuts)
                        if explicit and not found_cuts and counts_histograms(wanted) else None,
                        custom=custom, sketch_window=sketch_window, cov_rows=stats.cov.rows)
    # The rows' token (merge and update refuse to count them twice): a store's chunk checksums, known
    # now; without those, a hash of the blocks as the first pass reads them (no pass of its own).
    token = input_token(data)
    if token is None:  # a store without chunk checksums
        zarr_x = getattr(data.source, "zarr_x", None)
        # One digest per storage chunk: the same token whatever rows a block holds.
        first = Bundle((*first.stats, ContentDigest(piece_rows=int(zarr_x.chunks[0]) if zarr_x is not None else 0)))
    with steps._describe_span(data):
        # The merged states are kept with the summary (it can then be merged and updated,
        # daskbatch.incremental); finalizing them here gives the results a finalizing pass gives.
        kept = steps._kept_by_name(first, runner(first, finalize=False))
        if token is None:
            digest = kept.pop(ContentDigest().name)
            token = input_token(data, read_digest=digest.statistic.finalize(digest.state))
        data = runner.blocks  # in memory when kept (cached): what follows reads them from there
        results = {name: to_host(k.finalize()) for name, k in kept.items()}
        steps._check_nan_policy(results[Moments.name], moments.nan_policy, data)
        steps._warn_overflowing_moments(results[Moments.name], data)
        if two_passes:
            sketch = results[Sketch.name] if range_ is None else None
            m = results[Moments.name]
            lo, hi = histogram_ranges(range_, data.x.shape[1], m.finite_min, m.finite_max, sketch=sketch)
            log.debug("histogram ranges of %d features from %s", len(lo), "each feature's min and max"
                      if range_ is not None else "the sketch's 0.1-99.9 % quantiles widened by its error bound, "
                      "values detached beyond robust fences left out")
            by_class: dict[str, Any] = (
                {"target_cuts": given_cuts or target_cuts(results["target_sketch"], int(stats.mi.target_bins))}
                if target_mi
                else {"classes": class_values if counts_by_label(wanted) else None}
            )
            second: list[Any] = [Histogram(bins=bins, lo=lo, hi=hi, by_label=counts_by_label(wanted), **by_class)]
            if sketch is not None:  # the fine histogram that makes quantiles exact to one of its bins
                q_lo, q_hi = fine_ranges(sketch, m.finite_min, m.finite_max, QUANTILE_BINS)
                second.append(QuantileHistogram(bins=QUANTILE_BINS, lo=tuple(map(float, q_lo)),
                                                hi=tuple(map(float, q_hi))))
            kept.update(steps._kept_by_name(Bundle(tuple(second)), runner(Bundle(tuple(second)), 2, finalize=False)))
            results.update((s.name, to_host(kept[s.name].finalize())) for s in second)
    provenance = dict(data.provenance)
    if grouped:
        provenance["grouped"] = True
    if target_mi:
        cuts = list(kept[Histogram.name].statistic.target_cuts)
        provenance["target"] = {**provenance["target"], "bins": len(cuts) + 1, "cuts": cuts}
    if tiled:
        assert chosen is not None and chosen.feature_tile is not None
        results[CoMoments.name], provenance["tiled_cov"] = steps._tiled_cov(data, chosen.feature_tile, run.cov_out,
                                                                      stats.cov.ddof, fan_in)
    provenance.update(
        stats=list(names_of(wanted)), bins=bins if counts_histograms(wanted) else None, ddof=moments.ddof,
        bias=moments.bias, nan_policy=moments.nan_policy, split_every=fan_in, passes=2 if two_passes else 1,
        pass_seconds=list(runner.seconds), chunk_rows=int(max(data.x.chunks[0])), n_chunks=int(data.x.numblocks[0]),
        range_given=explicit, classes_from=classes_from, miller_madow=stats.mi.miller_madow, device=device,
        device_reason=where.reason, cached=cached,
        layout=layout.source, plan=None if chosen is None else {
            "budget_bytes": chosen.budget_bytes, "task_bytes": chosen.task_bytes,
            "limited_by": chosen.limited_by, "resources": chosen.resources.describe(),
            "n_classes": chosen.n_classes,
        },
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        daskbatch_version=steps._version(),
        input_tokens=[token],  # merge and update refuse to count these rows twice
    )
    if counts_histograms(wanted):
        provenance["range"] = "given" if explicit else "minmax" if range_ is not None else "quantiles"
    if COV in wanted:
        provenance["cov_rows"] = stats.cov.rows
    # A tiled covariance has no mergeable state; a pairwise one a state no saved summary can name yet.
    states = None if tiled else steps._mergeable(kept)
    return Computed(data=data, results=results, states=states, provenance=provenance)
