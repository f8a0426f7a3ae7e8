"""``plan``: where data, configuration and the live cluster meet the pure planner, and the label's class values.

:mod:`daskbatch.planning` reads no configuration and never sees a cluster; this module gathers those inputs
(a store's chunks, ``dask.config``, the workers, the label's classes) for ``describe`` and the CLI, and lays out
``describe``'s passes (:func:`lay_out`: classes, plan and blocks in one step).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch._common import Device, checked_device, warn
from daskbatch.config import STATISTIC_DEFAULTS, resolve_split_every
from daskbatch.errors import PlanError, RangeWarning
from daskbatch.planning.plan import DEFAULT_STATISTICS, Plan, Resources, footprint
from daskbatch.planning.search import plan_chunks, plan_dropping_sketch, sketch_in_plan
from daskbatch.runtime.capacity import (
    active_client,
    cuda_device_count,
    rechunk_method,
    resources_auto,
)
from daskbatch.stats.classes import (
    ClassValues,
    UnknownClassError,
    as_int64_labels,
    label_codes,
    validate_classes,
)
from daskbatch.stats.declaration import Footprint
from daskbatch.stats.kernels import path
from daskbatch.stats.numerics import namespace
from daskbatch.stats.pairwise import PAIRWISE_FOOTPRINT
from daskbatch.stats.ranges import is_minmax
from daskbatch.stats.registry import footprint_of
from daskbatch.stats.sketch_windows import WINDOWS, state_bytes_per_feature
from daskbatch.stats.spec import (
    COV,
    DEFAULT_STATS,
    SKETCH,
    Configured,
    configured,
    counts_by_label,
    describe_statistics,
    grouped_statistics,
    names_of,
    ranks_by_sketch,
    requested,
    target_statistics,
)

if TYPE_CHECKING:
    import dask.array as da
    from dask.delayed import Delayed

    from daskbatch.engine.inputs import FeatureMatrix
    from daskbatch.engine.run_options import RunOptions

__all__ = ["Layout", "checked_label", "lay_out", "max_classes", "plan", "plan_describe", "plan_statistics",
           "recorded_n_classes", "resolve_classes"]

log = logging.getLogger("daskbatch.describe")  # describe's log: the layout is its step


def plan(
    x_or_dataset: Any,
    *,
    stats: Sequence[str | Footprint] = DEFAULT_STATISTICS,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    resources: Resources | str | None = "auto",
    split_every: int | None = None,
    device: Device = "auto",
    weighted: bool = False,
) -> Plan:
    """Plan chunk rows, merge fan-in and feature tiles for a computation over ``x_or_dataset``.

    Parameters
    ----------
    x_or_dataset : path or URL of a Zarr store, Dataset, dask.array.Array, zarr.Array or numpy.ndarray
        Anything with ``shape``, ``dtype`` and (optionally) ``chunks``; a path is
        opened with :func:`daskbatch.open_dataset` (metadata only). A ``Dataset``
        contributes its storage chunks and, when it records them, its classes.
    stats : sequence of {"moments", "cov", "hist", "mi"}
        The statistics to plan for.
    bins : int, default 64
        Histogram bins per feature.
    n_classes : int, optional
        Label classes for ``"mi"``; default: what the data record.
    resources : Resources, "auto" or None, default "auto"
        The workers to plan for. ``"auto"``/None: those of the active
        ``distributed`` client, else this machine.
    split_every : int, optional
        Merge fan-in; default ``daskbatch.split-every``.
    device : {"auto", "cpu", "gpu"}, default "auto"
        With ``resources="auto"`` and no client: plan for this machine's memory
        or its GPUs; ``"auto"``: its GPUs when it has any.
    weighted : bool, default False
        The rows carry sample weights (``describe(weights=)``): each chunk task
        also holds the weight column and a copy of its rows of positive weight.

    Returns
    -------
    Plan
        Chunk rows, fan-in, feature tile and the projected task sizes.

    Raises
    ------
    PlanError
        When nothing fits; the message names the number to change.

    Examples
    --------
    >>> import numpy as np
    >>> import daskbatch as db
    >>> p = db.plan(np.zeros((1000, 4)), stats=("moments",), resources=db.Resources(2**30))
    >>> p.chunk_rows
    1000
    """
    from daskbatch import config  # lazy: dask

    device = checked_device(device)

    if isinstance(x_or_dataset, (str, os.PathLike)):
        from daskbatch.io.dataset import open_dataset  # lazy: dask, zarr

        x_or_dataset = open_dataset(x_or_dataset)
    x = getattr(x_or_dataset, "x", x_or_dataset)
    chunks = getattr(x_or_dataset, "store_chunks", None) or getattr(x, "chunks", None) or x.shape
    storage = tuple(max(c) if isinstance(c, tuple) else c for c in chunks)  # dask: tuple of tuples
    if n_classes is None and any(footprint(s).needs_classes for s in stats):
        n_classes = recorded_n_classes(x_or_dataset)
    if resources is None or (isinstance(resources, str) and resources == "auto"):
        resources = resources_auto(device=None if device == "auto" else device)
    if not isinstance(resources, Resources):
        raise TypeError(f"resources must be a Resources, 'auto' or None, got {resources!r}")
    settings = config.planner_settings()
    return plan_chunks(
        tuple(x.shape), x.dtype.itemsize, storage, resources, stats=tuple(stats), bins=bins,
        n_classes=n_classes, split_every=split_every if split_every is not None else resolve_split_every(None),
        **{k: settings[k] for k in ("memory_fraction", "reserved_bytes", "target_chunk_bytes")},
        dtype=str(x.dtype),
        compiled_kernels=path.kernel_path("cupy" if resources.device == "gpu" else "numpy", dtype=x.dtype,
                                          gpu_kernels=resources.device == "gpu" and _gpu_kernels_expected()).compiled,
        weighted=weighted,
        # An object store's blocks fetched ahead (none on distributed workers: each task has its own reader).
        read_ahead_blocks=0 if active_client() else int(getattr(x_or_dataset, "read_ahead_blocks", 0)),
    )


def _gpu_kernels_expected() -> bool:
    """Whether chunks on the planned GPUs take the numba-cuda kernels (else CuPy runs the array-API code)."""
    # Where this process sees a CUDA device, it checks for itself. Where it sees
    # none, the plan is for GPU workers elsewhere (made on a login node, before a
    # cluster starts): they are planned with the kernels, which ``daskbatch info
    # --gpu`` checks there and ``describe(device="gpu")`` warns about when absent.
    return path.gpu_available() or cuda_device_count() == 0


def plan_statistics(  # numpydoc ignore=PR01,RT01
    data: Any,
    names: Sequence[str | Footprint],
    *,
    bins: int,
    resources: Resources | str | None = "auto",
    split_every: int | None = None,
    n_classes: int | None = None,
    device: str | None = None,
) -> Plan:
    """Plan the statistics ``names`` over ``data`` (a FeatureMatrix): its store's chunks, classes and weights."""
    # Without n_classes for mi/class_moments: what the store records, else daskbatch.assumed-classes.
    from daskbatch import config  # lazy: dask

    source = data.source if data.source is not None else data.x
    labelled = any(footprint(s).needs_classes for s in names)
    if labelled and n_classes is None:
        n_classes = recorded_n_classes(source) or int(config.get("assumed-classes"))
    return plan(
        source, stats=tuple(names), bins=bins, n_classes=n_classes if labelled else None,
        resources=resources, split_every=split_every, device="auto" if device is None else checked_device(device),
        weighted=getattr(data, "weights", None) is not None,
    )


def plan_describe(  # numpydoc ignore=PR01,RT01
    x: Any,
    label: Any = None,
    *,
    stats: str | Sequence[Any] = DEFAULT_STATS,
    bins: int | None = None,
    range: Any = None,  # noqa: A002 - describe's name
    split_every: int | None = None,
    resources: Any = "auto",
    classes: Sequence[int] | None = None,
    target: Any = None,
    groups: Any = None,
    target_bins: Any = None,
    weights: Any = None,
) -> Plan:
    """Make the plan :func:`daskbatch.describe` makes for the same arguments (its largest pass), computing nothing."""
    from daskbatch.engine.inputs import as_feature_matrix  # lazy: dask

    asked = configured(stats, bins=bins, range=range, classes=classes, target_bins=target_bins)
    bins, range, classes = asked.histogram.bins, asked.histogram.range, asked.mi.classes  # noqa: A001
    data = as_feature_matrix(x, label, target=target, groups=groups, weights=weights)
    wanted = describe_statistics(asked, labelled=data.label is not None, range_=range)
    if groups is not None:
        wanted = grouped_statistics(wanted)
    fused: tuple[Any, ...] = ()
    n_classes = None
    if target is not None:
        wanted, fused, bins_of_target, _ = target_statistics(asked, wanted, asked.mi.target_bins)
        n_classes = None if bins_of_target is None else len(bins_of_target)
    names = (*names_of(wanted), *map(footprint_of, fused))
    if classes is not None and counts_by_label(wanted) and target is None:
        n_classes = len(validate_classes(classes, max_classes()))
    chosen, _ = plan_dropping_sketch(
        lambda stats_: plan_statistics(
            data, stats_, bins=bins, resources=resources, split_every=split_every, n_classes=n_classes
        ),
        names, optional=SKETCH not in requested(asked),
    )
    return chosen


@dataclasses.dataclass(frozen=True)
class Layout:
    """What :func:`lay_out` decided for ``describe``: the data in the blocks to run, the statistics, plan and classes."""

    data: FeatureMatrix  # rechunked to the plan's rows, its label checked; not yet on the device
    wanted: tuple[Any, ...]  # the built-in statistics that fit the plan
    custom: tuple[Any, ...]  # the user's statistics, and those a continuous target fuses into the first pass
    chosen: Plan | None
    plan_record: dict[str, Any] | None  # the provenance's account of the plan
    class_values: tuple[int, ...] | None
    classes_from: str | None
    given_cuts: Any
    target_mi: bool
    found_cuts: bool  # the target's bins are cut at the quantiles the first pass finds
    ranked: bool
    sketch_window: tuple[int, str, float] | None
    range_: Any  # "minmax" where not even the narrowest sketch fits and no range was given
    fan_in: int
    layout: str  # where chunk rows and fan-in came from: "plan", "input chunks" or "checkpoint"
    # With the classes found in the first pass (class_values None until then), the plan's record for their number.
    record_for_classes: Callable[[int], dict[str, Any] | None] | None = None


def lay_out(  # numpydoc ignore=PR01,RT01
    data: FeatureMatrix, stats: Configured, wanted: tuple[Any, ...], custom: tuple[Any, ...], run: RunOptions, *,
    grouped: bool, targeted: bool, device: str, compute: Callable[[Delayed, str], Any],
) -> Layout:
    """Lay out ``describe``'s passes over ``data``: the class values, the plan (a sketch that does not fit narrowed or left out), the blocks."""
    # The data come here once and leave in their final blocks: the classes sized the plan, the plan the blocks,
    # and the label is checked in those blocks (compute: the caller's scheduler and progress, with a title).
    range_, bins = stats.histogram.range, stats.histogram.bins
    plan, chunk_rows, split_every, layout = _run_layout(run.plan, run.split_every, run.checkpoint, run.force)
    if targeted:
        wanted, fused, class_values, given_cuts = target_statistics(stats, wanted, stats.mi.target_bins)
        custom, classes_from = (*custom, *fused), "target quantiles" if class_values is not None else None
    else:
        given_cuts, class_values, classes_from = None, None, None
    ranked = ranks_by_sketch(wanted)
    pairwise = COV in wanted and stats.cov.rows == "pairwise"
    planned_as = {COV.name: PAIRWISE_FOOTPRINT} if pairwise else {}  # four (D, D) matrices, or seven a tile pair

    def planned_for(n_classes: int | None, quiet: bool = False) -> tuple[Any, tuple[Any, ...]]:  # numpydoc ignore=PR01,RT01
        """The plan and the statistics it fits, for ``n_classes`` classes."""
        return plan_dropping_sketch(
            lambda names: _planned(plan, split_every, data, (*(planned_as.get(s, s) for s in names),
                                   *map(footprint_of, custom)), bins=bins, device=device, n_classes=n_classes,
                                   quiet=quiet),
            names_of(wanted), optional=SKETCH in wanted and SKETCH not in requested(stats) and not ranked,
        )

    labelled = not targeted and any(r.needs_label for r in wanted)
    found = labelled and _found_in_first_pass(data, stats, wanted, run, grouped) and _same_plan_for_any_classes(planned_for)
    if found:  # nothing before the second pass needs the classes: the first pass finds them, else a scan
        classes_from = "label scan"
    elif labelled:
        title = "group-key scan" if grouped else "label scan"  # negative keys: groups only
        class_values, classes_from = resolve_classes(
            data, stats.mi.classes, split_every=resolve_split_every(split_every), negative=grouped,
            compute=lambda graph: compute(graph, title),
        )
    target_mi = targeted and counts_by_label(wanted)
    found_cuts = target_mi and given_cuts is None  # cut at the quantiles the first pass finds
    if ranked and data.weights is not None:
        raise ValueError("spearman with sample weights is not implemented: its ranks count each row once")
    chosen, planned = planned_for(max_classes() if found else None if class_values is None else len(class_values))
    plan_record = _plan_record(chosen)
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
    fan_in = resolve_split_every(split_every if split_every is not None else
                                 chosen.split_every if chosen is not None else None)
    rows = chunk_rows if chunk_rows is not None else chosen.chunk_rows if chosen is not None else None
    if rows is not None and max(data.x.chunks[0]) > rows:  # only larger blocks are split: merging adds a copy
        data = dataclasses.replace(data, x=data.x.rechunk({0: rows}, method=rechunk_method()))
    if class_values is not None and classes_from not in ("label scan", "target quantiles"):
        assert data.label is not None
        data = dataclasses.replace(data, label=checked_label(data.label, data.x.chunks[0], class_values))
    if found:  # the first pass finds the classes: its label blocks refuse negative values as read
        assert data.label is not None
        data = dataclasses.replace(data, label=checked_label(data.label, data.x.chunks[0], None))
    if class_values is not None or found:  # checked just above, or found by scanning this very label
        data = dataclasses.replace(data, label_checked=True)
    record_for_classes = (lambda n: _plan_record(planned_for(n, True)[0])) if found else None
    return Layout(data, wanted, custom, chosen, plan_record, class_values, classes_from, given_cuts, target_mi,
                  found_cuts, ranked, sketch_window, range_, fan_in, layout, record_for_classes)


def _found_in_first_pass(data: FeatureMatrix, stats: Configured, wanted: tuple[Any, ...], run: RunOptions,
                         grouped: bool) -> bool:
    """Whether the label's classes can be found in the first pass rather than by a scan of their own before it."""
    # Only the second pass's histograms by class (mi) may use them, not class moments nor histograms on a given
    # range (first pass). Weights drop rows of weight 0 before the statistics see them; checkpoints fingerprint
    # the first pass; group keys may be negative: all three keep the scan.
    by_class_first = (stats.histogram.range is not None and not is_minmax(stats.histogram.range)
                      or any(r.needs_label and not r.by_label for r in wanted))
    return (not grouped and data.weights is None and run.checkpoint is None and stats.mi.classes is None
            and data.label is not None and _recorded_classes(data) is None and not by_class_first)


def _same_plan_for_any_classes(planned_for: Callable[[int, bool], tuple[Any, tuple[Any, ...]]]) -> bool:
    """Whether one class and ``daskbatch.max-classes`` classes give the passes the same blocks, fan-in and sketch."""
    # (feature, bin, class) tables rarely move a plan (a budget of gigabytes): the classes found then do not either.
    try:
        (fewest, fits), (most, fits_most) = planned_for(1, True), planned_for(max_classes(), True)
    except PlanError:  # the most classes do not fit: a scan finds how many there are before planning
        return False
    return fits == fits_most and all(getattr(fewest, k, None) == getattr(most, k, None)
                                     for k in ("chunk_rows", "split_every", "feature_tile"))


def _plan_record(chosen: Plan | None) -> dict[str, Any] | None:
    """The provenance's account of a plan (None without one)."""
    return None if chosen is None else {
        "budget_bytes": chosen.budget_bytes, "task_bytes": chosen.task_bytes, "limited_by": chosen.limited_by,
        "resources": chosen.resources.describe(), "n_classes": chosen.n_classes,
    }


def _run_layout(plan: Any, split_every: int | None, checkpoint: Any, force: bool) -> tuple[Any, int | None, int | None, str]:
    """What to plan with, chunk rows and fan-in (None: the plan decides) and where they come from."""
    # Resuming needs the grid and fan-in the checkpoint was written with (the cluster, and with it the
    # automatic plan, may have changed since), so without a request of its own a resumed run takes the
    # recorded layout and says so. A layout the user asked for (split_every, a Plan, Resources, or plan=None
    # for the input's blocks) is never overridden: the checkpoint's fingerprint refuses one that differs.
    if split_every is not None:
        resolve_split_every(split_every)  # validate before anything else
    recorded = None
    if checkpoint is not None and not force and isinstance(plan, str) and plan == "auto":
        from daskbatch.engine.checkpoint_files import recorded_layout  # lazy: zarr

        recorded = recorded_layout(checkpoint)
    if recorded is None:
        return plan, None, split_every, "plan" if plan is not None else "input chunks"
    fan_in = split_every if split_every is not None else recorded["split_every"]
    log.info("resuming on the checkpoint's layout: chunk_rows=%s, split_every=%s", f"{recorded['chunk_rows']:,}", fan_in)
    return None, recorded["chunk_rows"], fan_in, "checkpoint"


def _planned(
    plan: Any, split_every: int | None, data: FeatureMatrix, names: tuple[Any, ...], *, bins: int, device: str,
    n_classes: int | None, quiet: bool = False,
) -> Any:
    """The plan to run with (raising PlanError before any compute), or None to keep the input's chunks."""
    if plan is None:
        return None
    if isinstance(plan, Plan):
        chosen = plan
    elif (isinstance(plan, str) and plan == "auto") or isinstance(plan, Resources):
        chosen = plan_statistics(data, names, bins=bins, resources=plan, split_every=split_every,
                                 n_classes=n_classes, device=device)
    else:
        raise TypeError(f"plan must be 'auto', a Plan, a Resources or None; got {plan!r}")
    if chosen.shape != tuple(data.x.shape):
        raise ValueError(f"the plan is for shape {chosen.shape} but the data have shape {tuple(data.x.shape)}")
    if quiet:  # a plan asked for a comparison
        return chosen
    if isinstance(plan, Plan):  # whoever made it has logged it (daskbatch run does): once is enough
        log.debug("using the plan given: %s rows a chunk, split_every %d", f"{chosen.chunk_rows:,}", chosen.split_every)
    else:
        for line in chosen.explain().splitlines():  # a batch log records what the run was planned for
            log.info("%s", line)
    return chosen


# -- the class values of a label, decided once per run before the plan is made (their number sizes the
# (feature, bin, class) tables): declared (classes=[...]), else recorded by the store the label came from
# (a synthetic store's attrs["synth"]["classes"] = K means 0..K-1), else found by a scan of the label alone.
# Every count is checked against daskbatch.max-classes; declared and recorded values are checked while
# counting (checked_label). Found classes must be non-negative: a negative label often marks an unlabeled row
# (-1 in scikit-learn's semi-supervised estimators); declared classes may be any integers.


def max_classes() -> int:  # numpydoc ignore=RT01
    """Read the most class values a label may have (``daskbatch.max-classes``)."""
    from daskbatch import config  # lazy: dask

    value = int(config.get("max-classes"))
    if value < 1:
        raise ValueError(f"daskbatch.max-classes must be >= 1, got {value}")
    return value


def recorded_n_classes(obj: Any) -> int | None:  # numpydoc ignore=PR01,RT01
    """Read the label classes an object records: ``.n_classes``, or synthetic-store attrs ``synth.classes``."""
    n = getattr(obj, "n_classes", None)
    if n is None:
        synth = (getattr(obj, "attrs", None) or {}).get("synth")
        n = synth.get("classes") if isinstance(synth, dict) else None
    return int(n) if n is not None else None


def _recorded_classes(data: FeatureMatrix) -> tuple[int, ...] | None:
    """The class values the store records for ``data.label`` (only a label read from that store)."""
    # A label passed alongside a Dataset may have other classes than the store's.
    source = data.source
    if source is None or data.label is None or getattr(source, "label", None) is not data.label:
        return None
    n = recorded_n_classes(source)
    return tuple(range(n)) if n else None


def resolve_classes(  # numpydoc ignore=PR01,RT01
    data: FeatureMatrix,
    classes: Any,
    *,
    split_every: int,
    compute: Callable[[Delayed], Any],
    negative: bool = False,
) -> tuple[tuple[int, ...], str]:
    """Get the sorted class values of ``data.label`` and where they came from (``"given"``, ``"store"``, ``"label scan"``)."""
    # compute: the caller's scheduler and progress bar; negative: group keys, where no value marks an unlabeled row.
    limit = max_classes()
    if classes is not None:
        return validate_classes(classes, limit), "given"
    recorded = _recorded_classes(data)
    if recorded is not None:
        if len(recorded) > limit:
            raise ValueError(
                f"the store records {len(recorded):,} classes, more than daskbatch.max-classes ({limit:,})"
            )
        return recorded, "store"
    if data.label is None:
        raise ValueError("the class values of the label were asked for, but the data has no label")
    # negative values stop the scan of a label
    label = data.label if negative else checked_label(data.label, data.label.chunks[0], None)
    from daskbatch.engine.passes import tree_reduce  # lazy: dask

    found = compute(tree_reduce(ClassValues(max_classes=limit), label[:, None], split_every=split_every))
    return tuple(int(v) for v in np.asarray(found)), "label scan"


def checked_label(label: da.Array, rows: tuple[int, ...], classes: tuple[int, ...] | None) -> da.Array:  # numpydoc ignore=PR01,RT01
    """Rechunk ``label`` to blocks of ``rows``, each checked against ``classes`` (else for negatives) when read."""
    import dask.array as da  # lazy: dask

    label = label.rechunk((rows,), method=rechunk_method())
    # The function, not the method: typeshed's functools.wraps does not bind self.
    return da.map_blocks(_check_block, label, classes=classes, dtype=label.dtype, meta=label._meta)


def _check_block(block: Any, *, classes: tuple[int, ...] | None, block_info: dict[Any, Any] | None = None) -> Any:
    """Raise on a label value outside ``classes`` (or a negative one), naming its row and the block's rows."""
    xp = namespace(block)
    start, stop = block_info[0]["array-location"][0] if block_info else (0, block.shape[0])
    if classes is None:
        negative = as_int64_labels(xp, block) < 0
        if xp.any(negative):
            at = int(xp.argmax(xp.astype(negative, xp.int8)))
            count = int(xp.sum(xp.astype(negative, xp.int64)))
            raise ValueError(
                f"label value {int(block[at])} at row {start + at:,} is negative ({count:,} such "
                f"label{'s' if count != 1 else ''} in rows {start:,}..{stop - 1:,}); found classes are "
                "class numbers >= 0 (negative labels often mark unlabeled rows): drop those rows, "
                "or declare the class values with classes=[...]"
            )
        return block
    try:
        label_codes(xp, block, classes)
    except UnknownClassError as exc:
        raise UnknownClassError(exc.value, exc.row, exc.count, exc.classes, (start, stop)) from None
    return block
