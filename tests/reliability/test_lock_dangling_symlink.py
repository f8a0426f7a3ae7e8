"""A run lock whose path is a dangling symbolic link is named as such, not as "other runs keep taking it".

``O_CREAT | O_EXCL`` refuses to create through a symlink and reading finds no
file, so every round of the lock's loop thought the lock had just been released
and the run ended with a message about other runs that did not exist.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import daskbatch as db
from daskbatch.errors import LockHeldError
from daskbatch.runtime.runlock import RunLock, output_lock_path


def test_runlock_names_the_dangling_link(tmp_path: pathlib.Path) -> None:
    """One line naming the link, where it points and what to do; the link is left alone."""
    lock = tmp_path / "daskbatch.lock"
    lock.symlink_to(tmp_path / "gone" / "lock")
    with pytest.raises(LockHeldError) as info:
        RunLock(lock, "checkpoint directory ck").acquire()
    message = str(info.value)
    assert "\n" not in message and "other runs" not in message
    assert (
        f"lock file {lock} is a dangling symbolic link (to {tmp_path / 'gone' / 'lock'})" in message
    )
    assert "remove the link" in message
    assert lock.is_symlink()


def test_describe_out_with_a_dangling_lock_link(
    tmp_path: pathlib.Path, store: pathlib.Path, data: np.ndarray
) -> None:
    """The CLI: exit 2 with that line, the summary untouched."""
    out = tmp_path / "s.zarr"
    db.describe(data[:100], stats="moments").save(out)
    output_lock_path(out).symlink_to(tmp_path / "nowhere")
    result = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", str(store), "--out", str(out)]
        + ["--stats", "moments", "--cluster", "threads", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert (
        "\n" not in err and "dangling symbolic link" in err and str(output_lock_path(out)) in err
    ), err
    assert int(db.load_summary(out).arrays.count[0]) == 100
