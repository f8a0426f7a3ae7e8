"""A full disk during a checkpoint is no bad input, and leaves no partial file behind.

On a full disk ``describe --checkpoint`` exited 2 ("bad input") with
``[Errno 28]``, and left ``.tmp-L0-....ckpt-<pid>`` holding the space; the next
run, failing on its manifest first, never cleaned it. Now the write removes its
temporary file, the CLI exits 74 with one line naming the file and the bytes it
needed, and each run first deletes the temporary files of writers that are gone.

The disk is a real one: a small tmpfs (skipped where it cannot be mounted).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import psutil
import pytest
import zarr

import daskbatch as db


def _mount(where: pathlib.Path, size: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``mount -t tmpfs`` of ``size`` at ``where`` (with ``remount`` in ``extra`` to resize it)."""
    options = ",".join([*extra, f"size={size}"])
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True
    )


@pytest.fixture()
def disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A 64 KiB tmpfs: a disk that fills up for real (ENOSPC)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or _mount(where, "64k").returncode != 0:
        pytest.skip("a tmpfs cannot be mounted here (needs root)")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def _describe(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch describe ARGS`` without a cluster."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "daskbatch",
            "describe",
            *args,
            "--cluster",
            "threads",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )


def _temps(root: pathlib.Path) -> list[str]:
    """The temporary files under ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".tmp-*"))


def test_full_disk_exits_74_names_the_file_and_leaves_nothing(
    tmp_path: pathlib.Path, disk: pathlib.Path
) -> None:
    """A covariance state of 100 features (80 KB) does not fit in 64 KiB; after a resize the same command finishes."""
    x = np.random.default_rng(5).normal(size=(400, 100))
    zarr.open_group(str(tmp_path / "wide.zarr"), mode="w").create_array(
        "X", data=x, chunks=(100, 100)
    )
    args = (str(tmp_path / "wide.zarr"), "--stats", "moments,cov", "--checkpoint", str(disk / "ck"))
    full = _describe(*args, "--out", str(tmp_path / "s.zarr"))
    assert full.returncode == 74, full.stderr
    err = full.stderr.strip().splitlines()[-1]
    assert err.startswith("error: No space left on device writing checkpoint file "), err
    assert (
        str(disk / "ck") in err and "L0-000000.ckpt" in err and "bytes" in err and "needs" in err
    ), err
    assert _temps(disk) == []
    assert not (tmp_path / "s.zarr").exists()
    assert _mount(disk, "4m", "remount").returncode == 0
    done = _describe(*args, "--out", str(tmp_path / "s.zarr"))
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(
        db.load_summary(tmp_path / "s.zarr").mean, x.mean(axis=0), rtol=1e-12
    )


def test_the_next_run_removes_a_dead_writers_temporary_file(
    store: pathlib.Path, disk: pathlib.Path
) -> None:
    """A killed run's partial file fills the disk: the next run deletes it first and finishes; a live writer's stays."""
    args = (str(store), "--stats", "moments", "--checkpoint", str(disk / "ck"))
    assert _describe(*args).returncode == 0
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    assert not psutil.pid_exists(dead)
    live = disk / "ck" / f".tmp-daskbatch-checkpoint.json-{os.getpid()}"
    live.write_bytes(b"x")
    stale = disk / "ck" / f".tmp-daskbatch-checkpoint.json-{dead}"
    fd = os.open(
        stale, os.O_CREAT | os.O_WRONLY
    )  # as a killed run left it: everything the disk had
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    done = _describe(*args)
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and live.exists()


def test_a_lock_file_that_does_not_fit_is_not_left_behind(
    store: pathlib.Path, disk: pathlib.Path
) -> None:
    """Exit 74 naming the lock file; no empty lock file stays to lock the next runs out, the filler is untouched."""
    filler = disk / "someone-elses.bin"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\1" * 4096)
    finally:
        os.close(fd)
    size = filler.stat().st_size
    full = _describe(str(store), "--stats", "moments", "--checkpoint", str(disk / "ck"))
    assert full.returncode == 74, full.stderr
    err = full.stderr.strip().splitlines()[-1]
    assert f"writing lock file {disk / 'ck' / 'daskbatch.lock'}" in err, err
    assert not os.path.lexists(disk / "ck" / "daskbatch.lock")
    assert filler.stat().st_size == size


def test_a_summary_that_does_not_fit(tmp_path: pathlib.Path, disk: pathlib.Path) -> None:
    """``--out`` on a full disk: exit 74 naming the output, no temporary copy left."""
    x = np.random.default_rng(6).normal(size=(200, 150))
    zarr.open_group(str(tmp_path / "wide.zarr"), mode="w").create_array(
        "X", data=x, chunks=(100, 150)
    )
    full = _describe(
        str(tmp_path / "wide.zarr"), "--stats", "moments,cov", "--out", str(disk / "s.zarr")
    )
    assert full.returncode == 74, full.stderr
    err = full.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: No space left on device writing path {disk / 's.zarr'} "), err
    assert list(disk.iterdir()) == []
