"""How a block reaches the kernels: the one choice of the code that reads it (compiled numba, CPU or CUDA, or the array-API reference code), the float32 copy of narrow values, the CPU co-moments' centring block, and the overlapped host-to-GPU copies."""

from __future__ import annotations

import functools
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

__all__ = [
    "COMPILED", "FLOAT32_COPY_ITEMSIZE", "KERNEL_PATHS", "KernelPath", "Kind", "Stager", "available",
    "centring_rows", "enabled", "float32_block", "gpu_available", "kernel_path", "split_rows", "stager",
]

#: The code that reads a block: the numba loops on a NumPy block, the numba-cuda
#: kernels on a CuPy block, or the array-API reference code on either (or any other library).
Kind = Literal["numba-cpu", "numba-cuda", "array-api-numpy", "array-api-cupy", "array-api"]

#: The compiled kinds; a statistic lists those it has in ``compiled_kernels`` (both when it says nothing).
COMPILED: frozenset[str] = frozenset({"numba-cpu", "numba-cuda"})

#: The kernel paths of the planner's memory model (the keys of a
#: :class:`~daskbatch.stats.declaration.Footprint`'s tables): "compiled" = numba on the
#: CPU, "array-api" = the reference code, "gpu-compiled" = numba-cuda (device memory).
KERNEL_PATHS: tuple[str, ...] = ("compiled", "array-api", "gpu-compiled")

#: dtype kinds the kernels read: bool, signed and unsigned integers, floats.
_DTYPE_KINDS = frozenset("biuf")


@dataclass(frozen=True)
class KernelPath:  # numpydoc ignore=PR02
    """The code that reads a block, and why."""

    kind: Kind
    reason: str

    @property
    def compiled(self) -> bool:
        """Tell whether compiled kernels (numba or numba-cuda) read the block."""
        return self.kind in COMPILED


@functools.cache
def available() -> bool:
    """Tell whether numba can be imported (the kernels compile on first call, then come from its cache)."""
    try:
        import numba  # noqa: F401  # lazy: numba
    except ImportError:
        return False
    return True


def enabled() -> bool:
    """Tell whether the kernels are available and not switched off by ``daskbatch.kernels``."""
    from daskbatch import config  # lazy: dask (daskbatch.kernels, default in daskbatch.yaml)

    return bool(config.get("kernels")) and available()


@functools.cache
def gpu_available() -> bool:
    """Tell whether numba-cuda imports and sees a CUDA device (or runs under its simulator)."""
    try:
        from numba import cuda  # lazy: numba

        return bool(cuda.is_available())
    except Exception:  # no numba-cuda, no driver, a broken toolkit: all mean "not here"
        return False


def kernel_path(
    x: Any, statistic: Any = None, *, dtype: Any = None, ndim: int = 2, weighted: bool = False,
    gpu_kernels: bool | None = None,
) -> KernelPath:
    """Choose the code that reads a block."""
    library, dtype, ndim = _describe_block(x, dtype, ndim)
    fallback: Kind = "array-api-numpy" if library == "numpy" else "array-api-cupy" if library == "cupy" else "array-api"
    if library not in ("numpy", "cupy"):
        return KernelPath(fallback, f"{library} arrays take the array-API code")
    if not (ndim == 2 and dtype.kind in _DTYPE_KINDS and dtype.isnative):
        return KernelPath(fallback, f"the kernels read 2-D native bool, integer or float blocks, not {ndim}-D {dtype}")
    if library == "cupy" and dtype == np.float16:
        return KernelPath(fallback, "the GPU kernels do not read float16")
    if not enabled():
        return KernelPath(fallback, "the kernels are off (daskbatch.kernels is false) or numba is missing")
    kind: Kind = "numba-cpu" if library == "numpy" else "numba-cuda"
    if library == "cupy" and not (gpu_available() if gpu_kernels is None else gpu_kernels):
        return KernelPath(fallback, "numba-cuda sees no CUDA device")
    has = getattr(statistic, "compiled_kernels", COMPILED)
    if weighted:
        has = getattr(statistic, "weighted_kernels", has)
    if kind not in has:
        return KernelPath(fallback, f"{type(statistic).__name__} has no {kind} kernel"
                          + (" for weighted rows" if weighted else ""))
    return KernelPath(kind, f"{library} block of {dtype}")


def _describe_block(x: Any, dtype: Any, ndim: int) -> tuple[str, Any, int]:
    """The array library, dtype and dimensions of the block ``x`` stands for."""
    if isinstance(x, str):
        return x, np.dtype(np.float64 if dtype is None else dtype), ndim
    if type(x) is np.ndarray:  # subclasses (memmap, masked arrays) take the array-API code
        return "numpy", x.dtype, x.ndim
    meta = getattr(x, "_meta", None) if hasattr(x, "__dask_graph__") else None
    if meta is not None:
        library = "numpy" if type(meta) is np.ndarray else _library(meta)
        return library, np.dtype(x.dtype), x.ndim
    return _library(x), getattr(x, "dtype", None), getattr(x, "ndim", 0)


def _library(x: Any) -> str:
    """The array library of a block other than a plain NumPy array."""
    from array_api_compat import is_cupy_array

    if isinstance(x, np.ndarray):  # a subclass: named by its class, so it takes the array-API code
        return type(x).__name__
    if is_cupy_array(x):
        return "cupy"
    return type(x).__module__.split(".")[0]


#: Widest values, in bytes, that the CPU kernels read from a float32 copy of the block (:func:`float32_block`).
FLOAT32_COPY_ITEMSIZE = 2


def float32_block(x: Any) -> Any:
    """A NumPy block as the numba kernels read it: 1- and 2-byte values as their float32 copy, others as they are.

    bool, 8- and 16-bit integers and float16 are the 1- and 2-byte values. Every such value is exact in float32, and the kernels read each value as a float64, so their states are the
    same bit for bit. One copy a block spares each kernel a compiled specialisation of its own per dtype (a first
    call's compile each) and reads faster than the narrow loops (the sketch keys float32 values by their bits). A
    statistic that runs several kernels on one block copies it once first, and :class:`~daskbatch.stats.Bundle`
    once for all of its statistics.
    """
    if isinstance(x, np.ndarray) and x.dtype.itemsize <= FLOAT32_COPY_ITEMSIZE and x.dtype.kind in "biuf":
        return x.astype(np.float32)
    return x


#: Bytes of the float64 centring buffer aimed at: with the float32 block it is read from,
#: it stays in one core's L2 cache (1-2 MiB on current x86 server cores), so the block is
#: read from memory once and centred, then multiplied, from cache.
CENTRING_BUFFER_BYTES = 512 * 2**10

#: Fewest rows per block: each block costs a BLAS call and a few small NumPy operations,
#: and OpenBLAS's syrk slows down on short blocks of many features.
MIN_CENTRING_ROWS = 1024

#: Most rows per block: on few features more rows only add memory.
MAX_CENTRING_ROWS = 4096


def centring_rows(n_features: int) -> int:
    """Count the rows centred into the float64 buffer at a time for a chunk of ``n_features`` features."""
    rows = CENTRING_BUFFER_BYTES // (8 * max(n_features, 1))
    return max(MIN_CENTRING_ROWS, min(MAX_CENTRING_ROWS, rows))


S = TypeVar("S")


def split_rows(rows: int, part_rows: int) -> list[tuple[int, int]]:
    """Split ``0 .. rows`` into ``ceil(rows / part_rows)`` consecutive, near-equal row ranges."""
    if part_rows < 1:
        raise ValueError(f"part_rows must be at least 1, got {part_rows}")
    if rows <= 0:
        return []
    n = math.ceil(rows / part_rows)
    bounds = [rows * i // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


class _Slot:
    """One pinned host buffer and one device buffer per array of a part, and the events guarding them."""

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        self.host: list[np.ndarray] = []  # pinned uint8
        self.device: list[Any] = []  # cupy uint8
        self.copied = cupy.cuda.Event(disable_timing=True)  # the copies of this slot's part are done
        self.consumed = cupy.cuda.Event(disable_timing=True)  # the kernels reading this slot's part are done

    def buffers(self, i: int, nbytes: int) -> tuple[np.ndarray, Any]:
        """The ``i``-th pinned and device buffers, grown to at least ``nbytes``."""
        import cupyx

        while len(self.host) <= i:
            self.host.append(np.empty(0, dtype=np.uint8))
            self.device.append(self._cupy.empty(0, dtype=np.uint8))
        if self.host[i].nbytes < nbytes:
            # Kernels may still read the old device buffer: freed memory goes back to the
            # pool at once, so wait for them before letting go of it (a rare, growing step).
            self.consumed.synchronize()
            self.host[i] = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
            self.device[i] = self._cupy.empty(nbytes, dtype=np.uint8)
        return self.host[i], self.device[i]


class Stager:
    """Copies host parts to the current CUDA device through pinned buffers while earlier parts are reduced."""

    def __init__(self, depth: int = 2) -> None:  # slots in rotation: 2 is a double buffer
        import cupy  # lazy: cupy

        if depth < 2:
            raise ValueError(f"depth must be at least 2 (a double buffer), got {depth}")
        self._cupy = cupy
        self.device_id = int(cupy.cuda.Device().id)
        # Blocking streams, ordered with the legacy default stream where other threads' merges run: a
        # state such a merge frees while its kernels are queued is not rewritten here before they ran.
        self.copy_stream = cupy.cuda.Stream()
        self.compute_stream = cupy.cuda.Stream()
        self._slots = [_Slot(cupy) for _ in range(depth)]

    def _stage(self, slot: _Slot, part: Sequence[Any]) -> list[Any]:
        """Queue the copies of ``part`` (host arrays or None) into ``slot``; their device views."""
        cupy = self._cupy
        slot.copied.synchronize()  # the pinned buffers are free once their last copy is done
        self.copy_stream.wait_event(slot.consumed)  # the device buffers once their kernels are
        out: list[Any] = []
        for i, a in enumerate(part):
            if a is None:
                out.append(None)
                continue
            if not isinstance(a, np.ndarray) and hasattr(a, "__cuda_array_interface__"):
                out.append(cupy.asarray(a))  # already on a device: nothing to stage
                continue
            a = np.asarray(a)
            dtype = a.dtype.newbyteorder("=")  # the device reads native byte order
            if a.size == 0:
                out.append(cupy.empty(a.shape, dtype=dtype))
                continue
            host, device = slot.buffers(i, a.nbytes)
            pinned = host[: a.nbytes].view(dtype).reshape(a.shape)
            np.copyto(pinned, a)  # pageable -> pinned, here, while the GPU reduces the previous part
            view = device[: a.nbytes].view(dtype).reshape(a.shape)
            view.set(pinned, stream=self.copy_stream)  # pinned -> device, asynchronous
            out.append(view)
        slot.copied.record(self.copy_stream)
        return out

    def reduce(
        self,
        parts: Iterable[Sequence[Any]],
        chunk: Callable[..., S],
        merge: Callable[[S, S], S],
        initial: S | None = None,
    ) -> S | None:
        """``merge(...merge(merge(initial, chunk(*p0)), chunk(*p1))...)`` over the device copies of ``parts``."""
        cupy = self._cupy
        pending: deque[tuple[_Slot, list[Any]]] = deque()
        free = deque(self._slots)
        source = iter(parts)
        exhausted = False
        state = initial

        def refill() -> None:
            """Start copies into every free slot while parts remain."""
            nonlocal exhausted
            while free and not exhausted:
                part = next(source, None)
                if part is None:
                    exhausted = True
                    return
                slot = free.popleft()
                pending.append((slot, self._stage(slot, part)))

        with cupy.cuda.Device(self.device_id):
            caller = cupy.cuda.get_current_stream()
            self.compute_stream.wait_event(caller.record())  # e.g. the kernels that made ``initial``
            try:
                refill()
                while pending:
                    slot, arrays = pending.popleft()
                    with self.compute_stream:
                        self.compute_stream.wait_event(slot.copied)
                        result = chunk(*arrays)
                        state = result if state is None else merge(state, result)
                        slot.consumed.record(self.compute_stream)
                    del arrays, result
                    free.append(slot)
                    refill()  # the next copy goes in while the GPU works on this part
                # A device-side wait, not a host one: the chunk task returns while the GPU works.
                caller.wait_event(self.compute_stream.record())
            except BaseException:
                # Leave nothing in flight that reads or writes buffers a later call reuses.
                self.copy_stream.synchronize()
                self.compute_stream.synchronize()
                raise
        return state


_local = threading.local()


def stager() -> Stager:
    """Get the calling thread's :class:`Stager` for the current CUDA device (made on first use, then reused)."""
    import cupy  # lazy: cupy

    cache: dict[int, Stager] = _local.__dict__.setdefault("stagers", {})
    device = int(cupy.cuda.Device().id)
    if device not in cache:
        cache[device] = Stager()
    return cache[device]
