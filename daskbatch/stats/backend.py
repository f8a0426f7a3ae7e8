"""Array-library plumbing: the namespace of an array, the one non-standard call, host copies.

Every statistic is written against the array API standard and resolves its
namespace with :func:`namespace`, so the same code runs on NumPy, CuPy and
``array_api_strict`` blocks. The single escape hatch is :func:`bincount`,
which the standard lacks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace, device, is_cupy_array, is_numpy_array

from daskbatch._common import Array, Namespace

__all__ = ["bincount", "device", "matrix_diagonal", "namespace", "to_numpy"]


def namespace(*arrays: Array) -> Namespace:
    """Find the array-API namespace shared by ``arrays`` (numpy, cupy, array_api_strict, ...)."""
    return array_namespace(*arrays)


def matrix_diagonal(xp: Namespace, c: Array) -> Array:
    """Give the main diagonal of a square matrix in any namespace (``linalg.diagonal`` where it has one)."""
    return xp.linalg.diagonal(c) if hasattr(xp, "linalg") else xp.diagonal(c)


def bincount(xp: Namespace, idx: Array, /, *, minlength: int) -> Array:
    """Count the occurrences of each non-negative integer in the 1-D ``idx``."""
    native = getattr(xp, "bincount", None)
    if native is not None:
        return xp.astype(native(idx, minlength=minlength), xp.int64)
    ordered = xp.sort(idx)
    bounds = xp.arange(minlength + 1, dtype=idx.dtype, device=device(idx))
    positions = xp.searchsorted(ordered, bounds)
    return xp.astype(positions[1:] - positions[:-1], xp.int64)


def weighted_bincount(xp: Namespace, idx: Array, weights: Array, /, *, minlength: int) -> Array:
    """Sum ``weights`` by the non-negative integers of the 1-D ``idx``, as float64."""
    weights = xp.astype(weights, xp.float64)
    native = getattr(xp, "bincount", None)
    if native is not None:
        return xp.astype(native(idx, weights=weights, minlength=minlength), xp.float64)
    order = xp.argsort(idx)
    ordered = xp.take(idx, order)
    starts = xp.searchsorted(ordered, xp.arange(minlength + 1, dtype=idx.dtype, device=device(idx)))
    # Differences of a running sum: exact for whole-number weights, within eps * total otherwise
    # (only namespaces without bincount come here).
    running = xp.cumulative_sum(xp.take(weights, order), include_initial=True)
    return xp.take(running, starts[1:]) - xp.take(running, starts[:-1])


def to_numpy(a: Any) -> np.ndarray:
    """Copy an array from any supported backend to a host NumPy array (no copy for NumPy input)."""
    if is_numpy_array(a):
        return a
    if is_cupy_array(a):
        host: np.ndarray = a.get()
        return host
    if isinstance(a, (int, float, bool, np.generic)):
        return np.asarray(a)
    return np.from_dlpack(a)
