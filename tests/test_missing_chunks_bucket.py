"""A store in a bucket (moto's S3 server on loopback): a chunk lost after the open is refused; a refusal exits.

Before: a chunk object deleted after ``open_dataset`` was read as zarr's fill values, with no error; and after a
damaged chunk's refusal the process did not exit until the rows' token had read every chunk's trailer (a request
each) for the run that had failed. tests/test_missing_chunks_read.py: the same of a local store.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import daskbatch as db
from daskbatch.errors import DataError
from tests import test_object_store as object_store
from tests.test_object_store import Bucket

# The object-store tests' loopback S3 server and a fresh bucket on it, as fixtures of this module too.
s3_endpoint, bucket = object_store.s3_endpoint, object_store.bucket

ROWS, FEATURES, CHUNK = 1200, 3, 200


def _refusal_at_open(url: str, bucket: Bucket) -> str:
    """The one-line message opening the store refuses its absent chunks with."""
    with pytest.raises(DataError) as refused:
        db.open_dataset(url, storage_options=bucket.storage_options)
    return str(refused.value)


def test_a_chunk_object_deleted_after_the_open_is_refused(bucket: Bucket) -> None:
    url = bucket.url("s.zarr")
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=url)
    ds = db.open_dataset(url, storage_options=bucket.storage_options)
    bucket.client().delete_object(Bucket=bucket.name, Key="s.zarr/X/c/3/0")
    with pytest.raises(DataError) as refused:
        db.describe(ds, stats="moments", run=db.RunOptions(plan=None))
    assert str(refused.value) == _refusal_at_open(url, bucket)
    assert "X/c/3/0" in str(refused.value)


class _TrailerRequests(logging.Handler):
    """Counts the server's answers to ranged reads of chunk objects (the rows' token's trailers), by the time."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "GET /" in line and "/c/" in line and " 206 " in line:  # a part of a chunk object (a colored line)
            self.times.append(time.monotonic())


def test_a_refusal_of_a_store_in_a_bucket_exits_without_reading_every_trailer(bucket: Bucket) -> None:
    """The refusal is printed, then the process ends: the failed run's token is not read chunk by chunk.

    Main read each of the chunks' trailers before the process could exit (8 s after the refusal with 1,500 chunks
    here); the bound is on the requests, and on the exit a behaviour bound with a wide margin, not a speed threshold.
    600 chunks keep the request bound far from what main read (about 600 after the refusal) and the test short.
    """
    chunks = 600
    url = bucket.url("c.zarr")
    db.synth(chunks * 20, FEATURES, classes=3, chunk_rows=20, seed=7, path=url)
    bucket.client().put_object(Bucket=bucket.name, Key="c.zarr/X/c/2/0", Body=b"garbage\x00\xff")
    counted = _TrailerRequests()
    server_log = logging.getLogger("werkzeug")
    level = server_log.level
    server_log.setLevel(logging.INFO)  # the server's log line per request (the fixture quiets it)
    server_log.addHandler(counted)
    try:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        process = subprocess.Popen([sys.executable, "-m", "daskbatch", "describe", url, "--no-progress"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        refused_at, lines = None, []
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if refused_at is None and line.startswith("error:"):
                refused_at = time.monotonic()
        process.wait(timeout=120)
        exited_at = time.monotonic()
    finally:
        server_log.removeHandler(counted)
        server_log.setLevel(level)
    assert process.returncode == 2, "".join(lines)
    assert refused_at is not None and "X/c/2/0" in "".join(lines)
    after = [t for t in counted.times if t > refused_at]
    assert len(after) < chunks // 4, f"{len(after)} trailers read after the refusal"
    assert exited_at - refused_at < 5.0
