"""``synth`` and ``ingest`` with ``--overwrite`` replace only what daskbatch wrote.

``synth OUT --overwrite`` emptied whatever directory OUT was (zarr's mode "w"),
and ``ingest SRC OUT --overwrite`` deleted any directory or file at OUT: a typo
in OUT destroyed data that was not daskbatch's. ``transform`` and
``map_batches`` already refused that, even with ``--overwrite``.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import daskbatch as db


def _run(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
    )


SYNTH = ("synth", "--rows", "20", "--features", "2")


@pytest.fixture()
def place(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder with ``mine/`` (a user's directory), ``notes.txt`` and ``src.npy`` (an ingest source)."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    (tmp_path / "notes.txt").write_text("keep me")
    np.save(tmp_path / "src.npy", np.arange(30.0).reshape(10, 3))
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        [*SYNTH, "mine", "--overwrite"],
        [*SYNTH, "notes.txt", "--overwrite"],
        ["ingest", "src.npy", "mine", "--overwrite"],
        ["ingest", "src.npy", "notes.txt", "--overwrite"],
        ["ingest", "src.npy", "mine"],
    ],
)
def test_overwrite_refuses_what_daskbatch_did_not_write(
    place: pathlib.Path, command: list[str]
) -> None:
    """Exit 2, one line naming the path, advising no option that would not help; everything stays."""
    result = _run(place, *command)
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert (
        "\n" not in err and "is not a store daskbatch wrote" in err and "remove it yourself" in err
    ), err
    assert (place / "mine" / "thesis.tex").read_text() == "years of work"
    assert (place / "notes.txt").read_text() == "keep me"


def test_overwrite_through_a_link_replaces_the_link(place: pathlib.Path) -> None:
    """A symlink at OUT is replaced by the new store; the directory it pointed to is untouched."""
    for i, command in enumerate(([*SYNTH], ["ingest", "src.npy"])):
        link = place / f"link{i}"
        link.symlink_to(place / "mine")
        done = _run(place, *command, link.name, "--overwrite")
        assert done.returncode == 0, done.stderr
        assert not link.is_symlink() and db.open_dataset(str(link)).x.shape[1] in (2, 3)
        assert sorted(p.name for p in (place / "mine").iterdir()) == ["thesis.tex"]


def test_overwrite_still_replaces_daskbatch_stores(place: pathlib.Path) -> None:
    """A synth store is replaced by synth and by ingest; an empty directory is used."""
    (place / "empty").mkdir()
    for command in (
        [*SYNTH, "d.zarr"],
        [*SYNTH, "d.zarr", "--overwrite"],
        ["ingest", "src.npy", "d.zarr", "--overwrite"],
        [*SYNTH, "empty", "--overwrite"],
    ):
        done = _run(place, *command)
        assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(
        db.open_dataset(str(place / "d.zarr")).x.compute(), np.arange(30.0).reshape(10, 3)
    )
    assert db.open_dataset(str(place / "empty")).x.shape == (20, 2)
