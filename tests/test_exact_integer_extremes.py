"""min and max of int64 and uint64 features are exact, in their dtype, everywhere a summary keeps them.

Issue "Trust on real data, round 2", item 7: the extremes went through float64,
which holds integers up to 2**53 only, so
``describe((2**62 + np.arange(999)).astype('i8')[:, None]).max[0] - 2**62`` was
1024 instead of 998.
"""

from __future__ import annotations

import pathlib

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.stats.moments import Moments

BIG = 2**62


def _data() -> np.ndarray:
    """An int64 feature beyond 2**53 (shuffled, so no block holds both ends) and a small one."""
    big = (BIG + np.random.default_rng(7).permutation(999)).astype(np.int64)
    return np.stack([big, np.arange(999, dtype=np.int64) - 500], axis=1)


def test_the_issue_repro() -> None:
    s = db.describe((BIG + np.arange(999)).astype("i8")[:, None])
    assert s.max.dtype == np.int64 and int(s.arrays.max[0]) - BIG == 998 and int(s.arrays.min[0]) == BIG


def test_uint64_near_its_top_and_int64_near_its_bottom() -> None:
    top = (np.uint64(2**64 - 1) - np.arange(999, dtype=np.uint64))[:, None]
    s = db.describe(top, stats=("moments",))
    assert s.max.dtype == np.uint64 and int(s.arrays.max[0]) == 2**64 - 1 and int(s.arrays.min[0]) == 2**64 - 999
    bottom = (np.iinfo(np.int64).min + np.arange(999))[:, None].astype(np.int64)
    s = db.describe(bottom, stats=("moments",))
    assert int(s.arrays.min[0]) == -(2**63) and int(s.arrays.max[0]) == -(2**63) + 998


def test_exact_across_blocks_and_in_the_state() -> None:
    x = _data()
    s = db.describe(
        da.from_array(x, chunks=(100, 2)), stats=("moments",), run=db.RunOptions(plan=None)
    )
    np.testing.assert_array_equal(s.min, x.min(axis=0))
    np.testing.assert_array_equal(s.max, x.max(axis=0))
    assert s.states["moments"].state.fmax.dtype == np.int64
    # The float results are as before: float64, and the mean about its exact reference.
    assert s.mean.dtype == np.float64 and s.std.dtype == np.float64
    # Both features are 0..998 shifted: the same std.
    np.testing.assert_allclose(s.std, np.arange(999.0).std(ddof=1), rtol=1e-12)


def test_the_table_html_xarray_json_and_a_saved_summary_keep_every_digit(
    tmp_path: pathlib.Path,
) -> None:
    x = _data()
    s = db.describe(x, stats=("moments",))
    assert (
        f"{BIG + 998:,}" in repr(s)
        and f"{BIG:,}" in repr(s)
        and f"{BIG + 998:,}" in s._repr_html_()
    )
    ds = s.to_xarray()
    assert ds["max"].dtype == np.int64 and int(ds["max"][0]) == BIG + 998
    back = db.Summary.from_xarray(ds)
    np.testing.assert_array_equal(back.max, x.max(axis=0))
    assert s.to_json()["max"][0] == BIG + 998
    s.save(tmp_path / "s.zarr")
    loaded = db.load_summary(tmp_path / "s.zarr")
    assert loaded.max.dtype == np.int64 and int(loaded.arrays.max[0]) == BIG + 998
    assert s.to_dataframe()["min"].iloc[0] == BIG


def test_merge_and_update_stay_exact() -> None:
    x = _data()
    first, second = (
        db.describe(x[:400], stats=("moments",)),
        db.describe(x[400:], stats=("moments",)),
    )
    merged = db.merge(first, second)
    np.testing.assert_array_equal(merged.max, x.max(axis=0))
    np.testing.assert_array_equal(merged.min, x.min(axis=0))
    updated = db.update(first, x[400:])
    np.testing.assert_array_equal(updated.max, x.max(axis=0))
    assert updated.max.dtype == np.int64


def test_weights_leave_out_rows_of_weight_zero_exactly() -> None:
    x = (BIG + np.arange(300)).astype(np.int64)[:, None]
    w = np.ones(300)
    w[-5:] = 0.0  # the five largest values are as if absent
    w[:100] = 0.0  # one block of only weight 0: an empty state to merge with
    s = db.describe(
        da.from_array(x, chunks=(100, 1)), weights=da.from_array(w, chunks=100), stats=("moments",)
    )
    assert int(s.arrays.max[0]) == BIG + 294 and int(s.arrays.min[0]) == BIG + 100 and s.max.dtype == np.int64


def test_integers_merged_with_real_numbers_are_float64() -> None:
    m = Moments()
    ints = m.chunk(np.array([[BIG]], dtype=np.int64))
    floats = m.chunk(np.array([[0.5]]))
    result = m.finalize(m.merge(ints, floats))
    assert result.max.dtype == np.float64 and result.max[0] == float(BIG) and result.min[0] == 0.5


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8", "bool"])
def test_other_dtypes_keep_float64_extremes(dtype: str) -> None:
    x = (np.arange(20).reshape(10, 2) % 7).astype(dtype)
    s = db.describe(x, stats=("moments",))
    assert s.min.dtype == np.float64
    np.testing.assert_array_equal(s.max, x.max(axis=0).astype(np.float64))


def test_nan_policy_propagate_keeps_them_exact() -> None:
    s = db.describe(
        (BIG + np.arange(10)).astype(np.int64)[:, None],
        stats=[db.stats.Moments(nan_policy="propagate")],
    )
    assert s.max.dtype == np.int64 and int(s.arrays.max[0]) == BIG + 9
