"""Input readers behind one protocol: every kind of input, and ingest's batch files, read through io.readers."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.errors import DataError
from daskbatch.io import readers
from daskbatch.io.chunk_grid import WRITES_EVERY_CHUNK
from daskbatch.io.readers import FileReader, Part, Reader, open_reader

ROWS, COLS, CHUNK = 400, 3, 100
FILL = -9999.0


def _fill_valued_store(path: str) -> np.ndarray:
    """An xarray-style v2 array whose fill value marks missing values (``_FillValue`` decodes them to NaN)."""
    data = np.arange(ROWS * COLS, dtype="f8").reshape(ROWS, COLS) / 7
    data[::5, 1] = FILL
    arr = zarr.create_array(path, shape=data.shape, chunks=(CHUNK, COLS), dtype="f8", zarr_format=2,
                            fill_value=FILL, attributes={"_ARRAY_DIMENSIONS": ["sample", "feature"]})
    arr[:] = data
    return data


def _daskbatch_store(path: str) -> str:
    """A group whose X records that its writer stores every chunk, with chunk 1 of X deleted."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    x = group.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f8",
                           attributes={WRITES_EVERY_CHUNK: True})
    x[:] = np.ones((ROWS, COLS))
    os.remove(os.path.join(path, "X", "c", "1", "0"))
    return path


def test_a_dask_array_from_zarr_is_decoded_as_its_path_is(tmp_path) -> None:
    path = str(tmp_path / "cf.zarr")
    data = _fill_valued_store(path)
    by_path = db.describe(path, stats=("moments",))
    by_array = db.describe(da.from_zarr(path), stats=("moments",))
    expected = np.where(data == FILL, np.nan, data)
    np.testing.assert_array_equal(by_array.count, np.isfinite(expected).sum(axis=0))
    np.testing.assert_array_equal(by_array.mean, by_path.mean)
    np.testing.assert_allclose(by_array.mean, np.nanmean(expected, axis=0), rtol=1e-14)


def test_a_lost_chunk_is_refused_through_from_zarr_as_through_the_path(tmp_path) -> None:
    path = _daskbatch_store(str(tmp_path / "lost.zarr"))
    for given in (path, da.from_zarr(path, component="X")):
        with pytest.raises(DataError, match=r"1 chunk\(s\) of array 'X'.* are missing: X/c/1/0.*lost"):
            db.describe(given)


def test_a_lost_label_chunk_is_refused_through_from_zarr_as_through_the_path(tmp_path) -> None:
    path = str(tmp_path / "lost_label.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f8")[:] = 1.0
    group.create_array("y", shape=(ROWS,), chunks=(CHUNK,), dtype="i4", attributes={WRITES_EVERY_CHUNK: True})[:] = 1
    os.remove(os.path.join(path, "y", "c", "1"))  # zarr would read it as zeros: a class of its own
    by_path = (path, "y")
    by_arrays = (da.from_zarr(path, component="X"), da.from_zarr(path, component="y"))
    for x, label in (by_path, by_arrays):
        with pytest.raises(DataError, match=r"^1 chunk\(s\) of label 'y' are missing: y/c/1 \(100 rows\).*lost"):
            db.describe(x, label, stats=("moments", "mi"))


def test_a_from_zarr_label_with_cf_attributes_keeps_the_values_it_reads(tmp_path) -> None:
    path = str(tmp_path / "cf_label.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f8")[:] = np.arange(ROWS * COLS).reshape(ROWS, COLS)
    labels = np.arange(ROWS, dtype="i2") % 3
    group.create_array("y", shape=(ROWS,), chunks=(CHUNK,), dtype="i2", attributes={"_FillValue": -1})[:] = labels
    got = db.describe(da.from_zarr(path, component="X"), da.from_zarr(path, component="y"), stats=("moments", "mi"))
    want = db.describe(da.from_zarr(path, component="X"), labels, stats=("moments", "mi"))
    np.testing.assert_array_equal(got.mi, want.mi)  # the int16 labels as read, not decoded to float


def test_the_zarr_reader_keeps_the_users_row_blocks_and_gives_its_facts(tmp_path) -> None:
    path = str(tmp_path / "s.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f4")[:] = 1.0
    reader = open_reader(da.from_zarr(path, component="X", chunks=(2 * CHUNK, COLS)))
    assert type(reader) is readers.ZarrReader
    assert (reader.shape, reader.dtype, reader.chunks) == ((ROWS, COLS), np.dtype("f4"), (2 * CHUNK, 2 * CHUNK))
    np.testing.assert_array_equal(reader.read(10, 13), np.ones((3, COLS), dtype="f4"))
    assert reader.facts() == {"absent_chunks": 0, "absent_lost_chunks": 0, "absent_read_as": "", "checksums": None}


def test_in_memory_inputs_have_their_readers() -> None:
    import pandas as pd

    assert type(open_reader(np.ones((4, 2)))) is Reader
    frame = open_reader(pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4], "y": [0, 1]}), "y")
    assert type(frame) is readers.DataFrameReader and frame.names == ("a", "b") and list(frame.label) == [0, 1]
    assert frame.facts() == {}


class _RowsReader(Reader):
    """A toy format: a dict of named columns of equal length."""

    @classmethod
    def can_open(cls, x: object) -> bool:
        return isinstance(x, dict) and all(isinstance(v, list) for v in x.values())

    def __init__(self, x: dict, label: object = None, **options: object) -> None:
        super().__init__(np.column_stack([np.asarray(v, dtype="f8") for v in x.values()]), label, **options)
        self.names = tuple(x)


def test_a_new_input_format_is_one_reader_and_one_registry_line(monkeypatch) -> None:
    monkeypatch.setattr(readers, "READERS", (_RowsReader, *readers.READERS))
    summary = db.describe({"height": [1.0, 2.0, 3.0], "width": [2.0, 4.0, 9.0]})
    assert list(summary.feature_names) == ["height", "width"]
    np.testing.assert_allclose(summary.mean, [2.0, 5.0])


class _TextReader(FileReader):
    """A toy file format: whitespace-separated numbers, one row a line."""

    suffixes = (".txt",)

    def header(self) -> Part:
        values = np.loadtxt(self.path, ndmin=2)
        return Part(values.shape, values.dtype.str)

    def read(self, start: int, stop: int) -> np.ndarray:
        return np.loadtxt(self.path, ndmin=2)[start:stop]


def test_a_new_file_format_is_one_reader_and_one_registry_line_for_describe_and_ingest(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(readers, "READERS", (_TextReader, *readers.READERS))
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((n, 3)) for n in (7, 5)]
    for i, part in enumerate(parts):
        np.savetxt(tmp_path / f"b{i}.txt", part, fmt="%.17g")
    summary = db.describe(str(tmp_path / "b0.txt"), stats=("moments",))
    np.testing.assert_allclose(summary.mean, parts[0].mean(axis=0), rtol=1e-14)
    report = db.ingest(str(tmp_path / "b*.txt"), str(tmp_path / "out.zarr"), chunk_rows=4)
    assert (report.rows, report.features) == (12, 3)
    np.testing.assert_array_equal(db.open_dataset(tmp_path / "out.zarr").x.compute(), np.concatenate(parts))


def test_describe_reads_the_batch_files_ingest_reads(tmp_path) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((50, 4)), rng.integers(0, 3, 50)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "b.npz", X=x, y=y)
    expected = db.describe(x, y, stats=("moments", "mi"))
    np.testing.assert_array_equal(db.describe(str(tmp_path / "x.npy"), stats=("moments",)).mean, expected.mean)
    from_npz = db.describe(tmp_path / "b.npz", label="y", stats=("moments", "mi"))
    np.testing.assert_array_equal(from_npz.mean, expected.mean)
    np.testing.assert_array_equal(from_npz.mi, expected.mi)
    with pytest.raises(FileNotFoundError, match="^no such file or directory: .*absent.npy"):
        db.describe(str(tmp_path / "absent.npy"))
    (tmp_path / "empty.npy").touch()
    with pytest.raises(ValueError, match=r"^\S+empty\.npy: empty file \(0 bytes\)$"):
        db.describe(str(tmp_path / "empty.npy"))
    np.savez(tmp_path / "a.npz", A=x)
    with pytest.raises(ValueError, match=r"^\S+a\.npz: missing x key 'X' \(keys in file: A\)$"):
        db.describe(str(tmp_path / "a.npz"))


def test_a_from_zarr_array_names_its_store_by_path_and_finds_stored_weights(tmp_path) -> None:
    path = str(tmp_path / "w.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("X", shape=(ROWS, COLS), chunks=(CHUNK, COLS), dtype="f8")[:] = np.arange(ROWS * COLS).reshape(ROWS, COLS)
    group.create_array("w", shape=(ROWS,), chunks=(CHUNK,), dtype="f8")[:] = 1.0
    x = da.from_zarr(path, component="X")  # an fsspec store, not a LocalStore
    with pytest.raises(DataError, match=f"^'{path}' is a single array"):
        db.describe(x, "y")
    weighted = db.describe(x, weights="w", stats=("moments",))
    np.testing.assert_array_equal(weighted.mean, db.describe(path, stats=("moments",)).mean)


def test_a_dataset_opened_then_described_arms_its_read_event_once(tmp_path) -> None:
    """Main armed the rows' read event as the store opened and again as the reader took the Dataset."""
    from daskbatch.io import chunk_grid

    db.synth(tmp_path / "crc.zarr", rows=40, features=3, chunk_rows=10, seed=1)  # its chunks end with a CRC-32C
    ds = db.open_dataset(tmp_path / "crc.zarr")
    armed = chunk_grid._kept_for(chunk_grid._TOKEN_READ, ds.zarr_x)
    assert armed is not None and open_reader(ds).block_read is armed  # the open's event: not a second one
    again = open_reader(ds).block_read  # a later reader (a second describe) has its own
    assert again is not None and again is not armed and chunk_grid._kept_for(chunk_grid._TOKEN_READ, ds.zarr_x) is again
    summary = db.describe(ds, stats="moments")
    np.testing.assert_array_equal(summary.mean, db.describe(str(tmp_path / "crc.zarr"), stats="moments").mean)
    assert summary.provenance["input_tokens"] == db.describe(ds, stats="moments").provenance["input_tokens"]
