"""The one choice of which code reads a block: compiled numba (CPU or CUDA) or the array-API reference code."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COMPILED", "KERNEL_PATHS", "KernelPath", "Kind", "available", "enabled", "gpu_available", "kernel_path",
    "numba_view",
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

_MEMORY_PATH = {"numba-cpu": "compiled", "numba-cuda": "gpu-compiled"}
_ROUTE = {"numba-cpu": "cpu", "numba-cuda": "gpu"}


@dataclass(frozen=True)
class KernelPath:  # numpydoc ignore=PR02
    """The code that reads a block, and why."""

    kind: Kind
    reason: str

    @property
    def compiled(self) -> bool:
        """Tell whether compiled kernels (numba or numba-cuda) read the block."""
        return self.kind in COMPILED

    @property
    def memory_path(self) -> str:
        """Name the path in the planner's memory model (one of :data:`KERNEL_PATHS`)."""
        return _MEMORY_PATH.get(self.kind, "array-api")

    @property
    def route(self) -> str | None:
        """Give the older short name: "cpu" (numba), "gpu" (numba-cuda) or None (array-API code)."""
        return _ROUTE.get(self.kind)


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
    import numpy as np

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
    import numpy as np

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
    import numpy as np
    from array_api_compat import is_cupy_array

    if isinstance(x, np.ndarray):  # a subclass: named by its class, so it takes the array-API code
        return type(x).__name__
    if is_cupy_array(x):
        return "cupy"
    return type(x).__module__.split(".")[0]


@functools.cache
def _half_table() -> Any:
    """The float64 value of every float16 bit pattern (exact; numba lacks float16)."""
    import numpy as np  # lazy: importing daskbatch loads no numpy

    return np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)


def numba_view(x: Any) -> tuple[Any, Any]:
    """``x`` as the numba kernels read it: float16 as its uint16 bits plus the decoding table."""
    # bool is read as its uint8 bytes (0 or 1), which saves compiling one more specialisation.
    if x.dtype.kind == "f" and x.dtype.itemsize == 2:
        return x.view("uint16"), _half_table()
    if x.dtype.kind == "b":
        return x.view("uint8"), None
    return x, None
