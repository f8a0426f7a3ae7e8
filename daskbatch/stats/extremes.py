"""Exact per-feature extremes of 64-bit integer features, held in their own dtype.

float64 holds every integer up to 2**53 only: an int64 maximum of
``2**62 + 998`` came out ``2**62 + 1024``.  The moments' state keeps ``fmin`` /
``fmax`` of int64 and uint64 blocks in that dtype (every value is finite, so
there are no infinities to leave out), merges them exactly, and reports them
as ``min`` / ``max`` in that dtype.  Other dtypes keep their float64 extremes.
"""

from __future__ import annotations

from typing import Any

from daskbatch._typing import Array, Namespace
from daskbatch.stats.backend import namespace
from daskbatch.stats.numerics import as_float64

__all__ = ["exact_extremes", "is_exact", "merge_extreme"]


def is_exact(values: Array) -> bool:
    """Tell whether ``values`` are extremes held in a 64-bit integer dtype."""
    xp = namespace(values)
    return values.dtype in (xp.int64, xp.uint64)


def exact_extremes(xp: Namespace, x: Array) -> tuple[Array, Array] | None:
    """Find the per-feature minimum and maximum of a 64-bit integer block in its own dtype."""
    if not is_exact(x) or x.shape[0] == 0:
        return None
    return xp.min(x, axis=0), xp.max(x, axis=0)


def merge_extreme(xp: Namespace, a: Array, b: Array, *, smallest: bool) -> Any:
    """Merge the finite extremes of two states, exactly where both are held as integers."""
    pick = xp.minimum if smallest else xp.maximum
    if a.dtype == b.dtype:
        return pick(a, b)
    # An empty block's state holds ±inf: no value, so the exact side stands alone.
    if is_exact(a) and not is_exact(b) and not bool(xp.any(xp.isfinite(b))):
        return a
    if is_exact(b) and not is_exact(a) and not bool(xp.any(xp.isfinite(a))):
        return b
    return pick(as_float64(a), as_float64(b))
