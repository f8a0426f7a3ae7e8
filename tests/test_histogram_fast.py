"""The histogram counting loop gives, bit for bit, the counts of the loop it replaced.

``_reference_counts`` is a frozen copy of the former
``daskbatch.stats.kernels._numba_histogram.histogram_counts`` (one slot per
value, guarded against every range, two integer multiplies for the index). The
current loop must give the same int64 counts and the same float64 sums of
weights for every input: each dtype the kernels read (float16, which the
reference read as its bits plus a decoding table and the kernels as a float32 copy), NaN, ±inf, values on, just below and just above every
edge, values beyond ±2**63, ranges of any sign, tiny, huge and overflowing
ranges, steps and scales nudged off ``(hi - lo) / bins``, counts that already
hold values, and shapes that divide nothing evenly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskbatch.stats import kernels
from daskbatch.stats.kernels.path import float32_block

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

numba = pytest.importorskip("numba")

_INT_LIMIT = 2.0**63


@numba.njit
def _reference_counts(x, lut, lo, hi, step, scale, bins, labels, n_classes, counts, weights):  # noqa: ANN001, ANN202
    # The former loop, as it was; only _load and _weight are spelled out (None branches are pruned).
    rows, d = x.shape
    n_slots = bins + 3
    by_label = labels.shape[0] > 0
    top = float(bins - 1)
    over_slot = float(bins + 1)
    nan_slot = float(bins + 2)
    slot = np.empty(d, dtype=np.uint64)
    for i in range(rows):
        for j in range(d):
            if lut is None:
                v = np.float64(x[i, j])
            else:
                v = lut[x[i, j]]
            f = np.floor((v - lo[j]) * scale[j])
            f = f if abs(f) < _INT_LIMIT else 0.0
            f = f if f < top else top
            f = f if f > 0.0 else 0.0
            f = f - 1.0 if v < f * step[j] + lo[j] else f
            f = f + 1.0 if (v >= (f + 1.0) * step[j] + lo[j]) & (f < top) else f
            f += 1.0
            f = 0.0 if v < lo[j] else f
            f = over_slot if v > hi[j] else f
            f = nan_slot if v != v else f
            slot[j] = np.uint64((j * n_slots + np.int64(f)) * n_classes)
        k = np.uint64(labels[i] if by_label else 0)
        if weights is None:
            for j in range(d):
                counts[slot[j] + k] += 1
        else:
            wi = weights[i]
            for j in range(d):
                counts[slot[j] + k] += wi


#: (lo, hi) pairs: signs, tiny and huge widths, widths that overflow or underflow
#: the step or the scale (the loop's guarded path), edges that float32 holds exactly.
RANGES = [
    (0.0, 1.0), (-1.0, 1.0), (-3.5, -1.25), (0.1, 0.7), (-0.0, 5.0), (0.0, 64.0), (-1024.0, 1024.0),
    (1.0, 1.0 + 2.0**-52), (1.0, 1.0 + 2.0**-40), (1e-300, 2e-300), (0.0, 1e-310), (-5e-324, 5e-324),
    (1e20, 1e20 * (1 + 1e-15)), (-(2.0**70), 2.0**70), (-1e308, 1e308), (-1.7e308, -1e308), (1e300, 1e308),
    (-3e38, 3e38), (65504.0 * -1, 65504.0), (2.0**62, 2.0**64), (-7.0, 2.0**-1074),
]


def _values(lo: float, hi: float, bins: int, rng: np.random.Generator, n: int) -> np.ndarray:
    """Adversarial values for one feature: edges and their neighbours, the range's ends, specials, random."""
    with np.errstate(all="ignore"):
        step = (hi - lo) / bins
        i = np.arange(bins + 1, dtype=np.float64)
        if bins > 64:
            i = np.unique(np.concatenate([i[:8], i[-8:], rng.choice(i, 48, replace=False)]))
        edges = i * step + lo
        ends = np.array([lo, hi])
        near = np.concatenate([edges, ends])
        width = hi - lo if np.isfinite(hi - lo) else 1e308
        rand = rng.uniform(-0.25, 1.25, n) * width + lo if np.isfinite(width * 1.25) else rng.uniform(lo, hi, n)
    specials = np.array([
        np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0**63, -(2.0**63), 2.0**64, -(2.0**64), np.nextafter(2.0**63, 0),
        1e300, -1e300, 1.7e308, -1.7e308, 5e-324, -5e-324, 65504.0, -65504.0, 3.4e38, -3.4e38,
    ])
    return np.concatenate([
        near, np.nextafter(near, np.inf), np.nextafter(near, -np.inf),
        np.nextafter(np.nextafter(near, np.inf), np.inf), np.nextafter(np.nextafter(near, -np.inf), -np.inf),
        specials, rand,
    ])


def _chunk(
    d: int, bins: int, rows: int | None, seed: int, ranges: list[tuple[float, float]] = RANGES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float64 (rows, d) chunk of adversarial values, each column for its own range, and the ranges."""
    rng = np.random.default_rng(seed)
    picks = [ranges[(seed + j) % len(ranges)] for j in range(d)]
    lo = np.array([p[0] for p in picks])
    hi = np.array([p[1] for p in picks])
    cols = [_values(lo[j], hi[j], bins, rng, 40) for j in range(d)]
    n = max(len(c) for c in cols) if rows is None else rows
    # Every column mixes its own values with some of the next column's (values for other ranges).
    x = np.empty((n, d))
    for j, c in enumerate(cols):
        other = cols[(j + 1) % d]
        pool = np.concatenate([c, c, other])
        x[:, j] = pool[rng.permutation(np.resize(np.arange(len(pool)), n))]
    return x, lo, hi


def _as(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``x`` in ``dtype`` as the reference loop read it (float16 as bits plus table)."""
    with np.errstate(all="ignore"):
        if dtype == "float16":
            return x.astype(np.float16).view(np.uint16), np.arange(2**16, dtype=np.uint16).view(np.float16).astype(float)
        if dtype in ("int64", "uint8"):
            info = np.iinfo(dtype)
            y = np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min)
            return np.clip(y, info.min, info.max).astype(dtype), None
        return np.ascontiguousarray(x.astype(dtype)), None


def _both(x, lut, lo, hi, step, scale, bins, labels, n_classes, weights, seed=0):  # noqa: ANN001, ANN202
    """Counts of the reference and of the current loop, from the same non-zero start."""
    from daskbatch.stats.kernels._numba_histogram import histogram_counts

    d = x.shape[1]
    rng = np.random.default_rng(seed)
    size = d * (bins + 3) * n_classes
    if weights is None:
        start = rng.integers(0, 1000, size).astype(np.int64)
    else:
        start = rng.standard_normal(size) * 1e3
    want, got = start.copy(), start.copy()
    _reference_counts(x, lut, lo, hi, step, scale, bins, labels, n_classes, want, weights)
    # The current loop reads the kernels' view: float16 as its float32 copy (path.float32_block), the reference its bits.
    current = float32_block(x if lut is None else x.view(np.float16))
    histogram_counts(current, lo, hi, step, scale, bins, labels, n_classes, got, weights)
    return want, got


def _assert_same(want: np.ndarray, got: np.ndarray) -> None:
    assert want.dtype == got.dtype
    # Bitwise, also for the float64 sums (NaN weights included).
    np.testing.assert_array_equal(want.view(np.int64), got.view(np.int64))


def _steps(lo: np.ndarray, hi: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``step`` and ``scale`` as the wrappers in :mod:`daskbatch.stats.kernels` form them."""
    with np.errstate(all="ignore"):
        return (hi - lo) / bins, bins / (hi - lo)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "uint8"])
@pytest.mark.parametrize("d", [1, 3, 64, 257])
@pytest.mark.parametrize("bins", [1, 64, 2048])
def test_counts_equal_the_former_loop(dtype: str, d: int, bins: int) -> None:
    x, lo, hi = _chunk(d, bins, None if d < 64 else 301, seed=d * 7 + bins)
    data, lut = _as(x, dtype)
    step, scale = _steps(lo, hi, bins)
    rng = np.random.default_rng(bins)
    for k in (1, 4, 300):
        if d * (bins + 3) * k > 4_000_000:  # D=257 x 2048 bins x 300 classes: 1.3 GB of counts
            continue
        labels = np.empty(0, dtype=np.int64) if k == 1 else rng.integers(0, k, data.shape[0]).astype(np.int64)
        for weights in (None, rng.standard_normal(data.shape[0])):
            _assert_same(*_both(data, lut, lo, hi, step, scale, bins, labels, k, weights))


@pytest.mark.parametrize("rows", [1, 2, 5, 127, 1001])
@pytest.mark.parametrize("k", [1, 4])
def test_row_counts(rows: int, k: int) -> None:
    x, lo, hi = _chunk(3, 64, rows, seed=rows)
    step, scale = _steps(lo, hi, 64)
    labels = np.empty(0, dtype=np.int64) if k == 1 else np.arange(rows, dtype=np.int64) % k
    for dtype in ("float64", "float32"):
        data, lut = _as(x, dtype)
        _assert_same(*_both(data, lut, lo, hi, step, scale, 64, labels, k, None))
        _assert_same(*_both(data, lut, lo, hi, step, scale, 64, labels, k, np.linspace(-2, 3, rows)))


def test_empty_chunk() -> None:
    lo, hi = np.zeros(4), np.ones(4)
    step, scale = _steps(lo, hi, 8)
    _assert_same(*_both(np.empty((0, 4)), None, lo, hi, step, scale, 8, np.empty(0, dtype=np.int64), 1, None))


@pytest.mark.parametrize("bins", [1, 64, 2048])
def test_nudged_steps_and_odd_ranges(bins: int) -> None:
    """Steps and scales a few ulps off ``(hi - lo) / bins``, zero, negative, infinite or NaN; reversed ranges.

    Each odd feature is tried among ranges that are all well formed (so that it alone
    decides which loop runs), and then as every feature.
    """
    with np.errstate(all="ignore"):
        good = [r for r in RANGES if np.isfinite((r[1] - r[0]) * (bins / (r[1] - r[0]))) and r[1] - r[0] > 0]
    x, lo, hi = _chunk(len(good), bins, None, seed=bins, ranges=good)
    step, scale = _steps(lo, hi, bins)
    labels = np.arange(x.shape[0], dtype=np.int64) % 4
    with np.errstate(all="ignore"):
        variants = [
            (lo, hi, step, scale),
            (lo, hi, np.nextafter(step, np.inf), np.nextafter(scale, -np.inf)),
            (lo, hi, np.nextafter(np.nextafter(step, -np.inf), -np.inf), np.nextafter(scale, np.inf) * (1 + 2**-50)),
            (lo, hi, step * 1.001, scale * 0.999),
            (lo, hi, step * 0.999, scale * 1.001),
            (lo, hi, step, scale * 2.0**62),  # (hi - lo) * scale beyond 2**63
            (lo, hi, step, scale * 2.0**1000),  # and infinite
            (hi, lo, -step, -scale),  # reversed: lo > hi
            (hi, lo, step, scale),
            (lo, hi, -step, scale),
            (lo, hi, step, -scale),
            (lo, hi, np.zeros_like(step), scale),
            (lo, hi, step, np.zeros_like(scale)),
            (lo, hi, np.full_like(step, np.inf), scale),
            (lo, hi, step, np.full_like(scale, np.inf)),
            (lo, hi, np.full_like(step, np.nan), scale),
            (lo, hi, step, np.full_like(scale, np.nan)),
            (np.full_like(lo, -np.inf), hi, step, scale),
            (lo, np.full_like(hi, np.inf), step, scale),
            (np.full_like(lo, np.nan), hi, step, scale),
            (lo, np.full_like(hi, np.nan), step, scale),
            (np.full_like(lo, -1e308), np.full_like(hi, 1e308), step, scale),  # hi - lo overflows
        ]
    for v_lo, v_hi, v_step, v_scale in variants:
        for mask in (np.arange(len(lo)) == len(lo) // 2, np.ones(len(lo), dtype=bool)):
            a = (np.where(mask, v_lo, lo), np.where(mask, v_hi, hi), np.where(mask, v_step, step),
                 np.where(mask, v_scale, scale))
            for dtype in ("float64", "float32", "float16"):
                data, lut = _as(x, dtype)
                _assert_same(*_both(data, lut, *a, bins, labels, 4, None))
                _assert_same(*_both(data, lut, *a, bins, np.empty(0, dtype=np.int64), 1, np.ones(x.shape[0])))


def test_public_wrappers_give_the_former_counts() -> None:
    """``kernels.histogram`` and ``kernels.weighted_histogram`` reach the same counts."""
    x, lo, hi = _chunk(5, 64, 400, seed=3)
    labels = np.arange(400, dtype=np.int64) % 3
    w = np.linspace(0.5, 2.0, 400)
    step, scale = _steps(lo, hi, 64)
    for dtype in ("float64", "float32", "float16"):
        with np.errstate(over="ignore"):
            xx = x.astype(dtype)
        data, lut = _as(x, dtype)
        want = np.zeros(5 * 67 * 3, dtype=np.int64)
        _reference_counts(data, lut, lo, hi, step, scale, 64, labels, 3, want, None)
        np.testing.assert_array_equal(kernels.histogram(xx, lo, hi, 64, labels, 3).reshape(-1), want)
        wwant = np.zeros(5 * 67 * 3)
        _reference_counts(data, lut, lo, hi, step, scale, 64, labels, 3, wwant, w)
        _assert_same(wwant, kernels.weighted_histogram(xx, lo, hi, 64, labels, 3, w).reshape(-1))


_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(
    a=_finite, b=_finite, bins=st.sampled_from([1, 2, 3, 64, 2048]),
    values=st.lists(st.floats(width=64) | _finite, min_size=1, max_size=40),
    offsets=st.lists(st.integers(-3, 3), min_size=1, max_size=40), seed=st.integers(0, 2**16),
)
def test_any_range_and_value(a: float, b: float, bins: int, values: list[float], offsets: list[int], seed: int) -> None:
    """Any finite range (either order) and any values, plus edges moved by a few ulps."""
    lo, hi = np.array([min(a, b)]), np.array([max(a, b)])
    step, scale = _steps(lo, hi, bins)
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        edges = rng.integers(0, bins + 1, len(offsets)) * step[0] + lo[0]
    moved = [e for e in edges]
    with np.errstate(over="ignore"):  # an edge at the largest finite float moves on to infinity: a value like any
        for n, o in enumerate(offsets):
            for _ in range(abs(o)):
                moved[n] = np.nextafter(moved[n], np.inf if o > 0 else -np.inf)
    col = np.array(values + moved + [lo[0], hi[0]])
    labels = rng.integers(0, 4, len(col)).astype(np.int64)
    for dtype in ("float64", "float32"):
        data, lut = _as(col[:, None], dtype)
        _assert_same(*_both(data, lut, lo, hi, step, scale, bins, labels, 4, None))
        _assert_same(*_both(data, lut, lo, hi, step, scale, bins, np.empty(0, dtype=np.int64), 1, rng.random(len(col))))
