"""A variance whose sum of squares overflows float64 is +inf, as NumPy says, never the 0 of a constant feature.

A sentinel of 1e300 among ordinary values (or values near 1e160 that differ) makes
the squared deviations overflow: the corrected two-pass moment is then ``inf - inf``,
NaN, which the clamp of rounding below zero used to turn into 0 on the array-API
path and the GPU (a constant feature, to selection) and left NaN on the CPU loops.
Every path now keeps it +inf (``daskbatch.stats.numerics.central_moment``).
"""

from __future__ import annotations

import warnings
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.errors import OverflowWarning
from daskbatch.stats import ClassMoments, CoMoments, Moments, kernels
from daskbatch.stats.target import TargetMoments
from daskbatch.stats.tiled import CrossCoMoments

PATHS = [pytest.param(False, id="array-api"),
         pytest.param(True, id="kernels", marks=pytest.mark.skipif(not kernels.available(), reason="no numba"))]


def overflowing(rows: int = 400) -> np.ndarray:
    """Column 0: a 1e300 sentinel among N(0, 1); column 1: values near 1e160 that differ; column 2: N(0, 1)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(rows, 3))
    x[17, 0] = 1e300
    x[:, 1] = 1e160 * (1.0 + rng.random(rows))
    return x


def check_variances(var: np.ndarray, x: np.ndarray, ddof: int = 1) -> None:
    """inf where NumPy's variance overflows, NumPy's value (to 1e-12) elsewhere."""
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.var(x, axis=0, ddof=ddof)
    assert np.isposinf(want[:2]).all()  # the data do overflow
    np.testing.assert_array_equal(np.asarray(var)[:2], np.inf)
    np.testing.assert_allclose(np.asarray(var)[2], want[2], rtol=1e-12)


def whole_and_halves(stat: Any, x: np.ndarray, compiled: bool, weighted: bool) -> tuple[Any, Any]:
    """The state of ``x`` in one chunk, and merged from two (weights of 1 when ``weighted``)."""
    w = np.ones(x.shape[0]) if weighted else None
    with dask.config.set({"daskbatch.kernels": compiled}):
        whole = stat.chunk(x, weights=w)
        halves = stat.merge(stat.chunk(x[:150], weights=None if w is None else w[:150]),
                            stat.chunk(x[150:], weights=None if w is None else w[150:]))
    return whole, halves


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("weighted", [False, True])
def test_moments_keep_an_overflowing_variance_infinite(compiled: bool, weighted: bool) -> None:
    x = overflowing()
    stat = Moments()
    for state in whole_and_halves(stat, x, compiled, weighted):  # and no NumPy warning (they are errors here)
        np.testing.assert_array_equal(np.asarray(state.m2)[:2], np.inf)
        np.testing.assert_array_equal(np.asarray(state.m4)[:2], np.inf)
        check_variances(stat.finalize(state).var, x)


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("weighted", [False, True])
def test_covariance_diagonal_is_the_overflowing_variance(compiled: bool, weighted: bool) -> None:
    """The co-moments' diagonal is +inf where the variance is (not the NaN of inf - inf), merged or not."""
    x = overflowing()
    stat = CoMoments()
    for state in whole_and_halves(stat, x, compiled, weighted):
        result = stat.finalize(state)
        cov, corr = np.asarray(result.cov), np.asarray(result.corr)
        check_variances(np.diagonal(cov), x)
        assert np.isfinite(cov[0, 2]) and np.isfinite(cov[2, 2])
        # No correlation with an overflowed feature (1/sqrt(inf) would make it 0, measured by nothing); 1 with itself.
        assert np.isnan(corr[0, 1:]).all() and np.isnan(corr[1:, 0]).all() and np.isnan(corr[1, 2])
        np.testing.assert_array_equal(np.diagonal(corr), 1.0)


def test_diagonal_tiles_keep_an_overflowing_variance_infinite() -> None:
    """The tiles of a covariance too wide for one state: a diagonal tile's diagonal as CoMoments'."""
    x = overflowing()
    tile = CrossCoMoments()
    for state in (tile.chunk(x), tile.merge(tile.chunk(x[:150]), tile.chunk(x[150:]))):
        c = np.asarray(state.c)
        np.testing.assert_array_equal(np.diagonal(c)[:2], np.inf)
        assert np.isfinite(c[2, 2]) and np.isfinite(c[0, 2])
    assert np.isfinite(np.asarray(CrossCoMoments(split=1).chunk(x).c)[0, 1])  # off the diagonal: f0 with f2, as before


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("weighted", [False, True])
def test_class_moments_keep_an_overflowing_variance_infinite(compiled: bool, weighted: bool) -> None:
    x = overflowing()
    y = np.arange(x.shape[0]) % 2  # the sentinel's row 17 is in class 1
    w = np.ones(x.shape[0]) if weighted else None
    with dask.config.set({"daskbatch.kernels": compiled}):
        m2 = np.asarray(ClassMoments(classes=(0, 1)).chunk(x, y, weights=w).m2)  # (features, classes)
    assert np.isposinf(m2[0, 1]) and np.isfinite(m2[0, 0])
    assert np.isposinf(m2[1]).all() and np.isfinite(m2[2]).all()


def test_target_moments_keep_an_overflowing_variance_infinite() -> None:
    x = overflowing()
    target = np.random.default_rng(8).normal(size=x.shape[0])
    target[3] = 1e300
    state = TargetMoments().chunk(x, target)
    np.testing.assert_array_equal(np.asarray(state.x_m2)[:2], np.inf)
    assert np.isfinite(np.asarray(state.x_m2)[2])
    np.testing.assert_array_equal(np.asarray(state.y_m2), np.inf)


@pytest.mark.parametrize("weighted", [False, True])
def test_describe_says_once_which_variances_overflow(weighted: bool) -> None:
    """One OverflowWarning naming the features and their extremes, not NumPy's warnings from inside the passes."""
    x = overflowing(2_000)
    weights = da.from_array(np.ones(x.shape[0]), chunks=500) if weighted else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = db.describe(da.from_array(x, chunks=(500, 3)), weights=weights)
    assert [type(w.message) for w in caught] == [OverflowWarning], [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "2 feature(s)" in message and "f0 (min " in message and "max 1e+300)" in message and "f1 (min 1e+160" in message
    assert "f2" not in message
    check_variances(summary.to_dataframe().loc[:, "var"].to_numpy(), x)
    check_variances(np.diagonal(np.asarray(summary.cov)), x)
