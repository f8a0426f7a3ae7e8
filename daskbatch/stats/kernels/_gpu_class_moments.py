"""Host side of the per-class moments' GPU kernels (:mod:`~daskbatch.stats.kernels._cuda_class_moments`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.stats.kernels._gpu import (
    _backend,
    _first_pass_shape,
    _readable,
    _weights,
    row_groups,
)
from daskbatch.stats.kernels._gpu_layout import MAX_GRID_Y

__all__ = ["class_moments"]


def class_moments(
    x: Any, codes: Any, n_classes: int, weights: Any = None, rows_per_group: int | None = None
) -> tuple[Any, ...]:
    """Compute the fields of :class:`~daskbatch.stats.class_moments.ClassMomentsState` for a device chunk."""
    be = _backend(x)
    from daskbatch.stats.kernels import _cuda_class_moments as k  # lazy: numba

    x = be.contiguous(_readable(x))
    rows, d = x.shape
    weighted, w = _weights(be, weights)
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
