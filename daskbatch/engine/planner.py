"""``plan``: where data, configuration and the live cluster meet the pure planner, and the label's class values.

:mod:`daskbatch.planning` reads no configuration and never sees a cluster; this module gathers those inputs
(a store's chunks, ``dask.config``, the workers, the label's classes) for ``describe`` and the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch._common import Device, checked_device
from daskbatch.config import STATISTIC_DEFAULTS, resolve_split_every
from daskbatch.planning.plan import DEFAULT_STATISTICS, Plan, Resources, footprint
from daskbatch.planning.search import plan_chunks, plan_dropping_sketch
from daskbatch.runtime.capacity import active_client, cuda_device_count, resources_auto
from daskbatch.stats.classes import (
    ClassValues,
    UnknownClassError,
    as_int64_labels,
    label_codes,
    validate_classes,
)
from daskbatch.stats.declaration import Footprint
from daskbatch.stats.kernels import path
from daskbatch.stats.kernels.path import kernel_path
from daskbatch.stats.numerics import namespace
from daskbatch.stats.registry import footprint_of
from daskbatch.stats.spec import (
    DEFAULT_STATS,
    SKETCH,
    configured,
    counts_by_label,
    describe_statistics,
    grouped_statistics,
    names_of,
    requested,
    target_statistics,
)

if TYPE_CHECKING:
    import dask.array as da
    from dask.delayed import Delayed

    from daskbatch.engine.inputs import FeatureMatrix

__all__ = ["checked_label", "max_classes", "plan", "plan_describe", "plan_statistics", "recorded_n_classes",
           "resolve_classes"]


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
        n_classes=n_classes,
        split_every=split_every if split_every is not None else resolve_split_every(None),
        **{k: settings[k] for k in ("memory_fraction", "reserved_bytes", "target_chunk_bytes")},
        dtype=str(x.dtype),
        compiled_kernels=kernel_path("cupy" if resources.device == "gpu" else "numpy", dtype=x.dtype,
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
    from daskbatch.engine.reduce import tree_reduce  # lazy: dask

    found = compute(tree_reduce(ClassValues(max_classes=limit), label[:, None], split_every=split_every))
    return tuple(int(v) for v in np.asarray(found)), "label scan"


def checked_label(  # numpydoc ignore=PR01,RT01
    label: da.Array, rows: tuple[int, ...], classes: tuple[int, ...] | None
) -> da.Array:
    """Rechunk ``label`` to blocks of ``rows``, each checked against ``classes`` (else for negatives) when read."""
    import dask.array as da  # lazy: dask

    label = label.rechunk((rows,))
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
