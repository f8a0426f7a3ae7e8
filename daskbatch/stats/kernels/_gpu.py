"""Host side of the GPU kernels: launch shapes and buffer sizes (arithmetic on rows, features and card memory), launches, device buffers and the co-moments' SYRK."""

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
    "CENTRE_SHARE", "FEATURE_THREADS", "HIST_MIN_BLOCK_ROWS", "HIST_TARGET_BLOCKS", "HIST_THREADS", "MAX_GRID_Y",
    "MIN_GROUP_ROWS", "SHARED_BYTES", "TARGET_THREADS", "centring_blocks", "centring_rows", "class_moments", "comoments",
    "comoments_buffer_bytes", "group_features_bound", "histogram", "histogram_layout", "launch", "moments",
    "moments_buffer_bytes", "row_groups",
]

#: Threads a first-pass launch aims at: enough to fill an H100/H200 a few times over.
TARGET_THREADS = 2**19
#: Fewest rows a thread of a first-pass kernel walks (fewer: the fold costs more than it saves).
MIN_GROUP_ROWS = 32
#: Largest grid y dimension CUDA allows.
MAX_GRID_Y = 65_535
#: Threads per block along the features.
FEATURE_THREADS = 128
#: The co-moments' float64 centring buffer (one SYRK per buffer-full) holds the whole chunk when that is at
#: most 1/CENTRE_SHARE of the card's total memory, else that share (:func:`centring_rows`): of the total, as
#: the planner's ``Resources.device_memory_bytes``, so that a chunk's split does not depend on the card's load.
CENTRE_SHARE = 16
#: Shared memory a histogram block may use for its private counters (the default per-block limit).
SHARED_BYTES = 48 * 2**10
#: Threads of a histogram block, and the blocks a histogram launch aims at.
HIST_THREADS = 256
HIST_TARGET_BLOCKS = 1024
#: Fewest rows a histogram block counts (its flush of private counters must pay off).
HIST_MIN_BLOCK_ROWS = 256


def group_features_bound(rows: int, n_features: int) -> int:
    """Bound ``groups x D`` of a first-pass launch (:func:`row_groups`), for the planner."""
    return min(
        -(-rows // MIN_GROUP_ROWS) * n_features,
        max(n_features, TARGET_THREADS),
        MAX_GRID_Y * n_features,
    )


def moments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the moments kernel's own device buffers: float64 partials (4 x groups x D), int64 counts (3 x)."""
    return 7 * 8 * group_features_bound(rows, n_features)


def centring_rows(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Count the rows the co-moments centre into their float64 buffer at a time (one SYRK each)."""
    if device_bytes is None:
        return max(1, rows)
    return max(1, min(rows, device_bytes // CENTRE_SHARE // (8 * max(n_features, 1))))


def comoments_buffer_bytes(rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """Size the co-moments kernel's device buffers: partials, row counts, the float64 centring buffer."""
    centre = centring_rows(rows, n_features, device_bytes) * n_features * 8
    return 8 * group_features_bound(rows, n_features) + 8 * -(-rows // MIN_GROUP_ROWS) + centre


def row_groups(rows: int, n_features: int, rows_per_group: int | None = None) -> tuple[int, int]:
    """Split the rows of an (R, D) chunk (R > 0) into groups for a first-pass kernel."""
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
    """Choose the rows the co-moments centre at a time; give the most row groups one block splits into."""
    if block_rows is None:
        block_rows = centring_rows(rows, n_features, device_bytes)
    block_rows = max(1, min(rows, block_rows))
    last = rows % block_rows or block_rows
    groups = max(row_groups(kb, n_features, rows_per_group)[1] for kb in {block_rows, last})
    return block_rows, groups


def histogram_layout(
    rows: int, n_features: int, bins: int, n_classes: int, shared_bytes: int = SHARED_BYTES, counter_bytes: int = 4
) -> tuple[int, int, int] | None:
    """Lay out the privatised histogram kernel, or None when a tile does not fit."""
    per_feature = (bins + 3) * n_classes * counter_bytes
    tile = min(32, n_features, shared_bytes // per_feature)
    if tile < min(4, n_features):
        return None
    lanes = max(1, min(HIST_THREADS // tile, rows))
    n_tiles = math.ceil(n_features / tile)
    row_blocks = max(1, min(math.ceil(HIST_TARGET_BLOCKS / n_tiles), math.ceil(rows / HIST_MIN_BLOCK_ROWS)))
    row_blocks = min(row_blocks, MAX_GRID_Y)
    return tile, lanes, math.ceil(rows / row_blocks)


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
    """Call ``start`` (a kernel launch) with numba's low-occupancy warning silenced."""
    with _LAUNCH_LOCK, warnings.catch_warnings():
        for category in _occupancy_warnings():
            warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization",
                                    category=category)
        start()


#: Most threads a block may have (every CUDA device of compute capability 2.0 on).
MAX_BLOCK_THREADS = 1024


def check_launch_shape(kernel: Any, grid: Any, block: Any) -> None:
    """Refuse a launch shape that a CUDA device refuses, naming the kernel, on every backend."""
    grid_dims = (grid,) if isinstance(grid, int) else tuple(grid)
    block_dims = (block,) if isinstance(block, int) else tuple(block)
    name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "py_func", None), "__name__", repr(kernel))
    if min(grid_dims + block_dims) < 1:
        raise ValueError(f"kernel {name}: a launch of grid {grid_dims} and blocks {block_dims} has an empty dimension")
    if max(grid_dims[1:], default=1) > MAX_GRID_Y:
        raise ValueError(f"kernel {name}: grid {grid_dims} is taller than CUDA's {MAX_GRID_Y:,} blocks")
    if math.prod(block_dims) > MAX_BLOCK_THREADS:
        raise ValueError(f"kernel {name}: blocks {block_dims} have more than {MAX_BLOCK_THREADS:,} threads")


#: Device copies of histogram ranges (:meth:`_Backend.constants`), the most recently used last.
_CONSTANTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_CONSTANTS_LOCK = threading.Lock()
_CONSTANTS_KEPT = 16


@functools.cache
def _card_bytes(device: int) -> int:
    """Total memory of CUDA device ``device`` (asked once: it does not change)."""
    import cupy  # lazy: cupy

    return int(cupy.cuda.Device(device).mem_info[1])


@functools.lru_cache(maxsize=64)
def _numba_stream(device: int, ptr: int) -> Any:
    """numba's handle on the CUDA stream ``ptr`` of ``device``, built once per stream."""
    from numba import cuda  # lazy: numba

    # CuPy's null stream is the legacy default stream, which numba names apart.
    return cuda.default_stream() if ptr == 0 else cuda.external_stream(ptr)


class _Backend:
    """CuPy arrays on CuPy's current stream."""

    def __init__(self) -> None:
        import cupy  # lazy: cupy
        import cupy.cublas  # a submodule: ``cupy.cublas`` is not there until imported  # lazy: cupy
        from numba import cuda  # lazy: numba

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
        check_launch_shape(kernel, grid, block)
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
        from numba import cuda  # lazy: numba

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


def _prepare(x: Any, weights: Any) -> tuple[_Backend, Any, int, int, bool, Any]:
    """The backend, ``x`` as the kernels read it (C order, bool as its uint8 bytes), its shape and the weights."""
    be = _backend(x)
    x = be.contiguous(x.view(np.uint8) if x.dtype == np.bool_ else x)
    return (be, x, *x.shape, *_weights(be, weights))


def _first_pass_shape(d: int, groups: int) -> tuple[tuple[int, int], tuple[int, int]]:
    threads = min(FEATURE_THREADS, d)
    return (math.ceil(d / threads), groups), (threads, 1)


def _vector_shape(d: int) -> tuple[int, int]:
    threads = min(FEATURE_THREADS, d)
    return math.ceil(d / threads), threads


def _weights(be: _Backend, weights: Any) -> tuple[bool, Any]:
    """``(weighted, w)`` as the kernels take them: contiguous float64 weights, or a dummy that is never read."""
    if weights is None:  # never read: empty, so an unweighted chunk queues no extra memset
        return False, be.empty((1,), np.float64)
    if weights.dtype != np.float64:  # the statistics hand float64 already (positive_rows)
        weights = weights.astype(np.float64)
    return True, be.contiguous(weights)


def moments(x: Any, rows_per_group: int | None = None, weights: Any = None) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.moments.MomentsState` for a device chunk."""
    from daskbatch.stats.kernels import _cuda_moments as k  # lazy: numba

    be, x, rows, d, weighted, w = _prepare(x, weights)
    fields = 12 if weighted else 11
    if d == 0:  # no feature: no launch (a grid of 0 blocks is an error), as on the CPU
        out = be.result(be.zeros((fields, 0), np.float64))
    elif rows == 0:  # no row: the CPU kernels' empty state (counts 0, extrema +-inf), no launch
        out = be.result(be.zeros((fields, d), np.float64))
        out[k.FMIN] = np.inf
        out[k.FMAX] = -np.inf
    else:
        rpg, groups = row_groups(rows, d, rows_per_group)
        part = be.empty((5 if weighted else 4, groups, d), np.float64)
        counts = be.empty((3, groups, d), np.int64)
        out = be.empty((fields, d), np.float64)
        grid, block = _first_pass_shape(d, groups)
        vgrid, vblock = _vector_shape(d)
        be.launch(k.moments_partials, grid, block, x, rpg, part, counts, weighted, w)
        be.launch(k.moments_finish, vgrid, vblock, part, counts, rows, out, weighted)
        be.launch(k.moments_powers, grid, block, x, rpg, out, part, weighted, w)
        be.launch(k.moments_correct, vgrid, vblock, part, out)
        out = be.result(out)
    return tuple(out[i] for i in ((k.ROWS, *range(11)) if weighted else range(11)))


def comoments(
    x: Any, rows_per_group: int | None = None, block_rows: int | None = None, weights: Any = None
) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.comoments.CoMomentsState` for a device chunk."""
    from daskbatch.stats.kernels import _cuda_moments as k  # lazy: numba

    be, x, rows, d, weighted, w = _prepare(x, weights)
    if d == 0 or rows == 0:  # no feature (every row complete) or no row: no launch, as on the CPU
        empty = be.result(be.zeros((d,), np.float64))
        count = be.result(be.full((1,), float(rows), np.float64)).reshape(())
        zeros = be.result(be.zeros((d, d), np.float64))
        if not weighted:
            return count, empty, empty.copy(), zeros
        return be.result(w).sum().reshape(()), empty, empty.copy(), zeros, count
    rpg, groups = row_groups(rows, d, rows_per_group)
    grid, block = _first_pass_shape(d, groups)
    vgrid, vblock = _vector_shape(d)
    block_rows, block_groups = centring_blocks(rows, d, rows_per_group, block_rows, be.device_bytes())
    bad = be.zeros((rows,), np.uint8)
    first = be.full((1,), rows, np.int64)
    # Shared by the chunk's groups and by each centring block's, which may be more.
    part = be.empty((max(groups, block_groups), d), np.float64)
    n_rows = be.empty((groups,), np.int64)
    w_rows = be.empty((groups if weighted else 1,), np.float64)
    n_out = be.empty((2,), np.float64)
    centre = be.empty((3, d), np.float64)
    be.launch(k.mark_incomplete, grid, block, x, rpg, bad)
    be.launch(k.first_complete, math.ceil(rows / 256), min(256, rows), bad, first)
    be.launch(k.complete_sums, grid, block, x, rpg, bad, first, part, n_rows, weighted, w, w_rows)
    be.launch(k.complete_mean, vgrid, vblock, x, first, part, n_rows, n_out, centre, weighted, w_rows)

    dev = be.empty((block_rows, d), np.float64)
    c = be.gram_buffer(d)
    for start in range(0, rows, block_rows):
        kb = min(block_rows, rows - start)
        brpg, bgroups = row_groups(kb, d, rows_per_group)
        bgrid, bblock = _first_pass_shape(d, bgroups)
        be.launch(k.centre_block, bgrid, bblock, x, start, brpg, bad, centre, dev[:kb], part, weighted, w)
        be.launch(k.add_group_sums, vgrid, vblock, part, bgroups, centre)
        be.gram(dev[:kb], c)
    mean = be.empty((d,), np.float64)
    be.launch(k.finish_mean, vgrid, vblock, centre, n_out, mean)
    tile = 16
    be.launch(k.correct_upper, (math.ceil(d / tile), math.ceil(d / tile)), (tile, tile), c, centre, n_out)
    sums = be.result(n_out)
    centre = be.result(centre)
    fields = (sums[0:1].reshape(()), centre[0], be.result(mean), be.result(c))
    return (*fields, sums[1:2].reshape(())) if weighted else fields


def histogram(
    x: Any,
    lo: Any,
    hi: Any,
    bins: int,
    labels: Any = None,
    n_classes: int = 1,
    shared_bytes: int = SHARED_BYTES,
    weights: Any = None,
) -> Any:
    """Count the :class:`~daskbatch.stats.histogram.HistogramState` of a device chunk."""
    from daskbatch.stats.kernels import _cuda as k  # lazy: numba

    be, x, rows, d, weighted, w = _prepare(x, weights)
    dtype = np.float64 if weighted else np.int64
    if d == 0 or rows == 0:  # nothing to count: no launch
        return be.result(be.zeros((d, bins + 3, n_classes), dtype))
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
    counts = be.zeros((d * (bins + 3) * n_classes,), dtype)
    counter_bytes = 8 if weighted else 4  # float64 weight sums, or uint32 counts
    layout = histogram_layout(rows, d, bins, n_classes, shared_bytes, counter_bytes)
    if layout is not None:
        tile, lanes, rows_per_block = layout
        grid = (math.ceil(d / tile), math.ceil(rows / rows_per_block))
        shared = tile * (bins + 3) * n_classes * counter_bytes
        be.launch(k.histogram_shared, grid, tile * lanes, x, *vectors, int(bins), labels, by_label,
                  int(n_classes), tile, rows_per_block, counts, weighted, w, shared=shared)
    else:
        rpg, groups = row_groups(rows, d)
        grid, block = _first_pass_shape(d, groups)
        be.launch(k.histogram_global, grid, block, x, *vectors, int(bins), labels, by_label,
                  int(n_classes), rpg, counts, weighted, w)
    return be.result(counts).reshape(d, bins + 3, n_classes)


def class_moments(
    x: Any, codes: Any, n_classes: int, weights: Any = None, rows_per_group: int | None = None
) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.class_moments.ClassMomentsState` for a device chunk."""
    from daskbatch.stats.kernels import _cuda as k  # lazy: numba

    be, x, rows, d, weighted, w = _prepare(x, weights)
    if rows == 0 or d == 0 or n_classes == 0:  # no row, feature or class: zeros as on the CPU, no launch
        out = be.result(be.zeros((4, d, n_classes), np.float64))
    else:
        rpg, groups = row_groups(rows, d * n_classes, rows_per_group)
        part = be.zeros((3, n_classes, groups, d), np.float64)
        counts = be.zeros((n_classes, groups, d), np.int64)
        out = be.empty((4, d, n_classes), np.float64)
        grid, block = _first_pass_shape(d, groups)
        fgrid, fblock = _first_pass_shape(d, min(n_classes, MAX_GRID_Y))
        be.launch(k.class_partials, grid, block, x, rpg, codes, part, counts, weighted, w)
        be.launch(k.class_finish, fgrid, fblock, part, counts, out, weighted)
        be.launch(k.class_squares, grid, block, x, rpg, codes, out, part, weighted, w)
        be.launch(k.class_correct, fgrid, fblock, part, out)
        out = be.result(out)
    return tuple(out[f] for f in range(4))
