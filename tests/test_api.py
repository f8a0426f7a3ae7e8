"""End-to-end behaviour of the public API: describe, Summary, Accumulator, on real stores and clusters."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import zarr

import daskbatch as db


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    x = rng.normal(size=(3000, 5)) * [1.0, 2.0, 0.5, 3.0, 1.0] + [0.0, 10.0, -5.0, 1e3, 0.0]
    y = rng.integers(0, 3, size=3000)
    x[:, 4] += y  # informative feature
    return x.astype(np.float32), y.astype(np.int16)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, data: tuple[np.ndarray, np.ndarray]) -> str:
    x, y = data
    path = str(tmp_path_factory.mktemp("api") / "data.zarr")
    root = zarr.open_group(path, mode="w")
    root.create_array("X", data=x, chunks=(500, 5))
    root.create_array("y", data=y, chunks=(500,))
    return path


def test_describe_store_path_matches_numpy(store: str, data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    ref = x.astype(np.float64)
    s = db.describe(store, label="y")
    np.testing.assert_allclose(s.mean, ref.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(s.std, ref.std(axis=0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(s.cov, np.cov(ref.T), rtol=1e-11, atol=1e-12)
    assert s.cov_count == 3000
    for d in range(5):
        counts, _ = np.histogram(ref[:, d], bins=s.arrays.hist_edges[d])
        np.testing.assert_array_equal(s.arrays.hist_counts[d], counts)
    assert s.top_mi(1).index[0] == "f4"
    assert s.provenance["passes"] == 2 and s.provenance["rows"] == 3000


def test_same_result_on_a_real_cluster(store: str) -> None:
    from distributed import Client, LocalCluster

    local = db.describe(store, label="y")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, Client(cluster):
        remote = db.describe(store, label="y")
    for name in ("mean", "var", "skew", "kurtosis", "cov", "hist_counts", "mi"):
        np.testing.assert_array_equal(getattr(local, name), getattr(remote, name), err_msg=name)


def test_summary_roundtrip_and_views(tmp_path, store: str) -> None:
    s = db.describe(store, label="y", bins=16)
    back = db.load_summary(s.save(tmp_path / "stats.zarr"))
    for name in ("mean", "cov", "corr", "hist_counts", "hist_edges", "mi", "joint_counts"):
        np.testing.assert_array_equal(getattr(back, name), getattr(s, name), err_msg=name)
    assert back.feature_names == s.feature_names and back.cov_count == s.cov_count
    assert back.provenance["stats"] == s.provenance["stats"]
    ds = s.to_xarray()
    assert ds["cov"].dims == ("feature", "feature2") and ds["hist_counts"].dims == ("feature", "bin")
    table = s.to_dataframe()
    assert list(table.index) == list(s.feature_names) and table["count"].dtype == np.int64
    assert "Top correlated pairs" in s._repr_html_() and "f4" in repr(s)
    json.dumps(s.to_json(), allow_nan=False)
    odd = db.describe(np.array([[1.0, np.inf], [np.nan, 2.0], [3.0, 4.0]]), stats=("moments",))
    payload = json.loads(json.dumps(odd.to_json(), allow_nan=False))
    assert payload["max"] == [3.0, "inf"] and payload["skew"][1] is None


def test_accumulator_matches_describe(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    whole = db.describe(da.from_array(x, chunks=(700, 5)), y, range=(-20.0, 1020.0), bins=32)
    first, second = db.Accumulator(range=(-20.0, 1020.0), bins=32), db.Accumulator(range=(-20.0, 1020.0), bins=32)
    for start in range(0, 1500, 333):
        first.update(x[start : min(start + 333, 1500)], y[start : min(start + 333, 1500)])
    second.update(x[1500:], y[1500:])
    s = first.merge(second).summary()
    np.testing.assert_allclose(s.mean, whole.mean, rtol=1e-14)
    np.testing.assert_allclose(s.var, whole.var, rtol=1e-12)
    np.testing.assert_allclose(s.cov, whole.cov, rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(s.hist_counts, whole.hist_counts)
    np.testing.assert_allclose(s.mi, whole.mi, rtol=1e-12)
    assert first.rows == 3000


def test_accumulator_bad_input() -> None:
    with pytest.raises(ValueError, match="range"):
        db.Accumulator(stats=("moments", "hist"))
    acc = db.Accumulator(stats=("moments",))
    with pytest.raises(ValueError, match="no batches"):
        acc.summary()
    acc.update(np.ones((3, 2)))
    with pytest.raises(ValueError, match="batch 1 has 3 features; earlier batches had 2"):
        acc.update(np.ones((3, 3)))
    with pytest.raises(TypeError, match="complex"):
        acc.update(np.ones((3, 2), dtype=complex))
    mi = db.Accumulator(range=(0, 1))
    with pytest.raises(ValueError, match="label"):
        mi.update(np.ones((3, 2)))


def test_describe_rejects_bad_inputs(store: str) -> None:
    with pytest.raises(ValueError, match="unknown statistic"):
        db.describe(np.ones((4, 2)), stats=("moments", "median"))
    with pytest.raises(ValueError, match=r"label has 3 values but x has 4 rows"):
        db.describe(np.ones((4, 2)), np.zeros(3, dtype=int))
    with pytest.raises(TypeError, match="label has dtype float64"):
        db.describe(np.ones((4, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="range must be"):
        db.describe(np.ones((4, 2)), range=[(0, 1)] * 3)
    with pytest.raises(ValueError, match="split_every must be at least 2"):
        db.describe(np.ones((4, 2)), run=db.RunOptions(split_every=1))


def test_describe_follows_the_plan_and_refuses_one_that_cannot_fit(store: str) -> None:
    plan = db.plan(db.open_dataset(store, label="y"), stats=("moments", "cov"), resources=db.Resources(memory_bytes=2**30))
    s = db.describe(store, stats=("moments", "cov"), run=db.RunOptions(plan=plan))
    assert s.provenance["chunk_rows"] == plan.chunk_rows and s.provenance["split_every"] == plan.split_every
    with pytest.raises(db.PlanError, match="budget"):
        db.describe(store, run=db.RunOptions(plan=db.Resources(memory_bytes=2**20)))
    untouched = db.describe(da.from_array(np.ones((100, 2)), chunks=(7, 2)), stats=("moments",), run=db.RunOptions(plan=None))
    assert untouched.provenance["chunk_rows"] == 7


def test_checkpoint_resumes_on_its_own_grid_whatever_the_plan(tmp_path, store: str) -> None:
    ckpt = tmp_path / "ckpt"
    small = db.plan(db.open_dataset(store), stats=("moments",), resources=db.Resources(memory_bytes=2**30))
    first = db.describe(store, stats=("moments",), run=db.RunOptions(plan=small, checkpoint=ckpt))
    again = db.describe(store, stats=("moments",), run=db.RunOptions(checkpoint=ckpt))  # "auto" might choose another grid
    assert again.provenance["chunk_rows"] == first.provenance["chunk_rows"]
    np.testing.assert_array_equal(again.var, first.var)


def test_wide_covariance_is_tiled_into_zarr_when_the_plan_says_so(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, 400))
    x[:, 1] += x[:, 0]
    x[:, 399] -= x[:, 3]
    dx = da.from_array(x, chunks=(100, 400))
    tight = db.Resources(memory_bytes=2 * (256 * 2**20 + 3 * 2**20))  # 3 MiB per task: 400 x 400 merges do not fit
    plan = db.plan(dx, stats=("moments", "cov"), resources=tight)
    assert plan.feature_tile is not None and plan.feature_tile < 400
    s = db.describe(dx, stats=("moments", "cov"), run=db.RunOptions(plan=plan, cov_out=tmp_path / "cov.zarr"))
    ref = db.describe(dx, stats=("moments", "cov"), run=db.RunOptions(plan=None))
    assert s.cov is None and s.cov_count == 2000
    assert s.provenance["tiled_cov"]["path"] == str(tmp_path / "cov.zarr")
    np.testing.assert_allclose(s.tiled_cov().cov.compute(), ref.cov, rtol=1e-12, atol=1e-14)
    pairs = ["feature_a", "feature_b"]
    assert s.top_correlated(2)[pairs].equals(ref.top_correlated(2)[pairs])
    back = db.load_summary(s.save(tmp_path / "s.zarr"))
    assert tuple(back.top_correlated(1).loc[0, pairs]) == ("f0", "f1")


def test_xarray_dataarray_input_keeps_feature_names(data: tuple[np.ndarray, np.ndarray]) -> None:
    import xarray as xr

    x, y = data
    arr = xr.DataArray(
        da.from_array(x, chunks=(1000, 5)), dims=("sample", "feature"),
        coords={"feature": ["a", "b", "c", "d", "e"]}, name="X",
    )
    s = db.describe(arr, y, stats=("moments", "mi"))
    assert s.feature_names == ("a", "b", "c", "d", "e") and s.top_mi(1).index[0] == "e"
    np.testing.assert_allclose(s.mean, x.astype(np.float64).mean(axis=0), rtol=1e-13)
    with pytest.raises(TypeError, match="DataArray 'X' has dtype complex128"):
        db.describe(arr.astype(complex))


def _result_arrays(s: db.Summary) -> dict[str, np.ndarray]:
    return {name: value for name, value in s.variables.items() if isinstance(value, np.ndarray)}


def test_cache_auto_reads_once_when_it_fits_and_changes_no_bit(tmp_path, store: str) -> None:
    # The default keeps the decoded blocks between the passes when they fit (60 kB here);
    # every result array, down to the sketch and the fine quantile histogram, is bitwise
    # that of reading the store twice, and of cache=True on the store's own chunks.
    auto = db.describe(store, label="y")
    twice = db.describe(store, label="y", run=db.RunOptions(cache=False))
    assert auto.provenance["cached"] and not twice.provenance["cached"]
    assert auto.provenance["input_tokens"] == twice.provenance["input_tokens"]
    got, want = _result_arrays(auto), _result_arrays(twice)
    assert got.keys() == want.keys() and {"mean", "cov", "joint_counts", "class_m2", "quantile_counts"} <= got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    plain = db.describe(store, label="y", run=db.RunOptions(plan=None))
    cached = db.describe(store, label="y", run=db.RunOptions(plan=None, cache=True))
    assert cached.provenance["cached"] and not plain.provenance["cached"]
    for name, value in _result_arrays(plain).items():
        np.testing.assert_array_equal(_result_arrays(cached)[name], value, err_msg=name)
    # Not when the blocks take more than the configured share, nor with a checkpoint.
    import dask

    with dask.config.set({"daskbatch.cache-fraction": 1e-9}):
        assert not db.describe(store, label="y", stats=("moments", "hist")).provenance["cached"]
    assert not db.describe(store, label="y", stats=("moments", "hist"), run=db.RunOptions(checkpoint=str(tmp_path / "ck"))).provenance["cached"]
    with dask.config.set({"daskbatch.cache-fraction": 2}), pytest.raises(ValueError, match="cache-fraction must be"):
        db.describe(store, label="y", stats=("moments", "hist"))
    with pytest.raises(ValueError, match="cache must be True, False or 'auto'"):
        db.describe(store, label="y", run=db.RunOptions(cache="yes"))
