"""Chunks lost between a store's open and its reading are refused, as the open refuses them; a refusal exits promptly.

Before: a chunk deleted from a daskbatch store after ``open_dataset`` (whose listing found every chunk) was read
as zarr's fill values, and the statistics came out wrong with no error. Now the read refuses it with the open's
one-line message, from the store's own "not found" (no extra request per chunk). Stores of other writers, which
leave out chunks of fill values, read them as before.

tests/test_missing_chunks_bucket.py: the same of a store in a bucket, and the exit after a refusal.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.errors import DataError
from daskbatch.io import zarr_store
from daskbatch.io.chunk_decode import DirectBlocks

ROWS, FEATURES, CHUNK = 1200, 3, 200


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store daskbatch wrote (every chunk stored, and its arrays say so)."""
    path = tmp_path_factory.mktemp("lost") / "s.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=path)
    return path


def _refusal_at_open(path: Path | str, **options: object) -> str:
    """The one-line message opening the store refuses its absent chunks with."""
    with pytest.raises(DataError) as refused:
        db.open_dataset(path, **options)
    return str(refused.value)


@pytest.mark.parametrize("key", ["X/c/3/0", "y/c/4"])
def test_a_chunk_deleted_after_the_open_is_refused_as_the_open_refuses_it(
    written: Path, tmp_path: Path, key: str
) -> None:
    path = tmp_path / "s.zarr"
    shutil.copytree(written, path)
    ds = db.open_dataset(path)  # every chunk is there now
    (path / key).unlink()
    with pytest.raises(DataError) as refused:
        db.describe(ds, stats=("moments", "mi"), range=(-60, 60), bins=16, run=db.RunOptions(plan=None))
    message = str(refused.value)
    assert "\n" not in message and key in message
    assert message == _refusal_at_open(path)


def test_another_writers_chunk_deleted_after_the_open_reads_as_its_fill_value(tmp_path: Path) -> None:
    values = np.random.default_rng(5).normal(3.0, 1.0, size=(ROWS, FEATURES))
    path = tmp_path / "z.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", data=values, chunks=(CHUNK, FEATURES))  # zarr leaves out chunks of fill values
    ds = db.open_dataset(path, x="X")
    (path / "X" / "c" / "2" / "0").unlink()
    filled = values.copy()
    filled[2 * CHUNK : 3 * CHUNK] = 0.0
    summary = db.describe(ds, stats="moments", run=db.RunOptions(plan=None))
    np.testing.assert_array_equal(summary.mean, db.describe(filled, stats="moments", run=db.RunOptions(plan=None)).mean)


@pytest.mark.parametrize("direct", [False, True], ids=["zarr-read", "direct-read"])
def test_the_check_costs_no_request_of_its_own(written: Path, monkeypatch: pytest.MonkeyPatch, direct: bool) -> None:
    """Each chunk is read once, and no key is asked about otherwise: the store's answer (or the file's) is the check."""
    asked: list[str] = []
    get, exists = zarr.storage.LocalStore.get, zarr.storage.LocalStore.exists
    decode_into = DirectBlocks._decode_into

    async def counted_get(self, key, *args, **kwargs):  # noqa: ANN001, ANN202 - zarr's own signature
        asked.append(f"get {key}")
        return await get(self, key, *args, **kwargs)

    async def counted_exists(self, key):  # noqa: ANN001, ANN202
        asked.append(f"exists {key}")
        return await exists(self, key)

    def counted_decode(self, i, *args):  # noqa: ANN001, ANN202
        asked.append(f"file {Path(self.directory).name}/{self.metadata.encode_chunk_key((i,) + (0,) * (len(self.shape) - 1))}")
        return decode_into(self, i, *args)

    if not direct:  # zarr reads every chunk
        monkeypatch.setattr(zarr_store, "direct_blocks", lambda arr: None)
    ds = db.open_dataset(written)
    monkeypatch.setattr(zarr.storage.LocalStore, "get", counted_get)
    monkeypatch.setattr(zarr.storage.LocalStore, "exists", counted_exists)
    monkeypatch.setattr(DirectBlocks, "_decode_into", counted_decode)
    x, y = ds.x.compute(scheduler="sync"), ds.label.compute(scheduler="sync")
    read = sorted(asked)
    monkeypatch.undo()
    g = zarr.open_group(str(written), mode="r")
    np.testing.assert_array_equal(x, g["X"][:])
    np.testing.assert_array_equal(y, g["y"][:])
    n = ROWS // CHUNK
    how = "file" if direct else "get"  # the direct read opens each chunk's file, zarr's asks the store
    assert read == sorted([f"{how} X/c/{i}/0" for i in range(n)] + [f"{how} y/c/{i}" for i in range(n)])


def test_after_a_failed_run_the_rows_token_of_the_same_store_is_read_again(written: Path, tmp_path: Path) -> None:
    """A failed pass abandons its token's reading (tests/test_missing_chunks_bucket.py); the next run's is whole."""
    from daskbatch.engine.pipeline import input_token
    from daskbatch.io.chunk_grid import chunk_checksums

    path = tmp_path / "s.zarr"
    shutil.copytree(written, path)
    ds = db.open_dataset(path)
    kept = (path / "X/c/1/0").read_bytes()
    (path / "X/c/1/0").write_bytes(b"garbage\x00\xff")
    with pytest.raises(DataError, match="X/c/1/0"):
        db.describe(ds, stats="moments", run=db.RunOptions(plan=None))
    (path / "X/c/1/0").write_bytes(kept)
    # What reads the same array's checksums outside a run (a reader's facts) reads them all.
    assert chunk_checksums(ds.zarr_x) == chunk_checksums(db.open_dataset(written).zarr_x)
    summary = db.describe(ds, stats="moments", run=db.RunOptions(plan=None))
    assert summary.provenance["input_tokens"] == [input_token(db.open_dataset(written))]
