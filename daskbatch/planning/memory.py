"""How many bytes one task of the statistics engine holds at its peak (the planner's model).

Pure (stdlib only). The numbers in the tables below describe the chunk kernels
of :mod:`daskbatch.stats`; they are checked against ``tracemalloc``
measurements in ``tests/test_plan_memory.py`` (projected must stay between
1x and 2x of measured), so tune them there when a kernel changes.

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
  of the hungriest kernel (:func:`gpu_kernel_bytes`: the moments' per-group
  partials, the co-moments' partials and float64 centring buffer of at most
  :data:`GPU_CENTRE_BUFFER_BYTES`) and the states; the array-API statistics
  without a GPU kernel (sketch, class moments) keep their array-API tables;
* one merge task holds ``split_every`` input states, the old and new running results and
  the largest statistic's merge temporaries (``MERGE_TEMPORARIES``); every task
  also carries ``TASK_OVERHEAD_BYTES`` of small vectors and Python objects.
"""

from __future__ import annotations

__all__ = [
    "FLOAT64_COPIES",
    "GPU_CENTRE_BUFFER_BYTES",
    "GPU_MAX_GRID_Y",
    "GPU_MIN_GROUP_ROWS",
    "GPU_TARGET_THREADS",
    "MERGE_TEMPORARIES",
    "PATHS",
    "READ_BUFFERS",
    "ROW_TEMPORARIES",
    "COMOMENT_BLOCK_ROWS",
    "DEFAULT_STATISTICS",
    "STATE_COPIES",
    "SKETCH_SLOTS",
    "STATISTICS",
    "TASK_OVERHEAD_BYTES",
    "TEMPORARIES",
    "chunk_task_terms",
    "gpu_kernel_bytes",
    "merge_task_bytes",
    "projected_task_bytes",
    "state_bytes",
]

#: Statistics the engine knows, in the order they are reported.
STATISTICS: tuple[str, ...] = ("moments", "cov", "hist", "mi", "class_moments", "sketch")

#: What is planned when no statistics are named (``describe``'s default).
DEFAULT_STATISTICS: tuple[str, ...] = ("moments", "cov", "hist", "mi")

#: int64 counts per feature of the default quantile sketch (``Sketch().n_slots + 1``:
#: both signs' log and overflow buckets, zero, ±inf and NaN; a test keeps the two equal).
SKETCH_SLOTS = 27638

#: The ways a chunk kernel runs: "compiled" = the numba CPU loops of
#: :mod:`daskbatch.kernels` (NumPy chunks, the default on CPU); "array-api" = the
#: reference array-API code (array_api_strict, CuPy without numba-cuda, or
#: ``daskbatch.kernels: false``); "gpu-compiled" = the numba-cuda kernels on CuPy
#: chunks (device memory; the default on GPU).
PATHS: tuple[str, ...] = ("compiled", "array-api", "gpu-compiled")

#: Launch shape and buffer cap of the GPU kernels (``daskbatch.stats.kernels._gpu``'s
#: ``TARGET_THREADS``, ``MIN_GROUP_ROWS``, ``MAX_GRID_Y`` and ``CENTRE_BUFFER_BYTES``; a test keeps them equal).
GPU_TARGET_THREADS = 2**19
GPU_MIN_GROUP_ROWS = 32
GPU_MAX_GRID_Y = 65_535
GPU_CENTRE_BUFFER_BYTES = 256 * 2**20

#: Float64 copies of the chunk a kernel makes (the compiled co-moments centre
#: :data:`COMOMENT_BLOCK_ROWS` rows at a time instead: see ``chunk_task_terms``).
FLOAT64_COPIES: dict[str, dict[str, int]] = {
    "compiled": {"moments": 0, "cov": 0, "hist": 0, "mi": 0, "class_moments": 1, "sketch": 0},
    "array-api": {"moments": 1, "cov": 1, "hist": 1, "mi": 1, "class_moments": 1, "sketch": 1},
    # The GPU kernels read the block's own dtype; sketch and class moments have no GPU kernel.
    "gpu-compiled": {"moments": 0, "cov": 0, "hist": 0, "mi": 0, "class_moments": 1, "sketch": 1},
}

#: Rows the compiled co-moment kernel centres into one float64 buffer at a time
#: (``daskbatch.kernels.COMOMENT_BLOCK_ROWS``; a test keeps the two equal).
COMOMENT_BLOCK_ROWS = 4096

#: Further chunk-sized (``rows x D``) temporaries alive at a kernel's peak, by dtype.
#: array-api, measured with tracemalloc on NumPy (tests/test_plan_memory.py): moments peak at
#: ~3-4 float64 + 2 bool per element, co-moments at 4 float64, histograms at ~36 B; the
#: table keeps a little margin. The compiled loops work element by element: none.
TEMPORARIES: dict[str, dict[str, dict[str, int]]] = {
    "compiled": {
        "moments": {}, "cov": {}, "hist": {}, "mi": {}, "class_moments": {"float64": 3, "bool": 2}, "sketch": {},
    },
    "array-api": {
        "moments": {"float64": 4, "bool": 3},  # shifted values, deviations, powers, casts; masks
        "cov": {"float64": 4},  # zeros, shifted and centred blocks, one expression temporary
        "hist": {"float64": 2, "int64": 3, "bool": 3},  # scaled values, slot/flat index, masks
        "mi": {"float64": 2, "int64": 3, "bool": 3},  # as hist; labels are counted apart
        # class_moments has no compiled loop (both paths): the class-sorted copy of the block
        # is counted in FLOAT64_COPIES, these are one class's float64 cast, deviations and
        # squares and its finite mask, for the worst case of a block holding a single class.
        "class_moments": {"float64": 3, "bool": 2},
        "sketch": {"float64": 3, "int64": 3, "bool": 3},  # magnitudes, logs, keys, slots; masks
    },
    # Their own buffers are counted by gpu_kernel_bytes (they do not grow with the whole chunk).
    "gpu-compiled": {
        "moments": {}, "cov": {}, "hist": {}, "mi": {},
        "class_moments": {"float64": 3, "bool": 2}, "sketch": {"float64": 3, "int64": 3, "bool": 3},
    },
}

#: Bytes per row of row-length temporaries (co-moments: the complete-row mask, plus its casts on
#: the array-API path; mi: the int64 copy of the labels, their searchsorted and clipped class
#: columns, the class values taken back and the bool mask that checks them), on top of the
#: input labels.
ROW_TEMPORARIES: dict[str, dict[str, int]] = {
    "compiled": {"moments": 0, "cov": 1, "hist": 0, "mi": 25, "class_moments": 24, "sketch": 0},
    "array-api": {"moments": 0, "cov": 16, "hist": 0, "mi": 32, "class_moments": 24, "sketch": 0},
    # cov: the incomplete-row flags (uint8); mi: int64 labels, their searchsorted, clipped and
    # taken-back copies and the bool check of label_codes, plus the label block itself (int32).
    "gpu-compiled": {"moments": 0, "cov": 1, "hist": 0, "mi": 40, "class_moments": 24, "sketch": 0},
}

#: Transient state-sized arrays a kernel builds next to its state: the GEMM result and
#: the outer-product correction of co-moments; the bincount output and its cast for histograms.
STATE_COPIES: dict[str, dict[str, int]] = {
    "compiled": {"moments": 0, "cov": 2, "hist": 0, "mi": 0, "class_moments": 1, "sketch": 0},
    "array-api": {"moments": 0, "cov": 2, "hist": 1, "mi": 1, "class_moments": 1, "sketch": 1},
    # SYRK adds into the state in place; the histogram kernels count into the state.
    "gpu-compiled": {"moments": 0, "cov": 0, "hist": 0, "mi": 0, "class_moments": 1, "sketch": 1},
}

#: State-sized temporaries of one pairwise merge on top of the inputs and the old and new
#: running results (co-moments: the outer product and its scaled copy; moments: ~20 vectors).
MERGE_TEMPORARIES: dict[str, int] = {"moments": 1, "cov": 3, "hist": 0, "mi": 0, "class_moments": 2, "sketch": 0}

#: Buffers of reading one block from a compressed Zarr store, beyond the block itself, in
#: units of the raw block: the compressed bytes and the decoded chunk (tracemalloc: ~3x raw
#: at the read's peak). Usually they are freed when the read returns, but now and then zarr
#: still holds them while the kernels run (seen with tracemalloc, garbage collector on or off),
#: so the model counts them alongside the kernels' arrays.
READ_BUFFERS = 2

#: Small arrays (length-D vectors) and Python objects every task allocates besides the above.
TASK_OVERHEAD_BYTES = 128 * 2**10

_ITEMSIZE = {"float64": 8, "int64": 8, "bool": 1}
_LABEL_ITEMSIZE = 8  # class labels arrive as int64, one per row (only these statistics read them)
_BY_LABEL = ("mi", "class_moments")


def state_bytes(
    stat: str,
    n_features: int,
    *,
    bins: int = 64,
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> int:
    """Bytes of one state of ``stat`` over ``n_features`` features.

    Parameters
    ----------
    stat : {"moments", "cov", "hist", "mi", "class_moments", "sketch"}
        Statistic name.
    n_features : int
        Features (columns) of the input.
    bins : int, default 64
        Regular bins per feature (``hist`` and ``mi`` add under/overflow and NaN bins).
    n_classes : int or None
        Classes of the label (``mi`` and ``class_moments`` only).
    feature_tile : int or None
        Tile width when co-moments are computed per pair of feature tiles; the
        state is then that of one tile pair.

    Returns
    -------
    int
        Bytes.
    """
    d = n_features
    if stat == "moments":
        return 11 * d * 8  # n, mean, m2, m3, m4, min, max, nan/inf counts... ~11 vectors
    if stat == "cov":
        if feature_tile is not None and feature_tile < d:
            t = feature_tile
            return t * t * 8 + 2 * (2 * t) * 8  # tile-pair block + two vectors for each side
        return d * d * 8 + 2 * d * 8
    if stat == "hist":
        return d * (bins + 3) * 8
    if stat == "mi":
        if n_classes is None:
            raise ValueError("statistic 'mi' needs n_classes (the number of label classes)")
        return d * (bins + 3) * n_classes * 8
    if stat == "class_moments":
        if n_classes is None:
            raise ValueError("statistic 'class_moments' needs n_classes (the number of label classes)")
        return 4 * d * n_classes * 8  # n, shift, mean, m2 per (feature, class)
    if stat == "sketch":
        return d * SKETCH_SLOTS * 8 + 2 * d * 8  # counts, finite extrema
    raise ValueError(f"unknown statistic {stat!r}; expected one of {', '.join(STATISTICS)}")


def _gpu_group_features(rows: int, n_features: int) -> int:
    """Bound on ``groups x D`` of a GPU first-pass launch: ``groups <= min(ceil(rows / 32), max(1, 2**19 // D), 65,535)``.

    (``_gpu.row_groups`` gives at least 32 rows and at least ``rows / target``
    rows to a group, and makes at most the grid's 65,535 groups.) The bound, unlike the exact count, never falls as rows
    or features grow, so the planner's searches over rows stay valid.
    """
    return min(
        -(-rows // GPU_MIN_GROUP_ROWS) * n_features,
        max(n_features, GPU_TARGET_THREADS),
        GPU_MAX_GRID_Y * n_features,
    )


def gpu_kernel_bytes(stat: str, rows: int, n_features: int) -> int:
    """Device bytes of the GPU kernel's own buffers for ``stat`` on a ``rows x n_features`` chunk (states apart).

    * moments: float64 partials (4 x groups x D) and int64 counts (3 x groups x D);
    * cov: float64 partials (groups x D) and row counts, and the float64
      centring buffer of ``min(rows, GPU_CENTRE_BUFFER_BYTES / 8D)`` rows;
    * hist, mi: only length-D vectors (the counts are the state);
    * sketch, class moments: no GPU kernel (their array-API temporaries are counted apart).
    """
    g_d = _gpu_group_features(rows, n_features)
    if stat == "moments":
        return 7 * 8 * g_d
    if stat == "cov":
        centre = min(rows * n_features * 8, max(8 * n_features, GPU_CENTRE_BUFFER_BYTES))
        return 8 * g_d + 8 * -(-rows // GPU_MIN_GROUP_ROWS) + centre
    return 0


def chunk_task_terms(
    rows: int,
    n_features: int,
    itemsize: int,
    stats: tuple[str, ...],
    *,
    bins: int = 64,
    n_classes: int | None = None,
    feature_tile: int | None = None,
    path: str = "compiled",
) -> dict[str, int]:
    """The terms of :func:`projected_task_bytes`, by name (for ``Plan.explain``)."""
    if path not in PATHS:
        raise ValueError(f"unknown kernel path {path!r}; expected one of {PATHS}")
    elems = rows * n_features
    temps = {
        s: elems * sum(_ITEMSIZE[k] * n for k, n in TEMPORARIES[path][s].items()) for s in stats
    }
    states = {
        s: state_bytes(s, n_features, bins=bins, n_classes=n_classes, feature_tile=feature_tile)
        for s in stats
    }
    transient = {
        s: temps[s] + rows * ROW_TEMPORARIES[path][s] + STATE_COPIES[path][s] * states[s]
        for s in stats
    }
    # Statistics run one after another, so one float64 copy is alive at a time at most.
    copies = max((FLOAT64_COPIES[path][s] for s in stats), default=0)
    if path == "compiled" and "cov" in stats:
        transient["cov"] += min(rows, COMOMENT_BLOCK_ROWS) * n_features * 8  # the centring buffer
    if path == "gpu-compiled":
        for s in stats:
            transient[s] += gpu_kernel_bytes(s, rows, n_features)
    return {
        "raw": elems * itemsize,
        # A GPU task gets its block decoded (on the host): device memory holds no read buffers.
        "read buffers": 0 if path == "gpu-compiled" else READ_BUFFERS * elems * itemsize,
        "float64 copy": copies * elems * 8,
        "labels": rows * _LABEL_ITEMSIZE if set(_BY_LABEL) & set(stats) else 0,
        "temporaries": max(transient.values(), default=0),
        "states": sum(states.values()),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def projected_task_bytes(
    rows: int,
    n_features: int,
    itemsize: int,
    stats: tuple[str, ...],
    *,
    bins: int = 64,
    n_classes: int | None = None,
    feature_tile: int | None = None,
    path: str = "compiled",
) -> int:
    """Projected peak bytes of one fused chunk task over ``rows x n_features`` input.

    Parameters
    ----------
    rows, n_features : int
        Shape of the chunk.
    itemsize : int
        Bytes per input element (1 to 8).
    stats : tuple of str
        Statistics computed together in the task.
    bins, n_classes, feature_tile
        As in :func:`state_bytes`.
    path : {"compiled", "array-api", "gpu-compiled"}, default "compiled"
        Which kernels run the chunk (see :data:`PATHS`); "gpu-compiled" counts device memory.

    Returns
    -------
    int
        Bytes: raw block + read buffers + float64 copy + (labels) + the largest
        statistic's temporaries + all states + a fixed overhead.
    """
    terms = chunk_task_terms(
        rows, n_features, itemsize, stats, bins=bins, n_classes=n_classes,
        feature_tile=feature_tile, path=path,
    )
    return sum(terms.values())


def merge_terms(
    stats: tuple[str, ...],
    n_features: int,
    split_every: int,
    *,
    bins: int = 64,
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> dict[str, int]:
    """The terms of :func:`merge_task_bytes`, by name (for ``Plan.explain``)."""
    states = {
        s: state_bytes(s, n_features, bins=bins, n_classes=n_classes, feature_tile=feature_tile)
        for s in stats
    }
    total = sum(states.values())
    return {
        "input states": split_every * total,
        # the old running result stays alive until the new one is complete
        "running results": 2 * total,
        "temporaries": max((MERGE_TEMPORARIES[s] * b for s, b in states.items()), default=0),
        "overhead": TASK_OVERHEAD_BYTES,
    }


def merge_task_bytes(
    stats: tuple[str, ...],
    n_features: int,
    split_every: int,
    *,
    bins: int = 64,
    n_classes: int | None = None,
    feature_tile: int | None = None,
) -> int:
    """Projected peak bytes of one merge task folding ``split_every`` fused states.

    Parameters
    ----------
    stats : tuple of str
        Statistics whose states travel together.
    n_features : int
        Features of the input.
    split_every : int
        States merged by one task.
    bins, n_classes, feature_tile
        As in :func:`state_bytes`.

    Returns
    -------
    int
        Bytes: ``split_every`` inputs + the old and new running results + the
        largest statistic's merge temporaries (statistics merge one after another).
    """
    terms = merge_terms(
        stats, n_features, split_every, bins=bins, n_classes=n_classes, feature_tile=feature_tile
    )
    return sum(terms.values())
