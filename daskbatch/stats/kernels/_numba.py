"""What every compiled CPU loop shares: the jit settings, the element load, the row weight, the finite test."""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload

#: Rows per block of partial sums.
BLOCK = 128

_jit = numba.njit(nogil=True, cache=True)
_jit_inline = numba.njit(nogil=True, cache=True, inline="always")
# NumPy's error model drops numba's division-by-zero checks, whose branch keeps
# a loop from vectorising; for kernels whose divisors cannot be zero.
_jit_nocheck = numba.njit(nogil=True, cache=True, error_model="numpy")


def _load(v, lut):  # noqa: ANN001, ANN202 - numba overload stub
    """``v`` as float64; ``lut`` is None, or the float16 table when ``v`` holds float16 bits."""
    raise NotImplementedError("only callable from compiled code")


@overload(_load)
def _load_impl(v, lut):  # noqa: ANN001, ANN202
    # Chosen at compile time from the type of `lut`: numba has no float16 arrays,
    # so float16 chunks arrive as their uint16 bits plus a 65536-entry table.
    if isinstance(lut, types.NoneType):
        return lambda v, lut: np.float64(v)
    return lambda v, lut: lut[v]


def _weight(w, i):  # noqa: ANN001, ANN202 - numba overload stub
    """The weight of row ``i``: 1 when ``w`` is None (unweighted counts), else ``w[i]``."""
    raise NotImplementedError("only callable from compiled code")


@overload(_weight)
def _weight_impl(w, i):  # noqa: ANN001, ANN202
    # Chosen at compile time from the type of `w`: without weights the loop is the unweighted one.
    if isinstance(w, types.NoneType):
        return lambda w, i: 1
    return lambda w, i: w[i]


def _fourth_power(w, wdev, dev):  # noqa: ANN001, ANN202 - numba overload stub
    """``w * dev**4`` from ``wdev = w * dev``, rounded as the moments kernel always has (``(dev**2)**2`` unweighted)."""
    raise NotImplementedError("only callable from compiled code")


@overload(_fourth_power)
def _fourth_power_impl(w, wdev, dev):  # noqa: ANN001, ANN202
    # Two roundings of one power: unweighted (dev*dev)*(dev*dev), weighted ((w*dev)*dev*dev)*dev;
    # chosen at compile time so that neither kernel's bits change.
    if isinstance(w, types.NoneType):
        return lambda w, wdev, dev: (dev * dev) * (dev * dev)
    return lambda w, wdev, dev: wdev * dev * dev * dev


@_jit
def _finite(v: float) -> bool:
    # One compare that is False for NaN and ±inf, and vectorises.
    return abs(v) < np.inf


def finite_first_row(x: np.ndarray, lut: np.ndarray | None) -> np.ndarray | None:
    """Row 0 of ``x`` as float64 when every value in it is finite (and no float16 table reads it), else None."""
    # Usually so: then it is each column's first finite value and the first complete row, with no scan to compile.
    if lut is None and x.shape[0] and np.isfinite(x[0]).all():
        return x[0].astype(np.float64)
    return None
