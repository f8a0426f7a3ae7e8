"""Issue 'Every door locked', smaller item: a forged checkpoint node whose checksum holds is recomputed.

A node file's sha256 covers its header and payload, but whoever edits the
states can write the sha256 again.  Such a node escaped as ValueError (wrong
shapes), AttributeError (another state class) or MemoryError (an array header
claiming 10**11 values), or was merged silently (shapes that broadcast, float32
fields).  Every node on disk is now decoded when a run starts, its claimed
sizes bounded by its bytes and its states compared with the pass's: a node
that does not fit is logged as damaged, deleted and its blocks computed again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.engine.checkpoint import read_runs
from daskbatch.engine.checkpoint_files import MAGIC, decode_state, encode_state, read_header
from daskbatch.io.dataset import open_dataset
from daskbatch.io.synth import synth
from daskbatch.stats.histogram import HistogramState

ROWS_PER_BLOCK, N_BLOCKS, SPLIT = 200, 16, 2
RUN = db.RunOptions(split_every=SPLIT, plan=None)
describe = functools.partial(db.describe, stats="moments", run=RUN)


def fail_last_block(block: np.ndarray, block_info: dict | None = None) -> np.ndarray:
    """Identity, but the last block fails: a run that leaves most of its blocks checkpointed."""
    if block_info and block_info[0]["chunk-location"][0] == N_BLOCKS - 1:
        raise RuntimeError("injected failure")
    return block


def interrupted(ds: db.Dataset, checkpoint: Path) -> None:
    x = ds.x.map_blocks(fail_last_block, dtype=ds.x.dtype, meta=np.empty((0, 0), ds.x.dtype))
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        describe(dataclasses.replace(ds, x=x), run=dataclasses.replace(RUN, checkpoint=checkpoint))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forged") / "data.zarr"
    synth(N_BLOCKS * ROWS_PER_BLOCK, 5, chunk_rows=ROWS_PER_BLOCK, seed=11, path=path)
    return path


def _fields(state: object, change: Callable[[np.ndarray], np.ndarray]) -> object:
    return dataclasses.replace(state, **{  # type: ignore[type-var]
        f.name: change(np.asarray(getattr(state, f.name))) for f in dataclasses.fields(state)  # type: ignore[arg-type]
    })


def _sealed(header: dict, payload: bytes) -> bytes:
    """A node file of ``header`` and ``payload``, with a checksum that holds."""
    body = json.dumps(dict(header, nbytes=len(payload)), sort_keys=True).encode() + b"\n" + payload
    return f"{MAGIC} sha256={hashlib.sha256(body).hexdigest()}\n".encode() + body


def _huge_claim(raw: bytes) -> bytes:
    """The first field's record and .npy header claim 10**11 rows; the file keeps its few bytes."""
    header, payload = read_header_bytes(raw)
    field = header["states"][0]["fields"][0]
    field[2] = [10**11, *field[2][1:]]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(payload)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == f"s0.{field[0]}.npy":
                array = np.load(io.BytesIO(data))
                npy = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    npy, {"descr": array.dtype.str, "fortran_order": False, "shape": (10**11, *array.shape[1:])})
                data = npy.getvalue() + array.tobytes()
            dst.writestr(name, data)
    return _sealed(header, out.getvalue())


def read_header_bytes(raw: bytes) -> tuple[dict, bytes]:
    _, _, body = raw.partition(b"\n")
    line, _, payload = body.partition(b"\n")
    return json.loads(line), payload


def _restated(change: Callable[[object], object]) -> Callable[[bytes, Path], bytes]:
    """Decode the node, change its state, encode and seal it again (as the writer would)."""

    def forge(raw: bytes, path: Path) -> bytes:
        header, payload = read_header(path)
        (state,) = decode_state(header, payload)
        meta = {k: v for k, v in header.items() if k not in ("states", "nbytes")}
        return encode_state((change(state),), meta)

    return forge


FORGED: dict[str, Callable[[bytes, Path], bytes]] = {
    "wrong shape": _restated(lambda s: _fields(s, lambda a: np.resize(a, (7,)) if a.ndim else a)),
    "shape that broadcasts": _restated(lambda s: _fields(s, lambda a: a[:1] if a.ndim else a)),
    "float32 fields": _restated(lambda s: _fields(s, lambda a: a.astype(np.float32))),
    "another state class": _restated(lambda s: HistogramState(
        **{f.name: np.zeros(3) for f in dataclasses.fields(HistogramState)})),
    "huge claimed size": lambda raw, path: _huge_claim(raw),
}


@pytest.mark.parametrize("forgery", list(FORGED))
def test_a_forged_node_is_recomputed_as_damaged(tmp_path: Path, store: Path, forgery: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    plain = describe(ds)
    interrupted(ds, tmp_path)
    victim = sorted((tmp_path / "pass-moments").glob("L*.ckpt"))[0]
    victim.write_bytes(FORGED[forgery](victim.read_bytes(), victim))
    read_header(victim)  # its checksum holds: only its content gives it away

    with caplog.at_level(logging.WARNING, logger="daskbatch.checkpoint"):
        resumed = describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert read_runs(tmp_path, "moments")[-1]["damaged"] == [victim.name]
    assert any(victim.name in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    for name in ("mean", "std", "count", "skew", "kurtosis"):
        assert np.asarray(getattr(resumed, name)).tobytes() == np.asarray(getattr(plain, name)).tobytes(), name


def test_sound_nodes_of_a_growing_state_are_kept(tmp_path: Path) -> None:
    """Another writer's store: the first pass hashes its blocks (a state that grows); its nodes resume."""
    path = tmp_path / "foreign.zarr"
    x = np.random.default_rng(4).normal(size=(N_BLOCKS * ROWS_PER_BLOCK, 3))
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(ROWS_PER_BLOCK, 3))
    ds = open_dataset(path, chunks=ROWS_PER_BLOCK)
    plain = describe(ds)
    interrupted(ds, tmp_path / "ck")
    resumed = describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path / "ck"))
    (runs,) = [r for r in (tmp_path / "ck").iterdir() if r.name.startswith("pass-")]
    last = read_runs(tmp_path / "ck", runs.name.removeprefix("pass-"))[-1]
    assert last["damaged"] == [] and last["reused_blocks"] > 0, last
    assert resumed.provenance["input_tokens"] == plain.provenance["input_tokens"]
    assert np.asarray(resumed.mean).tobytes() == np.asarray(plain.mean).tobytes()
