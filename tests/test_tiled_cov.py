"""Tiled wide covariance: per-(I, J) tile reductions written to Zarr equal the untiled CoMoments."""

from __future__ import annotations

import math
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from daskbatch.engine.reduce import tree_reduce
from daskbatch.engine.tiled import open_tiled_cov, tiled_covariance
from daskbatch.errors import PlanError
from daskbatch.planning.resources import Resources
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
    summary = Summary(feature_names=tuple(names), **{k: np.zeros(D) for k in (
        "count", "nan_count", "posinf_count", "neginf_count", "mean", "var", "std", "skew", "kurtosis", "min", "max")},
        corr=result.corr.compute())
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
    with pytest.raises(FileExistsError, match="overwrite=True"):
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
