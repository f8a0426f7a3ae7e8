"""A corpus of stores that daskbatch did not write, each made here by its writer with that writer's defaults.

Each fixture returns a :class:`Foreign`: where the store is, the values as
its writer meant them (float64, decoded as xarray decodes CF packing), the
label and how many chunks the writer left out because they held only the
fill value (zarr's ``write_empty_chunks=False`` default, which xarray and dask
keep).  Every store has such chunks, so that reading them as lost would fail.
"""

from __future__ import annotations

import itertools
import pathlib
import warnings
from dataclasses import dataclass

import dask.array as da
import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

ROWS, FEATURES, CHUNK = 400, 3, 100
_memory_stores = itertools.count()


@dataclass(frozen=True)
class Foreign:
    """A store another writer made, and what it holds."""

    path: str
    x: np.ndarray
    y: np.ndarray | None
    absent: int
    label: str | None = "y"


def _data() -> tuple[np.ndarray, np.ndarray]:
    """Features with one all-zero row chunk, and a label whose first chunk is all class 0."""
    x = np.random.default_rng(11).normal(10.0, 2.0, (ROWS, FEATURES))
    x[CHUNK : 2 * CHUNK] = 0.0  # zarr's default fill value: that chunk is not written
    y = (np.arange(ROWS) >= CHUNK).astype(np.int64) + (np.arange(ROWS) >= 3 * CHUNK)
    return x, y


def _zarr_group(where: object, zarr_format: int = 3, **array_kwargs: object) -> Foreign:
    x, y = _data()
    g = zarr.open_group(where, mode="w", zarr_format=zarr_format)
    g.create_array("X", data=x, chunks=(CHUNK, FEATURES), **array_kwargs)
    g.create_array("y", data=y, chunks=(CHUNK,), **array_kwargs)
    return Foreign(str(where), x, y, absent=2)


@pytest.fixture()
def zarr_v2_blosc(tmp_path: pathlib.Path) -> Foreign:
    """zarr-python, Zarr v2 format, blosc compressor."""
    return _zarr_group(str(tmp_path / "v2.zarr"), zarr_format=2, compressors=numcodecs.Blosc())


@pytest.fixture()
def zarr_v3_sharded(tmp_path: pathlib.Path) -> Foreign:
    """zarr-python, Zarr v3, one shard of four inner chunks along the rows: inner chunks left out."""
    x, y = _data()
    path = tmp_path / "sharded.zarr"
    g = zarr.open_group(str(path), mode="w")
    g.create_array("X", data=x, chunks=(CHUNK, FEATURES), shards=(4 * CHUNK, FEATURES))
    g.create_array("y", data=y, chunks=(CHUNK,), shards=(2 * CHUNK,))
    return Foreign(str(path), x, y, absent=2)


@pytest.fixture()
def consolidated(tmp_path: pathlib.Path) -> Foreign:
    """zarr-python, Zarr v2 with consolidated metadata (``.zmetadata``), as xarray writes v2."""
    path = tmp_path / "consolidated.zarr"
    store = _zarr_group(str(path), zarr_format=2)
    zarr.consolidate_metadata(str(path))
    assert (path / ".zmetadata").is_file()
    return store


def _xarray(path: pathlib.Path, zarr_format: int | None, left_out: float) -> Foreign:
    """xarray ``to_zarr``: int16 packed with CF scale_factor/add_offset, _FillValue for NaN, a time coordinate."""
    x, _ = _data()
    x[CHUNK : 2 * CHUNK] = left_out  # packs to zarr's fill value, so the chunk is left out
    x[[3, 250], [1, 2]] = np.nan  # written as _FillValue
    x[CHUNK * 2 :] = np.round(x[CHUNK * 2 :], 3)
    ds = xr.Dataset(
        {"X": (("time", "feature"), x)},
        coords={"time": pd.date_range("2000-01-01", periods=ROWS, freq="D")},
    )
    ds["X"].encoding = {
        "dtype": "int16", "scale_factor": 0.001, "add_offset": 10.0, "_FillValue": -32768,
        "chunks": (CHUNK, FEATURES),
    }
    with warnings.catch_warnings():
        # xarray consolidates by default; zarr warns that v3 does not specify it.
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        ds.to_zarr(str(path), zarr_format=zarr_format)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        decoded = xr.open_zarr(str(path))["X"].values  # the values as xarray reads them
    return Foreign(str(path), np.asarray(decoded, dtype=np.float64), None, absent=1, label=None)


@pytest.fixture()
def xarray_cf(tmp_path: pathlib.Path) -> Foreign:
    """xarray's default format (Zarr v3 here): ``_FillValue`` is an attribute."""
    # 10.0 == add_offset packs to 0, zarr's fill value here.
    return _xarray(tmp_path / "xarray.zarr", None, left_out=10.0)


@pytest.fixture()
def xarray_cf_v2(tmp_path: pathlib.Path) -> Foreign:
    """xarray into Zarr v2: ``_FillValue`` is the array's fill value in ``.zarray``, consolidated."""
    # NaN packs to -32768, which xarray makes the v2 fill value.
    return _xarray(tmp_path / "xarray-v2.zarr", 2, left_out=np.nan)


def _xarray_fill_value(path: pathlib.Path, zarr_format: int, absent: int = 2) -> Foreign:
    """xarray ``to_zarr`` of float64 with an explicit ``_FillValue`` (climate data's habit), and an int label."""
    x, y = _data()
    x[2 * CHUNK : 3 * CHUNK] = np.nan  # all -9999 once encoded: zarr's fill value here, so not written
    x[[3, 250], [1, 2]] = np.nan
    ds = xr.Dataset({"X": (("sample", "feature"), x), "y": (("sample",), y)})
    encoding: dict[str, object] = {"_FillValue": -9999.0, "chunks": (CHUNK, FEATURES)}
    if zarr_format == 3:
        encoding["fill_value"] = -9999.0  # v3 keeps the _FillValue attribute apart from zarr's fill value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        ds.to_zarr(str(path), zarr_format=zarr_format, encoding={"X": encoding, "y": {"chunks": (CHUNK,)}})
        decoded = xr.open_zarr(str(path))
        values, label = decoded["X"].values, decoded["y"].values
    np.testing.assert_array_equal(values, x)  # xarray reads back the NaN it was given
    return Foreign(str(path), np.asarray(values, dtype=np.float64), np.asarray(label), absent=absent)


@pytest.fixture()
def xarray_fill_v2(tmp_path: pathlib.Path) -> Foreign:
    """xarray into Zarr v2 with ``_FillValue=-9999``: kept only as the metadata ``fill_value``."""
    # X's chunk of NaN and the label's chunk of class 0 (no fill value, which zarr writes as 0) are left out.
    return _xarray_fill_value(tmp_path / "fill-v2.zarr", 2, absent=2)


@pytest.fixture()
def xarray_fill_v3(tmp_path: pathlib.Path) -> Foreign:
    """xarray into Zarr v3 with ``_FillValue=-9999``: a base64 attribute (``'AAAAAICHw8A='``)."""
    # X's chunk of NaN and the label's chunk of class 0 (zarr's fill value 0) are left out.
    return _xarray_fill_value(tmp_path / "fill-v3.zarr", 3, absent=2)


@pytest.fixture()
def dask_to_zarr(tmp_path: pathlib.Path) -> Foreign:
    """dask ``Array.to_zarr`` (zarr's defaults): blocks of fill values are not written."""
    x, y = _data()
    path = str(tmp_path / "dask.zarr")
    da.from_array(x, chunks=(CHUNK, FEATURES)).to_zarr(path, component="X")
    da.from_array(y, chunks=CHUNK).to_zarr(path, component="y")
    return Foreign(path, x, y, absent=2)


@pytest.fixture()
def zip_store(tmp_path: pathlib.Path) -> Foreign:
    """zarr-python into a ``ZipStore`` (one ``.zip`` file)."""
    path = str(tmp_path / "store.zip")
    store = zarr.storage.ZipStore(path, mode="w")
    written = _zarr_group(store)
    store.close()
    return Foreign(path, written.x, written.y, written.absent)


@pytest.fixture()
def memory_store() -> Foreign:
    """zarr-python into an fsspec ``memory://`` store."""
    url = f"memory://foreign-{next(_memory_stores)}.zarr"
    written = _zarr_group(url)
    return Foreign(url, written.x, written.y, written.absent)


#: Every store of the corpus, by fixture name.
CORPUS = (
    "zarr_v2_blosc", "zarr_v3_sharded", "consolidated", "xarray_cf", "xarray_cf_v2", "xarray_fill_v2",
    "xarray_fill_v3", "dask_to_zarr", "zip_store", "memory_store",
)
