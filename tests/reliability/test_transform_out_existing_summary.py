"""``transform``/``map_batches`` with ``out=`` an existing summary (or any store daskbatch did not create) keep it.

``RowStore`` took a store without ``daskbatch-output.json`` for one "interrupted
while being created" and deleted it: a summary at ``out`` was removed without
``overwrite``, even the one the standardize step reads. Now only daskbatch's own
creation marker means "interrupted", and the files the steps read are never
written over, even with ``--overwrite``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError
from daskbatch.io.rowstore import CREATING_FILE

Snapshot = Callable[[pathlib.Path], dict[str, str]]


@pytest.fixture()
def summary(tmp_path: pathlib.Path, store: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "s.zarr"
    db.describe(str(store), stats="moments").save(path)
    return path


def test_transform_refuses_a_summary_at_out(
    store: pathlib.Path, summary: pathlib.Path, snapshot: Snapshot
) -> None:
    before = snapshot(summary)
    with pytest.raises(DataError, match="holds a daskbatch summary output"):
        db.transform(str(store), [db.steps.standardize(db.load_summary(summary))], summary)
    assert snapshot(summary) == before
    db.load_summary(summary)


def test_map_batches_refuses_a_summary_at_out(
    store: pathlib.Path, summary: pathlib.Path, snapshot: Snapshot
) -> None:
    before = snapshot(summary)
    with pytest.raises(DataError, match="holds a daskbatch summary output"):
        db.map_batches(np.negative, str(store), out=summary)
    assert snapshot(summary) == before


def test_the_cli_never_writes_over_the_summary_its_step_reads(
    store: pathlib.Path, summary: pathlib.Path, snapshot: Snapshot
) -> None:
    before = snapshot(summary)
    for extra in ([], ["--overwrite"]):
        result = CliRunner().invoke(main, ["transform", str(store), "--standardize", str(summary),
                                           "--out", str(summary), "--no-progress", *extra])
        assert result.exit_code == 2, result.output
        assert "\n" not in result.stderr.strip() and "--out" in result.stderr, result.stderr
        assert snapshot(summary) == before


def test_a_store_without_our_creation_marker_is_foreign(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    # Marked as a transform output but with neither manifest nor creation marker: not ours to delete.
    out = tmp_path / "t.zarr"
    zarr.open_group(str(out), mode="w", attributes={"daskbatch_output": "transform"}).create_array(
        "keep", data=np.arange(3))
    with pytest.raises(DataError, match="without its daskbatch-output.json"):
        db.transform(str(store), [db.steps.clip(-1, 1)], out)
    assert np.array_equal(zarr.open_group(str(out), mode="r")["keep"][:], np.arange(3))


def test_our_interrupted_creation_is_made_again(tmp_path: pathlib.Path, store: pathlib.Path, data: np.ndarray) -> None:
    out = tmp_path / "t.zarr"
    out.mkdir()
    (out / CREATING_FILE).write_text("transform\n")  # what a run killed while creating leaves
    zarr.open_group(str(out), mode="a", attributes={"daskbatch_output": "transform"})
    db.transform(str(store), [db.steps.clip(-1, 1)], out)
    assert not (out / CREATING_FILE).exists()
    got = db.open_dataset(out).x.compute()
    np.testing.assert_array_equal(got, np.clip(data, -1, 1))
