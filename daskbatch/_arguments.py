"""Strict checks of numeric arguments, so that ``bins=True`` or ``split_every=2.5`` fail instead of being rounded."""

from __future__ import annotations

import numbers
import reprlib
from typing import Any, cast

from daskbatch._typing import DEVICES, Device
from daskbatch.errors import GPUUnavailableError

__all__ = ["GPU_INSTALL", "checked_device", "gpu_module", "short_repr", "strict_int"]

#: How to get a working GPU stack, for every message that asks for one.
GPU_INSTALL = "pip install 'daskbatch[gpu-cu12]' (CUDA 12 driver) or 'daskbatch[gpu-cu13]' (CUDA 13)"


def checked_device(device: Any) -> Device:
    """Validate a ``device`` argument against the one vocabulary, :data:`~daskbatch._typing.Device`."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of 'auto', 'cpu', 'gpu'; got {device!r}")
    return cast(Device, device)


def strict_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int, refusing bools, non-integral floats and non-numbers."""
    # bool is an int subclass: True would silently mean 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "a bool" if isinstance(value, bool) else f"a {type(value).__name__}"
        raise TypeError(f"{name} must be an integer, got {value!r} ({kind})")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif float(value).is_integer():
        result = int(float(value))
    else:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {result}")
    return result


def gpu_module(what: str) -> Any:
    """CuPy, for ``device="gpu"``: the one check that every function taking ``device=`` makes."""
    try:
        import cupy  # lazy: cupy
    except ImportError as exc:
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy does not import ({exc}); {GPU_INSTALL}") from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # a driver or runtime problem: CuPy raises its own CUDARuntimeError types
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy sees no CUDA device ({exc}); {GPU_INSTALL}") from None
    if count < 1:
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy sees no CUDA device; {GPU_INSTALL}")
    return cupy


def short_repr(value: Any, limit: int = 40) -> str:
    """Show a value in a message: its repr cut at ``limit`` characters, never built whole."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_repr() -> reprlib.Repr:
    """A repr that stops after a few items, levels and characters."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict, short.maxset = 3, 4, 4, 4, 4
    short.maxstring = short.maxother = short.maxlong = 40
    return short


_SHORT_REPR = _short_repr()
