"""A local path with ``::`` in a name is that path; ``::`` chains only after a protocol.

zarr hands any path holding ``::`` to fsspec as a chained URL, so describing
``runs::2024.zarr`` failed with "no Zarr store", and ``--out o::s.zarr`` failed
on ``.o/zarr.json``, a path nobody gave.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.io.outputs import is_chained_url


def _describe(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch describe ARGS`` (moments only, no cluster) in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", "describe", *args]
        + ["--stats", "moments", "--cluster", "threads", "--no-progress"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
    )


def test_describe_reads_and_writes_paths_with_double_colons(
    tmp_path: pathlib.Path, data: np.ndarray
) -> None:
    """Input ``x::y.zarr`` and output ``o::s.zarr`` (twice: the second run replaces the first)."""
    group = zarr.open_group(zarr.storage.LocalStore(str(tmp_path / "x::y.zarr")), mode="w")
    group.create_array("X", data=data, chunks=(100, 3))
    for _ in range(2):
        done = _describe(tmp_path, "x::y.zarr", "--out", "o::s.zarr")
        assert done.returncode == 0, done.stderr
    saved = zarr.open_group(
        zarr.storage.LocalStore(str(tmp_path / "o::s.zarr"), read_only=True), mode="r"
    )
    assert saved.attrs["daskbatch_output"] == "summary"
    np.testing.assert_allclose(saved["mean"][...], data.mean(axis=0), rtol=1e-13)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o::s.zarr", "x::y.zarr"]


def test_a_chained_url_still_chains(
    tmp_path: pathlib.Path, store: pathlib.Path, data: np.ndarray
) -> None:
    """``simplecache::file://...`` is fsspec's, as before."""
    url = f"simplecache::file://{store}"
    assert is_chained_url(url)
    np.testing.assert_allclose(
        db.describe(url, stats="moments").mean, data.mean(axis=0), rtol=1e-13
    )


@pytest.mark.parametrize(
    ("path", "chained"),
    [
        ("simplecache::s3://bucket/x.zarr", True),
        ("zip://a.csv::s3://bucket/a.zip", True),
        ("run::2024.zarr", False),
        ("results/a::b", False),
        ("::x", False),
        ("plain.zarr", False),
    ],
)
def test_which_paths_chain(path: str, chained: bool) -> None:
    """Only a protocol (or a URL) before the first ``::`` makes a chain."""
    assert is_chained_url(path) is chained


def test_an_existing_local_path_never_chains(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file named like a chain is read as that file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "simplecache::x").mkdir()
    assert not is_chained_url("simplecache::x")


def test_load_summary_reads_a_path_with_double_colons(tmp_path: pathlib.Path, data: np.ndarray) -> None:
    """A summary saved at ``o::s.zarr`` loads back, states included (it can be merged)."""
    path = str(tmp_path / "o::s.zarr")
    db.describe(data, stats=("moments",)).save(path)
    loaded = db.load_summary(path)
    np.testing.assert_allclose(loaded.mean, data.mean(axis=0), rtol=1e-13)
    assert db.merge(loaded, db.describe(data + 1.0, stats=("moments",))).arrays.count[0] == 2 * len(data)
