"""open_dataset / open_zarr on real Zarr stores: formats, URLs, chunk alignment, integrity errors."""

from __future__ import annotations

import json
import os
import warnings

import dask
import numpy as np
import pytest
import zarr

from daskbatch.errors import DataError, IncompleteStoreWarning, MissingChunksWarning
from daskbatch.io.dataset import open_dataset, open_zarr

ROWS, COLS, CHUNK = 1000, 5, 100


def _data() -> np.ndarray:
    return np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) / 7


def _group(path, *, zarr_format: int = 3, label: bool = True, **attrs) -> zarr.Group:
    g = zarr.open_group(str(path), mode="w", zarr_format=zarr_format, attributes=attrs)
    a = g.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f4")
    a[:] = _data()
    if label:
        y = g.create_array("y", shape=(ROWS,), chunks=(CHUNK,), dtype="i4")
        y[:] = np.arange(ROWS) % 3
    return g


def _chunk_file(path, zarr_format: int, row_chunk: int) -> str:
    name = f"c/{row_chunk}/0" if zarr_format == 3 else f"{row_chunk}.0"
    return os.path.join(str(path), "X", name)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_roundtrip_and_alignment(tmp_path, zarr_format):
    path = tmp_path / "g.zarr"
    _group(path, zarr_format=zarr_format)
    ds = open_dataset(path, label="y")
    np.testing.assert_array_equal(ds.x.compute(), _data())
    np.testing.assert_array_equal(ds.label.compute(), np.arange(ROWS) % 3)
    assert ds.x.numblocks[1] == 1
    assert all(c % CHUNK == 0 for c in ds.x.chunks[0][:-1])
    assert ds.label.chunks[0] == ds.x.chunks[0]
    assert ds.store_chunks == (CHUNK, COLS)
    assert ds.zarr_format == zarr_format
    assert ds.feature_names == [f"f{i}" for i in range(COLS)]
    assert ds.missing_chunks == []
    json.dumps(ds.provenance())


def test_chunk_choices(tmp_path):
    path = tmp_path / "g.zarr"
    _group(path)
    assert open_dataset(path, chunks="storage").x.chunks[0] == (CHUNK,) * 10
    assert open_dataset(path, chunks=250).x.chunks[0] == (250,) * 4
    # auto: whole multiples of the storage chunk under the byte target
    with dask.config.set({"daskbatch.target-chunk-bytes": 3 * CHUNK * COLS * 4 + 1}):
        assert open_dataset(path).x.chunks[0] == (300, 300, 300, 100)
    with dask.config.set({"daskbatch.target-chunk-bytes": 1}):
        assert open_dataset(path).x.chunks[0] == (CHUNK,) * 10
    with pytest.raises(ValueError, match="chunks"):
        open_dataset(path, chunks="huge")


def test_bare_array_and_open_zarr(tmp_path):
    path = tmp_path / "a.zarr"
    a = zarr.create_array(str(path), shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f4")
    a[:] = _data()
    x = open_zarr(path)
    np.testing.assert_array_equal(x.compute(), _data())
    assert x.numblocks[1] == 1
    ds = open_dataset(str(path))
    assert ds.label is None and ds.array_name == ""


def test_open_zarr_component(tmp_path):
    path = tmp_path / "g.zarr"
    g = _group(path)
    g.create_array("other", shape=(10, 2), chunks=(5, 2), dtype="f8")[:] = 1.0
    assert open_zarr(path).shape == (ROWS, COLS)
    assert open_zarr(path, "other").shape == (10, 2)


def test_memory_and_file_urls(tmp_path):
    _group("memory://daskbatch-test.zarr")
    ds = open_dataset("memory://daskbatch-test.zarr", label="y")
    np.testing.assert_array_equal(ds.x.compute(), _data())
    _group(tmp_path / "f.zarr")
    x = open_zarr(f"file://{tmp_path / 'f.zarr'}")
    np.testing.assert_array_equal(x.compute(), _data())


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_store_feature_names(tmp_path, zarr_format):
    xr = pytest.importorskip("xarray")
    names = ["temp", "pressure", "wind"]
    data = np.random.default_rng(0).random((50, 3)).astype("f4")
    xds = xr.Dataset({"obs": (("sample", "feature"), data)}, coords={"feature": names})
    with warnings.catch_warnings():
        # xarray's fixed-width strings have no v3 spec yet; that is xarray's business.
        warnings.simplefilter("ignore")
        xds.to_zarr(tmp_path / "xr.zarr", mode="w", zarr_format=zarr_format)
    ds = open_dataset(tmp_path / "xr.zarr", x="obs")
    assert ds.feature_names == names
    np.testing.assert_array_equal(ds.x.compute(), data)
    assert "_ARRAY_DIMENSIONS" not in ds.attrs


def test_feature_names_from_attrs(tmp_path):
    path = tmp_path / "g.zarr"
    _group(path, feature_names=list("abcde"))
    assert open_dataset(path).feature_names == list("abcde")


def test_layout_attr_picks_label(tmp_path):
    path = tmp_path / "g.zarr"
    _group(path, daskbatch={"x": "X", "label": "y"})
    assert open_dataset(path).label_name == "y"


def test_missing_store_and_array(tmp_path):
    with pytest.raises(DataError, match="no Zarr store at .*nothere.zarr"):
        open_dataset(tmp_path / "nothere.zarr")
    path = tmp_path / "g.zarr"
    _group(path)
    with pytest.raises(DataError, match=r"x array 'Z' not found .*g\.zarr.*\['X', 'y'\]"):
        open_dataset(path, x="Z")
    with pytest.raises(DataError, match="label array 'lab' not found"):
        open_dataset(path, label="lab")


def test_bad_shapes(tmp_path):
    path = tmp_path / "g.zarr"
    g = _group(path)
    g.create_array("v", shape=(ROWS,), chunks=(CHUNK,), dtype="f4")
    g.create_array("short", shape=(ROWS - 1,), chunks=(CHUNK,), dtype="i4")
    with pytest.raises(DataError, match=r"array 'v' .*shape \(1000,\).*2-D"):
        open_dataset(path, x="v")
    with pytest.raises(DataError, match=r"label .*'short'.*\(999,\).*\(1000,\)"):
        open_dataset(path, label="short")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_missing_chunk_raises_or_warns(tmp_path, zarr_format):
    """A store zarr wrote: an absent chunk is the fill value by default, refused on request."""
    path = tmp_path / "g.zarr"
    _group(path, zarr_format=zarr_format)
    os.remove(_chunk_file(path, zarr_format, 3))
    key = "X/c/3/0" if zarr_format == 3 else "X/3.0"
    with pytest.raises(DataError, match=f"{key}"):
        open_dataset(path, missing="raise")
    for missing in ("auto", "fill"):
        ds = open_dataset(path, missing=missing)
        assert ds.missing_chunks == [(3, 0)]
        assert ds.provenance()["missing_chunk_keys"] == [key]
        assert ds.provenance()["absent_fill_chunks"] == 1 and ds.provenance()["complete"] is True
        assert key in repr(ds) and "absent (fill value)" in repr(ds)
        expected = _data()
        expected[3 * CHUNK : 4 * CHUNK] = 0  # zarr's default fill value
        np.testing.assert_array_equal(ds.x.compute(), expected)
    # Marked as written by daskbatch: every chunk was stored, so this one was lost.
    zarr.open_array(str(path / "X"), mode="r+").update_attributes({"daskbatch:writes_every_chunk": True})
    with pytest.raises(DataError, match=f"{key}.*daskbatch wrote every chunk"):
        open_dataset(path)
    with pytest.warns(MissingChunksWarning, match=f"1 chunk.*'X'.*{key}"):
        assert open_dataset(path, missing="fill").provenance()["complete"] is False


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_corrupt_chunk_names_key_and_position(tmp_path, zarr_format):
    path = tmp_path / "g.zarr"
    _group(path, zarr_format=zarr_format)
    chunk = _chunk_file(path, zarr_format, 5)
    with open(chunk, "r+b") as f:
        f.seek(4)
        f.write(b"\xff" * 24)  # clobber the zstd frame header
    ds = open_dataset(path)
    key = "X/c/5/0" if zarr_format == 3 else "X/5.0"
    with pytest.raises(
        DataError, match=rf"chunk '{key}' \(grid position \(5, 0\)\) of array 'X'"
    ) as err:
        ds.x.compute()
    assert err.value.__cause__ is not None
    assert not isinstance(err.value.__cause__, DataError)
    # The healthy chunks still read.
    healthy = open_dataset(path, chunks="storage").x[:500]
    np.testing.assert_array_equal(healthy.compute(), _data()[:500])


def test_truncated_chunk_under_distributed(tmp_path):
    distributed = pytest.importorskip("distributed")
    path = tmp_path / "g.zarr"
    _group(path)
    chunk = _chunk_file(path, 3, 2)
    with open(chunk, "r+b") as f:
        f.truncate(10)
    ds = open_dataset(path, chunks="storage")
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        with pytest.raises(DataError, match=r"X/c/2/0.*\(2, 0\)"):
            ds.x.sum().compute()


def test_incomplete_ingest_warns(tmp_path):
    path = tmp_path / "g.zarr"
    _group(path, daskbatch_output="ingest", complete=False)
    with pytest.warns(IncompleteStoreWarning, match="did not finish"):
        ds = open_dataset(path)
    assert ds.provenance()["complete"] is False


def test_repr(tmp_path):
    path = tmp_path / "g.zarr"
    _group(path)
    ds = open_dataset(path, label="y")
    text = repr(ds)
    assert "g.zarr" in text and "(1,000 x 5)" in text and "y int32" in text
    assert "<table>" in ds._repr_html_()


def test_sharded_store_aligns_to_shards(tmp_path):
    path = tmp_path / "sh.zarr"
    g = zarr.open_group(str(path), mode="w")
    a = g.create_array("X", shape=(ROWS, COLS), chunks=(50, COLS), shards=(200, COLS), dtype="f4")
    a[:] = _data()
    ds = open_dataset(path, chunks="storage")
    assert ds.store_chunks == (200, COLS) and ds.x.chunks[0] == (200,) * 5
    np.testing.assert_array_equal(ds.x.compute(), _data())
    os.remove(path / "X" / "c" / "2" / "0")
    with pytest.raises(DataError, match=r"X/c/2/0"):
        open_dataset(path, missing="raise")


def test_columns_chunked_in_store_still_one_block_wide(tmp_path):
    path = tmp_path / "cols.zarr"
    a = zarr.create_array(str(path), shape=(ROWS, COLS), chunks=(CHUNK, 2), dtype="f4")
    a[:] = _data()
    x = open_zarr(path)
    assert x.numblocks[1] == 1 and all(c % CHUNK == 0 for c in x.chunks[0][:-1])
    np.testing.assert_array_equal(x.compute(), _data())
