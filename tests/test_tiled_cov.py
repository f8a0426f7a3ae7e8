"""Tiled wide covariance: per-(I, J) tile reductions written to Zarr equal the untiled CoMoments."""

from __future__ import annotations

import math
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from daskbatch.engine.passes import tree_reduce
from daskbatch.engine.tiled_cov import open_tiled_cov, tiled_covariance
from daskbatch.errors import PlanError
from daskbatch.planning.plan import Resources
from daskbatch.planning.search import plan_chunks
from daskbatch.stats import CoMoments
from daskbatch.stats.tiled import CrossCoMoments
from daskbatch.summary import Summary

D = 40


def wide_data(rows: int = 300, seed: int = 0) -> np.ndarray:
    """Correlated features with large offsets, NaN and inf rows and a constant column."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(rows, 8))
    x = base @ rng.normal(size=(8, D)) + rng.normal(scale=0.3, size=(rows, D)) + rng.uniform(-1e4, 1e4, D)
    x[rng.random(rows) < 0.05, rng.integers(0, D)] = np.nan
    x[7, 3] = np.inf
    x[:, 21] = 2.5  # no variance: correlation NaN, as untiled
    return x


def untiled(x: da.Array, ddof: int = 1):  # noqa: ANN201 - a CoMomentsResult
    return dask.compute(tree_reduce(CoMoments(ddof=ddof), x.rechunk({1: -1}), split_every=3))[0]


def assert_matches(tiled, ref) -> None:  # noqa: ANN001
    scale = np.nanmax(np.abs(ref.cov))
    cov, corr = tiled.cov.compute(), tiled.corr.compute()
    assert tiled.n == int(ref.n)
    np.testing.assert_array_equal(np.isnan(cov), np.isnan(ref.cov))
    np.testing.assert_allclose(cov, ref.cov, rtol=1e-13, atol=1e-13 * scale)
    np.testing.assert_array_equal(np.isnan(corr), np.isnan(ref.corr))
    np.testing.assert_allclose(corr, ref.corr, rtol=0, atol=1e-13)
    np.testing.assert_allclose(tiled.mean, ref.mean, rtol=1e-15, atol=0)


@pytest.mark.parametrize(("tile", "chunks"), [(16, (47, D)), (7, (60, 10)), (40, (100, D)), (5, (150, D))])
def test_tiles_equal_untiled_comoments(tmp_path: Path, tile: int, chunks: tuple[int, int]) -> None:
    x = da.from_array(wide_data(), chunks=chunks)
    result = tiled_covariance(x, tile=tile, out=tmp_path / "cov.zarr", split_every=2)
    assert_matches(result, untiled(x))
    stored = zarr.open_group(tmp_path / "cov.zarr", mode="r")
    assert stored["cov"].chunks == (min(tile, D), min(tile, D))
    n_tiles = math.ceil(D / tile)
    # Every chunk of both arrays was written: upper tiles and their mirrors.
    assert stored["corr"].nchunks_initialized == n_tiles * n_tiles


def test_budget_that_forces_tiling_gives_the_untiled_result(tmp_path: Path) -> None:
    """The planner picks a tile under a tiny budget; the tiled result equals the untiled one."""
    shape, memory = (300, D), 32 * 1024
    while True:  # the smallest budget that plans at all does so only by tiling
        try:
            plan = plan_chunks(shape, 8, (10, D), Resources(memory), stats=("cov",), split_every=2,
                               memory_fraction=1.0, reserved_bytes=0)
            break
        except PlanError:
            memory = int(memory * 1.1)
    assert plan.feature_tile is not None and plan.feature_tile < D
    x = da.from_array(wide_data(seed=1), chunks=(plan.chunk_rows, D))
    result = tiled_covariance(x, tile=plan.feature_tile, out=tmp_path / "c.zarr", split_every=plan.split_every)
    assert_matches(result, untiled(x))


def test_top_correlated_and_reopen(tmp_path: Path) -> None:
    x = da.from_array(wide_data(seed=2), chunks=(50, D))
    ref = untiled(x)
    names = [f"g{i}" for i in range(D)]
    result = tiled_covariance(x, tile=16, out=tmp_path / "c.zarr", feature_names=names)
    summary = Summary(feature_names=tuple(names), results={"moments": {k: np.zeros(D) for k in (
        "count", "nan_count", "posinf_count", "neginf_count", "mean", "var", "std", "skew", "kurtosis", "min", "max")},
        "cov": {"corr": result.corr.compute()}})
    top = result.top_correlated(25)
    assert top == list(summary.top_correlated(25).itertuples(index=False, name=None))
    assert len(top) == 25 and all(a != b for a, b, _ in top)
    r = {(a, b): v for a, b, v in top}
    i, j = int(top[0][0][1:]), int(top[0][1][1:])
    assert r[top[0][0], top[0][1]] == pytest.approx(ref.corr[i, j], abs=1e-13)
    again = open_tiled_cov(tmp_path / "c.zarr")
    assert (again.n, again.tile, again.feature_names) == (result.n, 16, tuple(names))
    assert again.top_correlated(3) == top[:3]
    # Its own earlier store is replaced; anything else is refused.
    assert tiled_covariance(x, tile=16, out=tmp_path / "c.zarr", feature_names=names).top_correlated(3) == top[:3]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("a user's file")
    with pytest.raises(FileExistsError, match="daskbatch did not write it"):
        tiled_covariance(x, tile=16, out=tmp_path / "other")


def test_tiles_are_written_by_workers(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    x = da.from_array(wide_data(seed=3), chunks=(64, D))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c, \
            distributed.Client(c), distributed.get_task_stream() as stream:
        result = tiled_covariance(x, tile=13, out=tmp_path / "c.zarr")
    # Each of the 4 * 5 / 2 tile pairs was finalized and written by a task on a worker.
    writes = [t for t in stream.data if str(t["key"]).startswith("('_write_tile") or "_write_tile" in str(t["key"])]
    assert len(writes) == 10 and all(t["worker"] for t in writes)
    assert_matches(result, untiled(x))


def test_cross_state_merges_like_one_chunk() -> None:
    rng = np.random.default_rng(5)
    block = rng.normal(3.0, 2.0, (90, 7))
    stat = CrossCoMoments(split=3)
    parts = [stat.chunk(block[a:b]) for a, b in ((0, 0), (0, 31), (31, 32), (32, 90))]
    merged = parts[0]
    for p in parts[1:]:
        merged = stat.merge(merged, p)
    whole = stat.chunk(block)
    np.testing.assert_allclose(merged.c, whole.c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(merged.shift_b + merged.mean_b, block[:, 3:].mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(whole.c, np.cov(block, rowvar=False)[:3, 3:] * 89, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ sample weights


def weighted_reference(x: np.ndarray, w: np.ndarray, ddof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """NumPy float64: the weighted mean, covariance (frequency weights) and correlation of the complete rows, and W."""
    keep = np.isfinite(x).all(axis=1) & (w > 0)
    xc, wc = x[keep], w[keep]
    total = float(wc.sum())
    cov = np.cov(xc, rowvar=False, aweights=wc, ddof=0) * total / (total - ddof)
    sd = np.where(np.ptp(xc, axis=0) > 0, np.sqrt(np.diagonal(cov)), np.nan)  # a constant feature: NaN, not 0/0
    corr = cov / np.outer(sd, sd)
    corr[np.diag_indices(D)] = np.where(sd > 0, 1.0, np.nan)
    return np.average(xc, weights=wc, axis=0), cov, corr, total


def weights_for(rows: int, seed: int = 4) -> np.ndarray:
    """Gamma weights with a tenth of zeros (some on incomplete rows)."""
    rng = np.random.default_rng(seed)
    w = rng.gamma(2.0, 1.5, rows)
    w[rng.random(rows) < 0.1] = 0.0
    return w


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize(("tile", "chunks"), [(16, (47, D)), (8, (60, 10)), (7, (33, D)), (40, (100, D)), (3, (150, D))])
def test_weighted_tiles_equal_numpy_aweights(tmp_path: Path, tile: int, chunks: tuple[int, int], ddof: int) -> None:
    """Tiles that divide D or not, row blocks that are not the tiles', ddof 0 and 1: numpy's weighted covariance."""
    x = wide_data(seed=6)
    w = weights_for(len(x))
    result = tiled_covariance(da.from_array(x, chunks=chunks), tile=tile, out=tmp_path / "cov.zarr", ddof=ddof,
                              split_every=3, weights=da.from_array(w, chunks=31))
    mean, cov, corr, total = weighted_reference(x, w, ddof)
    assert result.n == int((np.isfinite(x).all(axis=1) & (w > 0)).sum())
    assert result.weight_sum == pytest.approx(total, rel=1e-14)
    got_cov, got_corr = result.cov.compute(), result.corr.compute()
    scale = np.nanmax(np.abs(cov))
    np.testing.assert_allclose(got_cov, cov, rtol=1e-11, atol=1e-13 * scale)
    np.testing.assert_array_equal(np.isnan(got_corr), np.isnan(corr))
    np.testing.assert_allclose(got_corr, corr, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-14)
    # ... and the untiled weighted co-moments of the same blocks, to rounding.
    ref = dask.compute(tree_reduce(CoMoments(ddof=ddof), da.from_array(x, chunks=(chunks[0], D)),
                                   weights=da.from_array(w, chunks=chunks[0]), split_every=3))[0]
    assert result.n == int(ref.n) and result.weight_sum == pytest.approx(float(ref.weight_sum), rel=1e-14)
    np.testing.assert_allclose(got_cov, ref.cov, rtol=1e-12, atol=1e-13 * scale)
    again = open_tiled_cov(tmp_path / "cov.zarr")
    assert (again.n, again.weight_sum) == (result.n, result.weight_sum)


def test_integer_weights_tile_as_repeated_rows(tmp_path: Path) -> None:
    x = wide_data(seed=7)
    k = np.random.default_rng(8).integers(0, 4, len(x))
    weighted = tiled_covariance(da.from_array(x, chunks=(41, D)), tile=9, out=tmp_path / "w.zarr",
                                weights=da.from_array(k.astype(np.float64), chunks=41))
    repeated = tiled_covariance(da.from_array(np.repeat(x, k, axis=0), chunks=(41, D)), tile=9, out=tmp_path / "r.zarr")
    assert weighted.weight_sum == repeated.n and repeated.weight_sum is None
    scale = np.nanmax(np.abs(repeated.cov.compute()))
    np.testing.assert_allclose(weighted.cov.compute(), repeated.cov.compute(), rtol=1e-12, atol=1e-13 * scale)
    np.testing.assert_allclose(weighted.mean, repeated.mean, rtol=1e-14)


def test_weighted_cross_state_merges_like_one_chunk() -> None:
    rng = np.random.default_rng(9)
    block, w = rng.normal(3.0, 2.0, (90, 7)), weights_for(90, seed=10)
    stat = CrossCoMoments(split=3)
    parts = [stat.chunk(block[a:b], weights=w[a:b]) for a, b in ((0, 0), (0, 31), (31, 32), (32, 90))]
    merged = parts[0]
    for p in parts[1:]:
        merged = stat.merge(merged, p)
    total = w.sum()
    want = np.cov(block, rowvar=False, aweights=w, ddof=0)[:3, 3:] * total
    np.testing.assert_allclose(merged.c, want, rtol=1e-12, atol=1e-12)
    assert float(merged.n) == pytest.approx(total, rel=1e-14) and int(merged.rows) == (w > 0).sum()
    np.testing.assert_allclose(merged.shift_b + merged.mean_b, np.average(block[:, 3:], weights=w, axis=0), rtol=1e-14)
    # An unweighted part weighs 1 per row.
    mixed = stat.merge(stat.chunk(block[:40]), stat.chunk(block[40:], weights=w[40:]))
    ones = np.concatenate([np.ones(40), w[40:]])
    np.testing.assert_allclose(mixed.c, np.cov(block, rowvar=False, aweights=ones, ddof=0)[:3, 3:] * ones.sum(),
                               rtol=1e-12, atol=1e-12)


def test_describe_with_weights_tiles_the_covariance(tmp_path: Path) -> None:
    """describe(weights=, cov_out=) under a plan that tiles: numpy's weighted covariance in the store."""
    import daskbatch as db

    x = wide_data(rows=600, seed=11)
    w = weights_for(len(x), seed=12)
    dx = da.from_array(x, chunks=(50, D))
    budget = 64 * 2**10
    while True:  # the smallest budget (above the 256 MiB reserved per task) that plans at all: by tiling
        try:
            plan = db.plan(dx, stats=("moments", "cov"), resources=db.Resources(memory_bytes=2 * (256 * 2**20 + budget)))
            break
        except PlanError:
            budget = int(budget * 1.1)
    assert plan.feature_tile is not None and plan.feature_tile < D
    # 522 of the 551 rows of positive weight are complete (5 %): under the warning's 10 %.
    s = db.describe(dx, weights=w, stats=("moments", "cov"),
                    run=db.RunOptions(plan=plan, cov_out=tmp_path / "cov.zarr"))
    mean, cov, _, total = weighted_reference(x, w, ddof=1)
    assert s.cov is None and s.cov_count == int((np.isfinite(x).all(axis=1) & (w > 0)).sum())
    assert s.provenance["cov_weight_sum"] == pytest.approx(total, rel=1e-14)
    np.testing.assert_allclose(s.tiled_cov().cov.compute(), cov, rtol=1e-11, atol=1e-13 * np.abs(cov).max())
