"""``load_summary`` on something that is not a summary says so in one line.

On a data store it raised xarray's KeyError about ``dimension_names`` metadata.
"""

from __future__ import annotations

import pathlib

import dask.array as da
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.tiled_cov import tiled_covariance
from daskbatch.errors import DataError


def test_a_data_store_is_named_with_its_arrays(store: pathlib.Path) -> None:
    with pytest.raises(DataError, match=r"is not a daskbatch summary \(it holds arrays X, y\)") as err:
        db.load_summary(store)
    assert str(store) in str(err.value) and "\n" not in str(err.value)


def test_other_paths_are_named(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("x")
    with pytest.raises(DataError, match="not a Zarr group"):
        db.load_summary(plain)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        db.load_summary(tmp_path / "missing.zarr")
    cov = tiled_covariance(da.from_zarr(str(store), component="X"), tile=2, out=tmp_path / "c.zarr")
    with pytest.raises(DataError, match="it is a daskbatch tiled_cov output"):
        db.load_summary(cov.path)


def test_summaries_saved_before_the_marker_still_load(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    s = db.describe(str(store), stats="moments", run=db.RunOptions(plan=None))
    path = tmp_path / "s.zarr"
    s.save(path)
    group = zarr.open_group(str(path), mode="r+")
    del group.attrs["daskbatch_output"]  # as an older daskbatch wrote it
    np.testing.assert_array_equal(db.load_summary(path).mean, s.mean)
    with pytest.raises(DataError, match="not a daskbatch summary"):
        s.save(path)  # but it is no longer recognised as ours to replace
