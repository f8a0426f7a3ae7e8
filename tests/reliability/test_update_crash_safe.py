"""A summary being replaced is at its path at every instant, or put back by the next run.

Replacing a summary moved the old one aside, then renamed the new one into
place: a crash between the two renames left no summary at its path (only a
hidden ``.old`` sibling), and the re-run said "no summary at s.zarr".
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import zarr

import daskbatch as db

#: ``daskbatch describe --update``, killed (SIGKILL) right after the old summary is moved aside.
KILLED_BETWEEN_RENAMES = """
import os, signal, sys
target = os.path.abspath(sys.argv[1])
real_rename = os.rename
def rename(src, dst):
    real_rename(src, dst)
    if os.path.abspath(src) == target:
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
from daskbatch.cli import main
main(sys.argv[2:])
"""


def make_store(path: pathlib.Path, x: np.ndarray) -> str:
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(50, x.shape[1]))
    return str(path)


def test_killed_between_the_renames_then_rerun(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(11)
    x0, x1 = rng.normal(size=(200, 3)), rng.normal(loc=2.0, size=(130, 3))
    d0, d1 = make_store(tmp_path / "d0.zarr", x0), make_store(tmp_path / "d1.zarr", x1)
    s = tmp_path / "s.zarr"
    db.describe(d0, stats="moments").save(s)
    args = ["describe", d1, "--update", str(s), "--cluster", "threads", "--no-progress"]
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(s), *args],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert not s.exists() and [p for p in os.listdir(tmp_path) if p.startswith(".s.zarr.old-")]  # the crash state
    # Readers find the old summary again (it was complete), and the re-run completes the update.
    np.testing.assert_array_equal(db.load_summary(s).count, [200, 200, 200])
    rerun = subprocess.run([sys.executable, "-m", "daskbatch", *args], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    got = db.load_summary(s)
    rows = np.concatenate([x0, x1])
    np.testing.assert_array_equal(got.count, [330, 330, 330])
    np.testing.assert_allclose(got.mean, rows.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(got.std, rows.std(axis=0, ddof=1), rtol=1e-12)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".s.zarr.old-")], os.listdir(tmp_path)


def test_a_finished_swap_leaves_no_old_copy_behind(tmp_path: pathlib.Path) -> None:
    x = np.random.default_rng(2).normal(size=(100, 2))
    s = tmp_path / "s.zarr"
    db.describe(x, stats="moments").save(s)
    # Killed after the second rename, before deleting the old one: the new summary is in place.
    shutil.copytree(s, tmp_path / ".s.zarr.old-4194303-0badc0de")
    db.describe(x[:50], stats="moments").save(s)
    assert db.load_summary(s).count.tolist() == [50, 50]
    assert not (tmp_path / ".s.zarr.old-4194303-0badc0de").exists()
