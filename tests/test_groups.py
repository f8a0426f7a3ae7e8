"""Groups: per-group moments and histograms in the same passes, against numpy per-group references."""

from __future__ import annotations

from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.planner import plan_describe

pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.RangeWarning")


@pytest.fixture(scope="module")
def grouped_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    """Rows sorted by group (most chunks hold one or two groups), negative keys, NaN in one feature."""
    rng = np.random.default_rng(7)
    g = np.sort(rng.choice(np.array([-3, 0, 2, 5, 11]), 2400, p=[0.1, 0.3, 0.2, 0.3, 0.1]))
    x = rng.normal(size=(2400, 5)) * rng.uniform(0.5, 4.0, 5) + 1e3
    x[:, 1] += 3.0 * (g == 2)
    x[::11, 4] = np.nan
    path = tmp_path_factory.mktemp("groups") / "grouped.zarr"
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x, chunks=(300, 5))
    root.create_array("g", data=g.astype(np.int32), chunks=(300,))
    return str(path), x, g


def _describe(store: str, rows: int, **kw: object) -> db.Summary:
    x = da.from_zarr(store, component="X").rechunk((rows, -1))
    g = da.from_zarr(store, component="g").rechunk(rows)
    with dask.config.set(scheduler="threads", num_workers=2):
        return db.describe(x, groups=g, run=db.RunOptions(plan=None), **kw)


@pytest.mark.parametrize("rows", [2400, 170])
def test_grouped_moments_and_histograms_equal_numpy_per_group(grouped_store, rows: int) -> None:
    store, x, g = grouped_store
    s = _describe(store, rows, bins=12)
    values = np.unique(g)
    np.testing.assert_array_equal(s.groups, values)
    for j, v in enumerate(values):
        xs = x[g == v]
        np.testing.assert_array_equal(s.arrays.group_count[:, j], np.sum(np.isfinite(xs), axis=0))
        np.testing.assert_allclose(s.arrays.group_mean[:, j], np.nanmean(xs, axis=0), rtol=1e-13)
        np.testing.assert_allclose(s.arrays.group_var[:, j], np.nanvar(xs, axis=0, ddof=1), rtol=1e-10)
        for d in range(x.shape[1]):
            ref, _ = np.histogram(xs[:, d][np.isfinite(xs[:, d])], bins=s.arrays.hist_edges[d])
            np.testing.assert_array_equal(s.arrays.group_hist[d, :, j], ref, err_msg=f"feature {d}, group {v}")
    np.testing.assert_array_equal(s.group_hist.sum(axis=2), s.hist_counts)  # the groups partition the rows
    ds = s.by_group()
    assert ds["mean"].dims == ("feature", "group") and ds["hist_counts"].dims == ("feature", "bin", "group")
    np.testing.assert_array_equal(ds["group"].values, values)
    np.testing.assert_allclose(ds["var"].sel(group=-3).values, np.nanvar(x[g == -3], axis=0, ddof=1), rtol=1e-10)


def test_groups_with_moments_only_and_declared_values(tmp_path: Path, grouped_store) -> None:
    store, x, g = grouped_store
    s = _describe(store, 500, stats=("moments",), classes=[-3, 0, 2, 5, 11, 99])
    assert s.group_hist is None and s.hist_counts is None
    np.testing.assert_array_equal(s.arrays.group_count[:, -1], 0)  # a declared group with no row
    assert np.isnan(s.arrays.group_mean[:, -1]).all()
    np.testing.assert_allclose(s.arrays.group_mean[:, 1], np.nanmean(x[g == 0], axis=0), rtol=1e-13)
    loaded = db.load_summary(s.save(tmp_path / "g.zarr"))
    np.testing.assert_array_equal(loaded.groups, s.groups)
    np.testing.assert_array_equal(loaded.group_mean, s.group_mean)
    plain = db.describe(x, stats=("moments",), run=db.RunOptions(plan=None))
    assert plain.groups is None and plain.group_mean is None


def test_group_refusals(grouped_store) -> None:
    store, x, g = grouped_store
    with pytest.raises(ValueError, match=r"^label= with groups= is not supported .*: describe the classes and the groups "
                       r"in two runs, describe\(x, label=\.\.\.\) and describe\(x, groups=\.\.\.\)$"):
        db.describe(x, g, groups=g, run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"^target= with groups= is not supported .*describe\(x, target=\.\.\.\)"):
        db.describe(x, target=x[:, 0], groups=g, run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"^groups has shape \(2399,\); expected \(2,400,\)"):
        db.describe(x, groups=g[:-1], run=db.RunOptions(plan=None))
    with pytest.raises(TypeError, match="^groups has dtype float64; group keys must be integers"):
        db.describe(x, groups=g.astype(float), run=db.RunOptions(plan=None))
    with dask.config.set({"daskbatch.max-classes": 3}), pytest.raises(ValueError, match="more than"):
        _describe(store, 600, stats=("moments",))
    with pytest.raises(ValueError, match="^this summary has no groups"):
        db.describe(x, stats=("moments",), run=db.RunOptions(plan=None)).by_group()


def test_update_with_groups_equals_one_describe(grouped_store) -> None:
    store, x, g = grouped_store
    first = _describe(store, 400, stats=("moments",), classes=[-3, 0, 2, 5, 11])  # all the rows
    half = db.describe(x[:1200], groups=g[:1200], stats=("moments",), classes=[-3, 0, 2, 5, 11], run=db.RunOptions(plan=None))
    with dask.config.set(scheduler="threads", num_workers=2):
        both = db.update(half, x[1200:], groups=g[1200:], run=db.RunOptions(plan=None))
    np.testing.assert_array_equal(both.groups, first.groups)
    np.testing.assert_array_equal(both.group_count, first.group_count)
    np.testing.assert_allclose(both.group_mean, first.group_mean, rtol=1e-13)
    np.testing.assert_allclose(both.group_var, first.group_var, rtol=1e-10)
    assert both.provenance["grouped"]


def test_accumulator_with_groups_equals_describe() -> None:
    """``Accumulator(groups=True)`` streams group keys as each batch's label: describe(groups=...)'s bits."""
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(300, 4)), rng.integers(0, 5, 300)
    s = db.describe(da.from_array(x, chunks=(50, -1)), groups=da.from_array(g, chunks=50), stats=("moments",),
                    run=db.RunOptions(plan=None, split_every=64))
    acc = db.Accumulator(stats=("moments",), groups=True)
    for lo in range(0, 300, 50):
        acc.update(x[lo:lo + 50], g[lo:lo + 50])
    a = acc.summary()
    assert a.provenance["grouped"] and s.provenance["grouped"]
    for name in ("mean", "var", "class_mean", "class_count", "class_m2"):
        np.testing.assert_array_equal(getattr(a, name), getattr(s, name), err_msg=name)


def test_groups_by_name_in_the_store_equal_the_array(grouped_store) -> None:
    """``groups="g"`` names the store's array, as weights= and target= do: the same bits as the array itself."""
    store, x, g = grouped_store
    with dask.config.set(scheduler="threads", num_workers=2):
        by_name = db.describe(store, groups="g", stats=("moments", "hist"), range="minmax", bins=8, run=db.RunOptions(plan=None))
        by_array = db.describe(store, groups=da.from_zarr(store, component="g"), stats=("moments", "hist"),
                               range="minmax", bins=8, run=db.RunOptions(plan=None))
    assert by_name.provenance["groups"].startswith("groups ") and by_name.provenance["grouped"]
    for name in ("groups", "group_count", "group_mean", "group_var", "group_hist"):
        np.testing.assert_array_equal(getattr(by_name, name), getattr(by_array, name), err_msg=name)
    np.testing.assert_allclose(by_name.arrays.group_mean[:, 0], np.nanmean(x[g == -3], axis=0), rtol=1e-13)
    assert "class_moments" in plan_describe(store, groups="g", stats=("moments",)).stats  # planned by group
    with pytest.raises(TypeError, match="^groups 'g' is a name, and a groups name needs x to be a store path"):
        db.describe(x, groups="g", run=db.RunOptions(plan=None))


@pytest.mark.parametrize("rows", [2400, 170])
def test_weighted_groups_equal_numpy_weighted_per_group(grouped_store, rows: int) -> None:
    """Groups with frequency weights: numpy's weighted mean, m2 / (W - ddof) and weighted histogram per group."""
    store, x, g = grouped_store
    w = np.random.default_rng(2).gamma(2.0, 1.0, size=g.size)
    s = _describe(store, rows, weights=da.from_array(w, chunks=rows), bins=8, range="minmax")
    for j, v in enumerate(np.unique(g)):
        xs, ws = x[g == v][:, :4], w[g == v]  # feature 4 holds NaN; its weights are those of its finite rows
        np.testing.assert_allclose(s.arrays.group_count[:4, j], ws.sum(), rtol=1e-13)
        mean = np.average(xs, weights=ws, axis=0)
        np.testing.assert_allclose(s.arrays.group_mean[:4, j], mean, rtol=1e-13)
        m2 = (ws[:, None] * (xs - mean) ** 2).sum(axis=0)
        np.testing.assert_allclose(s.arrays.group_var[:4, j], m2 / (ws.sum() - 1), rtol=1e-10)
        for d in range(4):
            ref = np.histogram(xs[:, d], bins=s.arrays.hist_edges[d], weights=ws)[0]
            np.testing.assert_allclose(s.arrays.group_hist[d, :, j], ref, rtol=1e-12, err_msg=f"feature {d}, group {v}")


def test_row_inputs_from_pandas_name_their_missing_values() -> None:
    # A nullable pandas Series with missing values: refused in one line naming the input and what each row needs
    # (weights and groups said "label ... every sample needs a class" before they shared one reader).
    pd = pytest.importorskip("pandas")
    x = np.arange(12.0).reshape(4, 3)
    with pytest.raises(ValueError, match="^groups has 1 missing values; every row needs a group key$"):
        db.describe(x, groups=pd.Series([0, 1, None, 1], dtype="Int64"), stats=("moments",))
    with pytest.raises(ValueError, match="^weights has 2 missing values; every row needs a weight$"):
        db.describe(x, weights=pd.Series([1.0, None, 2.0, None], dtype="Float64"), stats=("moments",))
    # Without missing values the nullable Series are read as their NumPy dtype, and give what the arrays give.
    by_series = db.describe(x, groups=pd.Series([0, 1, 0, 1], dtype="Int64"), weights=pd.Series([1, 2, 3, 4]),
                            stats=("moments",))
    by_arrays = db.describe(x, groups=np.array([0, 1, 0, 1]), weights=np.array([1, 2, 3, 4]), stats=("moments",))
    np.testing.assert_array_equal(by_series.mean, by_arrays.mean)
    # A target reads its missing values as NaN, which the target's statistics refuse naming the row.
    with pytest.raises(ValueError, match="the target holds 1 non-finite value.*at its row 1"):
        db.describe(x, target=pd.Series([0.5, None, 1.5, 2.0], dtype="Float64"))


def test_group_key_scan_is_named_so_in_progress() -> None:
    # The scan that finds the group keys reports itself as such (it said "label scan").
    x = np.arange(40.0).reshape(20, 2)
    titles: set[str] = set()
    db.describe(x, groups=np.arange(20) % 3, stats=("moments", "hist"), run=db.RunOptions(progress=lambda done, total, title: titles.add(title)))
    assert "group-key scan" in titles and "label scan" not in titles, titles
    titles.clear()
    db.describe(x, label=np.arange(20) % 3, stats=("moments", "class_moments"), run=db.RunOptions(progress=lambda done, total, title: titles.add(title)))
    assert "label scan" in titles, titles
    titles.clear()  # only the second pass's mi needs the classes: the first pass finds them, no scan of its own
    db.describe(x, label=np.arange(20) % 3, stats=("moments", "hist", "mi"), run=db.RunOptions(progress=lambda done, total, title: titles.add(title)))
    assert titles == {"pass 1/2: moments+sketch", "pass 2/2: hist+qhist"}, titles
