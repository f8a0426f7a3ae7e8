"""Host side of the GPU kernels: launch shapes, device buffers and the co-moments' SYRK.

The kernels of :mod:`daskbatch.stats.kernels._cuda` take CuPy arrays (the GPU path
of :func:`daskbatch.stats.kernels.moments` and friends) or numba device arrays (the
tests, under numba's CUDA simulator). A :class:`_Backend` hides the
difference: where buffers come from (CuPy's memory pool, or RMM when CuPy is
set to allocate from it, so buffers are reused from block to block), which
stream the kernels run on (CuPy's current stream, so they are ordered with
the CuPy work around them and with :mod:`daskbatch.stats.kernels._staging`'s
copies) and how results are handed back (CuPy arrays stay on the device).

Nothing here synchronises with the host: a chunk's state is complete when the
stream reaches it, which is when CuPy next reads it.

Launches go through :func:`launch`, which silences numba's low-occupancy
``NumbaPerformanceWarning`` (grids under 128 blocks: the folds of narrow
chunks, every launch on a few dozen features) and nothing else.
"""

from __future__ import annotations

import functools
import importlib
import math
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "CENTRE_SHARE",
    "SHARED_BYTES",
    "centring_rows",
    "comoments",
    "histogram",
    "histogram_layout",
    "launch",
    "moments",
    "row_groups",
]

#: Threads a first-pass launch aims at: enough to fill an H100/H200 a few times over.
TARGET_THREADS = 2**19
#: Fewest rows a thread of a first-pass kernel walks (fewer: the fold costs more than it saves).
MIN_GROUP_ROWS = 32
#: Largest grid y dimension CUDA allows.
MAX_GRID_Y = 65_535
#: Threads per block along the features.
FEATURE_THREADS = 128
#: The co-moments centre a chunk into a float64 buffer and add its ``devᵀ dev`` to the result
#: with one SYRK per buffer-full. The buffer holds the whole chunk (one SYRK) when that is at
#: most 1/CENTRE_SHARE of the card's memory, else as many rows as that share holds
#: (:func:`centring_rows`). The share is of the card's total memory, which the planner is
#: given as ``Resources.device_memory_bytes``: model and kernel size the buffer alike, and
#: the split of a chunk (hence its rounding) does not depend on what else the card holds
#: at the time. 1 GB on a 16 GB card, 5 GB on an 80 GB H100, 8.8 GB on an H200 (a
#: 100,000 x 5,000 float32 chunk in one SYRK).
CENTRE_SHARE = 16
#: Shared memory a histogram block may use for its private counters (the default per-block limit).
SHARED_BYTES = 48 * 2**10
#: Threads of a histogram block, and the blocks a histogram launch aims at.
HIST_THREADS = 256
HIST_TARGET_BLOCKS = 1024
#: Fewest rows a histogram block counts (its flush of private counters must pay off).
HIST_MIN_BLOCK_ROWS = 256


@functools.cache
def _occupancy_warnings() -> tuple[type[Warning], ...]:
    """The NumbaPerformanceWarning classes of numba-cuda and of numba's built-in target, whichever import."""
    found: list[type[Warning]] = []
    for module in ("numba.cuda.core.errors", "numba.core.errors"):
        try:
            found.append(importlib.import_module(module).NumbaPerformanceWarning)
        except (ImportError, AttributeError):
            continue
    return tuple(dict.fromkeys(found))


#: ``warnings.catch_warnings`` swaps the process-wide filter list: launches from several
#: dask threads must not restore each other's copies.
_LAUNCH_LOCK = threading.Lock()


def launch(start: Callable[[], None]) -> None:
    """Call ``start`` (a kernel launch) with numba's low-occupancy warning silenced.

    Small grids are deliberate here (one thread per feature for the folds),
    so the warning says nothing about this code; every other warning,
    including other performance warnings, goes through.

    Parameters
    ----------
    start : callable
        Launches one kernel.
    """
    with _LAUNCH_LOCK, warnings.catch_warnings():
        for category in _occupancy_warnings():
            warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization",
                                    category=category)
        start()


def group_features_bound(rows: int, n_features: int) -> int:
    """Bound ``groups x D`` of a first-pass launch (:func:`row_groups`), for the planner.

    ``row_groups`` gives a group at least ``MIN_GROUP_ROWS`` rows and at least
    ``rows / target`` rows, and makes at most ``MAX_GRID_Y`` groups. The bound,
    unlike the exact count, never falls as rows or features grow, so the
    planner's searches over rows stay valid.

    Parameters
    ----------
    rows : int
        Rows of the chunk.
    n_features : int
        Features of the chunk.

    Returns
    -------
    int
        The bound.
    """
    return min(
        -(-rows // MIN_GROUP_ROWS) * n_features,
        max(n_features, TARGET_THREADS),
        MAX_GRID_Y * n_features,
    )


def moments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the moments kernel's own device buffers: float64 partials (4 x groups x D), int64 counts (3 x).

    Parameters
    ----------
    rows : int
        Rows of the chunk.
    n_features : int
        Features of the chunk.
    device_bytes : int, optional
        The card's total memory (unused: the partials do not depend on it).

    Returns
    -------
    int
        Bytes.
    """
    return 7 * 8 * group_features_bound(rows, n_features)


def centring_rows(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Count the rows the co-moments centre into their float64 buffer at a time (one SYRK each).

    Parameters
    ----------
    rows : int
        Rows of the chunk.
    n_features : int
        Features of the chunk (> 0).
    device_bytes : int, optional
        The card's total memory; None (unknown) holds the whole chunk.

    Returns
    -------
    int
        All ``rows`` when their float64 copy fits in ``device_bytes / CENTRE_SHARE``,
        else as many as fit (at least one).
    """
    if device_bytes is None:
        return max(1, rows)
    return max(1, min(rows, device_bytes // CENTRE_SHARE // (8 * max(n_features, 1))))


def comoments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the co-moments kernel's device buffers: partials, row counts, the float64 centring buffer.

    Parameters
    ----------
    rows : int
        Rows of the chunk.
    n_features : int
        Features of the chunk.
    device_bytes : int, optional
        The card's total memory (see :func:`centring_rows`); None counts a buffer for the whole chunk.

    Returns
    -------
    int
        Bytes.
    """
    centre = centring_rows(rows, n_features, device_bytes) * n_features * 8
    return 8 * group_features_bound(rows, n_features) + 8 * -(-rows // MIN_GROUP_ROWS) + centre


def row_groups(rows: int, n_features: int, rows_per_group: int | None = None) -> tuple[int, int]:
    """Split the rows of an (R, D) chunk (R > 0) into groups for a first-pass kernel.

    Parameters
    ----------
    rows : int
        R.
    n_features : int
        D.
    rows_per_group : int, optional
        Rows of a group; by default chosen from R and D.

    Returns
    -------
    rows_per_group : int
        Rows of each group.
    groups : int
        Number of groups.
    """
    if rows_per_group is None:
        target = max(1, TARGET_THREADS // max(n_features, 1))
        rows_per_group = max(MIN_GROUP_ROWS, math.ceil(rows / target))
    rows_per_group = max(int(rows_per_group), math.ceil(rows / MAX_GRID_Y), 1)
    return rows_per_group, math.ceil(rows / rows_per_group)


def centring_blocks(
    rows: int,
    n_features: int,
    rows_per_group: int | None = None,
    block_rows: int | None = None,
    device_bytes: int | None = None,
) -> tuple[int, int]:
    """Choose the rows the co-moments centre at a time; give the most row groups one block splits into.

    A block has fewer rows than the chunk but may be split into more groups
    (smaller groups reach the thread target sooner), so the group buffer is
    sized for the larger of the two counts.

    Parameters
    ----------
    rows : int
        Rows of the chunk (> 0).
    n_features : int
        Features of the chunk (> 0).
    rows_per_group : int, optional
        As given to :func:`comoments`.
    block_rows : int, optional
        As given to :func:`comoments`; by default :func:`centring_rows`.
    device_bytes : int, optional
        The card's total memory, for :func:`centring_rows`.

    Returns
    -------
    block_rows : int
        Rows of each block but the last.
    groups : int
        The most groups of any block (the full ones and the last).
    """
    if block_rows is None:
        block_rows = centring_rows(rows, n_features, device_bytes)
    block_rows = max(1, min(rows, block_rows))
    last = rows % block_rows or block_rows
    groups = max(row_groups(kb, n_features, rows_per_group)[1] for kb in {block_rows, last})
    return block_rows, groups


def histogram_layout(
    rows: int, n_features: int, bins: int, n_classes: int, shared_bytes: int = SHARED_BYTES
) -> tuple[int, int, int] | None:
    """Lay out the privatised histogram kernel, or None when a tile does not fit.

    A tile of features keeps ``tile * (bins + 3) * n_classes`` uint32 counters
    in shared memory; tiles narrower than 4 features (or all features) read
    too little of each row to be worth it, and the counts go to global memory
    with atomics instead.

    Parameters
    ----------
    rows : int
        Rows of the chunk.
    n_features : int
        Features of the chunk.
    bins : int
        Bins per feature.
    n_classes : int
        Classes per bin.
    shared_bytes : int, default SHARED_BYTES
        Shared memory a block may use.

    Returns
    -------
    tuple of int or None
        ``(tile, lanes, rows_per_block)``, or None.
    """
    per_feature = (bins + 3) * n_classes * 4
    tile = min(32, n_features, shared_bytes // per_feature)
    if tile < min(4, n_features):
        return None
    lanes = max(1, min(HIST_THREADS // tile, rows))
    n_tiles = math.ceil(n_features / tile)
    row_blocks = max(1, min(math.ceil(HIST_TARGET_BLOCKS / n_tiles), math.ceil(rows / HIST_MIN_BLOCK_ROWS)))
    row_blocks = min(row_blocks, MAX_GRID_Y)
    return tile, lanes, math.ceil(rows / row_blocks)


#: Device copies of histogram ranges (:meth:`_Backend.constants`), the most recently used last.
_CONSTANTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_CONSTANTS_LOCK = threading.Lock()
_CONSTANTS_KEPT = 16


@functools.cache
def _card_bytes(device: int) -> int:
    """Total memory of CUDA device ``device`` (asked once: it does not change)."""
    import cupy

    return int(cupy.cuda.Device(device).mem_info[1])


@functools.lru_cache(maxsize=64)
def _numba_stream(device: int, ptr: int) -> Any:
    """numba's handle on the CUDA stream ``ptr`` of ``device``, built once per stream."""
    from numba import cuda

    # CuPy's null stream is the legacy default stream, which numba names apart.
    return cuda.default_stream() if ptr == 0 else cuda.external_stream(ptr)


class _Backend:
    """CuPy arrays on CuPy's current stream."""

    def __init__(self) -> None:
        import cupy
        import cupy.cublas  # a submodule: ``cupy.cublas`` is not there until imported
        from numba import cuda

        self.xp = cupy
        self.cuda = cuda
        self.cublas = cupy.cublas
        # numba would otherwise wait on the stream CuPy names in __cuda_array_interface__
        # before every launch (a host synchronisation); we launch on that very stream.
        self.stream = _numba_stream(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return self.xp.zeros(shape, dtype=dtype)

    def empty(self, shape: Any, dtype: Any) -> Any:
        return self.xp.empty(shape, dtype=dtype)

    def full(self, shape: Any, value: Any, dtype: Any) -> Any:
        return self.xp.full(shape, value, dtype=dtype)

    def arg(self, a: Any) -> Any:
        return self.cuda.as_cuda_array(a, sync=False)

    def launch(self, kernel: Any, grid: Any, block: Any, *args: Any, shared: int = 0) -> None:
        values = [self.arg(a) if hasattr(a, "__cuda_array_interface__") else a for a in args]
        launch(lambda: kernel[grid, block, self.stream, shared](*values))

    def contiguous(self, x: Any) -> Any:
        """``x`` in C order (an F-ordered block would make every load a strided one)."""
        return x if x.flags.c_contiguous else self.xp.ascontiguousarray(x)

    def constants(self, arrays: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        """Device copies of small host arrays, made once per device and content (a copy from pageable memory waits)."""
        key = (self.xp.cuda.Device().id, *((a.dtype.str, a.shape, a.tobytes()) for a in arrays))
        with _CONSTANTS_LOCK:
            found = _CONSTANTS.pop(key, None)
        if found is None:
            found = tuple(self.xp.asarray(a) for a in arrays)
        with _CONSTANTS_LOCK:
            _CONSTANTS[key] = found  # most recently used last
            evicted = [_CONSTANTS.pop(next(iter(_CONSTANTS))) for _ in range(len(_CONSTANTS) - _CONSTANTS_KEPT)]
        if evicted:
            # Kernels on other streams may still read them, and freed memory is reused at
            # once: wait for the device before letting go (rare: a 17th distinct range).
            self.xp.cuda.Device().synchronize()
        del evicted
        return found

    def result(self, a: Any) -> Any:
        return a

    def device_bytes(self) -> int | None:
        """The card's total memory, which sizes the co-moments' centring buffer (:func:`centring_rows`)."""
        return _card_bytes(self.xp.cuda.Device().id)

    def gram_buffer(self, d: int) -> Any:
        """Zeros (D, D) in C order, for :meth:`gram` to add to."""
        return self.xp.zeros((d, d), dtype=np.float64)

    def gram(self, dev: Any, c: Any) -> None:
        """``c += devᵀ dev`` on the upper triangle at least (cuBLAS SYRK)."""
        # C-ordered ``c`` so that CuPy passes ``dev`` (C order) to cuBLAS without a copy.
        self.cublas.syrk("T", dev, out=c, alpha=1.0, beta=1.0, lower=False)


class _SimBackend(_Backend):
    """numba device arrays (numba's CUDA simulator in the tests, or a GPU without CuPy)."""

    def __init__(self) -> None:
        from numba import cuda

        self.cuda = cuda
        self.stream = 0

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return self.cuda.to_device(np.zeros(shape, dtype=dtype))

    def empty(self, shape: Any, dtype: Any) -> Any:
        return self.cuda.device_array(shape, dtype=dtype)

    def full(self, shape: Any, value: Any, dtype: Any) -> Any:
        return self.cuda.to_device(np.full(shape, value, dtype=dtype))

    def arg(self, a: Any) -> Any:
        return a

    def contiguous(self, x: Any) -> Any:
        return x

    def constants(self, arrays: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        return tuple(self.cuda.to_device(a) for a in arrays)

    def result(self, a: Any) -> Any:
        return a.copy_to_host()

    def device_bytes(self) -> int | None:
        # The simulator reports infinite memory: unknown, so the whole chunk is one block.
        total = self.cuda.current_context().get_memory_info().total
        return int(total) if math.isfinite(total) else None

    def gram_buffer(self, d: int) -> Any:
        return self.cuda.to_device(np.zeros((d, d)))

    def gram(self, dev: Any, c: Any) -> None:
        # What a SYRK does: the upper triangle only; the lower one keeps whatever it held (zeros).
        host = c.copy_to_host()
        block = dev.copy_to_host()
        upper = np.triu(np.ones(host.shape, dtype=bool))
        host[upper] += (block.T @ block)[upper]
        c.copy_to_device(host)


def _backend(x: Any) -> _Backend:
    from array_api_compat import is_cupy_array

    return _Backend() if is_cupy_array(x) else _SimBackend()


def _readable(x: Any) -> Any:
    """``x`` as the kernels read it: bool as its uint8 bytes (0 or 1)."""
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    return x


def _first_pass_shape(d: int, groups: int) -> tuple[tuple[int, int], tuple[int, int]]:
    threads = min(FEATURE_THREADS, d)
    return (math.ceil(d / threads), groups), (threads, 1)


def _vector_shape(d: int) -> tuple[int, int]:
    threads = min(FEATURE_THREADS, d)
    return math.ceil(d / threads), threads


def moments(x: Any, rows_per_group: int | None = None) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.moments.MomentsState` for a device chunk.

    Two reads of ``x``: the first finds the reference value, the sum about
    it, extrema and NaN/inf counts; the second sums the centred powers.
    Buffers: (4 + 3) x G x D float64/int64 partials and one (11, D) result.

    Parameters
    ----------
    x : cupy.ndarray
        The chunk, (R, D) with R > 0.
    rows_per_group : int, optional
        Rows per group of the launch (see :func:`row_groups`).

    Returns
    -------
    tuple of cupy.ndarray
        The state's fields, in field order.
    """
    be = _backend(x)
    from daskbatch.stats.kernels import _cuda as k

    x = be.contiguous(_readable(x))
    rows, d = x.shape
    if d == 0:  # no feature: no launch (a grid of 0 blocks is an error), as on the CPU
        out = be.result(be.zeros((11, 0), np.float64))
        return tuple(out[i] for i in range(11))
    rpg, groups = row_groups(rows, d, rows_per_group)
    part = be.empty((4, groups, d), np.float64)
    counts = be.empty((3, groups, d), np.int64)
    out = be.empty((11, d), np.float64)
    grid, block = _first_pass_shape(d, groups)
    vgrid, vblock = _vector_shape(d)
    be.launch(k.moments_partials, grid, block, x, rpg, part, counts)
    be.launch(k.moments_finish, vgrid, vblock, part, counts, rows, out)
    be.launch(k.moments_powers, grid, block, x, rpg, out, part)
    be.launch(k.moments_correct, vgrid, vblock, part, out)
    out = be.result(out)
    return tuple(out[i] for i in range(11))


def comoments(x: Any, rows_per_group: int | None = None, block_rows: int | None = None) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.comoments.CoMomentsState` for a device chunk.

    Three reads of ``x`` (complete rows; their sum about the first one; the
    centring, which packs the centred rows into the float64 buffer as it reads
    them), the buffer holding the whole chunk when it fits in the card's
    share (:func:`centring_rows`), else going block by block, and a SYRK
    adding each buffer's ``devᵀ dev`` to ``c``.

    Parameters
    ----------
    x : cupy.ndarray
        The chunk, (R, D).
    rows_per_group : int, optional
        Rows per group of the launches (see :func:`row_groups`).
    block_rows : int, optional
        Rows centred at a time; by default :func:`centring_rows` of the card's memory.

    Returns
    -------
    tuple of cupy.ndarray
        The fields ``(n, shift, mean, c)``; ``c`` holds the co-moments in its
        upper triangle and zeros below (the state's layout: finalize mirrors).
    """
    be = _backend(x)
    from daskbatch.stats.kernels import _cuda as k

    x = be.contiguous(_readable(x))
    rows, d = x.shape
    if d == 0:  # every row is complete when there is no feature to miss
        empty = be.result(be.zeros((0,), np.float64))
        n = be.result(be.full((1,), float(rows), np.float64)).reshape(())
        return n, empty, empty, be.result(be.zeros((0, 0), np.float64))
    rpg, groups = row_groups(rows, d, rows_per_group)
    grid, block = _first_pass_shape(d, groups)
    vgrid, vblock = _vector_shape(d)
    block_rows, block_groups = centring_blocks(rows, d, rows_per_group, block_rows, be.device_bytes())
    bad = be.zeros((rows,), np.uint8)
    first = be.full((1,), rows, np.int64)
    # Shared by the chunk's groups and by each centring block's, which may be more.
    part = be.empty((max(groups, block_groups), d), np.float64)
    n_rows = be.empty((groups,), np.int64)
    n_out = be.empty((1,), np.float64)
    centre = be.empty((3, d), np.float64)
    be.launch(k.mark_incomplete, grid, block, x, rpg, bad)
    be.launch(k.first_complete, math.ceil(rows / 256), min(256, rows), bad, first)
    be.launch(k.complete_sums, grid, block, x, rpg, bad, first, part, n_rows)
    be.launch(k.complete_mean, vgrid, vblock, x, first, part, n_rows, n_out, centre)

    dev = be.empty((block_rows, d), np.float64)
    c = be.gram_buffer(d)
    for start in range(0, rows, block_rows):
        kb = min(block_rows, rows - start)
        brpg, bgroups = row_groups(kb, d, rows_per_group)
        bgrid, bblock = _first_pass_shape(d, bgroups)
        be.launch(k.centre_block, bgrid, bblock, x, start, brpg, bad, centre, dev[:kb], part)
        be.launch(k.add_group_sums, vgrid, vblock, part, bgroups, centre)
        be.gram(dev[:kb], c)
    mean = be.empty((d,), np.float64)
    be.launch(k.finish_mean, vgrid, vblock, centre, n_out, mean)
    tile = 16
    be.launch(k.correct_upper, (math.ceil(d / tile), math.ceil(d / tile)), (tile, tile), c, centre, n_out)
    n = be.result(n_out).reshape(())
    centre = be.result(centre)
    return n, centre[0], be.result(mean), be.result(c)


def histogram(
    x: Any,
    lo: Any,
    hi: Any,
    bins: int,
    labels: Any = None,
    n_classes: int = 1,
    shared_bytes: int = SHARED_BYTES,
) -> Any:
    """Count the :class:`~daskbatch.stats.histogram.HistogramState` of a device chunk.

    One read of ``x``: slot and count together, into per-block shared-memory
    counters when a tile of features fits in ``shared_bytes`` (else straight
    into the global counts).

    Parameters
    ----------
    x : cupy.ndarray
        The chunk, (R, D).
    lo, hi : array_like
        Range of each feature.
    bins : int
        Equal-width bins per feature.
    labels : cupy.ndarray, optional
        The int64 class of every row, already checked to lie in ``0 .. n_classes - 1``.
    n_classes : int, default 1
        K, the size of the last axis of the counts.
    shared_bytes : int, default SHARED_BYTES
        Shared memory a block may use.

    Returns
    -------
    cupy.ndarray
        The int64 counts (D, bins + 3, K).
    """
    be = _backend(x)
    from daskbatch.stats.kernels import _cuda as k

    x = be.contiguous(_readable(x))
    rows, d = x.shape
    if d == 0 or rows == 0:  # nothing to count: no launch
        return be.result(be.zeros((d, bins + 3, n_classes), np.int64))
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    # The float64 expressions of Histogram.edges / Histogram.slots, on the host.
    step = (hi - lo) / bins
    scale = bins / (hi - lo)
    # The same ranges come with every chunk of a pass: copied to the device once, not per chunk.
    vectors = be.constants((lo, hi, step, scale))
    by_label = labels is not None
    if labels is None:
        labels = be.zeros((1,), np.int64)
    counts = be.zeros((d * (bins + 3) * n_classes,), np.int64)
    layout = histogram_layout(rows, d, bins, n_classes, shared_bytes)
    if layout is not None:
        tile, lanes, rows_per_block = layout
        grid = (math.ceil(d / tile), math.ceil(rows / rows_per_block))
        shared = tile * (bins + 3) * n_classes * 4
        be.launch(k.histogram_shared, grid, tile * lanes, x, *vectors, int(bins), labels, by_label,
                  int(n_classes), tile, rows_per_block, counts, shared=shared)
    else:
        rpg, groups = row_groups(rows, d)
        grid, block = _first_pass_shape(d, groups)
        be.launch(k.histogram_global, grid, block, x, *vectors, int(bins), labels, by_label,
                  int(n_classes), rpg, counts)
    return be.result(counts).reshape(d, bins + 3, n_classes)
