"""The blocked CPU co-moments (each block centred about its own mean, then merged) against float64 references.

The references are computed here, independently of the package: exactly
rounded sums (``math.fsum``) of float64 copies, centred about an exactly
summed mean. Data sit far from zero (mean 1e6, spread 1), where forming
``Σx² - n·mean²`` would lose every digit, so agreement to 1e-12 shows the
co-moments are centred. Chunks span several centring blocks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskbatch.stats import CoMoments, kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

RTOL = 1e-12


def reference(x: np.ndarray, w: np.ndarray | None = None) -> tuple[int, float, np.ndarray, np.ndarray]:
    """Rows, weight sum, mean and co-moments of the complete rows of ``x``, summed exactly in float64."""
    x = np.asarray(x, dtype=np.float64)
    keep = np.all(np.isfinite(x), axis=1)
    x = x[keep]
    w = np.ones(len(x)) if w is None else np.asarray(w, dtype=np.float64)[keep]
    total = math.fsum(w)
    d = x.shape[1]
    mean = np.array([math.fsum(w * x[:, j]) / total for j in range(d)]) if total > 0 else np.zeros(d)
    dev = x - mean
    c = np.array([[math.fsum(w * dev[:, i] * dev[:, j]) for j in range(d)] for i in range(d)])
    return int(keep.sum()), total, mean, c


def assert_matches(state, ref_rows: int, ref_total: float, ref_mean: np.ndarray, ref_c: np.ndarray) -> None:
    """Compare a state with a reference: counts exactly, mean and co-moments to RTOL of their scale."""
    weighted = hasattr(state, "rows")
    assert float(state.rows if weighted else state.n) == ref_rows
    assert float(state.n) == pytest.approx(ref_total, rel=1e-15)
    mean = np.asarray(state.shift) + np.asarray(state.mean)
    np.testing.assert_allclose(mean, ref_mean, rtol=RTOL, atol=0)
    c = np.asarray(state.c)
    scale = np.sqrt(np.outer(np.diag(ref_c), np.diag(ref_c)))  # |c_ij| <= scale_ij (Cauchy-Schwarz)
    assert np.all(np.abs(c - ref_c) <= RTOL * scale + 1e-300), np.max(np.abs(c - ref_c) / scale)
    np.testing.assert_array_equal(c, c.T)  # one symmetric product per block, symmetric corrections


def far_from_zero(rows: int, d: int, seed: int = 0, dtype: str = "float64") -> np.ndarray:
    """Correlated features of mean ~1e6 and spread ~1."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, d))
    mix = np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    return (1e6 + rng.uniform(-5, 5, d) + z @ mix).astype(dtype)


@pytest.mark.parametrize(("rows", "d"), [(9000, 3), (2500, 64), (5000, 1)])
def test_far_from_zero_matches_exact_sums(rows: int, d: int) -> None:
    x = far_from_zero(rows, d)
    assert rows > kernels.path.centring_rows(d)  # several blocks, the last a partial one
    assert_matches(CoMoments().chunk(x), *reference(x))


def test_float32_chunk_is_centred_in_float64() -> None:
    x = far_from_zero(6000, 8, seed=1, dtype="float32")
    assert_matches(CoMoments().chunk(x), *reference(x))


def test_incomplete_rows_are_left_out() -> None:
    x = far_from_zero(7000, 4, seed=2)
    x[::7, 1] = np.nan
    x[3, 0] = np.inf
    x[5, 3] = -np.inf
    x[4096:4200] = np.nan  # a run of incomplete rows across a block boundary
    state = CoMoments().chunk(x)
    assert_matches(state, *reference(x))
    first = int(np.flatnonzero(np.all(np.isfinite(x), axis=1))[0])
    np.testing.assert_array_equal(state.shift, x[first])  # the reference row is still the first complete one


def test_block_with_no_complete_rows() -> None:
    from daskbatch.stats.kernels._numba_comoments import chunk_comoments

    x = far_from_zero(300, 3, seed=3)
    x[100:200, 2] = np.nan  # block 1 of 3 (100 rows each) has none
    n, total, shift, mean, c = chunk_comoments(x, None, 100)
    rows, ref_total, ref_mean, ref_c = reference(x)
    assert (n, total) == (rows, ref_total)
    np.testing.assert_allclose(shift + mean, ref_mean, rtol=RTOL)
    np.testing.assert_allclose(c, ref_c, rtol=1e-10, atol=RTOL * np.max(np.abs(ref_c)))


def test_no_complete_rows_and_no_rows() -> None:
    from daskbatch.stats.kernels._numba_comoments import chunk_comoments

    x = np.full((50, 3), np.nan)
    n, total, shift, mean, c = chunk_comoments(x, None, 16)
    assert (n, total) == (0, 0.0)
    for field in (shift, mean, c):
        np.testing.assert_array_equal(field, 0.0)
    n, total, shift, mean, c = chunk_comoments(np.empty((0, 3)), None, 16)
    assert (n, total, shift.shape, mean.shape, c.shape) == (0, 0.0, (3,), (3,), (3, 3))
    state = CoMoments().chunk(np.empty((0, 3), dtype=np.float32))
    assert float(state.n) == 0.0 and state.c.shape == (3, 3)


@pytest.mark.parametrize("d", [1, 6])
def test_weighted_matches_exact_sums(d: int) -> None:
    x = far_from_zero(8000, d, seed=4)
    x[::11, 0] = np.nan
    w = np.random.default_rng(5).gamma(2.0, 1.5, len(x))
    assert_matches(CoMoments().chunk(x, weights=w), *reference(x, w))


def test_weighted_zero_weights_and_integer_weights() -> None:
    x = far_from_zero(5000, 3, seed=6)
    w = np.random.default_rng(7).integers(0, 4, len(x)).astype(np.float64)  # rows of weight 0 are left out
    state = CoMoments().chunk(x, weights=w)
    keep = w > 0
    assert_matches(state, *reference(x[keep], w[keep]))
    cov = np.cov(x, fweights=w.astype(np.int64), rowvar=False)
    np.testing.assert_allclose(CoMoments().finalize(state).cov, cov, rtol=1e-10)


def test_block_size_does_not_matter_beyond_rounding() -> None:
    from daskbatch.stats.kernels._numba_comoments import chunk_comoments

    x = far_from_zero(3000, 5, seed=8)
    one = chunk_comoments(x, None, 10**6)
    for block_rows in (1, 7, 1000):
        many = chunk_comoments(x, None, block_rows)
        assert many[:2] == one[:2]
        np.testing.assert_array_equal(many[2], one[2])
        np.testing.assert_allclose(many[3], one[3], rtol=RTOL)
        np.testing.assert_allclose(many[4], one[4], rtol=RTOL, atol=RTOL * np.max(np.abs(one[4])))


def test_blocks_merge_as_states_do() -> None:
    """The in-chunk merge of the blocks agrees with CoMoments.merge of the blocks' own states."""
    x = far_from_zero(4000, 4, seed=9)
    stat = CoMoments()
    whole = stat.chunk(x)
    merged = stat.chunk(x[:1500])
    for part in (x[1500:2600], x[2600:]):
        merged = stat.merge(merged, stat.chunk(part))
    np.testing.assert_allclose(whole.shift + whole.mean, merged.shift + merged.mean, rtol=RTOL)
    np.testing.assert_allclose(whole.c, merged.c, rtol=RTOL, atol=RTOL * np.max(np.abs(whole.c)))


def test_centring_rows_keep_the_buffer_cache_sized() -> None:
    from daskbatch.stats.kernels.path import (
        MAX_CENTRING_ROWS,
        MIN_CENTRING_ROWS,
        centring_rows,
    )

    for d in (1, 8, 64, 65, 256, 4096):
        rows = centring_rows(d)
        assert MIN_CENTRING_ROWS <= rows <= MAX_CENTRING_ROWS
        assert rows * d * 8 <= 512 * 2**10 or rows == MIN_CENTRING_ROWS
    assert centring_rows(64) == 1024


def test_drifting_data_whose_blocks_have_different_means() -> None:
    """Block means far apart (a trend over the rows): the merge's spread term carries most of ``c``."""
    rng = np.random.default_rng(10)
    t = np.arange(9000.0)
    x = np.column_stack([1e6 + 1e-3 * t, 1e6 - 2e-3 * t, np.sin(t / 500.0)]) + rng.standard_normal((9000, 3))
    assert_matches(CoMoments().chunk(x), *reference(x))
