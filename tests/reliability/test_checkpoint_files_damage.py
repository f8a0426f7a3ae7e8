"""Damaged checkpoint files are detected, logged and recomputed; a manifest never names paths.

Findings: the sha256 covered the payload but not the JSON header, so header edits
crashed the resume with KeyError/AttributeError; with --force, pass names from a
received manifest were used as paths and deleted ``*.ckpt``, ``runs.jsonl`` and
``.tmp-*`` files outside the checkpoint directory; ``read_runs`` raised
JSONDecodeError on a garbage line.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.checkpoint import MANIFEST, read_runs
from daskbatch.errors import CheckpointMismatchError
from daskbatch.io.dataset import open_dataset
from daskbatch.io.synth import synth

ROWS_PER_BLOCK, N_BLOCKS, SPLIT = 200, 16, 2
RUN = db.RunOptions(split_every=SPLIT, plan=None)
describe = functools.partial(db.describe, stats="moments", run=RUN)


class Counting:
    """Identity on blocks that counts them, and fails at block ``fail_at``."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.lock = 0, fail_at, threading.Lock()

    def __call__(self, block: np.ndarray, block_info: dict | None = None) -> np.ndarray:
        if block.shape[0]:
            if self.fail_at is not None and block_info and block_info[0]["chunk-location"][0] == self.fail_at:
                raise RuntimeError("injected failure")
            with self.lock:
                self.n += 1
        return block


def counted(ds: db.Dataset, counter: Counting) -> db.Dataset:
    return dataclasses.replace(ds, x=ds.x.map_blocks(counter, dtype=ds.x.dtype, meta=np.empty((0, 0), ds.x.dtype)))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("damage") / "data.zarr"
    synth(N_BLOCKS * ROWS_PER_BLOCK, 5, classes=3, chunk_rows=ROWS_PER_BLOCK, seed=11, path=path)
    return path


@pytest.fixture(scope="module")
def plain(store: Path) -> db.Summary:
    return describe(open_dataset(store, chunks=ROWS_PER_BLOCK))


def blocks_of(name: str) -> range:
    level, index = map(int, re.fullmatch(r"L(\d+)-(\d+)\.ckpt", name).groups())  # type: ignore[union-attr]
    span = SPLIT ** (level + 1)
    return range(index * span, min((index + 1) * span, N_BLOCKS))


def covered(folder: Path) -> set[int]:
    return {b for p in folder.glob("L*.ckpt") for b in blocks_of(p.name)}


# --------------------------------------------------------------------------- damage

def _lines(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """(checksum line or b"", header line, payload), for this format and the one before it."""
    first, _, rest = raw.partition(b"\n")
    if first.startswith(b"{"):
        return b"", first, rest
    header, _, payload = rest.partition(b"\n")
    return first, header, payload


def _join(check: bytes, header: bytes, payload: bytes, *, reseal: bool) -> bytes:
    body = header + b"\n" + payload
    if check and reseal:  # a forged file: header edited and its checksum written again
        check = check.split(b"sha256=")[0] + b"sha256=" + hashlib.sha256(body).hexdigest().encode()
    return (check + b"\n" if check else b"") + body


def edit_header(raw: bytes, edit: Callable[[dict], None], *, reseal: bool = False) -> bytes:
    check, header, payload = _lines(raw)
    doc = json.loads(header)
    edit(doc)
    return _join(check, json.dumps(doc, sort_keys=True).encode(), payload, reseal=reseal)


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda doc: doc.__setitem__(key, value)


def _wrong_checksum(raw: bytes) -> bytes:
    check, header, payload = _lines(raw)
    if check:
        return _join(check.split(b"sha256=")[0] + b"sha256=" + b"0" * 64, header, payload, reseal=False)
    return edit_header(raw, _set("sha256", "0" * 64))


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "payload bit flipped": lambda raw: raw[:-100] + bytes([raw[-100] ^ 0xFF]) + raw[-99:],
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "garbage": lambda raw: os.urandom(len(raw)),
    "wrong checksum": _wrong_checksum,
    "header not JSON": lambda raw: b"\n".join(_lines(raw)[:1] + (b"{not json",) + (_lines(raw)[2],)).lstrip(b"\n"),
    "header edit: state type": lambda raw: edit_header(raw, lambda d: d["states"][0].__setitem__(
        "state", d["states"][0]["state"] + "X")),
    "header edit: field names": lambda raw: edit_header(raw, lambda d: d["states"][0]["fields"][0].__setitem__(0, "nope")),
    "header edit: states dropped": lambda raw: edit_header(raw, lambda d: d.pop("states")),
    "header edit: level": lambda raw: edit_header(raw, _set("level", "0")),
    "forged header: state type": lambda raw: edit_header(
        raw, lambda d: d["states"][0].__setitem__("state", "daskbatch.stats.moments:Moments"), reseal=True),
    "forged header: fields": lambda raw: edit_header(
        raw, lambda d: d["states"][0].__setitem__("fields", d["states"][0]["fields"][:-1]), reseal=True),
    "forged header: dtype": lambda raw: edit_header(
        raw, lambda d: d["states"][0]["fields"][0].__setitem__(1, "<f4"), reseal=True),
    "forged header: not a statistic": lambda raw: edit_header(
        raw, lambda d: d["states"][0].__setitem__("state", "os:system"), reseal=True),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_file_is_detected_logged_and_recomputed(
    tmp_path: Path, store: Path, plain: db.Summary, damage: str, caplog: pytest.LogCaptureFixture,
) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        describe(counted(ds, Counting(fail_at=N_BLOCKS - 1)), run=dataclasses.replace(RUN, checkpoint=tmp_path))
    folder = tmp_path / "pass-moments"
    victim = sorted(folder.glob("L*.ckpt"))[0]
    done = covered(folder)
    victim.write_bytes(DAMAGE[damage](victim.read_bytes()))

    counter = Counting()
    with caplog.at_level(logging.WARNING, logger="daskbatch.checkpoint"):
        resumed = describe(counted(ds, counter), run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert counter.n == N_BLOCKS - len(done) + len(blocks_of(victim.name))
    assert read_runs(tmp_path, "moments")[-1]["damaged"] == [victim.name]
    assert any(victim.name in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    for name in ("mean", "std", "count", "skew", "kurtosis"):
        assert np.asarray(getattr(resumed, name)).tobytes() == np.asarray(getattr(plain, name)).tobytes(), name


def test_file_of_another_node_is_not_merged(tmp_path: Path, store: Path, plain: db.Summary) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        describe(counted(ds, Counting(fail_at=N_BLOCKS - 1)), run=dataclasses.replace(RUN, checkpoint=tmp_path))
    folder = tmp_path / "pass-moments"
    a, b = sorted(folder.glob("L*.ckpt"))[:2]
    shutil.copyfile(a, b)  # b now holds a's blocks under b's name
    resumed = describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert read_runs(tmp_path, "moments")[-1]["damaged"] == [b.name]
    assert np.asarray(resumed.mean).tobytes() == np.asarray(plain.mean).tobytes()


# --------------------------------------------------------------------------- the manifest names no paths

def _victim(tmp_path: Path) -> tuple[Path, list[str]]:
    victim = tmp_path / "victim"
    victim.mkdir()
    names = ["L0-000000.ckpt", "runs.jsonl", ".tmp-precious", "notes.txt"]
    for name in names:
        (victim / name).write_text("precious")
    return victim, names


def _first_run(tmp_path: Path, store: Path) -> Path:
    ck = tmp_path / "ck"
    describe(open_dataset(store, chunks=ROWS_PER_BLOCK), run=dataclasses.replace(RUN, checkpoint=ck))
    return ck


def test_force_never_deletes_outside_the_checkpoint_via_a_pass_name(tmp_path: Path, store: Path) -> None:
    victim, names = _victim(tmp_path)
    ck = _first_run(tmp_path, store)
    (ck / "pass-..").mkdir()  # lets "pass-../../../victim" resolve to tmp_path/victim
    manifest = json.loads((ck / MANIFEST).read_text())
    manifest["passes"]["../../../victim"] = {}
    (ck / MANIFEST).write_text(json.dumps(manifest))
    other = open_dataset(store, chunks=2 * ROWS_PER_BLOCK)  # other input: force discards the old passes
    with pytest.raises(CheckpointMismatchError, match=r"pass name '\.\./\.\./\.\./victim' is not a plain name"):
        describe(other, run=dataclasses.replace(RUN, checkpoint=ck, force=True))
    assert sorted(p.name for p in victim.iterdir()) == sorted(names)


def test_force_does_not_follow_a_symlinked_pass_folder(tmp_path: Path, store: Path) -> None:
    victim, names = _victim(tmp_path)
    ck = _first_run(tmp_path, store)
    os.symlink(victim, ck / "pass-hist")
    manifest = json.loads((ck / MANIFEST).read_text())
    manifest["passes"]["hist"] = {}
    (ck / MANIFEST).write_text(json.dumps(manifest))
    other = open_dataset(store, chunks=2 * ROWS_PER_BLOCK)
    forced = describe(other, run=dataclasses.replace(RUN, checkpoint=ck, force=True))
    assert sorted(p.name for p in victim.iterdir()) == sorted(names)
    assert np.asarray(forced.mean).tobytes() == np.asarray(describe(other).mean).tobytes()


@pytest.mark.parametrize("bad", ["[]", '{"input": {}, "passes": []}', '{"input": {"a": 1}, "passes": {}}', "{"])
def test_malformed_manifest_is_one_clear_error(tmp_path: Path, store: Path, bad: str) -> None:
    ck = _first_run(tmp_path, store)
    (ck / MANIFEST).write_text(bad)
    with pytest.raises(CheckpointMismatchError, match="is not a daskbatch checkpoint manifest"):
        describe(open_dataset(store, chunks=ROWS_PER_BLOCK), run=dataclasses.replace(RUN, checkpoint=ck))


# --------------------------------------------------------------------------- the run log

def test_read_runs_skips_garbage_and_says_how_many(
    tmp_path: Path, store: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    ck = _first_run(tmp_path, store)
    log = ck / "pass-moments" / "runs.jsonl"
    with open(log, "ab") as f:
        f.write(b"\x00\xffgarbage\n[1, 2]\n{\"pid\": 1, \"bl")  # two bad lines and a torn last one
    describe(open_dataset(store, chunks=ROWS_PER_BLOCK), run=dataclasses.replace(RUN, checkpoint=ck))  # appends after the torn line
    with caplog.at_level(logging.WARNING, logger="daskbatch.checkpoint"):
        runs = read_runs(ck, "moments")
    assert [r["computed_blocks"] for r in runs] == [N_BLOCKS, 0]
    assert any("skipped 3 unreadable line(s)" in r.getMessage() for r in caplog.records)
