"""Run locks: a lock file that names no possible holder is stale; two runs on one output never both write.

A lock file holding a pid no process can have (-1) or a start time that is no
time (1e20) ended in a traceback instead of being taken over, and two identical
transforms started at once failed with confusing errors and left an empty store:
transforms took no lock at all.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.runtime.runlock import RunLock, output_lock_path

HOST = socket.gethostname()
GARBAGE = [
    b"",
    b"\x00\x00\x00",
    b"not json",
    b"[1, 2]",
    b'{"pid": -1, "host": "%s", "since": 1}' % HOST.encode(),
    b'{"pid": 0, "host": "%s", "since": 1}' % HOST.encode(),
    b'{"pid": true, "host": "%s", "since": 1}' % HOST.encode(),
    b'{"pid": 1099511627776, "host": "%s", "since": 1}' % HOST.encode(),
    b'{"pid": 1, "host": "%s", "since": 1e20}' % HOST.encode(),
    b'{"pid": 1, "host": "", "since": 1}',
]


def old(path: pathlib.Path, content: bytes) -> pathlib.Path:
    path.write_bytes(content)
    then = time.time() - 3600
    os.utime(path, (then, then))
    return path


@pytest.mark.parametrize("content", GARBAGE, ids=[c.decode(errors="replace")[:30] or "empty" for c in GARBAGE])
def test_a_garbage_lock_file_is_stale(tmp_path: pathlib.Path, content: bytes) -> None:
    lock = old(tmp_path / "daskbatch.lock", content)
    with RunLock(lock, "test"):
        assert lock.read_bytes() != content
    assert not lock.exists()


def test_a_young_garbage_lock_file_is_being_written(tmp_path: pathlib.Path) -> None:
    from daskbatch.errors import LockHeldError

    lock = tmp_path / "daskbatch.lock"
    lock.write_bytes(b"")
    with pytest.raises(LockHeldError, match="still writing it"):
        RunLock(lock, "test").acquire()


def test_a_transform_takes_over_a_garbage_lock(tmp_path: pathlib.Path, store: pathlib.Path, data: np.ndarray) -> None:
    out = tmp_path / "t.zarr"
    old(output_lock_path(out), b"")
    db.transform(str(store), [db.steps.clip(-1, 1)], out)
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), np.clip(data, -1, 1))
    assert not output_lock_path(out).exists()


def test_a_second_transform_of_one_output_fails_naming_the_holder(
    tmp_path: pathlib.Path, store: pathlib.Path
) -> None:
    out = tmp_path / "t.zarr"
    with RunLock(output_lock_path(out), "a transform in this process"):
        proc = subprocess.run([sys.executable, "-m", "daskbatch", "transform", str(store), "--clip", "-1:1",
                               "--out", str(out), "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "\n" not in err and f"pid {os.getpid()}" in err and str(out) in err, err
    assert not out.exists()  # no empty store left behind


def test_two_identical_transforms_at_once(tmp_path: pathlib.Path, store: pathlib.Path, data: np.ndarray) -> None:
    out = tmp_path / "t.zarr"
    cmd = [sys.executable, "-m", "daskbatch", "transform", str(store), "--clip", "-1:1", "--out", str(out),
           "--no-progress", "--chunk-rows", "50"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stderr.close()  # type: ignore[union-attr]
    for rc, err in results:
        assert rc == 0 or (rc == 2 and "in use" in err and "\n" not in err.strip()), err
    again = CliRunner().invoke(main, [*cmd[3:]])  # the same call again: complete, nothing left to write
    assert again.exit_code == 0, again.output
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), np.clip(data, -1, 1))
