"""``describe``'s outputs stay clear of the summaries it reads (``--like``, ``--update``), as of its input store.

``--out`` over the ``--like`` reference replaced the reference with the new
rows' summary, and ``--update S --out N --json S/x.json --overwrite`` wrote into
S; only the input store and the checkpoint were protected.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
import zarr

import daskbatch as db


def _describe(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch describe ARGS`` without a cluster, in ``cwd``."""
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
        cwd=cwd,
        timeout=240,
    )


@pytest.fixture()
def more(tmp_path: pathlib.Path) -> pathlib.Path:
    """``more.zarr``: 200 further rows."""
    path = tmp_path / "more.zarr"
    x = np.random.default_rng(11).normal(size=(200, 3))
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(100, 3))
    return path


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--like", "s.zarr", "--out", "s.zarr"], "--out s.zarr is the --like summary"),
        (
            ["--like", "s.zarr", "--json", "s.zarr/x.json", "--overwrite"],
            "--json s.zarr/x.json is inside the --like summary",
        ),
        (
            ["--update", "s.zarr", "--out", "n.zarr", "--json", "s.zarr/x.json", "--overwrite"],
            "--json s.zarr/x.json is inside the --update summary",
        ),
        (
            ["--update", "s.zarr", "--out", "n.zarr", "--checkpoint", "s.zarr/ck"],
            "--checkpoint s.zarr/ck is inside the --update summary",
        ),
    ],
)
def test_outputs_never_over_or_into_a_summary_read(
    tmp_path: pathlib.Path,
    more: pathlib.Path,
    data: np.ndarray,
    args: list[str],
    words: str,
    snapshot: Callable[[pathlib.Path], dict[str, str]],
) -> None:
    """Exit 2, one line naming the option and the summary; nothing is written."""
    db.describe(data, stats=["moments", "hist"], range=(-5.0, 5.0)).save(tmp_path / "s.zarr")
    before = snapshot(tmp_path)
    refused = _describe(tmp_path, "more.zarr", *args)
    assert refused.returncode == 2, refused.stderr
    err = refused.stderr.strip()
    assert "\n" not in err and words in err, err
    assert snapshot(tmp_path) == before


def test_update_in_place_under_another_spelling(
    tmp_path: pathlib.Path, more: pathlib.Path, data: np.ndarray
) -> None:
    """``--update s.zarr --out ./s.zarr`` is the update in place, as without --out."""
    db.describe(data, stats="moments").save(tmp_path / "s.zarr")
    done = _describe(tmp_path, "more.zarr", "--update", "s.zarr", "--out", "./s.zarr")
    assert done.returncode == 0, done.stderr
    assert int(db.load_summary(tmp_path / "s.zarr").arrays.count[0]) == 800
