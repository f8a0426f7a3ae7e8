"""Issue "Every door locked", items 9, 10 and the smaller ones: inputs that gave silently wrong answers or a crash.

* A pandas Series of weights, target or group keys beside a DataFrame was used by
  position, whatever its index: a Series indexed otherwise than the DataFrame's
  rows is now refused in one line, as the label already was.
* The mask of a masked array was ignored: masked values of ``x`` are now missing
  (NaN, as numpy.ma leaves them out of ``mean`` and ``count``), a masked weight
  makes its row as if absent, a masked label or group key is refused.
* ``longdouble`` data gave a numba TypingError: now converted to float64 with a
  warning naming the precision lost (a value beyond float64's range is refused).
* An all-NaN store failed in the sketch with NumPy's "zero-size array": describe
  now gives counts 0 and NaN results, also through the CLI.
* A uint64 group key beyond int64 was called a "label value": it is named as a group key.
"""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main

ROWS = 1_000


@pytest.fixture()
def x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(ROWS, 3))


@pytest.mark.parametrize("role", ["weights", "target", "groups"])
def test_series_with_another_index_is_refused(x: np.ndarray, role: str) -> None:
    df = pd.DataFrame(x)
    values = (
        np.random.default_rng(1).uniform(size=ROWS) if role != "groups" else np.arange(ROWS) % 3
    )
    stats = ("moments",)
    with pytest.raises(
        ValueError,
        match=rf"^{role}: the Series' index does not match the rows of the DataFrame; "
        rf"use {role}\.reindex\(df\.index\)$",
    ):
        db.describe(df, stats=stats, **{role: pd.Series(values, index=df.index[::-1])})
    # The same Series indexed like the DataFrame is used, and means what the index says.
    aligned = db.describe(df, stats=stats, **{role: pd.Series(values, index=df.index)})
    positional = db.describe(x, stats=stats, **{role: values})
    np.testing.assert_array_equal(aligned.mean, positional.mean)


def test_weights_series_beside_an_array_is_used_by_position(x: np.ndarray) -> None:
    w = np.random.default_rng(1).uniform(size=ROWS)
    got = db.describe(x, weights=pd.Series(w, index=np.arange(ROWS)[::-1]), stats=("moments",))
    np.testing.assert_array_equal(got.mean, db.describe(x, weights=w, stats=("moments",)).mean)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_masked_values_are_missing(x: np.ndarray, dtype: type) -> None:
    values = (x * 100).astype(dtype)
    mask = x > 1
    got = db.describe(np.ma.masked_array(values, mask=mask), stats=("moments",))
    expected = np.ma.masked_array(values.astype(np.float64), mask=mask)
    np.testing.assert_array_equal(got.count, expected.count(axis=0))
    np.testing.assert_allclose(got.mean, expected.mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(got.nan_count, mask.sum(axis=0))
    # Dask arrays of masked blocks too.
    import dask.array as da

    lazy = da.ma.masked_array(
        da.from_array(values, chunks=(250, 3)), mask=da.from_array(mask, chunks=(250, 3))
    )
    np.testing.assert_allclose(
        db.describe(lazy, stats=("moments",)).mean, expected.mean(axis=0), rtol=1e-12
    )


def test_masked_int_values_float64_cannot_hold_are_refused() -> None:
    values = np.array([[2**60 + 1, 1], [1, 1]])
    with pytest.raises(
        ValueError, match=r"masked int64 array and its value 1152921504606846977 at \(0, 0\)"
    ):
        db.describe(np.ma.masked_array(values, mask=[[0, 1], [0, 0]]), stats=("moments",))


def test_masked_weights_make_rows_absent_and_masked_labels_are_refused(x: np.ndarray) -> None:
    half = np.arange(ROWS) < ROWS // 2
    w = np.ma.masked_array(np.ones(ROWS), mask=half)
    got = db.describe(x, weights=w, stats=("moments",))
    np.testing.assert_array_equal(got.count, [ROWS // 2] * 3)
    np.testing.assert_allclose(got.mean, x[~half].mean(axis=0), rtol=1e-12)
    with pytest.raises(
        ValueError, match=f"^label has {ROWS // 2:,} masked values; every row needs one$"
    ):
        db.describe(x, np.ma.masked_array(np.ones(ROWS, int), mask=half))
    with pytest.raises(
        ValueError, match=f"^groups has {ROWS // 2:,} masked values; every row needs one$"
    ):
        db.describe(x, groups=np.ma.masked_array(np.ones(ROWS, int), mask=half))


def test_longdouble_is_computed_in_float64_with_a_warning(x: np.ndarray) -> None:
    with pytest.warns(RuntimeWarning, match=r"x has dtype float(128|96|64) .*computes in float64"):
        got = db.describe(x.astype(np.longdouble), stats=("moments", "sketch"))
    want = db.describe(x, stats=("moments", "sketch"))
    np.testing.assert_array_equal(got.mean, want.mean)
    np.testing.assert_array_equal(got.quantile(0.5), want.quantile(0.5))


@pytest.mark.skipif(
    np.finfo(np.longdouble).max <= np.finfo(np.float64).max, reason="longdouble is float64 here"
)
def test_longdouble_beyond_float64_is_refused(x: np.ndarray) -> None:
    big = x.astype(np.longdouble)
    big[7, 1] = np.longdouble("1e400")
    with (
        pytest.warns(RuntimeWarning, match="longdouble|float128"),
        pytest.raises(
            ValueError, match=r"^x has the value 1e\+400 at row 7, beyond float64's range"
        ),
    ):
        db.describe(big, stats=("moments",))


def all_nan_store(path: pathlib.Path) -> pathlib.Path:
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("X", data=np.full((600, 3), np.nan), chunks=(100, 3))
    return path


def test_all_nan_store_gives_counts_zero_and_nan_results(tmp_path: pathlib.Path) -> None:
    store = all_nan_store(tmp_path / "nan.zarr")
    with pytest.warns(db.errors.CompleteRowsWarning, match="no feature has a finite value to correlate"):
        got = db.describe(store)
    np.testing.assert_array_equal(got.count, [0, 0, 0])
    np.testing.assert_array_equal(got.nan_count, [600, 600, 600])
    for name in ("mean", "std", "min", "max"):
        assert np.isnan(getattr(got, name)).all(), name
    assert np.isnan(got.quantile(0.5)).all()
    with warnings.catch_warnings():  # the CLI shows its warnings as a user sees them, not as errors
        warnings.simplefilter("default")
        cli = CliRunner().invoke(
            main, ["describe", str(store), "--no-progress", "--cluster", "threads"]
        )
    assert cli.exit_code == 0, cli.output


def test_uint64_group_keys_beyond_int64_are_named_as_group_keys(
    tmp_path: pathlib.Path, x: np.ndarray
) -> None:
    keys = (np.arange(ROWS) % 3).astype(np.uint64)
    keys[345] = 2**64 - 1
    message = f"groups: group key {2**64 - 1} at row 345 does not fit in int64"
    with pytest.raises(ValueError, match=f"^{message}"):
        db.describe(x, groups=keys, stats=("moments",))
    root = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    root.create_array("X", data=x, chunks=(100, 3))
    root.create_array("g", data=keys, chunks=(100,))
    cli = CliRunner().invoke(
        main,
        [
            "describe",
            str(tmp_path / "g.zarr"),
            "--groups",
            "g",
            "--stats",
            "moments",
            "--no-progress",
            "--cluster",
            "threads",
        ],
    )
    assert cli.exit_code == 2, cli.output
    line = next(ln for ln in cli.output.splitlines() if ln.startswith("error:"))
    assert "group key 18446744073709551615 at row 345 does not fit in int64" in line
