"""The numba CPU kernels (daskbatch/stats/kernels) agree with the array-API reference path.

The reference is the same ``chunk()`` with ``daskbatch.kernels`` switched off
(and, once, the ``array_api_strict`` backend, which never takes the kernels).
Moments and co-moments agree to rounding, histograms bit for bit, on every
dtype, with NaN, ±inf, empty, one-row and constant chunks.
"""

from __future__ import annotations

import math

import dask.config
import numpy as np
import pytest

from daskbatch.stats import ClassMoments, CoMoments, Histogram, Moments, kernels
from daskbatch.stats._base import merge_all

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

# Each dtype compiles three kernels on a cold numba cache (~3 s); the common ones stay
# in the quick run, the rest are marked slow.
_slow = pytest.mark.slow
DTYPES = ["float32", "float64", "int64", "bool"] + [
    pytest.param(d, marks=_slow) for d in ("float16", "int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64")
]
MOMENT_FIELDS = ("n", "shift", "mean", "m2", "m3", "m4", "fmin", "fmax", "nan_count", "posinf_count", "neginf_count")


def reference(stat, x, y=None):
    """``stat.chunk`` on the array-API path."""
    with dask.config.set({"daskbatch.kernels": False}):
        assert not kernels.kernel_path(x).compiled
        return stat.chunk(x, y)


def fast(stat, x, y=None):
    assert kernels.kernel_path(x).compiled
    return stat.chunk(x, y)


def assert_moments_close(a, b, rtol=1e-13):
    for f in MOMENT_FIELDS:
        va, vb = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        # int64/uint64 blocks keep their extremes in their dtype (exact); the rest is float64.
        exact = f in ("fmin", "fmax") and vb.dtype in (np.int64, np.uint64)
        assert va.dtype == vb.dtype and (exact or vb.dtype == np.float64), f
        if f in ("n", "shift", "fmin", "fmax", "nan_count", "posinf_count", "neginf_count"):
            np.testing.assert_array_equal(va, vb, err_msg=f)
        else:
            # Relative to the field's scale: m3 of a symmetric column is near 0.
            scale = np.max(np.abs(vb), initial=0.0)
            np.testing.assert_allclose(va, vb, rtol=rtol, atol=rtol * scale, err_msg=f)


def data(dtype: str, rows: int = 500, cols: int = 5, seed: int = 0) -> np.ndarray:
    """Skewed, offset values of ``dtype`` (well conditioned: mean ~ spread)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random((rows, cols)) < 0.3
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    base = rng.gamma(2.0, 3.0, size=(rows, cols)) + np.arange(cols)
    if info is not None:
        base = np.clip(np.round(base * (1 if info.bits == 8 else 50)), info.min, info.max)
        return base.astype(dtype)
    return base.astype(dtype)


def with_nonfinite(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[3, 0] = np.nan
    x[7, 1] = np.inf
    x[8, 1] = -np.inf
    x[9, 2] = np.inf
    x[:, 4] = np.nan  # a column with no finite value
    x[0, 3] = np.nan  # the reference value comes from a later row
    return x


def hist_for(x: np.ndarray, bins: int = 13, by_label: bool = False) -> Histogram:
    v = x.astype(np.float64)
    finite = np.isfinite(v)
    lo = np.min(np.where(finite, v, np.inf), axis=0)
    hi = np.max(np.where(finite, v, -np.inf), axis=0)
    lo, hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 1.0)
    # Ranges a bit inside the data, so that underflow and overflow occur.
    span = np.where(hi > lo, hi - lo, 1.0)
    return Histogram(bins, tuple(lo + 0.05 * span), tuple(hi - 0.1 * span), by_label=by_label)


# --- every dtype --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_dtypes_agree(dtype: str) -> None:
    x = data(dtype)
    if x.dtype.kind == "f":
        x = with_nonfinite(x)
    assert_moments_close(fast(Moments(), x), reference(Moments(), x))
    c_fast, c_ref = fast(CoMoments(), x[:, :4]), reference(CoMoments(), x[:, :4])
    assert float(c_fast.n) == float(c_ref.n)
    np.testing.assert_array_equal(c_fast.shift, c_ref.shift)
    np.testing.assert_allclose(c_fast.mean, c_ref.mean, rtol=1e-13, atol=1e-13 * np.abs(c_ref.mean).max())
    np.testing.assert_allclose(c_fast.c, c_ref.c, rtol=1e-12, atol=1e-13 * np.abs(c_ref.c).max())
    h = hist_for(x)
    np.testing.assert_array_equal(fast(h, x).counts, reference(h, x).counts)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32"])
def test_histogram_matches_numpy_histogram(dtype: str) -> None:
    x = data(dtype, rows=2000, cols=3, seed=4)
    h = hist_for(x, bins=17)
    counts = fast(h, x).counts[:, :, 0]
    for d in range(x.shape[1]):
        expected, edges = np.histogram(x[:, d].astype(np.float64), bins=17, range=(h.lo[d], h.hi[d]))
        np.testing.assert_array_equal(counts[d, 1:-2], expected)
        np.testing.assert_array_equal(h.edges(np)[d], edges)


# --- histograms bit for bit ---------------------------------------------------------------


def test_histogram_values_on_and_beside_every_edge() -> None:
    rng = np.random.default_rng(7)
    for trial in range(30):
        bins = int(rng.integers(1, 150))
        lo = rng.normal(size=3) * 10.0 ** rng.uniform(-3, 6, size=3)
        hi = lo + 10.0 ** rng.uniform(-5, 6, size=3)
        h = Histogram(bins, tuple(lo), tuple(hi))
        edges = h.edges(np).T
        x = np.concatenate([
            edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf),
            rng.uniform(lo, hi, size=(200, 3)), [[np.nan, np.inf, -np.inf]],
        ])
        np.testing.assert_array_equal(fast(h, x).counts, reference(h, x).counts, err_msg=f"trial {trial}")


def test_histogram_by_label_bitwise_and_label_errors() -> None:
    x = with_nonfinite(data("float32", rows=400))
    y = np.random.default_rng(1).integers(0, 5, size=400).astype(np.int16)
    h = hist_for(x, by_label=True)
    got, want = fast(h, x, y).counts, reference(h, x, y).counts
    assert got.shape == want.shape == (5, 16, 5)
    np.testing.assert_array_equal(got, want)
    bad = y.copy()
    bad[10] = -2
    with pytest.raises(ValueError, match="found -2"):
        h.chunk(x, bad)


@pytest.mark.parametrize("dtype", ["float32", "bool"] + [pytest.param(d, marks=_slow) for d in ("float64", "int64", "float16")])
def test_class_moments_bitwise_and_against_numpy(dtype: str) -> None:
    # Kernels are bitwise the class-sorted array-API reduction (ANOVA's constant-within-class
    # test reads m2 == 0 exactly), on non-contiguous class values, one absent from the
    # chunk, with NaN/±inf and an all-NaN column; the states agree with numpy per class.
    x = data(dtype, rows=700, cols=5, seed=4)
    if x.dtype.kind == "f":
        x = with_nonfinite(x)
    rng = np.random.default_rng(2)
    y = rng.choice(np.array([7, -1, 3]), size=700)  # class 12 never occurs
    stat = ClassMoments(classes=(-1, 3, 7, 12))
    got, want = fast(stat, x, y), reference(stat, x, y)
    for f in ("n", "shift", "mean", "m2"):
        a, b = getattr(got, f), getattr(want, f)
        assert a.shape == b.shape == (5, 4) and a.dtype == b.dtype == np.float64, f
        np.testing.assert_array_equal(a.view(np.int64), b.view(np.int64), err_msg=f)  # bits, signed zeros too
    v = x.astype(np.float64)
    for k, c in enumerate(stat.classes):
        for j in range(5):
            col = v[y == c, j]
            col = col[np.isfinite(col)]
            assert got.n[j, k] == col.size
            if col.size:
                np.testing.assert_allclose(got.shift[j, k] + got.mean[j, k], np.mean(col), rtol=1e-13, atol=1e-12)
                m2 = np.sum((col - math.fsum(col) / col.size) ** 2)
                np.testing.assert_allclose(got.m2[j, k], m2, rtol=1e-11, atol=1e-9)
    # One feature: NumPy sums the single column pairwise, the kernel in row order: equal to rounding.
    one, ref = fast(stat, x[:, :1], y), reference(stat, x[:, :1], y)
    np.testing.assert_array_equal(one.n, ref.n)
    np.testing.assert_array_equal(one.shift, ref.shift)
    np.testing.assert_allclose(one.mean, ref.mean, rtol=1e-13, atol=1e-13 * np.abs(ref.mean).max())
    np.testing.assert_allclose(one.m2, ref.m2, rtol=1e-12, atol=1e-12 * np.abs(ref.m2).max())


# --- edge cases -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["one_row", "constant", "all_nan", "empty", "fortran_order", "strided"],
)
def test_edge_cases_agree(case: str) -> None:
    x = data("float64", rows=50, cols=4, seed=3)
    if case == "one_row":
        x = x[:1]
    elif case == "constant":
        x = np.full((40, 4), 2.5)
    elif case == "all_nan":
        x = np.full((30, 4), np.nan)
    elif case == "empty":
        x = x[:0]
    elif case == "fortran_order":
        x = np.asfortranarray(x)
    elif case == "strided":
        x = data("float32", rows=100, cols=8)[::3, ::2]
    h = Histogram(8, (0.0,) * 4, (20.0,) * 4)
    with dask.config.set({"daskbatch.kernels": False}):
        ref = Moments().chunk(x), CoMoments().chunk(x), h.chunk(x)
    got = Moments().chunk(x), CoMoments().chunk(x), h.chunk(x)
    assert_moments_close(got[0], ref[0])
    for f in ("n", "shift", "mean", "c"):
        scale = np.max(np.abs(getattr(ref[1], f)), initial=0.0)
        np.testing.assert_allclose(getattr(got[1], f), getattr(ref[1], f), rtol=1e-13, atol=1e-13 * scale)
    np.testing.assert_array_equal(got[2].counts, ref[2].counts)
    r_fast, r_ref = Moments().finalize(got[0]), Moments().finalize(ref[0])
    for f in ("count", "mean", "var", "skew", "kurtosis", "min", "max"):
        np.testing.assert_allclose(getattr(r_fast, f), getattr(r_ref, f), rtol=1e-12, err_msg=f)


def test_array_api_strict_is_the_reference() -> None:
    xps = pytest.importorskip("array_api_strict")
    x = with_nonfinite(data("float64", rows=300, seed=5))
    strict = xps.asarray(x)
    assert not kernels.kernel_path(strict).compiled
    s_ref = Moments().chunk(strict)
    ref = type(s_ref)(**{f: np.asarray(getattr(s_ref, f)) for f in MOMENT_FIELDS})
    assert_moments_close(Moments().chunk(x), ref)


# --- accuracy on ill-conditioned data -------------------------------------------------------


def test_ill_conditioned_mean_and_variance_against_fsum() -> None:
    rng = np.random.default_rng(11)
    x = 1e8 + rng.standard_normal((30_000, 2))
    chunks = [x[:9_000], x[9_000:21_000], x[21_000:]]
    res = Moments().finalize(merge_all(Moments(), [Moments().chunk(c) for c in chunks]))
    for d in range(2):
        col = x[:, d].tolist()
        n = len(col)
        mean = math.fsum(col) / n
        # v - mean is exact here (Sterbenz), so fsum of the squares is the variance to ~1 ulp.
        var = math.fsum((v - mean) ** 2 for v in col) / (n - 1)
        assert abs(res.mean[d] - mean) <= 1e-15 * abs(mean)
        assert abs(res.var[d] - var) <= 1e-13 * var


# --- the switch ---------------------------------------------------------------------------


def test_compiled_only_for_native_numpy_2d_real() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    assert kernels.kernel_path(x).compiled
    assert not kernels.kernel_path(x[:, 0]).compiled
    assert not kernels.kernel_path(x.astype(np.complex64)).compiled
    assert not kernels.kernel_path(x.astype(">f4")).compiled
    with dask.config.set({"daskbatch.kernels": False}):
        assert not kernels.kernel_path(x).compiled
