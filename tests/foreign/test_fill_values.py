"""Fill values and CF packing read exactly as xarray decodes them, on stores xarray writes.

Issue "Trust on real data, round 2", item 1: a float store that xarray wrote
with ``_FillValue=-9999`` read its missing values as -9999 (mean ``[-1661.5, 6]``
where xarray decodes ``[6, 6]``): for Zarr v2 xarray keeps ``_FillValue`` only
as the metadata ``fill_value``, and for v3 the attribute is base64.
"""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import daskbatch as db
from daskbatch.errors import DataError

# Stores other tools wrote hold NaN holes and fill values read at the edges: the trust warnings
# (complete rows, piled values) are true of them and not what these tests compare.
pytestmark = [
    pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning"),
    pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning"),
]

#: What xarray is asked to write for ``v``: CF masking and packing in each combination.
ENCODINGS = {
    "float_fill_value": {"_FillValue": -9999.0},
    "float_missing_value": {"missing_value": -9999.0},
    "float_default": {},
    "int_fill_value": {"dtype": "int32", "_FillValue": 7},
    "packed_fill_value": {
        "dtype": "int16",
        "scale_factor": 0.01,
        "add_offset": 5.0,
        "_FillValue": -32767,
    },
    "packed_missing_value": {
        "dtype": "int16",
        "scale_factor": 0.01,
        "add_offset": 5.0,
        "missing_value": -32767,
    },
    "packed_no_mask": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 5.0},
    "unsigned_bytes": {"dtype": "int8", "_Unsigned": "true", "_FillValue": 255},
}


def _values(case: str) -> np.ndarray:
    """Rows with NaN (a whole chunk of them, and single ones), and values that pack exactly enough."""
    x = np.round(np.random.default_rng(1).normal(5.0, 2.0, (300, 3)), 2)
    if case == "unsigned_bytes":  # netCDF-3's bytes: 0..254 stored in int8, 255 missing
        x = np.arange(900.0).reshape(300, 3) % 255
        x[[3, 250], [1, 2]] = np.nan
        return x
    if case == "int_fill_value":
        # 7 is the fill value: each 7 is missing to xarray.
        return np.arange(900.0).reshape(300, 3) % 50
    if case != "packed_no_mask":
        x[100:200] = np.nan
        x[[3, 250], [1, 2]] = np.nan
    return x


def _write(path: pathlib.Path, case: str, zarr_format: int) -> np.ndarray:
    """Write ``v`` with xarray; return what ``xr.open_zarr`` reads back."""
    x = _values(case)
    ds = xr.Dataset({"v": (("sample", "feature"), x)})
    encoding = {**ENCODINGS[case], "chunks": (100, 3)}
    with warnings.catch_warnings():
        # Consolidated metadata in v3; packing floats with no _FillValue.
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        warnings.simplefilter("ignore", xr.SerializationWarning)
        ds.to_zarr(str(path), zarr_format=zarr_format, encoding={"v": encoding})
        return np.asarray(xr.open_zarr(str(path))["v"].values, dtype=np.float64)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("case", list(ENCODINGS))
def test_describe_reads_what_xarray_decodes(
    tmp_path: pathlib.Path, case: str, zarr_format: int
) -> None:
    path = tmp_path / "a.zarr"
    decoded = _write(path, case, zarr_format)
    s = db.describe(
        db.open_dataset(path, x="v"), stats=("moments", "cov"), run=db.RunOptions(plan=None)
    )
    np.testing.assert_array_equal(s.nan_count, np.sum(np.isnan(decoded), axis=0))
    np.testing.assert_array_equal(s.count, np.sum(np.isfinite(decoded), axis=0))
    np.testing.assert_allclose(s.mean, np.nanmean(decoded, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.std, np.nanstd(decoded, axis=0, ddof=1), rtol=1e-10)
    np.testing.assert_array_equal(s.min, np.nanmin(decoded, axis=0))
    np.testing.assert_array_equal(s.max, np.nanmax(decoded, axis=0))
    # The correlation of the rows where both features are there.
    rows = np.all(np.isfinite(decoded), axis=1)
    np.testing.assert_allclose(
        s.arrays.corr[0, 1], np.corrcoef(decoded[rows, 0], decoded[rows, 1])[0, 1], rtol=1e-9
    )


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_the_issue_repro(tmp_path: pathlib.Path, zarr_format: int) -> None:
    x = np.arange(12.0).reshape(6, 2)
    x[0, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        xr.Dataset({"v": (("s", "f"), x)}).to_zarr(
            tmp_path / "a.zarr", encoding={"v": {"_FillValue": -9999.0}}, zarr_format=zarr_format
        )
    s = db.describe(db.open_dataset(tmp_path / "a.zarr", x="v"), stats=("moments",))
    np.testing.assert_array_equal(s.mean, [6.0, 6.0])
    np.testing.assert_array_equal(s.nan_count, [1, 0])


def test_zarr_default_fill_value_is_no_mask_in_v2(tmp_path: pathlib.Path) -> None:
    """Zeros of a v2 store that zarr wrote (fill value 0, no xarray attributes) stay zeros."""
    x = np.zeros((20, 2))
    x[::3] = 1.5
    zarr.create_array(
        str(tmp_path / "z.zarr"), data=x, chunks=(5, 2), zarr_format=2, fill_value=0.0
    )
    s = db.describe(tmp_path / "z.zarr", stats=("moments",))
    np.testing.assert_array_equal(s.count, [20, 20])
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-15)


def test_a_plain_number_fill_value_in_v3_is_that_number(tmp_path: pathlib.Path) -> None:
    """Another writer's numeric ``_FillValue`` attribute (not xarray's base64) means itself."""
    x = np.arange(10.0).reshape(5, 2)
    arr = zarr.create_array(str(tmp_path / "n.zarr"), data=x, chunks=(5, 2))
    arr.attrs["_FillValue"] = 4.0
    s = db.describe(tmp_path / "n.zarr", stats=("moments",))
    np.testing.assert_array_equal(s.nan_count, [1, 0])  # the 4 of 0, 2, 4, 6, 8
    np.testing.assert_array_equal(s.mean, [4.0, 5.0])


def test_an_undecodable_fill_value_is_named(tmp_path: pathlib.Path) -> None:
    arr = zarr.create_array(str(tmp_path / "bad.zarr"), data=np.ones((4, 2)), chunks=(4, 2))
    arr.attrs["_FillValue"] = "not base64!"
    with pytest.raises(DataError, match=r"_FillValue attribute 'not base64!'.*float64") as info:
        db.open_dataset(tmp_path / "bad.zarr")
    assert "\n" not in str(info.value)


def test_undecodable_cf_attributes_are_named(tmp_path: pathlib.Path) -> None:
    arr = zarr.create_array(str(tmp_path / "s.zarr"), data=np.ones((4, 2)), chunks=(4, 2))
    arr.attrs["scale_factor"] = "ten"
    with pytest.raises(
        DataError, match=r"CF attributes \{'scale_factor': 'ten'\} that xarray cannot decode"
    ):
        db.open_dataset(tmp_path / "s.zarr")


def test_a_null_fill_value_attribute_is_none(tmp_path: pathlib.Path) -> None:
    """``_FillValue: null`` masks nothing (xarray refuses such a store; its data are valid)."""
    arr = zarr.create_array(
        str(tmp_path / "n.zarr"), data=np.arange(8.0).reshape(4, 2), chunks=(4, 2)
    )
    arr.attrs["_FillValue"] = None
    s = db.describe(tmp_path / "n.zarr", stats=("moments",))
    np.testing.assert_array_equal(s.nan_count, [0, 0])
    np.testing.assert_array_equal(s.mean, [3.0, 4.0])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_integer_label_with_an_explicit_fill_value_keeps_its_classes(tmp_path: pathlib.Path, zarr_format: int) -> None:
    """xarray's ``_FillValue`` on an int label: every class read as stored (xarray makes floats); a missing one refused."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(600, 3)), rng.integers(0, 3, 600)
    path = str(tmp_path / "label.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        xr.Dataset({"X": (("sample", "feature"), x), "y": (("sample",), y)}).to_zarr(
            path, zarr_format=zarr_format, encoding={"y": {"_FillValue": -1, "chunks": (200,)}})
    assert xr.open_zarr(path)["y"].dtype == np.float64  # what xarray makes of it
    s = db.describe(path, label="y", stats=("moments", "hist", "mi"), range=(-5, 5))
    np.testing.assert_array_equal(s.mi, db.describe(x, label=y, stats=("moments", "hist", "mi"), range=(-5, 5)).mi)
    y[250:253] = -1  # three rows without a class, as xarray writes NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        xr.Dataset({"X": (("sample", "feature"), x), "y": (("sample",), np.where(y < 0, np.nan, y))}).to_zarr(
            path, mode="w", zarr_format=zarr_format, encoding={"y": {"_FillValue": -1, "dtype": "int64", "chunks": (200,)}})
    with pytest.raises(DataError, match=r"^array 'y' in .* holds its fill value -1 \(xarray's missing value\) in 3 rows "
                                        r"from row 250: a label needs a class on every row$"):
        db.describe(path, label="y", stats=("moments", "hist", "mi"), range=(-5, 5))
