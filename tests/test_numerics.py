"""``describe`` against float64 references: every statistic, ill-conditioned data, dtypes and edge cases."""

from __future__ import annotations

import math
import re

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import mutual_info_score

import daskbatch as db
from daskbatch.errors import CompleteRowsWarning
from daskbatch.stats.numerics import to_numpy
from daskbatch.testing import assert_results_close, assert_states_equal, labels_for, sample_arrays

# --------------------------------------------------------------------- helpers


def fsum_mean_var(col: np.ndarray, ddof: int = 1) -> tuple[float, float]:
    """Mean and variance with math.fsum sums (correctly rounded mean; two-pass variance about it)."""
    col = np.asarray(col, dtype=np.float64)
    mean = math.fsum(col) / col.size
    return mean, math.fsum((col - mean) ** 2) / (col.size - ddof)


def bin_index(col: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """numpy.histogram's bin of every in-range value (last bin closed), -1 below, len(edges)-1 above."""
    b = len(edges) - 1
    idx = np.clip(np.searchsorted(edges, col, side="right") - 1, 0, b - 1)
    return np.where(col < edges[0], -1, np.where(col > edges[-1], b, idx))


@pytest.fixture(scope="module")
def mixed() -> tuple[np.ndarray, np.ndarray]:
    """(600, 4) data of different shapes (normal, skewed, heavy-tailed, discrete) and a 3-class label."""
    rng = np.random.default_rng(2024)
    n = 600
    y = rng.integers(0, 3, n)
    x = np.column_stack([
        rng.normal(3.0, 2.0, n) + y,
        rng.exponential(1.5, n),
        rng.standard_t(5, n) * 10 - 40,
        rng.integers(0, 6, n).astype(np.float64) + 0.5 * (y == 2),
    ])
    return x, y


CHUNKS = (1, 5, 64, 99, 600)  # one-row chunks, small, ragged and one chunk

# ------------------------------------------------------- statistics vs numpy


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("rows", [7, 64, 600])
def test_moments_match_numpy_and_scipy(mixed, rows: int, ddof: int) -> None:
    x, _ = mixed
    s = db.describe(da.from_array(x, chunks=(rows, -1)), stats=["moments", db.Moments(ddof=ddof)])
    u = db.describe(da.from_array(x, chunks=(rows, -1)), stats=db.stats.Moments(ddof=ddof, bias=False))
    np.testing.assert_array_equal(s.count, np.full(4, 600.0))
    np.testing.assert_array_equal(s.nan_count, np.zeros(4))
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(s.var, x.var(axis=0, ddof=ddof), rtol=1e-13)
    np.testing.assert_allclose(s.std, x.std(axis=0, ddof=ddof), rtol=1e-13)
    np.testing.assert_array_equal(s.min, x.min(axis=0))
    np.testing.assert_array_equal(s.max, x.max(axis=0))
    np.testing.assert_allclose(s.skew, scipy.stats.skew(x, axis=0), rtol=1e-11)
    np.testing.assert_allclose(s.kurtosis, scipy.stats.kurtosis(x, axis=0), rtol=1e-11)
    np.testing.assert_allclose(u.skew, scipy.stats.skew(x, axis=0, bias=False), rtol=1e-11)
    np.testing.assert_allclose(u.kurtosis, scipy.stats.kurtosis(x, axis=0, bias=False), rtol=1e-11)


@pytest.mark.parametrize("ddof", [0, 1])
def test_cov_corr_match_numpy_on_complete_rows(mixed, ddof: int) -> None:
    x, _ = mixed
    x = x.copy()
    x[[3, 17, 17, 400], [0, 1, 2, 3]] = [np.nan, np.inf, np.nan, -np.inf]
    complete = np.all(np.isfinite(x), axis=1)
    s = db.describe(da.from_array(x, chunks=(37, -1)), stats=["moments", "cov", db.Moments(ddof=ddof)])
    assert s.cov_count == int(complete.sum()) == 597
    np.testing.assert_allclose(s.cov, np.cov(x[complete], rowvar=False, ddof=ddof), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(s.corr, np.corrcoef(x[complete], rowvar=False), rtol=1e-12, atol=1e-13)
    assert np.all(np.abs(s.corr) <= 1.0)
    np.testing.assert_array_equal(np.diag(s.corr), np.ones(4))
    np.testing.assert_array_equal(s.cov, s.cov.T)


@pytest.mark.parametrize("rows", CHUNKS)
def test_histogram_counts_equal_numpy_exactly(mixed, rows: int) -> None:
    x, _ = mixed
    s = db.describe(da.from_array(x, chunks=(rows, -1)), stats="hist", bins=17)
    gamma = (1 + s.provenance["sketch"]["alpha"]) / (1 - s.provenance["sketch"]["alpha"])
    for d in range(4):
        lo, hi = s.arrays.hist_edges[d, 0], s.arrays.hist_edges[d, -1]
        # The range holds the data and ends at most one sketch bucket (a factor gamma) beyond it.
        vmin, vmax = x[:, d].min(), x[:, d].max()
        assert min(vmin * gamma, vmin / gamma) <= lo <= vmin and vmax <= hi <= max(vmax * gamma, vmax / gamma), d
        counts, edges = np.histogram(x[:, d], bins=17, range=(lo, hi))  # numpy's binning of that range
        np.testing.assert_array_equal(s.arrays.hist_edges[d], edges)
        np.testing.assert_array_equal(s.arrays.hist_counts[d], counts)
    np.testing.assert_array_equal(s.underflow, np.zeros(4))
    np.testing.assert_array_equal(s.overflow, np.zeros(4))


#: (lo, hi, bins) where the scaled index ``floor((x - lo) * bins / (hi - lo))`` of a value one
#: ulp from an edge lands one bin too high (-2, 1, 27; 0.2, 4.4, 15) or too low (1.2573..., 26).
EDGE_CASES = [(-2.5, 4.0, 13), (-2.0, 1.0, 27), (0.2, 4.4, 15), (1.257302210933933, 4.257302210933933, 26)]


@pytest.mark.parametrize("lo, hi, bins", EDGE_CASES)
def test_histogram_with_range_counts_outside_and_nan_apart(lo: float, hi: float, bins: int) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(0, 3, (500, 2))
    x[::37, 0] = np.nan
    x[5, 1], x[6, 1] = np.inf, -np.inf
    edges = np.histogram_bin_edges([], bins=bins, range=(lo, hi))
    # values exactly on every edge and one ulp either side: the cases rounding gets wrong
    x[100 : 100 + 3 * (bins + 1), 1] = np.concatenate(
        [edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)]
    )
    with pytest.warns(db.RangeWarning, match="2 of 2 feature"):  # N(0, 3) spills far beyond these ranges
        s = db.describe(da.from_array(x, chunks=(61, -1)), stats="hist", bins=bins, range=(lo, hi))
    for d in range(2):
        col = x[:, d]
        valid = ~np.isnan(col)
        counts, e = np.histogram(col[valid], bins=bins, range=(lo, hi))
        np.testing.assert_array_equal(s.arrays.hist_edges[d], e)
        np.testing.assert_array_equal(s.arrays.hist_counts[d], counts)
        assert s.arrays.underflow[d] == np.sum(col < lo)
        assert s.arrays.overflow[d] == np.sum(col > hi)
        assert s.arrays.nan_count[d] == np.sum(~valid)
        assert s.arrays.hist_counts[d].sum() + s.arrays.underflow[d] + s.arrays.overflow[d] + s.arrays.nan_count[d] == col.size


def test_histogram_per_feature_ranges() -> None:
    x = np.column_stack([np.linspace(0, 1, 50), np.linspace(-10, 10, 50)])
    ranges = np.array([[0.25, 0.75], [-20.0, 0.0]])
    with pytest.warns(db.RangeWarning, match="f0 \\(52.0%\\), f1 \\(50.0%\\)"):  # half of each is outside
        s = db.describe(x, stats="hist", bins=4, range=ranges)
    assert s.provenance["out_of_range"] == ["f0", "f1"]
    np.testing.assert_array_equal(s.out_of_range_fraction, [0.52, 0.5])
    for d in range(2):
        counts, edges = np.histogram(x[:, d], bins=4, range=tuple(ranges[d]))
        np.testing.assert_array_equal(s.arrays.hist_counts[d], counts)
        np.testing.assert_array_equal(s.arrays.hist_edges[d], edges)
    with pytest.raises(ValueError, match="range"):
        db.describe(x, stats="hist", range=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="lo < hi"):
        db.describe(x, stats="hist", range=(1.0, 1.0))


@pytest.mark.parametrize("miller_madow", [False, True])
@pytest.mark.parametrize("rows", [3, 64, 600])
def test_mutual_information_equals_sklearn(mixed, rows: int, miller_madow: bool) -> None:
    x, y = mixed
    x = x.copy()
    x[::50, 2] = np.nan  # NaN rows leave that feature's table, not the others'
    nats = db.describe(da.from_array(x, chunks=(rows, -1)), y, stats=db.stats.MutualInformation(miller_madow=miller_madow), bins=9)
    bits = db.describe(x, y, stats=db.stats.MutualInformation(base=2, miller_madow=miller_madow), bins=9)
    assert nats.provenance["mi_units"] == "nats" and bits.provenance["mi_units"] == "bits"
    for d in range(4):
        # MI counts the in-range bins only: out-of-range values are reported, not scored
        e = nats.arrays.hist_edges[d]
        valid = ~np.isnan(x[:, d]) & (x[:, d] >= e[0]) & (x[:, d] <= e[-1])
        binned = bin_index(x[valid, d], e)
        want = mutual_info_score(binned, y[valid])
        if miller_madow:
            n = valid.sum()
            m_x, m_y = np.unique(binned).size, np.unique(y[valid]).size
            m_xy = np.unique(np.stack([binned, y[valid]]), axis=1).shape[1]
            want += (m_x + m_y - m_xy - 1) / (2 * n)
        assert abs(nats.arrays.mi[d] - want) <= 1e-12, d
        assert bits.arrays.mi[d] == pytest.approx(nats.arrays.mi[d] / math.log(2), rel=1e-14)
    # the joint table is the exact contingency of bin x class
    np.testing.assert_array_equal(nats.joint_counts.sum(axis=(1, 2)), [600, 600, 588, 600])
    assert nats.joint_counts.shape == (4, 9 + 2, 3)


def test_mutual_information_of_independent_and_identical_labels() -> None:
    y = np.tile(np.arange(4), 40)
    x = np.column_stack([np.repeat(np.arange(8.0), 20), y.astype(np.float64)])  # independent; identical
    s = db.describe(x, y, stats="mi", bins=8)
    assert s.arrays.mi[0] == pytest.approx(0.0, abs=1e-15)
    assert s.arrays.mi[1] == pytest.approx(math.log(4), rel=1e-14)


@pytest.mark.parametrize("q", [0.0, 0.01, 0.25, 0.5, 0.9, 0.999, 1.0])
def test_quantiles_within_one_bin_of_inverted_cdf(mixed, q: float) -> None:
    x, _ = mixed
    s = db.describe(da.from_array(x, chunks=(50, -1)), stats="hist", bins=32)
    got = s.quantile(q)
    want = np.quantile(x, q, axis=0, method="inverted_cdf")
    width = s.arrays.hist_edges[:, 1] - s.arrays.hist_edges[:, 0]
    assert np.all(np.abs(got - want) <= width * (1 + 1e-12)), (got, want, width)
    many = s.quantile([q, 0.5])
    assert many.shape == (4, 2)
    assert list(many.columns) == [q, 0.5] and list(many.index) == list(s.feature_names)
    np.testing.assert_array_equal(many.iloc[:, 0], got)


def test_quantile_rejects_bad_probabilities(mixed) -> None:
    s = db.describe(mixed[0], stats="hist", bins=8)
    for bad in (-0.1, 1.5, np.nan):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            s.quantile(bad)
    with pytest.raises(ValueError, match="hist"):
        db.describe(mixed[0], stats="moments").quantile(0.5)

# ------------------------------------------------------ ill-conditioned data


def _check_shifted(n: int) -> None:
    rng = np.random.default_rng(11)
    x = 1e8 + rng.standard_normal((n, 4))
    s = db.describe(da.from_array(x, chunks=(65_536, 4)), stats=("moments", "cov"))
    for d in range(4):
        mean, var = fsum_mean_var(x[:, d])
        assert abs(s.arrays.mean[d] - mean) / mean <= 1e-15, d
        assert abs(s.arrays.var[d] - var) / var <= 1e-13, d
        assert abs(s.arrays.cov[d, d] - var) / var <= 1e-13, d
        assert abs(s.arrays.std[d] - math.sqrt(var)) / math.sqrt(var) <= 1e-13, d


def test_shifted_by_1e8_mean_and_variance() -> None:
    _check_shifted(500_000)


@pytest.mark.slow
def test_shifted_by_1e8_full_size() -> None:
    _check_shifted(2_000_000)


@pytest.mark.parametrize("noise", [1.0, 3000.0])
def test_float32_near_1e9(noise: float) -> None:
    """float32 data: every value is accumulated in float64 (noise 1 rounds every value to 1e9 itself)."""
    rng = np.random.default_rng(3)
    x = (1e9 + noise * rng.standard_normal((200_000, 2))).astype(np.float32)
    s = db.describe(da.from_array(x, chunks=(65_536, 2)), stats=("moments", "cov"))
    assert s.mean.dtype == np.float64
    for d in range(2):
        mean, var = fsum_mean_var(x[:, d].astype(np.float64))
        assert abs(s.arrays.mean[d] - mean) / mean <= 1e-15, d
        if var == 0.0:
            assert s.arrays.var[d] == 0.0 and s.arrays.cov[d, d] == 0.0
            assert np.isnan(s.arrays.skew[d]) and np.isnan(s.arrays.kurtosis[d])
        else:
            assert abs(s.arrays.var[d] - var) / var <= 1e-13, d
            assert abs(s.arrays.cov[d, d] - var) / var <= 1e-13, d


def test_float32_cancellation_example_from_sklearn_12333() -> None:
    # scikit-learn's float32 accumulator gave wrong means on large float32 columns.
    x = np.full((1_000_000, 1), 100_000.0, dtype=np.float32)
    x[::2] = 100_001.0
    s = db.describe(da.from_array(x, chunks=(100_000, 1)), stats="moments")
    assert s.arrays.mean[0] == 100_000.5
    assert s.arrays.var[0] == pytest.approx(0.25 * 1_000_000 / 999_999, rel=1e-15)

# ---------------------------------------------------------------- dtypes

ACCEPTED = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64", "bool"]


@pytest.mark.parametrize("dtype", ACCEPTED)
def test_accepted_dtypes_give_float64_results(dtype: str) -> None:
    base = np.arange(60).reshape(20, 3) % 7
    x = base.astype(dtype)
    s = db.describe(da.from_array(x, chunks=(6, 3)), stats=("moments", "cov", "hist"), bins=4)
    ref = db.describe(da.from_array(x.astype(np.float64), chunks=(6, 3)), stats=("moments", "cov", "hist"), bins=4)
    for name in ("count", "mean", "var", "std", "skew", "kurtosis", "min", "max", "cov", "corr", "hist_edges"):
        got = getattr(s.arrays, name)
        # int64/uint64 extremes stay in their dtype: float64 rounds them beyond 2**53.
        exact = name in ("min", "max") and dtype in ("int64", "uint64")
        assert got.dtype == (np.dtype(dtype) if exact else np.float64), name
        np.testing.assert_array_equal(got, getattr(ref, name), err_msg=name)
    np.testing.assert_array_equal(s.hist_counts, ref.hist_counts)
    assert s.provenance["dtype"] == dtype


@pytest.mark.parametrize(
    "x",
    [
        np.ones((3, 2), dtype=np.complex128),
        np.array([["a", "b"]] * 3),
        np.array([[1, 2]] * 3, dtype=object),
        np.array([["2020-01-01", "2021-01-01"]] * 3, dtype="datetime64[D]"),
        np.ones((3, 2), dtype="timedelta64[s]"),
    ],
    ids=["complex", "str", "object", "datetime", "timedelta"],
)
def test_rejected_dtypes_name_array_and_dtype(x: np.ndarray) -> None:
    with pytest.raises(TypeError, match="^" + re.escape(f"x has dtype {np.dtype(x.dtype)};")):
        db.describe(x)
    with pytest.raises(TypeError, match=r"^x has dtype"):
        db.describe(da.from_array(x, chunks=(2, 2)))


def test_label_dtype_must_be_integer() -> None:
    x = np.ones((4, 2))
    with pytest.raises(TypeError, match="label has dtype float64"):
        db.describe(x, np.array([0.0, 1.0, 0.0, 1.0]))
    s = db.describe(x, np.array([True, False, True, False]), stats="mi", bins=2)  # bool counts as 0/1
    assert s.joint_counts.shape[2] == 2

# ------------------------------------------------------------- edge cases


def test_nan_values_are_omitted_and_counted() -> None:
    x = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0], [5.0, np.nan]])
    with pytest.warns(CompleteRowsWarning, match="only the 1 of 4 rows"):  # and says so
        s = db.describe(da.from_array(x, chunks=(1, 2)), stats=("moments", "cov", "hist"), bins=2)
    np.testing.assert_array_equal(s.count, [3, 1])
    np.testing.assert_array_equal(s.nan_count, [1, 3])
    np.testing.assert_array_equal(s.mean, [3.0, 4.0])
    np.testing.assert_array_equal(s.var, [4.0, np.nan])  # one value: no sample variance
    np.testing.assert_array_equal(s.min, [1.0, 4.0])
    np.testing.assert_array_equal(s.max, [5.0, 4.0])
    assert s.cov_count == 1
    np.testing.assert_array_equal(s.hist_counts.sum(axis=1), [3, 1])


def test_all_nan_feature() -> None:
    x = np.column_stack([np.full(5, np.nan), np.arange(5.0)])
    with pytest.warns(CompleteRowsWarning, match="no finite value in f0"):  # and says so
        s = db.describe(da.from_array(x, chunks=(2, 2)), stats=("moments", "cov", "hist"), bins=3)
    assert s.arrays.count[0] == 0 and s.arrays.nan_count[0] == 5
    for name in ("mean", "var", "std", "skew", "kurtosis", "min", "max"):
        assert np.isnan(getattr(s.arrays, name)[0]), name
    assert s.arrays.mean[1] == 2.0
    assert s.cov_count == 0 and np.all(np.isnan(s.cov))
    assert s.arrays.hist_counts[0].sum() == 0 and s.arrays.hist_counts[1].sum() == 5


def test_infinities() -> None:
    x = np.array([[1.0, 1.0, 1.0], [np.inf, -np.inf, np.inf], [2.0, 2.0, -np.inf], [3.0, 3.0, 3.0]])
    with pytest.warns(CompleteRowsWarning, match="only the 2 of 4 rows"):  # and says so
        s = db.describe(da.from_array(x, chunks=(3, 3)), stats=("moments", "cov"))
    np.testing.assert_array_equal(s.count, [4, 4, 4])
    np.testing.assert_array_equal(s.posinf_count, [1, 0, 1])
    np.testing.assert_array_equal(s.neginf_count, [0, 1, 1])
    np.testing.assert_array_equal(s.mean, [np.inf, -np.inf, np.nan])
    assert np.all(np.isnan(s.var)) and np.all(np.isnan(s.skew)) and np.all(np.isnan(s.kurtosis))
    np.testing.assert_array_equal(s.min, [1.0, -np.inf, -np.inf])
    np.testing.assert_array_equal(s.max, [np.inf, 3.0, np.inf])
    assert s.cov_count == 2  # rows 0 and 3


def test_histogram_range_of_feature_with_infinity_uses_finite_values() -> None:
    x = np.column_stack([np.arange(100.0), np.arange(100.0)])
    x[5, 0] = np.inf
    s = db.describe(x, stats="hist", bins=10)
    finite = np.delete(x[:, 0], 5)
    # The range ends within one sketch bucket (a factor gamma) of the finite extrema, never at inf.
    gamma = (1 + s.provenance["sketch"]["alpha"]) / (1 - s.provenance["sketch"]["alpha"])
    lo, hi = s.arrays.hist_edges[0, 0], s.arrays.hist_edges[0, -1]
    assert lo == 0.0 and finite.max() <= hi <= finite.max() * gamma
    counts, edges = np.histogram(finite, bins=10, range=(lo, hi))
    np.testing.assert_array_equal(s.arrays.hist_edges[0], edges)
    np.testing.assert_array_equal(s.arrays.hist_counts[0], counts)
    assert s.arrays.overflow[0] == 1
    assert abs(s.quantile(0.5).iloc[0] - np.quantile(x[:, 0], 0.5, method="inverted_cdf")) <= edges[1] - edges[0]


def test_constant_feature() -> None:
    x = np.column_stack([np.full(10, 3.25), np.arange(10.0)])
    s = db.describe(da.from_array(x, chunks=(3, 2)), stats=("moments", "cov", "hist"), bins=4)
    assert s.arrays.mean[0] == 3.25 and s.arrays.var[0] == 0.0 and s.arrays.std[0] == 0.0
    assert np.isnan(s.arrays.skew[0]) and np.isnan(s.arrays.kurtosis[0])
    assert s.arrays.cov[0, 0] == 0.0 and s.arrays.cov[0, 1] == 0.0
    assert np.isnan(s.arrays.corr[0, 0]) and np.isnan(s.arrays.corr[0, 1]) and s.arrays.corr[1, 1] == 1.0
    counts, edges = np.histogram(x[:, 0], bins=4)  # numpy's (v - 0.5, v + 0.5)
    np.testing.assert_array_equal(s.arrays.hist_edges[0], edges)
    np.testing.assert_array_equal(s.arrays.hist_counts[0], counts)


def test_single_row() -> None:
    x = np.array([[1.5, -2.0]])
    s = db.describe(x, stats=("moments", "cov", "hist"), bins=4)
    np.testing.assert_array_equal(s.count, [1, 1])
    np.testing.assert_array_equal(s.mean, x[0])
    assert np.all(np.isnan(s.var)) and np.all(np.isnan(s.skew))
    assert s.cov_count == 1 and np.all(np.isnan(s.cov)) and np.all(np.isnan(s.corr))
    np.testing.assert_array_equal(s.hist_counts.sum(axis=1), [1, 1])
    s0 = db.describe(x, stats=["moments", "cov", db.Moments(ddof=0)])
    np.testing.assert_array_equal(s0.var, [0.0, 0.0])
    np.testing.assert_array_equal(s0.cov, np.zeros((2, 2)))


def test_bias_corrections_undefined_for_tiny_samples() -> None:
    x = np.array([[1.0], [2.0], [4.0]])
    s = db.describe(x, stats=db.stats.Moments(bias=False))
    assert s.arrays.skew[0] == pytest.approx(scipy.stats.skew(x[:, 0], bias=False), rel=1e-14)
    assert np.isnan(s.arrays.kurtosis[0])  # needs n > 3 (scipy silently returns the biased value)


@pytest.mark.parametrize(
    "x, match",
    [
        (np.zeros((0, 3)), "no values"),
        (np.zeros((5, 0)), "no values"),
        (np.arange(5.0), r"expected 2-D.*x\[:, None\]"),
        (np.zeros((2, 3, 4)), "expected 2-D"),
    ],
    ids=["no-rows", "no-features", "1-D", "3-D"],
)
def test_bad_shapes(x: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        db.describe(x)


def test_label_errors() -> None:
    x = np.ones((6, 2))
    with pytest.raises(ValueError, match="label has 5 values but x has 6 rows"):
        db.describe(x, np.zeros(5, dtype=int))
    with pytest.raises(ValueError, match="expected 1-D"):
        db.describe(x, np.zeros((6, 1), dtype=int))
    with pytest.raises(ValueError, match="class numbers"):
        db.describe(x, np.array([0, 1, -1, 0, 1, 0]), stats="mi")
    s = db.describe(x, None, stats=("moments", "mi"))  # MI without a label is skipped
    assert s.mi is None


def test_nan_policies() -> None:
    x = np.array([[1.0, 1.0], [np.nan, 2.0], [3.0, 4.0]])
    p = db.describe(x, stats=db.stats.Moments(nan_policy="propagate"))
    assert np.isnan(p.arrays.mean[0]) and np.isnan(p.arrays.var[0]) and np.isnan(p.arrays.min[0])
    assert p.arrays.mean[1] == pytest.approx(7 / 3) and p.arrays.nan_count[0] == 1
    with pytest.raises(ValueError, match=r"holds NaN values in 1 feature\(s\): f0 \(1\)"):
        db.describe(x, stats=db.stats.Moments(nan_policy="raise"))
    db.describe(x[[0, 2]], stats=db.stats.Moments(nan_policy="raise"))  # no NaN: fine
    with pytest.raises(ValueError, match="nan_policy"):
        db.describe(x, stats=db.stats.Moments(nan_policy="ignore"))  # type: ignore[arg-type]


def test_unknown_statistic_and_split_every() -> None:
    with pytest.raises(ValueError, match="unknown statistic"):
        db.describe(np.ones((3, 2)), stats=("moments", "median"))
    with pytest.raises(ValueError, match="split_every must be at least 2"):
        db.describe(np.ones((3, 2)), run=db.RunOptions(split_every=1))


@pytest.mark.parametrize("lo, hi, bins", EDGE_CASES)
def test_histogram_slots_at_edges_every_backend(xp, lo: float, hi: float, bins: int) -> None:
    """The array-API path (strict, cupy) and the CPU path bin edge values exactly as numpy does."""
    from daskbatch.stats import Histogram

    edges = np.histogram_bin_edges([], bins=bins, range=(lo, hi))
    v = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [np.nan]])
    x = np.column_stack([v, v[::-1]])
    hist = Histogram(bins=bins, lo=(lo, lo), hi=(hi, hi))
    got = hist.finalize(hist.chunk(xp.asarray(x)))
    for d in range(2):
        counts, _ = np.histogram(x[~np.isnan(x[:, d]), d], bins=bins, range=(lo, hi))
        np.testing.assert_array_equal(np.asarray(to_numpy(got.counts))[d], counts)
        assert int(to_numpy(got.underflow)[d]) == 1 and int(to_numpy(got.overflow)[d]) == 1


@given(x=sample_arrays(min_rows=1, max_rows=40, nonfinite=True), data=st.data())
def test_compiled_kernels_match_array_api_path(x: np.ndarray, data: st.DataObject) -> None:
    """numpy chunks go through the compiled kernels; they must agree with the array-API reference code."""
    from daskbatch.stats import CoMoments, Histogram, Moments, Sketch

    features = x.shape[1]
    y = data.draw(labels_for(x.shape[0]))
    hist = Histogram(bins=6, lo=(-100.0,) * features, hi=(100.0,) * features, by_label=True)
    sketch = Sketch()
    for stat in (Moments(), CoMoments(), hist, sketch):
        with dask.config.set({"daskbatch.kernels": True}):
            fast = stat.chunk(x, y)
        with dask.config.set({"daskbatch.kernels": False}):
            slow = stat.chunk(x, y)
        if stat is hist or stat is sketch:
            assert_states_equal(fast, slow)
        else:
            assert_results_close(stat.finalize(fast), stat.finalize(slow), rtol=1e-12, atol=1e-12)
