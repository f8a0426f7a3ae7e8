"""How many bytes one task of the statistics engine holds at its peak (the planner's model).

Pure (no dask, zarr or cupy). It keeps no table per statistic: every statistic
declares its :class:`~daskbatch.stats.declaration.Footprint` (state size and
temporaries per kernel path) next to its state, and this module adds them up,
so a user's statistic with a footprint is planned like a built-in one. The
footprints are checked against ``tracemalloc`` in ``tests/test_plan_memory.py``
(projected must stay between 1x and 2x of measured).

Model (in the spirit of cubed's projected memory):

* one chunk task holds the raw block (``rows x D x itemsize``), the buffers of
  reading it from a compressed store (``READ_BUFFERS``), a float64 copy
  of it (the array-API path; of the compiled CPU kernels only co-moments make one),
  the chunk-sized temporaries of the *hungriest* requested statistic
  (all statistics run fused in one task, one after another), transient
  state-sized copies made while building a state, and the states of all
  requested statistics;
* on the GPU (path ``"gpu-compiled"``: the numba-cuda kernels of
  :mod:`daskbatch.stats.kernels._gpu`) one chunk task holds, in device memory,
  the block (decoded on the host, so no read buffers), its labels, the buffers
  of the hungriest kernel (``Footprint.device_buffers``: the moments' per-group
  partials, the co-moments' partials and float64 centring buffer, which holds
  the whole chunk unless that exceeds a share of the card's memory) and
  the states; the statistics without a GPU kernel (sketch, class moments)
  declare their array-API temporaries for that path;
* one merge task holds ``split_every`` input states, the old and new running results and
  the largest statistic's merge temporaries (``Footprint.merge_temporaries``); every task
  also carries ``TASK_OVERHEAD_BYTES`` of small vectors and Python objects.
"""

from __future__ import annotations

from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats.declaration import KERNEL_PATHS, Footprint
from daskbatch.stats.registry import STATISTICS as DECLARED

__all__ = [
    "DEFAULT_STATISTICS",
    "PATHS",
    "READ_BUFFERS",
    "STATISTICS",
    "TASK_OVERHEAD_BYTES",
    "WEIGHT_ROW_BYTES",
    "StatLike",
    "chunk_task_terms",
    "footprint",
    "merge_task_bytes",
    "projected_task_bytes",
    "stat_name",
    "state_bytes",
]

#: Statistics the engine knows, in the order they are reported.
STATISTICS: tuple[str, ...] = tuple(name for name, d in DECLARED.items() if d.footprint is not None and d.selectable)

#: What is planned when no statistics are named (``describe``'s default).
DEFAULT_STATISTICS: tuple[str, ...] = ("moments", "cov", "hist", "mi")

#: The kernel paths (see :data:`daskbatch.stats.declaration.KERNEL_PATHS`).
PATHS: tuple[str, ...] = KERNEL_PATHS

#: Buffers of reading one block from a compressed Zarr store, beyond the block itself, in
#: units of the raw block: the compressed bytes and the decoded chunk (tracemalloc: ~3x raw
#: at the read's peak). Usually they are freed when the read returns, but now and then zarr
#: still holds them while the kernels run (seen with tracemalloc, garbage collector on or off),
#: so the model counts them alongside the kernels' arrays.
READ_BUFFERS = 2

#: Small arrays (length-D vectors) and Python objects every task allocates besides the above.
TASK_OVERHEAD_BYTES = 128 * 2**10

#: Bytes per row of a weighted chunk task (``describe(weights=)``): the weight block as read
#: (float64, 8) and the float64 copy the statistics take of it (8), the weight check's and the
#: positive-weight masks (3 x 1), and with zero weights the indices of the rows kept (8) and their
#: weights (8); rounded up for the row-sized weight temporaries of the kernels.
WEIGHT_ROW_BYTES = 40

_ITEMSIZE = {"float64": 8, "int64": 8, "bool": 1}
_LABEL_ITEMSIZE = 8  # class labels arrive as int64, one per row (read once for all statistics)

#: A statistic named by its name (built in) or by its own :class:`Footprint` (a user's).
StatLike = str | Footprint


def footprint(stat: StatLike) -> Footprint:
    """Get the footprint of ``stat``: a built-in statistic's, as its declaration says, or ``stat`` itself."""
    if isinstance(stat, Footprint):
        return stat
    declared = DECLARED.get(stat)
    if declared is None or declared.footprint is None:
        raise ValueError(f"unknown statistic {stat!r}; expected one of {', '.join(STATISTICS)}")
    return declared.footprint


def stat_name(stat: StatLike) -> str:
    """Name ``stat`` (for messages and ``Plan.explain``)."""
    return stat.name if isinstance(stat, Footprint) else stat


def state_bytes(
    stat: StatLike,
    n_features: int,
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> int:
    """Size one state of ``stat`` over ``n_features`` features (with ``feature_tile``: the state of one tile pair)."""
    return int(footprint(stat).state(n_features, bins, n_classes, feature_tile))


def chunk_task_terms(
    rows: int,
    n_features: int,
    itemsize: int,
    stats: tuple[StatLike, ...],
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
    path: str = "compiled",
    device_bytes: int | None = None,
    weighted: bool = False,
) -> dict[str, int]:
    """The terms of :func:`projected_task_bytes`, by name (for ``Plan.explain``)."""
    # path: the kernels that run the chunk (PATHS); device_bytes: the card's memory on "gpu-compiled";
    # weighted: the weight column (WEIGHT_ROW_BYTES a row) and the copy of the rows of positive weight.
    if path not in PATHS:
        raise ValueError(f"unknown kernel path {path!r}; expected one of {PATHS}")
    elems = rows * n_features
    prints = [footprint(s) for s in stats]
    states = [f.state(n_features, bins, n_classes, feature_tile) for f in prints]
    transient = []
    for f, state in zip(prints, states, strict=True):
        temps = elems * sum(_ITEMSIZE[k] * n for k, n in f.temporaries[path].items())
        centring = f.centring_rows(n_features) if callable(f.centring_rows) else f.centring_rows
        extra = min(rows, centring) * n_features * 8 if path == "compiled" else 0  # centring buffer
        if path == "compiled" and f.compiled_scratch is not None:
            extra += f.compiled_scratch(n_features)
        if path == "gpu-compiled" and f.device_buffers is not None:
            extra += f.device_buffers(rows, n_features, device_bytes)
        transient.append(temps + rows * f.row_bytes[path] + f.state_copies[path] * state + extra)
    # Statistics run one after another, so one float64 copy is alive at a time at most.
    copies = max((f.float64_copies[path] for f in prints), default=0)
    labels = rows * _LABEL_ITEMSIZE if any(f.reads_label for f in prints) else 0
    weights = {
        "weights": rows * WEIGHT_ROW_BYTES,
        # Rows of weight 0 are dropped once per block (Bundle.chunk): a copy of the others and their labels.
        "positive rows": elems * itemsize + labels,
    } if weighted else {}
    return {
        "raw": elems * itemsize,
        # A GPU task gets its block decoded (on the host): device memory holds no read buffers.
        "read buffers": 0 if path == "gpu-compiled" else READ_BUFFERS * elems * itemsize,
        "float64 copy": copies * elems * 8,
        "labels": labels,
        **weights,
        "temporaries": max(transient, default=0),
        "states": sum(states),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def projected_task_bytes(
    rows: int,
    n_features: int,
    itemsize: int,
    stats: tuple[StatLike, ...],
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
    path: str = "compiled",
    device_bytes: int | None = None,
    weighted: bool = False,
) -> int:
    """Project the peak bytes of one fused chunk task over ``rows x n_features`` input (the module's model)."""
    terms = chunk_task_terms(
        rows, n_features, itemsize, stats, bins=bins, n_classes=n_classes,
        feature_tile=feature_tile, path=path, device_bytes=device_bytes, weighted=weighted,
    )
    return sum(terms.values())


def merge_terms(
    stats: tuple[StatLike, ...],
    n_features: int,
    split_every: int,
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> dict[str, int]:
    """The terms of :func:`merge_task_bytes`, by name (for ``Plan.explain``)."""
    prints = [footprint(s) for s in stats]
    states = [f.state(n_features, bins, n_classes, feature_tile) for f in prints]
    total = sum(states)
    return {
        "input states": split_every * total,
        # the old running result stays alive until the new one is complete
        "running results": 2 * total,
        "temporaries": max((f.merge_temporaries * b for f, b in zip(prints, states, strict=True)), default=0),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def merge_task_bytes(
    stats: tuple[StatLike, ...],
    n_features: int,
    split_every: int,
    *,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> int:
    """Project the peak bytes of one merge task folding ``split_every`` fused states: inputs, old and new results, temporaries."""
    terms = merge_terms(
        stats, n_features, split_every, bins=bins, n_classes=n_classes, feature_tile=feature_tile
    )
    return sum(terms.values())
