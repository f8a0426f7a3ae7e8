"""Pairwise-complete covariance tile by tile into Zarr, and pairwise covariance with sample weights.

Issue "Trust on real data, round 2": ``CoMoments(rows="pairwise")`` was refused
in one line when the covariance was too wide for one worker (tiled into
``cov_out``) and with sample weights. A tile now keeps the counts, sums and
cross products of its pairs (matrix products of the masked data and the masks),
and weights weigh each pair's rows as the complete rows' weighted covariance
weighs them (frequency weights: the weighted co-moment over ``W - ddof``).
"""

from __future__ import annotations

import pathlib
import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest

import daskbatch as db
from daskbatch.engine.tiled_cov import open_tiled_cov, tiled_covariance
from daskbatch.errors import CompleteRowsWarning, PlanError, SuspectValueWarning
from daskbatch.stats import CoMoments
from daskbatch.summary.reprs import format_report

PAIRWISE = CoMoments(rows="pairwise")
#: 23 features in tiles of 7: four tiles a side, the last 2 wide.
D, TILE = 23, 7


def _with_nan(rows: int, features: int, *, offset: float = 0.0, seed: int = 0) -> np.ndarray:
    """Correlated normal data about ``offset`` with 10 % of each feature's values NaN, at random."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)) @ rng.normal(size=(features, features)) * 0.3
    x = x + offset
    x[rng.random(x.shape) < 0.10] = np.nan
    return x


def _pandas(x: np.ndarray, offset: float) -> tuple[np.ndarray, np.ndarray]:
    """pandas' pairwise cov and corr of ``x - offset``: exact values (Sterbenz) where pandas on ``x`` rounds 1e-11 off."""
    frame = pd.DataFrame(x - offset)
    return frame.cov().to_numpy(), frame.corr().to_numpy()


def _weighted_reference(
    x: np.ndarray, w: np.ndarray, ddof: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float64 loop over the pairs: each pair's weighted cov (``W - ddof``), corr and rows, over its finite rows."""
    d = x.shape[1]
    cov, corr, rows = np.full((d, d), np.nan), np.full((d, d), np.nan), np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            keep = np.isfinite(x[:, i]) & np.isfinite(x[:, j]) & (w > 0)
            a, b, v = x[keep, i], x[keep, j], w[keep]
            total = v.sum()
            da_, db_ = a - np.average(a, weights=v), b - np.average(b, weights=v)
            c = np.sum(v * da_ * db_)
            cov[i, j] = c / (total - ddof)
            corr[i, j] = c / np.sqrt(np.sum(v * da_ * da_) * np.sum(v * db_ * db_))
            rows[i, j] = keep.sum()
    return cov, corr, rows


def _tiling_plan(dx: da.Array) -> db.Plan:
    """The smallest budget (above the 256 MiB reserved per task) that plans at all: by tiling the covariance."""
    budget = 64 * 2**10
    while True:
        try:
            plan = db.plan(
                dx,
                stats=("moments", "cov"),
                resources=db.Resources(memory_bytes=2 * (256 * 2**20 + budget)),
            )
            break
        except PlanError:
            budget = int(budget * 1.1)
    assert plan.feature_tile is not None and plan.feature_tile < dx.shape[1]
    return plan


@pytest.mark.parametrize("offset", [0.0, 1e6])
@pytest.mark.parametrize("chunks", [(700, D), (1_000, 9)])
def test_tiled_pairwise_equals_pandas(
    tmp_path: pathlib.Path, offset: float, chunks: tuple[int, int]
) -> None:
    """Several tiles, the last uneven, any row chunks: pandas' pairwise cov and corr to 1e-12, pair counts mᵀm."""
    x = _with_nan(3_000, D, offset=offset, seed=int(offset) % 7)
    tc = tiled_covariance(
        da.from_array(x, chunks=chunks),
        tile=TILE,
        out=tmp_path / "c.zarr",
        split_every=2,
        rows="pairwise",
    )
    cov, corr = _pandas(x, offset)
    np.testing.assert_allclose(tc.cov.compute(), cov, rtol=0, atol=1e-12 * np.abs(cov).max())
    np.testing.assert_allclose(tc.corr.compute(), corr, rtol=0, atol=1e-12)
    mask = np.isfinite(x).astype(np.float64)
    np.testing.assert_array_equal(tc.pair_counts.compute(), mask.T @ mask)
    assert tc.n == int((mask.T @ mask).min()) and tc.rows == "pairwise"
    np.testing.assert_allclose(
        tc.mean, np.nanmean(x, axis=0), rtol=1e-14, atol=1e-14 * np.nanstd(x)
    )
    reopened = open_tiled_cov(tmp_path / "c.zarr")
    assert (reopened.rows, reopened.n) == ("pairwise", tc.n)
    assert reopened.top_correlated(3) == tc.top_correlated(3)


def test_describe_tiles_the_pairwise_covariance(tmp_path: pathlib.Path) -> None:
    """describe(CoMoments(rows='pairwise'), cov_out=) under a plan that tiles: pandas' pairwise matrices in the store."""
    x = _with_nan(600, 40, seed=3)
    dx = da.from_array(x, chunks=(50, 40))
    plan = _tiling_plan(dx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SuspectValueWarning)
        s = db.describe(
            dx,
            stats=["moments", PAIRWISE],
            run=db.RunOptions(plan=plan, cov_out=tmp_path / "cov.zarr"),
        )
    cov, corr = _pandas(x, 0.0)
    tiled = s.tiled_cov()
    assert s.cov is None and tiled.rows == "pairwise" and s.provenance["cov_rows"] == "pairwise"
    np.testing.assert_allclose(tiled.cov.compute(), cov, rtol=0, atol=1e-12 * np.abs(cov).max())
    np.testing.assert_allclose(tiled.corr.compute(), corr, rtol=0, atol=1e-12)
    mask = np.isfinite(x).astype(np.float64)
    assert s.cov_count == int((mask.T @ mask).min())
    assert f"pairwise: each pair's own rows, at least {s.cov_count:,}" in format_report(
        s
    )  # the CLI's report
    expected_top = pd.DataFrame(s.top_correlated(3)).to_numpy()[:, 2].astype(float)
    upper = np.abs(corr[np.triu_indices(40, k=1)])
    np.testing.assert_allclose(np.abs(expected_top), np.sort(upper)[::-1][:3], rtol=0, atol=1e-12)


def test_the_planner_tiles_a_pairwise_covariance_too_wide_for_a_worker(
    tmp_path: pathlib.Path,
) -> None:
    """Four (D, D) matrices do not fit where the complete rows' one does: the pairwise covariance is tiled, not refused."""
    d = 2_000
    x = np.random.default_rng(2).normal(size=(400, d))
    x[::7, 3] = np.nan
    dx = da.from_array(x, chunks=(100, d))
    budget = db.Resources(memory_bytes=1000 * 2**20)
    assert (
        db.plan(dx, stats=("moments", "cov"), resources=budget).feature_tile is None
    )  # the complete rows fit
    s = db.describe(
        dx, stats=["moments", PAIRWISE], run=db.RunOptions(plan=budget, cov_out=tmp_path / "c.zarr")
    )
    assert 1 < s.provenance["tiled_cov"]["tile"] < d
    whole = PAIRWISE.finalize(PAIRWISE.chunk(x))  # in memory: pandas' (tests/test_pairwise_cov.py)
    tiled = s.tiled_cov()
    np.testing.assert_allclose(tiled.corr[:, :50].compute(), whole.corr[:, :50], rtol=0, atol=1e-13)
    np.testing.assert_allclose(tiled.cov[-50:].compute(), whole.cov[-50:], rtol=0, atol=1e-13)
    assert s.cov_count == int(whole.n) == 400 - len(range(0, 400, 7))


def test_weighted_pairwise_equals_a_loop_over_pairs(tmp_path: pathlib.Path) -> None:
    """Weights (zeros among them): describe, merge, update, a saved summary's update, and tiles give the loop's values."""
    x = _with_nan(4_000, 6, offset=100.0, seed=5)
    w = np.random.default_rng(6).uniform(0, 3, len(x))
    w[::11] = 0.0  # a row of weight 0 is as if absent
    cov, corr, rows = _weighted_reference(x, w)
    cut = 1_500
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompleteRowsWarning)
        warnings.simplefilter("ignore", SuspectValueWarning)
        whole = db.describe(
            da.from_array(x, chunks=(700, 6)), stats=["moments", PAIRWISE], weights=w
        )
        first = db.describe(x[:cut], stats=["moments", PAIRWISE], weights=w[:cut])
        first.save(tmp_path / "first.zarr")
        summaries = {
            "describe": whole,
            "merge": db.merge(
                first, db.describe(x[cut:], stats=["moments", PAIRWISE], weights=w[cut:])
            ),
            "update": db.update(first, x[cut:], weights=w[cut:]),
            "loaded and updated": db.update(
                db.load_summary(tmp_path / "first.zarr"), x[cut:], weights=w[cut:]
            ),
        }
    for how, s in summaries.items():
        np.testing.assert_allclose(s.cov, cov, rtol=0, atol=1e-12 * np.abs(cov).max(), err_msg=how)
        np.testing.assert_allclose(s.corr, corr, rtol=0, atol=1e-12, err_msg=how)
        assert s.cov_count == int(rows.min()) and s.provenance["cov_rows"] == "pairwise", how
    tc = tiled_covariance(
        da.from_array(x, chunks=(900, 6)),
        tile=4,
        out=tmp_path / "w.zarr",
        split_every=2,
        rows="pairwise",
        weights=da.from_array(w, chunks=900),
    )
    np.testing.assert_allclose(tc.cov.compute(), cov, rtol=0, atol=1e-12 * np.abs(cov).max())
    np.testing.assert_allclose(tc.corr.compute(), corr, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(tc.pair_counts.compute(), rows)


def test_integer_weights_are_repeated_rows() -> None:
    """Frequency weights: weight k is the row k times over (pandas' pairwise cov of the repeated rows)."""
    x = _with_nan(500, 4, seed=7)
    w = np.random.default_rng(8).integers(0, 4, len(x))
    state = PAIRWISE.merge(
        PAIRWISE.chunk(x[:200], weights=w[:200]), PAIRWISE.chunk(x[200:], weights=w[200:])
    )
    result = PAIRWISE.finalize(state)
    repeated = pd.DataFrame(np.repeat(x, w, axis=0))
    np.testing.assert_allclose(result.cov, repeated.cov().to_numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(result.corr, repeated.corr().to_numpy(), rtol=0, atol=1e-12)
    mask = np.isfinite(x[w > 0]).astype(np.float64)
    np.testing.assert_array_equal(result.pair_counts, mask.T @ mask)
    np.testing.assert_allclose(
        result.weight_sum, (np.isfinite(x) * w[:, None]).T @ np.isfinite(x), rtol=1e-15
    )


def test_bad_rows_for_a_tiled_covariance_is_refused(tmp_path: pathlib.Path) -> None:
    """A rows value that is neither way of choosing rows: one line, nothing written."""
    with pytest.raises(
        ValueError, match=r"^rows='pair': rows must be one of \('complete', 'pairwise'\)$"
    ):
        tiled_covariance(da.zeros((10, 3)), tile=2, out=tmp_path / "c.zarr", rows="pair")
    assert not (tmp_path / "c.zarr").exists()
