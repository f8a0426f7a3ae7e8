"""A checkpoint resumes only on the data and settings that wrote it (real stores on disk).

Finding: the fingerprint was the path as typed plus shape, dtype and chunks, so a
store regenerated at the same path returned the old statistics with 0 blocks
computed, two stores with one relative path in two directories swapped
results, the same store by its absolute path was refused, and a resume under
another ``daskbatch.kernels`` setting was silently not bitwise.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.checkpoint import read_runs
from daskbatch.errors import CheckpointMismatchError
from daskbatch.io.synth import synth

ROWS, FEATURES, CHUNK = 2000, 4, 250
RUN = db.RunOptions(split_every=2, plan=None)
describe = functools.partial(db.describe, stats="moments", run=RUN)


@pytest.fixture(autouse=True)
def one_storage_chunk_per_block() -> object:
    """Paths open with one block per storage chunk (chunks="auto" never goes below one)."""
    with dask.config.set({"daskbatch.target-chunk-bytes": 1}):
        yield


def make_store(path: Path, seed: int) -> Path:
    synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=seed, path=path)
    return path


def assert_bitwise(a: db.Summary, b: db.Summary) -> None:
    for name in ("mean", "std", "count", "min", "max"):
        va, vb = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert va.tobytes() == vb.tobytes(), name


def test_store_rewritten_at_the_same_path_is_refused(tmp_path: Path) -> None:
    store, ck = tmp_path / "data.zarr", tmp_path / "ck"
    old = describe(make_store(store, seed=1), run=dataclasses.replace(RUN, checkpoint=ck))
    shutil.rmtree(store)
    make_store(store, seed=2)
    with pytest.raises(CheckpointMismatchError, match=r"written for other data: x content .*"
                       r"the store was rewritten since.*--force") as info:
        describe(store, run=dataclasses.replace(RUN, checkpoint=ck))
    assert "\n" not in str(info.value)
    forced = describe(store, run=dataclasses.replace(RUN, checkpoint=ck, force=True))
    assert_bitwise(forced, describe(store))
    assert not np.array_equal(forced.mean, old.mean)
    assert read_runs(ck, "moments")[-1]["computed_blocks"] == ROWS // CHUNK


def test_one_chunk_rewritten_in_place_is_refused(tmp_path: Path) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=1), tmp_path / "ck"
    describe(store, run=dataclasses.replace(RUN, checkpoint=ck))
    arr = zarr.open_array(store / "X", mode="r+")
    arr[:1, :1] = 1e6  # one chunk file rewritten: its size or mtime changes
    with pytest.raises(CheckpointMismatchError, match="x content"):
        describe(store, run=dataclasses.replace(RUN, checkpoint=ck))


def test_label_rewritten_is_refused(tmp_path: Path) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=1), tmp_path / "ck"
    db.describe(store, stats=("moments", "mi"), run=db.RunOptions(split_every=2, plan=None, checkpoint=ck))
    y = zarr.open_array(store / "y", mode="r+")
    y[:] = (np.asarray(y[:]) + 1) % 3
    with pytest.raises(CheckpointMismatchError, match="label content .*the label was rewritten since"):
        db.describe(store, stats=("moments", "mi"), run=db.RunOptions(split_every=2, plan=None, checkpoint=ck))


def test_same_relative_path_in_two_directories_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = tmp_path / "ck"
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        make_store(tmp_path / d / "data.zarr", seed=ord(d))
    monkeypatch.chdir(tmp_path / "a")
    describe("data.zarr", run=dataclasses.replace(RUN, checkpoint=ck))
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(CheckpointMismatchError, match=r"source \(.*a/data\.zarr in the checkpoint, .*b/data\.zarr now"):
        describe("data.zarr", run=dataclasses.replace(RUN, checkpoint=ck))


@pytest.mark.parametrize("spelling", ["absolute", "symlink", "dotted"])
def test_same_store_by_another_path_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=5), tmp_path / "ck"
    monkeypatch.chdir(tmp_path)
    first = describe("data.zarr", run=dataclasses.replace(RUN, checkpoint=ck))
    if spelling == "absolute":
        other = str(store)
    elif spelling == "symlink":
        os.symlink(store, tmp_path / "link.zarr")
        other = "link.zarr"
    else:
        (tmp_path / "sub").mkdir()
        other = "sub/../data.zarr"
    again = describe(other, run=dataclasses.replace(RUN, checkpoint=ck))
    assert [r["computed_blocks"] for r in read_runs(ck, "moments")] == [ROWS // CHUNK, 0]
    assert_bitwise(first, again)


def test_kernels_setting_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=1), tmp_path / "ck"
    describe(store, run=dataclasses.replace(RUN, checkpoint=ck))
    with dask.config.set({"daskbatch.kernels": False}), pytest.raises(
        CheckpointMismatchError, match=r"kernels \(daskbatch\.kernels=True.*daskbatch\.kernels=False.*setting changed"
    ):
        describe(store, run=dataclasses.replace(RUN, checkpoint=ck))


def test_every_differing_item_is_named(tmp_path: Path) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=1), tmp_path / "ck"
    describe(store, run=dataclasses.replace(RUN, checkpoint=ck))
    with dask.config.set({"daskbatch.kernels": False}), pytest.raises(CheckpointMismatchError) as info:
        describe(store, run=db.RunOptions(split_every=3, checkpoint=ck))
    assert "split_every (2 in the checkpoint, 3 now)" in str(info.value)
    assert "kernels (" in str(info.value)


def test_in_memory_data_with_other_values_is_refused(tmp_path: Path) -> None:
    ds = synth(ROWS, FEATURES, chunk_rows=CHUNK, seed=1)
    describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    shifted = dataclasses.replace(ds, x=ds.x + 1.0)
    with pytest.raises(CheckpointMismatchError, match="x content"):
        describe(shifted, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    again = describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert read_runs(tmp_path, "moments")[-1]["computed_blocks"] == 0
    assert_bitwise(again, describe(ds))


@pytest.mark.gpu
def test_device_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    store, ck = make_store(tmp_path / "data.zarr", seed=1), tmp_path / "ck"
    describe(store, run=dataclasses.replace(RUN, checkpoint=ck))
    with pytest.raises(CheckpointMismatchError, match=r"array backend \(numpy .* in the checkpoint, cupy .* now"):
        describe(store, run=dataclasses.replace(RUN, device="gpu", checkpoint=ck))
