"""What every GPU loop (numba-cuda) shares: the element load, the rows of a group, correctly rounded arithmetic."""

from __future__ import annotations

import numba
from numba import config, cuda

SIMULATED = bool(getattr(config, "ENABLE_CUDASIM", False))  # set by NUMBA_ENABLE_CUDASIM=1

if SIMULATED:  # Python floats round every operation, as __dmul_rn/__dadd_rn do

    @cuda.jit(device=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return a * b

    @cuda.jit(device=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return a + b

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dmul_rn(a, b)

    @cuda.jit(device=True, inline=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dadd_rn(a, b)


@cuda.jit(device=True)
def _load(x, i, j):  # noqa: ANN001, ANN202
    return numba.float64(x[i, j])


@cuda.jit(device=True)
def _rows_of_group(g, rows_per_group, rows):  # noqa: ANN001, ANN202
    start = g * rows_per_group
    return start, min(start + rows_per_group, rows)
