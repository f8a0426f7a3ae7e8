"""Array-library plumbing and the numerical helpers the statistics share.

The statistics find their array-API namespace with :func:`namespace` (NumPy, CuPy,
``array_api_strict``); the helpers: finite rows, float64 copies, stable merges, ratio forms where
weight sums would overflow (:data:`RATIO_FORM_FROM`), exact extremes of 64-bit integer features.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import numpy as np
from array_api_compat import array_namespace, is_cupy_array, is_numpy_array
from array_api_compat import device as device  # re-exported: the statistics' one import of it

from daskbatch._common import Array, Namespace


def namespace(*arrays: Array) -> Namespace:
    """Find the array-API namespace shared by ``arrays`` (numpy, cupy, array_api_strict, ...)."""
    return array_namespace(*arrays)


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


#: Weight sums from here on merge by ratios ``nb / n``: their products and cubes (``na * nb``,
#: ``n ** 3``) would overflow float64 by 2**341. Below it the product forms stay, bitwise as ever
#: (counts without weights never get here).
RATIO_FORM_FROM = 2.0**300


def pair_weight(xp: Namespace, n_a: Array, n_b: Array, n: Array) -> Array:
    """Chan's ``n_a n_b / n``; weight sums whose product overflows as a share of ``n`` (RATIO_FORM_FROM)."""
    n_safe = safe_divisor(xp, n)
    return xp.where(n < RATIO_FORM_FROM, n_a * n_b / n_safe, n_a * (n_b / n_safe))


def merged_by_ratios(a: Any, b: Any, n: Array, delta: Array) -> tuple[Array, Array, Array]:
    """Merge ``m2``, ``m3`` and ``m4`` of two moments states with every weight sum as a share of ``n``."""
    fa, fb = a.n / n, b.n / n
    d2 = delta * delta
    m2 = a.m2 + b.m2 + d2 * a.n * fb
    m3 = a.m3 + b.m3 + d2 * delta * a.n * fb * (fa - fb) + 3.0 * delta * (fa * b.m2 - fb * a.m2)
    m4 = (
        a.m4
        + b.m4
        + d2 * d2 * a.n * fb * (fa * fa - fa * fb + fb * fb)
        + 6.0 * d2 * (fa * fa * b.m2 + fb * fb * a.m2)
        + 4.0 * delta * (fa * b.m3 - fb * a.m3)
    )
    return m2, m3, m4


def positive_rows(
    xp: Any, x: Array, label: Array | None, weights: Array
) -> tuple[Array, Array | None, Array]:
    """Keep the rows of positive weight (a zero weight makes a row as if absent); weights as float64."""
    if weights.shape[0] != x.shape[0]:
        raise ValueError(f"the chunk has {x.shape[0]:,} rows but {weights.shape[0]:,} weights")
    w = xp.astype(weights, xp.float64)
    keep = w > 0
    if bool(xp.all(keep)):
        return x, label, w
    rows = xp.nonzero(keep)[
        0
    ]  # take, not a mask with a second index: the array API allows only a sole mask
    return (
        xp.take(x, rows, axis=0),
        None if label is None else xp.take(label, rows),
        xp.take(w, rows),
    )


def as_float64(x: Array) -> Array:
    """Copy ``x`` to float64: states accumulate in float64 whatever the input dtype."""
    xp = namespace(x)
    if x.dtype == xp.bool:
        x = xp.astype(x, xp.uint8)
    return xp.astype(x, xp.float64, copy=True)


_P = ParamSpec("_P")
_T = TypeVar("_T")
_W = TypeVar("_W")


def handles_overflow(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Run ``method`` with NumPy's overflow and invalid-value warnings off: it handles those values itself."""

    @functools.wraps(method)
    def _quiet(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``method`` under ``np.errstate(over="ignore", invalid="ignore")``."""
        with np.errstate(over="ignore", invalid="ignore"):
            return method(*args, **kwargs)

    return _quiet


def central_moment(xp: Any, m: Array, power_sum: Array) -> Array:
    """Give a corrected central moment (``m2``, ``m4``) as states keep it: at least 0, +inf where its sum overflowed."""
    return xp.where(
        power_sum == xp.inf, xp.full_like(m, xp.inf), xp.where(m > 0, m, xp.zeros_like(m))
    )


def rows_of(s: Any) -> Array:
    """Give a state's rows: its ``rows`` when it counts weights in ``n`` (or is a tile of pairs), else ``n``."""
    return getattr(s, "rows", s.n)


def with_rows(weighted: Callable[..., _W], s: Any, rows: Array) -> _W:
    """Give ``s`` as its weighted subclass ``weighted``, which counts the ``rows`` beside their weight sum ``n``."""
    return weighted(**{f.name: getattr(s, f.name) for f in dataclasses.fields(s)}, rows=rows)


def safe_divisor(xp: Any, n: Array) -> Array:
    """Replace zeros of ``n`` by one, so ``s / safe_divisor(n)`` is 0 where ``n`` is 0."""
    return xp.where(n > 0, n, xp.ones_like(n))


def merge_shifted_means(
    xp: Any, na: Array, nb: Array, shift_a: Array, mean_a: Array, shift_b: Array, mean_b: Array
) -> tuple[Array, Array, Array]:
    """Merge two means held as ``shift + mean``: returns ``(shift, mean, delta)`` of the union."""
    shift = xp.where(na > 0, shift_a, shift_b)
    ma = (shift_a - shift) + mean_a
    mb = (shift_b - shift) + mean_b
    both = (na > 0) & (nb > 0)
    delta = xp.where(both, mb - ma, xp.zeros_like(ma))
    weight_b = nb / safe_divisor(xp, na + nb)
    mean = xp.where(na > 0, xp.where(nb > 0, ma + delta * weight_b, ma), mb)
    return shift, mean, delta


def with_classes(xp: Namespace, a: Array, n_classes: int) -> Array:
    """``a`` with empty classes (zeros) appended along its last axis up to ``n_classes``; ``a`` when it has them."""
    k = a.shape[-1]
    if k >= n_classes:
        return a
    pad = xp.zeros((*a.shape[:-1], n_classes - k), dtype=a.dtype, device=device(a))
    return xp.concat([a, pad], axis=-1)


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
