"""A changed byte in a stored chunk must fail the read, never change the numbers.

Before: synth and ingest wrote zstd without any checksum, so 20 of 20 flipped
bytes (XOR 0xFF and 0x01 at 10 positions of one chunk) gave exit 0 and wrong
statistics.  Now every chunk daskbatch writes carries a CRC-32C, reads raise a
one-line DataError naming the array, chunk key and grid position, and
``daskbatch verify`` reports the chunk.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError
from daskbatch.io.verify import verify_store

ROWS, FEATURES, CHUNK = 2000, 4, 500
POSITIONS = 10
MASKS = (0xFF, 0x01)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, bytes]:
    path = tmp_path_factory.mktemp("flip") / "s.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=3, path=path)
    return path, (path / "X" / "c" / "1" / "0").read_bytes()


def _flipped(tmp_path: pathlib.Path, pristine: tuple[pathlib.Path, bytes], pos: int, mask: int) -> pathlib.Path:
    import shutil

    src, raw = pristine
    dst = tmp_path / "s.zarr"
    shutil.copytree(src, dst)
    data = bytearray(raw)
    data[pos] ^= mask
    (dst / "X" / "c" / "1" / "0").write_bytes(bytes(data))
    return dst


def test_writers_add_a_checksum(pristine: tuple[pathlib.Path, bytes], tmp_path: pathlib.Path) -> None:
    from zarr.codecs import Crc32cCodec

    g = zarr.open_group(str(pristine[0]), mode="r")
    for name in ("X", "y"):
        assert isinstance(g[name].metadata.codecs[-1], Crc32cCodec), name
    np.save(tmp_path / "b0.npy", np.ones((10, 3), "f4"))
    db.ingest(str(tmp_path / "b0.npy"), tmp_path / "in.zarr", chunk_rows=4, compressor="none")
    assert isinstance(zarr.open_group(str(tmp_path / "in.zarr"))["X"].metadata.codecs[-1], Crc32cCodec)
    summary = db.describe(np.arange(12.0).reshape(6, 2), stats=("moments",), run=db.RunOptions(plan=None))
    summary.save(tmp_path / "sum.zarr")
    for _, arr in zarr.open_group(str(tmp_path / "sum.zarr"), mode="r").arrays():
        assert isinstance(arr.metadata.codecs[-1], Crc32cCodec), arr.path


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: f"xor{m:#04x}")
@pytest.mark.parametrize("index", range(POSITIONS))
def test_flipped_byte_fails_describe_and_verify(
    tmp_path: pathlib.Path, pristine: tuple[pathlib.Path, bytes], index: int, mask: int
) -> None:
    size = len(pristine[1])
    pos = index * (size - 1) // (POSITIONS - 1)  # first byte, last byte (the checksum) and between
    path = _flipped(tmp_path, pristine, pos, mask)
    with pytest.raises(DataError, match=r"chunk 'X/c/1/0' \(grid position \(1, 0\)\) of array 'X'") as err:
        db.describe(path, stats=("moments", "cov"), run=db.RunOptions(plan=None))
    assert "\n" not in str(err.value)
    report = verify_store(path)
    assert not report.ok
    assert [(p.key, p.position, p.kind) for p in report.problems] == [("X/c/1/0", (1, 0), "corrupt")]


def test_truncated_chunk_is_reported_as_truncated(tmp_path: pathlib.Path, pristine: tuple[pathlib.Path, bytes]) -> None:
    import shutil

    path = tmp_path / "t.zarr"
    shutil.copytree(pristine[0], path)
    (path / "X" / "c" / "1" / "0").write_bytes(pristine[1][: len(pristine[1]) // 2])
    (path / "y" / "c" / "3").write_bytes(b"")
    report = verify_store(path)
    assert [(p.key, p.kind) for p in report.problems] == [("X/c/1/0", "truncated"), ("y/c/3", "truncated")]
    with pytest.raises(DataError, match=r"'X/c/1/0'"):
        db.describe(path, stats=("moments",), run=db.RunOptions(plan=None))


def test_verify_cli_exit_codes(tmp_path: pathlib.Path, pristine: tuple[pathlib.Path, bytes]) -> None:
    clean = CliRunner().invoke(main, ["verify", str(pristine[0])])
    assert clean.exit_code == 0, clean.output
    assert "OK: 8 chunks of 2 arrays, all present and decoded" in clean.output
    bad = _flipped(tmp_path, pristine, len(pristine[1]) // 2, 0x01)
    result = CliRunner().invoke(main, ["verify", str(bad)])
    assert result.exit_code == 1, result.output
    assert "corrupt" in result.output and "X/c/1/0 (grid position (1, 0))" in result.output
    assert "FAILED: 1 corrupt of 8 chunks" in result.output
