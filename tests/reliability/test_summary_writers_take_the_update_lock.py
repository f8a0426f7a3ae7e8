"""Every writer of a summary path takes the lock ``describe --update`` holds.

``describe --out S``, started while an update of S held its lock, replaced the
2,050,000-row updated summary with its own 20,000 rows; both exited 0. Now
``describe --out`` and ``Summary.save`` take the summary's run lock, and fail at
once (exit 2, one line naming the holder) while another live run holds it.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import daskbatch as db
from daskbatch.errors import LockHeldError
from daskbatch.runtime.runlock import output_lock_path

HOLD = (
    "import sys\n"
    "from daskbatch.runtime.runlock import RunLock\n"
    "with RunLock(sys.argv[1], 'an update'):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.read()\n"
)


@pytest.fixture()
def saved(tmp_path: pathlib.Path, data: np.ndarray) -> pathlib.Path:
    """``s.zarr``: the summary of the first 500 rows of ``data``."""
    path = tmp_path / "s.zarr"
    db.describe(data[:500], stats="moments").save(path)
    return path


@pytest.fixture()
def held(saved: pathlib.Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the summary's lock, as a running ``describe --update`` does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(output_lock_path(saved))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.communicate(timeout=60)


def _rows(path: pathlib.Path) -> int:
    """The number of rows the saved summary counts."""
    return int(db.load_summary(path).arrays.count[0])


def test_describe_out_refuses_a_summary_being_updated(
    saved: pathlib.Path, held: subprocess.Popen[str], store: pathlib.Path
) -> None:
    """Exit 2, one line naming the lock's holder; the summary is left as the update will write it."""
    result = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", str(store), "--out", str(saved)]
        + ["--stats", "moments", "--cluster", "threads", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert "\n" not in err and f"pid {held.pid}" in err and "in use" in err and str(saved) in err, (
        err
    )
    assert _rows(saved) == 500


def test_summary_save_refuses_a_summary_being_updated(
    saved: pathlib.Path, held: subprocess.Popen[str], data: np.ndarray
) -> None:
    """The API writer takes the same lock: LockHeldError, the summary unchanged."""
    with pytest.raises(LockHeldError, match=f"pid {held.pid}"):
        db.describe(data[:20], stats="moments").save(saved)
    assert _rows(saved) == 500


def test_describe_out_releases_the_lock(saved: pathlib.Path, store: pathlib.Path) -> None:
    """Without a holder the summary is replaced as before, and no lock file is left beside it."""
    result = subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", str(store), "--out", str(saved)]
        + ["--stats", "moments", "--cluster", "threads", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert _rows(saved) == 600
    assert not os.path.lexists(output_lock_path(saved))
