"""The memory-aware planner: chunk rows, merge fan-in and feature tiles that fit a worker, and the device of a batch."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daskbatch._common import strict_int
from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.errors import PlanError
from daskbatch.planning.plan import (
    DEFAULT_STATISTICS,
    READ_BUFFERS,
    STATISTICS,
    Plan,
    Resources,
    StatLike,
    budget_bytes,
    budget_formula,
    footprint,
    format_bytes,
    merge_task_bytes,
    projected_task_bytes,
    stat_name,
    state_bytes,
)
from daskbatch.stats.declaration import Footprint
from daskbatch.stats.kernels import INT32_ROWS
from daskbatch.stats.sketch_windows import WINDOWED_FOOTPRINTS, window_of

__all__ = ["CPU_BYTES_PER_S", "GPU_BATCH_OVERHEAD_S", "HOST_TO_DEVICE_BYTES_PER_S", "DeviceChoice", "choose_device",
           "gpu_min_batch_bytes", "plan_chunks", "plan_dropping_sketch", "plan_task_rows", "sketch_in_plan"]

MIN_SPLIT_EVERY = 2


def plan_chunks(
    shape: tuple[int, ...],
    itemsize: int,
    storage_chunks: tuple[int, ...],
    resources: Resources,
    *,
    stats: tuple[StatLike, ...] | list[StatLike] = DEFAULT_STATISTICS,
    bins: int = STATISTIC_DEFAULTS["bins"],
    n_classes: int | None = None,
    split_every: int | None = None,
    memory_fraction: float | None = None,
    reserved_bytes: int | None = None,
    target_chunk_bytes: int | None = None,
    dtype: str | None = None,
    compiled_kernels: bool | None = None,
    weighted: bool = False,
    read_ahead_blocks: int = 0,
) -> Plan:
    """Plan chunk rows, merge fan-in and feature tiles for a ``(rows, D)`` input (pure); PlanError when nothing fits."""
    stats_t = _check_inputs(shape, itemsize, storage_chunks, stats, bins, n_classes)
    n_rows, n_features = int(shape[0]), int(shape[1])
    # read_ahead_blocks: the blocks each worker process's reader fetches ahead from an object store. They wait
    # decoded (while read, with their READ_BUFFERS) beside the tasks, which share them: each counts its part.
    # A label's blocks are read ahead together, up to one block of x's bytes (BlockReader's span_bytes).
    blocks_ahead = read_ahead_blocks * (1 + READ_BUFFERS) + (1 if read_ahead_blocks else 0)
    ahead = blocks_ahead * itemsize * n_features / resources.threads_per_worker
    storage_rows = max(1, min(int(storage_chunks[0]), n_rows))
    settings = _settings(
        split_every=split_every, memory_fraction=memory_fraction, reserved_bytes=reserved_bytes,
        target_chunk_bytes=target_chunk_bytes, compiled_kernels=compiled_kernels,
    )
    memory_fraction, reserved_bytes = settings["memory_fraction"], int(settings["reserved_bytes"])
    target_chunk_bytes = int(settings["target_chunk_bytes"])
    se0 = strict_int(settings["split_every"], "split_every", minimum=MIN_SPLIT_EVERY)
    # A fan-in above the number of blocks merges them all at once, as that number does: the search
    # below starts there, so a huge split_every costs nothing (blocks are whole storage chunks).
    se_top = max(MIN_SPLIT_EVERY, min(se0, -(-n_rows // storage_rows)))
    if not 0 < memory_fraction <= 1:
        raise ValueError(
            f"daskbatch.memory-fraction must be a number in (0, 1] (the share of a worker's memory one task "
            f"may plan to use), got {memory_fraction!r}"
        )
    formula = budget_formula(resources, memory_fraction, reserved_bytes)
    budget = budget_bytes(resources, memory_fraction, reserved_bytes)
    if budget <= 0:
        # A negative byte count means nothing to a user: say which side of the formula is short.
        share = budget + reserved_bytes
        raise PlanError(
            f"no per-task budget is left: {formula.rsplit(' - ', 1)[0]} = {format_bytes(max(share, 0))} per task, "
            f"not more than the {format_bytes(reserved_bytes)} reserved per task (daskbatch.reserved-memory); "
            "raise --memory or lower --threads"
        )
    compiled = settings["compiled_kernels"]
    path = ("gpu-compiled" if resources.device == "gpu" else "compiled") if compiled else "array-api"
    kw: dict[str, Any] = {"bins": bins, "n_classes": n_classes}
    notes: list[str] = []

    def _chunk_bytes(rows: int, feature_tile: int | None) -> int:
        """Project a chunk task of ``rows`` rows (with its share of the blocks read ahead)."""
        return projected_task_bytes(
            rows, n_features, itemsize, stats_t, feature_tile=feature_tile, path=path,
            device_bytes=resources.device_memory_bytes, weighted=weighted, **kw
        ) + math.ceil(ahead * rows)

    def _merge_fits(fan_in: int, feature_tile: int | None = None) -> bool:
        """Whether a merge task of ``fan_in`` states fits the budget."""
        return merge_task_bytes(stats_t, n_features, fan_in, feature_tile=feature_tile, **kw) <= budget

    # Merge fan-in and feature tiles: states must fit split_every + 1 (+ temporaries) times.
    tile: int | None = None
    se = MIN_SPLIT_EVERY
    if _merge_fits(se):
        se = _last_fitting(se, se_top, _merge_fits)
    else:
        if "cov" not in map(stat_name, stats_t) or n_features < 2:  # the pairwise covariance plans as a footprint
            raise _states_error(stats_t, se, n_features, budget, formula, kw)

        def tile_fits(t: int) -> bool:
            """Whether tiles ``t`` wide fit a merge task and a one-storage-chunk task."""
            return _merge_fits(se, t) and _chunk_bytes(min(storage_rows, n_rows), t) <= budget

        if not _merge_fits(se, 1):
            raise _states_error(stats_t, se, n_features, budget, formula, kw)
        if not tile_fits(1):  # the merges fit in tiles: it is one storage chunk that does not
            raise _chunk_error(storage_rows, n_rows, n_features, itemsize, _chunk_bytes(storage_rows, 1), budget,
                               formula)
        tile = _last_fitting(1, n_features - 1, tile_fits)
        cov_full = state_bytes("cov", n_features)
        notes.append(
            f"the {n_features:,} x {n_features:,} co-moment state ({format_bytes(cov_full)}) "
            f"does not fit a merge task even with split_every {se}: co-moments are planned "
            f"in feature tiles of {tile:,}"
        )
    if se != se_top:
        notes.append(f"split_every lowered from {se0} to {se} so that a merge task fits")

    if n_rows == 0:
        chunk_rows, limited_by = 0, "data"
    else:
        need = _chunk_bytes(storage_rows, tile)
        if need > budget:
            raise _chunk_error(storage_rows, n_rows, n_features, itemsize, need, budget, formula)
        chunk_rows, limited_by = _choose_rows(
            n_rows, storage_rows, n_features * itemsize, lambda rows: _chunk_bytes(rows, tile), budget,
            target_chunk_bytes, resources.total_threads,
        )
    n_chunks = max(1, math.ceil(n_rows / chunk_rows)) if chunk_rows else 1
    n_tiles = math.ceil(n_features / tile) if tile else 0
    n_tile_pairs = n_tiles * (n_tiles + 1) // 2
    trees = n_tile_pairs + (1 if set(map(stat_name, stats_t)) - {"cov"} else 0) if tile else 1
    return Plan(
        shape=(n_rows, n_features), itemsize=itemsize, dtype=dtype,
        storage_chunks=(int(storage_chunks[0]), int(storage_chunks[1])), stats=stats_t,
        bins=bins, n_classes=n_classes, resources=resources, memory_fraction=memory_fraction,
        reserved_bytes=reserved_bytes, target_chunk_bytes=target_chunk_bytes,
        budget_bytes=budget, chunk_rows=chunk_rows, n_chunks=n_chunks, split_every=se,
        feature_tile=tile, n_tile_pairs=n_tile_pairs,
        states_bytes=sum(state_bytes(s, n_features, feature_tile=tile, **kw) for s in stats_t),
        chunk_task_bytes=_chunk_bytes(chunk_rows, tile),
        merge_task_bytes=merge_task_bytes(stats_t, n_features, se, feature_tile=tile, **kw),
        n_tasks=trees * _tree_tasks(n_chunks, se), limited_by=limited_by, notes=tuple(notes),
        kernel_path=path, weighted=weighted, read_ahead_bytes=math.ceil(ahead * chunk_rows),
    )


def _settings(**given: Any) -> dict[str, Any]:
    """The planner's settings: those given, the rest from ``dask.config`` (defaults: ``daskbatch.yaml``)."""
    if None not in given.values():
        return given
    from daskbatch import config  # lazy: dask (the settings of daskbatch.yaml and their overrides)

    return {**config.planner_settings(), **{k: v for k, v in given.items() if v is not None}}


def _check_inputs(
    shape: tuple[int, ...],
    itemsize: int,
    storage_chunks: tuple[int, ...],
    stats: tuple[StatLike, ...] | list[StatLike],
    bins: int,
    n_classes: int | None,
) -> tuple[StatLike, ...]:
    """Validate the arguments of :func:`plan_chunks`; return the statistics in canonical order."""
    if len(shape) != 2 or any(int(n) < 0 for n in shape):
        raise ValueError(f"expected a 2-D (samples x features) shape, got {tuple(shape)}")
    if len(storage_chunks) != 2 or any(int(c) < 1 for c in storage_chunks):
        raise ValueError(f"storage chunks must be 2 positive ints, got {tuple(storage_chunks)}")
    if not 1 <= int(itemsize) <= 16:
        raise ValueError(f"itemsize must be between 1 and 16 bytes, got {itemsize}")
    unknown = [s for s in stats if not isinstance(s, Footprint) and s not in STATISTICS]
    if unknown or not stats:
        raise ValueError(
            f"unknown or no statistics {unknown or list(stats)}; choose from {', '.join(STATISTICS)} "
            "(or pass a statistic's Footprint)"
        )
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    for stat in stats:
        if footprint(stat).needs_classes and (n_classes is None or n_classes < 1):
            raise ValueError(
                f"statistic {stat_name(stat)!r} needs the number of label classes (n_classes=K; --n-classes K "
                f"on the command line), got {n_classes}"
            )
    # Built-in statistics in their canonical order, then a user's in the order given.
    return tuple(s for s in STATISTICS if s in stats) + tuple(s for s in stats if isinstance(s, Footprint))


def _last_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """Largest ``k`` in ``[lo, hi]`` with ``fits(k)``, given ``fits(lo)`` and that what fits grows no larger with ``k``."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _choose_rows(
    n_rows: int,
    storage_rows: int,
    row_bytes: int,
    chunk_bytes: Any,
    budget: int,
    target_bytes: int,
    total_threads: int,
) -> tuple[int, str]:
    """Chunk rows (a multiple of ``storage_rows`` or ``n_rows``) and what limited them."""
    k_max = math.ceil(n_rows / storage_rows)

    def rows(k: int) -> int:
        return min(k * storage_rows, n_rows)

    limits = {  # on a tie the first name is reported, so the most telling comes first
        "data": k_max,
        "memory budget": _last_fitting(1, k_max, lambda k: chunk_bytes(rows(k)) <= budget),
        # ceil(k_max / k) >= 2 x threads keeps every thread busy with a spare chunk each
        "parallelism": max(1, k_max // (2 * total_threads)),
        "target chunk size": max(1, target_bytes // max(1, storage_rows * row_bytes)),
    }
    k = min(limits.values())
    limited_by = next(name for name, v in limits.items() if v == k)
    return rows(k), limited_by


def plan_task_rows(
    n_rows: int,
    unit_rows: int,
    input_row_bytes: int,
    task_row_bytes: int,
    resources: Resources,
    *,
    read_rows: int | None = None,
    max_units: int | None = None,
    memory_fraction: float | None = None,
    reserved_bytes: int | None = None,
    target_chunk_bytes: int | None = None,
) -> int:
    """Plan the rows of a row-wise task (:func:`daskbatch.transform`) by :func:`plan_chunks`' rules, in whole units."""
    # Tasks are sized here so that a tiny output chunk does not make a tiny task: at least one unit (one
    # output chunk, even beyond the budget: the user chose it), a multiple of read_rows when such a task
    # fits, and at most max_units output chunks when given (a stop waits for running tasks).
    settings = _settings(memory_fraction=memory_fraction, reserved_bytes=reserved_bytes,
                         target_chunk_bytes=target_chunk_bytes)
    budget = budget_bytes(resources, float(settings["memory_fraction"]), int(settings["reserved_bytes"]))
    out_rows = unit = max(1, min(int(unit_rows), n_rows))
    if read_rows and read_rows > 0:
        # A task that starts and ends on input reads decodes no stored chunk twice, when such a task fits.
        both = math.lcm(unit, int(read_rows))
        if both < n_rows and both * task_row_bytes <= budget:
            unit = both
    if n_rows <= unit:
        return max(n_rows, 0)
    rows, _ = _choose_rows(n_rows, unit, input_row_bytes, lambda r: r * task_row_bytes, budget,
                           int(settings["target_chunk_bytes"]), resources.total_threads)
    if max_units:
        rows = min(rows, max(unit, (max_units * out_rows) // unit * unit))
    return rows


def _tree_tasks(n_chunks: int, split_every: int) -> int:
    """Chunk tasks + merge tasks of a ``split_every``-ary tree over ``n_chunks`` leaves."""
    total, n = n_chunks, n_chunks
    while n > 1:
        n = math.ceil(n / split_every)
        total += n
    return total


def _chunk_error(storage_rows: int, n_rows: int, n_features: int, itemsize: int, need: int, budget: int,
                 formula: str) -> PlanError:
    """The refusal of a storage chunk that no task can hold: memory or smaller chunks keep the answer."""
    one = "one storage chunk" if storage_rows < n_rows else "the whole array"
    return PlanError(
        f"a {storage_rows:,}-row chunk ({one}, {n_features:,} features x {itemsize} B) "
        f"needs {format_bytes(need)} > budget {format_bytes(budget)} ({formula}); "
        "use --memory or rechunk the store to fewer rows per chunk"
    )


def _states_error(
    stats: tuple[StatLike, ...],
    split_every: int,
    n_features: int,
    budget: int,
    formula: str,
    kw: dict[str, Any],
) -> PlanError:
    """The refusal of states that no merge task can hold; it names the largest, and only memory keeps the answer."""
    sizes = {stat_name(s): state_bytes(s, n_features, **kw) for s in stats}
    states = sum(sizes.values())
    big = max(sizes, key=lambda s: sizes[s])
    return PlanError(
        f"merging {split_every + 1} states of {format_bytes(states)} "
        f"(largest: '{big}' {format_bytes(sizes[big])} for {n_features:,} features) needs "
        f"{format_bytes(merge_task_bytes(stats, n_features, split_every, **kw))} > budget "
        f"{format_bytes(budget)} ({formula}); raise --memory"
    )


def plan_dropping_sketch(
    make: Callable[[tuple[Any, ...]], Plan], stats: tuple[Any, ...], *, optional: bool
) -> tuple[Plan, tuple[Any, ...]]:
    """Plan with ``make(stats)``; where that does not fit, with a windowed sketch, or without an ``optional`` one."""
    # The sketch keeps every bucket by default (221 kB a feature); where that does not fit, the first of
    # WINDOWS that fits (2,048 buckets per sign in int64 down to 512 in int32, the narrower ones with buckets
    # twice as wide) takes its place, its footprint standing for "sketch" in the statistics returned. int32
    # counts are planned only below 2**31 rows. Only an optional sketch (it only chooses histogram ranges)
    # is left out, when no window fits either: ranges then come from each feature's min and max.
    try:
        return make(stats), stats
    except PlanError as err:
        if "sketch" not in stats:
            raise
        first = err
    # Wide data: the sketch with a window of buckets per sign, the widest that fits.
    for footprint_ in WINDOWED_FOOTPRINTS:
        windowed = tuple(footprint_ if s == "sketch" else s for s in stats)
        try:
            chosen = make(windowed)
        except PlanError:
            continue
        if window_of(footprint_)[1] == "int32" and chosen.shape[0] > INT32_ROWS:  # type: ignore[index]
            continue
        return chosen, windowed
    if not optional:
        raise first
    without = tuple(s for s in stats if s != "sketch")
    try:
        return make(without), without
    except PlanError:
        raise first from None  # the sketch was not the problem: the first message says what is


def sketch_in_plan(planned: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[int, str, float] | None]:
    """``planned`` with ``"sketch"`` for a windowed sketch's footprint, and that sketch's (window, count dtype, alpha)."""
    chosen = next((w for w in map(window_of, planned) if w is not None), None)
    return tuple("sketch" if window_of(s) is not None else s for s in planned), chosen


# -- where device="auto" runs a batch of map_batches: the GPU when it passed the preflight and the batch pays
# for its copy. A coarse cost model: a batch of B bytes costs the CPU B / CPU_BYTES_PER_S on one thread; the GPU
# a fixed GPU_BATCH_OVERHEAD_S plus the round trip over the host-to-device link, which the threads of one worker
# share (its own compute taken as negligible). Heavier functions pay earlier: daskbatch.gpu-min-batch-bytes
# overrides the threshold.

#: What one core streams through a vectorised float64 expression (a few NumPy passes over the batch).
CPU_BYTES_PER_S = 1.0e9
#: Pageable host memory to the GPU over PCIe 4 x16, as measured rather than as advertised.
HOST_TO_DEVICE_BYTES_PER_S = 12.0e9
#: Per-batch cost of the GPU that does not shrink with the batch: allocation, kernel launches, synchronisation.
GPU_BATCH_OVERHEAD_S = 2.0e-3


def gpu_min_batch_bytes(resources: Resources) -> int | None:
    """The smallest batch (input bytes) for which the GPU beats one CPU thread; None when it never pays."""
    # The output is assumed as large as the input: it crosses the link once each way.
    link_s_per_byte = 2 * resources.threads_per_worker / HOST_TO_DEVICE_BYTES_PER_S
    saved_s_per_byte = 1 / CPU_BYTES_PER_S - link_s_per_byte
    if saved_s_per_byte <= 0:
        return None
    return int(round(GPU_BATCH_OVERHEAD_S / saved_s_per_byte))


@dataclass(frozen=True)
class DeviceChoice:
    """Where ``device="auto"`` runs the batches (``device``), and why in one line (``reason``)."""

    device: str
    reason: str


def choose_device(
    batch_bytes: int, resources: Resources | None, *, gpu_problem: str | None, min_bytes: int | None = None
) -> DeviceChoice:
    """The GPU when it works (``gpu_problem`` None) and a batch of ``batch_bytes`` pays for its transfer, else the CPU."""
    if gpu_problem is not None:
        return DeviceChoice("cpu", f"the GPU preflight failed: {gpu_problem}")
    batch = format_bytes(batch_bytes)
    if min_bytes is None:
        if resources is None:
            raise ValueError("choose_device needs resources (or min_bytes) when the GPU works")
        min_bytes = gpu_min_batch_bytes(resources)
        if min_bytes is None:
            return DeviceChoice("cpu", (
                f"the GPU never pays for its transfer with {resources.threads_per_worker} threads sharing its link "
                "(set daskbatch.gpu-min-batch-bytes to choose it)"
            ))
        source = "planned"
    else:
        source = "daskbatch.gpu-min-batch-bytes"
    if batch_bytes >= min_bytes:
        return DeviceChoice("gpu", f"batches of {batch} reach the {source} threshold of {format_bytes(min_bytes)}")
    return DeviceChoice("cpu", f"batches of {batch} are below the {source} threshold of {format_bytes(min_bytes)}")
