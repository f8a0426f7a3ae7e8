"""A local store's plain chunks decoded straight into a block: the same values as zarr's read, else zarr's read."""

from __future__ import annotations

import pickle
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

import daskbatch as db
from daskbatch.io import zarr_store
from daskbatch.io.chunk_decode import DirectBlocks, direct_blocks, zstd_content_size
from daskbatch.io.zarr_store import BlockReader

SHAPE, CHUNKS = (1003, 5), (100, 5)  # an edge chunk of 3 rows

#: Layouts decoded directly: those zarr and xarray write by default (zstd, v2 and v3), blosc, none, checksums.
DIRECT = {
    "v3-zstd": {"dtype": "f4"},
    "v3-zstd-checksum": {"dtype": "u1", "compressors": [ZstdCodec(level=3, checksum=True)]},
    "v3-blosc": {"dtype": "f8", "compressors": [BloscCodec()]},
    "v3-none": {"dtype": "i2", "compressors": None},
    "v3-crc32c": {"dtype": "f4", "compressors": [ZstdCodec(level=1), Crc32cCodec()]},
    "v3-bool": {"dtype": "bool"},
    "v3-dotted-keys": {"dtype": "f4", "chunk_key_encoding": {"name": "default", "separator": "."}},
    "v2-zstd": {"dtype": "f4", "zarr_format": 2},
    "v2-blosc-lz4": {"dtype": "f8", "zarr_format": 2, "compressors": numcodecs.Blosc(cname="lz4")},
    "v2-none": {"dtype": "i4", "zarr_format": 2, "compressors": None},
    "v2-slashed-keys": {"dtype": "f4", "zarr_format": 2, "chunk_key_encoding": {"name": "v2", "separator": "/"}},
}

#: Row ranges: whole chunks, chunk-straddling, the edge chunk, one row.
RANGES = [(0, 1003), (0, 100), (100, 400), (50, 250), (990, 1003), (900, 1003), (37, 38)]


def _written(path: Path, **kwargs: object) -> tuple[zarr.Array, np.ndarray]:
    """An array of ``SHAPE`` written by zarr with ``kwargs``, and its values."""
    kwargs.setdefault("chunks", CHUNKS)
    arr = zarr.create_array(str(path), shape=SHAPE, **kwargs)
    values = (np.random.default_rng(7).standard_normal(SHAPE) * 1e3).astype(arr.dtype)
    values.flat[::97] = np.nan if values.dtype.kind == "f" else values.flat[::97]
    arr[:] = values
    return arr, values


@pytest.mark.parametrize("layout", list(DIRECT))
def test_direct_read_is_zarrs(tmp_path: Path, layout: str) -> None:
    arr, values = _written(tmp_path / layout, **DIRECT[layout])
    direct = direct_blocks(arr)
    assert direct is not None
    direct = pickle.loads(pickle.dumps(direct))  # as a distributed worker gets it
    for start, stop in RANGES:
        got = direct.read(start, stop)
        assert got is not None
        want = arr[start:stop]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes() == values[start:stop].tobytes()  # NaN payloads and signs too


@pytest.mark.parametrize("layout", ["big-endian", "column-chunks", "sharded", "gzip", "transposed"])
def test_other_layouts_are_zarrs(tmp_path: Path, layout: str) -> None:
    kwargs = {
        "big-endian": {"dtype": ">f8"},
        "column-chunks": {"dtype": "f4", "chunks": (100, 2)},
        "sharded": {"dtype": "f4", "shards": (200, 5)},
        "gzip": {"dtype": "f4", "compressors": [GzipCodec()]},
        "transposed": {"dtype": "f4", "zarr_format": 2, "order": "F"},
    }[layout]
    arr, values = _written(tmp_path / layout, **kwargs)
    assert direct_blocks(arr) is None
    assert np.array_equal(BlockReader(arr)[100:300], values[100:300], equal_nan=True)


def _chunk_file(arr: zarr.Array, i: int) -> Path:
    return Path(str(arr.store.root)) / arr.path / arr.metadata.encode_chunk_key((i, 0))


@pytest.mark.parametrize("damage", ["absent", "truncated", "garbage", "short-frame", "checksum"])
def test_a_chunk_not_decoded_here_is_zarrs(tmp_path: Path, damage: str) -> None:
    codecs = [ZstdCodec(level=1), Crc32cCodec()] if damage == "checksum" else [ZstdCodec(level=1)]
    arr, values = _written(tmp_path / damage, dtype="f4", compressors=codecs)
    path = _chunk_file(arr, 2)
    raw = path.read_bytes()
    if damage == "absent":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(raw[:20] + bytes(len(raw) - 20))
    elif damage == "short-frame":  # a valid frame of fewer values than the chunk holds
        path.write_bytes(numcodecs.Zstd().encode(values[200:299].copy()))
    else:
        path.write_bytes(raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:])
    direct = direct_blocks(arr)
    assert direct is not None
    assert direct.read(0, 100) is not None  # the other chunks still decode here
    assert direct.read(100, 400) is None  # left to zarr: its fill values, or its error
    if damage == "absent":
        block = BlockReader(arr, missing="fill")[100:400]
        assert (block[100:200] == arr.fill_value).all()
        assert block[:100].tobytes() == values[100:200].tobytes()
    else:
        with pytest.raises(Exception, match="chunk"):
            BlockReader(arr)[100:400]


def test_zstd_content_size_reads_every_field_width() -> None:
    for n in (0, 1, 255, 256, 300, 65_791, 65_792, 2**20):  # one-, two- (less 256) and four-byte fields
        assert zstd_content_size(numcodecs.Zstd().encode(np.zeros(n, dtype=np.uint8))) == n
    assert zstd_content_size(b"not a frame") is None


@pytest.mark.parametrize("layout", ["v3-zstd", "v2-blosc-lz4"])
def test_describe_gives_the_same_bits_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """The full summary of a store read directly equals the one zarr's reads give, bit for bit."""
    kwargs = {key: value for key, value in DIRECT[layout].items() if key != "dtype"}
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=kwargs.pop("zarr_format", 3))
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 3, 2_500)
    values = (1e4 + rng.standard_normal((2_500, 6)) * [0.01, 1, 10, 100, 1e3, 1e4] + labels[:, None]).astype("f4")
    values[::37, 2] = np.nan
    group.create_array("X", data=values, chunks=(300, 6), **kwargs)  # an edge chunk of 100 rows
    group.create_array("y", data=labels, chunks=(300,), **kwargs)
    decoded: list[tuple[int, int]] = []
    read = DirectBlocks.read
    monkeypatch.setattr(DirectBlocks, "read", lambda self, a, b: decoded.append((a, b)) or read(self, a, b))
    direct = db.describe(str(tmp_path / "s.zarr"), label="y")
    assert decoded  # the blocks were decoded here
    monkeypatch.setattr(zarr_store, "direct_blocks", lambda arr: None)
    read_by_zarr = db.describe(str(tmp_path / "s.zarr"), label="y")
    left, right = direct.to_xarray(), read_by_zarr.to_xarray()
    assert sorted(left.data_vars) == sorted(right.data_vars)
    for name in left.data_vars:
        assert left[name].values.tobytes() == right[name].values.tobytes(), name


def test_a_local_fsspec_store_is_decoded_directly_too(tmp_path: Path) -> None:
    """``da.from_zarr(path)`` opens a path through fsspec's local file system: the same files."""
    _, values = _written(tmp_path / "s.zarr", dtype="f4")
    arr = zarr.open_array(zarr.storage.FsspecStore.from_url(f"file://{tmp_path / 's.zarr'}", read_only=True), mode="r")
    direct = direct_blocks(arr)
    assert direct is not None
    block = direct.read(50, 1003)
    assert block is not None and block.tobytes() == values[50:].tobytes()
