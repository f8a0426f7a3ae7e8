"""Outputs never destroy inputs or files they were not asked to replace.

``describe d.zarr --out d.zarr`` used to delete the input and exit 0; ``--out
DIR`` emptied a directory of other files. Every output path is now checked
before anything is computed, refused with one line (exit 2) when it is, lies
in or holds the input, or holds something that is not an earlier daskbatch
output of the same kind, and written beside its final place first.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.engine.tiled_cov import tiled_covariance
from daskbatch.io.outputs import OutputError, check_output, output_kind, write_output

FAST = ["--cluster", "threads", "--no-progress", "--stats", "moments"]

Snapshot = Callable[[pathlib.Path], dict[str, str]]


def describe(store: pathlib.Path, *args: str) -> object:
    return CliRunner().invoke(main, ["describe", str(store), *FAST, *args])


def one_line_error(result: object, *words: str) -> None:
    """Exit 2, nothing computed (no report), one line on stderr naming ``words``."""
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("error: ") and "\n" not in err, err
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    assert "rows ×" not in result.stdout  # type: ignore[attr-defined]  # refused before the compute
    for w in words:
        assert w in err, err


@pytest.fixture()
def other_files(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory of a user's own files."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("keep me")
    (home / "sub").mkdir()
    (home / "sub" / "data.csv").write_text("a,b\n1,2\n")
    return home


# ------------------------------------------------------------------ the CLI: refused, nothing touched
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--out", "{store}"], ["--out", "is the input store", "choose another path"]),
        (["--out", "{store}", "--overwrite"], ["is the input store"]),
        (["--out", "{store}/X"], ["is inside the input store"]),
        (["--out", "{tmp}", "--overwrite"], ["holds the input store"]),
        (["--out", "{home}"], ["already exists and is not a daskbatch summary", "--overwrite"]),
        (["--out", "{home}/notes.txt"], ["already exists and is not a daskbatch summary"]),
        (["--out", "{tmp}/missing/s.zarr"], ["does not exist"]),
        (["--json", "{home}"], ["--json", "is a directory"]),
        (["--json", "{home}/notes.txt"], ["--json", "not a daskbatch summary"]),
        (["--json", "{store}/zarr.json", "--overwrite"], ["is inside the input store"]),
        (["--json", "{tmp}/missing/s.json"], ["does not exist"]),
        (["--json", "/proc/daskbatch-summary.json"], ["not writable"]),
        (["--cov-out", "{store}"], ["--cov-out", "is the input store"]),
        (["--cov-out", "{home}"], ["--cov-out", "not a daskbatch tiled covariance"]),
        (["--out", "{tmp}/s.zarr", "--checkpoint", "{tmp}/s.zarr/ckpt"], ["holds the --checkpoint directory"]),
        (["--out", "{tmp}/s.zarr", "--json", "{tmp}/s.zarr"], ["--json", "is --out"]),
    ],
)
def test_refused_outputs_leave_everything_as_it_was(
    tmp_path: pathlib.Path, store: pathlib.Path, other_files: pathlib.Path, snapshot: Snapshot,
    args: list[str], words: list[str],
) -> None:
    before = snapshot(tmp_path)
    argv = [a.format(store=store, tmp=tmp_path, home=other_files) for a in args]
    one_line_error(describe(store, *argv), *words)
    assert snapshot(tmp_path) == before
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_a_users_link_is_kept_without_overwrite(tmp_path: pathlib.Path, store: pathlib.Path,
                                               other_files: pathlib.Path) -> None:
    for target in (other_files / "notes.txt", tmp_path / "empty"):  # a file, and an empty folder
        if target.name == "empty":
            target.mkdir()
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        one_line_error(describe(store, "--out", str(link)), "already exists", "--overwrite")
        assert link.is_symlink() and link.resolve() == target.resolve()
    assert (other_files / "notes.txt").read_text() == "keep me"


def test_overwrite_never_replaces_what_daskbatch_did_not_write(
    tmp_path: pathlib.Path, store: pathlib.Path, other_files: pathlib.Path, snapshot: Snapshot
) -> None:
    kept = snapshot(other_files)
    one_line_error(describe(store, "--out", str(other_files), "--overwrite"), "daskbatch did not write it")
    assert snapshot(other_files) == kept
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory holds nothing to lose: it takes the summary
    assert describe(store, "--out", str(empty)).exit_code == 0
    np.testing.assert_allclose(db.load_summary(empty).mean, zarr.open_array(str(store / "X"))[:].mean(axis=0))


def test_a_group_zarr_cannot_open_is_refused_in_one_line(tmp_path: pathlib.Path, store: pathlib.Path,
                                                         snapshot: Snapshot) -> None:
    odd = tmp_path / "odd.zarr"  # someone's group whose attributes are no mapping: zarr raises TypeError
    odd.mkdir()
    (odd / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": ["mine"]}')
    kept = snapshot(odd)
    for extra in ([], ["--overwrite"]):
        one_line_error(describe(store, "--out", str(odd), *extra), "daskbatch did not write it")
    assert snapshot(odd) == kept


def test_rerun_replaces_its_own_outputs_without_overwrite(tmp_path: pathlib.Path, store: pathlib.Path, snapshot: Snapshot) -> None:
    out, js = tmp_path / "s.zarr", tmp_path / "s.json"
    data_before = snapshot(store)
    for _ in range(2):  # the second run finds its own summary and JSON there and replaces them
        result = describe(store, "--out", str(out), "--json", str(js))
        assert result.exit_code == 0, result.output
    assert snapshot(store) == data_before
    assert output_kind(out) == "summary" and output_kind(js) == "summary"
    assert json.loads(js.read_text())["feature_names"] == ["f0", "f1", "f2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.json", "s.zarr"]  # no temporary siblings


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any directory")
def test_unwritable_directory_is_refused_before_the_compute(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    one_line_error(describe(store, "--out", str(locked / "s.zarr")), "not writable")


# ------------------------------------------------------------------ the API
def test_summary_save_refuses_foreign_paths_and_its_own_input(store: pathlib.Path, other_files: pathlib.Path, snapshot: Snapshot) -> None:
    summary = db.describe(str(store), stats="moments", run=db.RunOptions(plan=None))
    kept = snapshot(store), snapshot(other_files)
    with pytest.raises(OutputError, match="not a daskbatch summary"):
        summary.save(other_files)
    for target in (store, store / "X", store.parent):  # overwrite=True never reaches the input
        with pytest.raises(OutputError, match="input store"):
            summary.save(target, overwrite=True)
    assert (snapshot(store), snapshot(other_files)) == kept
    path = store.parent / "s.zarr"
    summary.save(path)
    summary.save(path)  # an earlier summary is replaced without asking
    np.testing.assert_array_equal(db.load_summary(path).mean, summary.mean)


def test_failed_write_keeps_the_old_output_and_leaves_no_temporary(tmp_path: pathlib.Path, store: pathlib.Path, snapshot: Snapshot) -> None:
    summary = db.describe(str(store), stats="moments", run=db.RunOptions(plan=None))
    path = tmp_path / "s.zarr"
    summary.save(path)
    before = snapshot(path)

    def half_then_fail(tmp: str) -> None:
        os.makedirs(tmp)
        pathlib.Path(tmp, "zarr.json").write_text("{}")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_output(check_output(path, kind="summary"), half_then_fail)
    assert snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr", "s.zarr"]


def test_tiled_covariance_refuses_the_input_and_foreign_stores(store: pathlib.Path, other_files: pathlib.Path, snapshot: Snapshot) -> None:
    import dask.array as da

    x = da.from_zarr(str(store), component="X")
    kept = snapshot(store), snapshot(other_files)
    with pytest.raises(OutputError, match="is the input store"):
        tiled_covariance(x, tile=2, out=store, protected={"the input store": str(store)})
    with pytest.raises(OutputError, match="not a daskbatch tiled covariance"):
        tiled_covariance(x, tile=2, out=other_files)
    assert (snapshot(store), snapshot(other_files)) == kept
    out = store.parent / "c.zarr"
    first = tiled_covariance(x, tile=2, out=out)
    again = tiled_covariance(x, tile=2, out=out)  # its own earlier store is replaced
    np.testing.assert_allclose(again.cov.compute(), np.cov(zarr.open_array(str(store / "X"))[:], rowvar=False))
    assert first.path == again.path and output_kind(out) == "tiled_cov"


def test_ingest_overwrite_never_deletes_its_sources(tmp_path: pathlib.Path, snapshot: Snapshot) -> None:
    src = tmp_path / "batches"
    src.mkdir()
    for i in range(2):
        np.save(src / f"b{i}.npy", np.full((4, 2), float(i)))
    before = snapshot(src)
    result = CliRunner().invoke(main, ["ingest", str(src / "*.npy"), str(src), "--overwrite"])
    one_line_error(result, "holds the source")
    assert snapshot(src) == before


def test_demo_refuses_a_directory_with_someone_elses_data(tmp_path: pathlib.Path, snapshot: Snapshot) -> None:
    mine = zarr.open_group(str(tmp_path / "data.zarr"), mode="w")
    mine.create_array("X", data=np.ones((4, 2)))
    before = snapshot(tmp_path)
    result = CliRunner().invoke(main, ["demo", "--rows", "100", "--features", "4", "--workers", "1", "--out", str(tmp_path)])
    one_line_error(result, "data.zarr", "did not write")
    assert snapshot(tmp_path) == before
