"""Absent chunks: the fill value where the writer leaves them out, a loss where daskbatch wrote every chunk.

Issue 16 (item 2): a label chunk that is all class 0 is not written by zarr, and
``describe`` refused the store advising ``missing='skip'``, which on the wine
data dropped 50 valid rows (class 0 went from 59 rows to 9).  Issue 17 (item
6): inner chunks never written to a shard read as zeros while ``verify`` and
``inspect`` saw nothing.
"""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from sklearn.datasets import load_wine

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError, MissingChunksWarning
from tests.foreign.conftest import Foreign

# Stores other tools wrote hold NaN holes and fill values read at the edges: the trust warnings
# (complete rows, piled values) are true of them and not what these tests compare.
pytestmark = [
    pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning"),
    pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning"),
]


def test_the_issue_repro_label_chunks_all_class_zero(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "plain.zarr"
    X = np.random.default_rng(16).normal(5.0, 3.0, (40_000, 4))
    g = zarr.open_group(str(path), mode="w")
    g.create_array("X", data=X, chunks=(10000, 4))  # 40,000 rows
    y = np.zeros(40000, "int64")
    y[20000:] = 1
    g.create_array("y", data=y, chunks=(10000,))  # y/c/0 and y/c/1 are not written
    assert sorted(p.name for p in (path / "y" / "c").iterdir()) == ["2", "3"]
    s = db.describe(path, label="y", stats=("moments", "class_moments"), run=db.RunOptions(plan=None))
    np.testing.assert_allclose(s.mean, X.mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(s.arrays.class_count[0], [20000, 20000])
    np.testing.assert_allclose(s.arrays.class_mean[:, 0], X[:20000].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.arrays.class_mean[:, 1], X[20000:].mean(axis=0), rtol=1e-12)
    assert s.provenance["label_missing_chunk_keys"] == ["y/c/0", "y/c/1"]
    assert s.provenance["absent_fill_chunks"] == 2 and s.provenance["complete"] is True
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 0 and "absent    y/c/0" in result.output and "absent (fill value)" in result.output


def test_wine_with_zarr_defaults_keeps_every_row(tmp_path: pathlib.Path) -> None:
    wine = load_wine()
    x, y = wine.data, wine.target.astype(np.int64)  # sorted by class: rows 0-58 are class 0
    path = tmp_path / "wine.zarr"
    g = zarr.open_group(str(path), mode="w")
    g.create_array("X", data=x, chunks=(50, 13))
    g.create_array("y", data=y, chunks=(50,))  # rows 0-49 are all class 0: y/c/0 is not written
    assert not (path / "y" / "c" / "0").exists()
    s = db.describe(path, label="y", stats=("moments", "class_moments"), run=db.RunOptions(plan=None))
    assert s.provenance["rows"] == 178
    np.testing.assert_array_equal(s.arrays.class_count[0], np.bincount(y))  # 59, 71, 48
    for k in range(3):
        np.testing.assert_allclose(s.arrays.class_mean[:, k], x[y == k].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.std, x.std(axis=0, ddof=1), rtol=1e-10)
    # skip stays available when asked for, and does what it says: the rows of y/c/0 are left out.
    with pytest.warns(MissingChunksWarning, match="left out"):
        skipped = db.describe(path, label="y", stats=("moments",), run=db.RunOptions(plan=None, missing="skip"))
    assert skipped.provenance["rows"] == 128 and skipped.provenance["complete"] is False


def _synth_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "own.zarr"
    db.synth(600, 3, classes=2, chunk_rows=100, seed=4, path=path)
    return path


def test_lost_chunk_of_a_daskbatch_store_still_refuses_and_never_advises_skip(tmp_path: pathlib.Path) -> None:
    path = _synth_copy(tmp_path)
    (path / "X" / "c" / "2" / "0").unlink()
    with pytest.raises(DataError) as err:
        db.describe(path, run=db.RunOptions(plan=None))
    msg = str(err.value)
    assert "X/c/2/0" in msg and "daskbatch wrote every chunk" in msg and "\n" not in msg
    assert "skip" not in msg and "missing=" not in msg
    # Following it: verify names the lost chunk and fails; the store still refuses.
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 1 and "missing   X/c/2/0" in result.output and "FAILED: 1 missing" in result.output
    with pytest.raises(DataError, match="X/c/2/0"):
        db.describe(path, run=db.RunOptions(plan=None))
    refused = CliRunner().invoke(main, ["describe", str(path), "--cluster", "threads", "--no-progress"])
    assert refused.exit_code == 2 and "X/c/2/0" in refused.output and "skip" not in refused.output


def test_explicit_raise_refuses_a_foreign_absent_chunk_and_names_the_right_reading(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "plain.zarr"
    g = zarr.open_group(str(path), mode="w")
    g.create_array("X", data=np.zeros((200, 2)), chunks=(100, 2))
    with pytest.raises(DataError) as err:
        db.open_dataset(path, missing="raise")
    assert "X/c/0/0, X/c/1/0" in str(err.value) and "missing='auto'" in str(err.value)
    assert "skip" not in str(err.value)


def _sharded(path: pathlib.Path, x: np.ndarray, own: bool) -> None:
    g = zarr.open_group(str(path), mode="w")
    g.create_array(
        "X", shape=x.shape, chunks=(100, 3), shards=(400, 3), dtype="f8",
        attributes={"daskbatch:writes_every_chunk": True} if own else None,
        config={"write_empty_chunks": own},
    )[:] = x


def test_sharded_foreign_store_sees_absent_inner_chunks(tmp_path: pathlib.Path) -> None:
    x = np.random.default_rng(17).normal(10.0, 1.0, (800, 3))
    x[100:200] = 0.0  # inner chunk (1, 0) of shard X/c/0/0 is left out
    x[700:800] = 0.0  # inner chunk (3, 0) of shard X/c/1/0
    path = tmp_path / "sharded.zarr"
    _sharded(path, x, own=False)
    s = db.describe(path, stats=("moments",), run=db.RunOptions(plan=None))
    np.testing.assert_allclose(s.mean, x.mean(axis=0), rtol=1e-12)
    assert s.provenance["missing_chunk_keys"] == [
        "inner chunk (1, 0) of shard X/c/0/0", "inner chunk (3, 0) of shard X/c/1/0",
    ]
    assert s.provenance["missing_chunks"] == [[1, 0], [7, 0]] and s.provenance["absent_fill_chunks"] == 2
    inspect = CliRunner().invoke(main, ["inspect", str(path)])
    assert inspect.exit_code == 0 and "inner chunk (1, 0) of shard X/c/0/0" in inspect.output
    verify = CliRunner().invoke(main, ["verify", str(path)])
    assert verify.exit_code == 0, verify.output
    assert "absent    inner chunk (3, 0) of shard X/c/1/0 (grid position (7, 0)): absent (fill value)" in verify.output


def test_sharded_daskbatch_store_with_a_lost_inner_chunk_refuses(tmp_path: pathlib.Path) -> None:
    """An inner chunk dropped from a shard of an array that records writing every chunk."""
    x = np.random.default_rng(18).normal(10.0, 1.0, (800, 3))
    path = tmp_path / "own-sharded.zarr"
    _sharded(path, x, own=True)
    assert db.open_dataset(path).provenance()["absent_chunks"] == 0
    pristine = tmp_path / "copy.zarr"
    shutil.copytree(path, pristine)
    # Another writer rewrites shard X/c/1/0 without inner chunk (2, 0).
    arr = zarr.open_array(str(path / "X"), mode="r+", config={"write_empty_chunks": False})
    arr[600:700] = 0.0
    with pytest.raises(DataError) as err:
        db.describe(path, run=db.RunOptions(plan=None))
    assert "inner chunk (2, 0) of shard X/c/1/0" in str(err.value) and "daskbatch wrote every chunk" in str(err.value)
    verify = CliRunner().invoke(main, ["verify", str(path)])
    assert verify.exit_code == 1 and "missing   inner chunk (2, 0) of shard X/c/1/0" in verify.output
    assert CliRunner().invoke(main, ["verify", str(pristine)]).exit_code == 0


def test_verify_of_a_saved_summary_passes(tmp_path: pathlib.Path) -> None:
    """A summary store leaves out chunks of fill values (all-zero histogram rows): not a loss.

    Before, ``daskbatch verify`` of a freshly saved summary said ``FAILED: 9 missing``.
    """
    x = np.zeros((300, 3))
    x[:, 0] = np.arange(300)
    db.describe(x, np.arange(300) % 2, run=db.RunOptions(plan=None)).save(tmp_path / "s.zarr")
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "s.zarr")])
    assert result.exit_code == 0, result.output
    assert "absent (fill value)" in result.output and "missing " not in result.output


def test_every_daskbatch_data_writer_records_that_it_writes_every_chunk(tmp_path: pathlib.Path) -> None:
    """synth, ingest and transform mark their arrays; a chunk lost from any of them is refused."""
    src = _synth_copy(tmp_path)
    x = np.asarray(zarr.open_group(str(src), mode="r")["X"][:])
    np.savez(tmp_path / "b0.npz", x=x[:300], y=np.zeros(300, np.int64))
    np.savez(tmp_path / "b1.npz", x=x[300:], y=np.ones(300, np.int64))
    db.ingest(str(tmp_path / "b*.npz"), tmp_path / "ingested.zarr", x_key="x", label_key="y", chunk_rows=100)
    db.transform(src, [db.steps.clip(-1.0, 1.0)], out=tmp_path / "t.zarr", chunk_rows=100)
    for name in ("own.zarr", "ingested.zarr", "t.zarr"):
        g = zarr.open_group(str(tmp_path / name), mode="r")
        assert g["X"].attrs["daskbatch:writes_every_chunk"] is True, name
        assert g["y"].attrs["daskbatch:writes_every_chunk"] is True, name
        (tmp_path / name / "y" / "c" / "1").unlink()
        with pytest.raises(DataError, match=r"y/c/1.*daskbatch wrote every chunk"):
            db.open_dataset(tmp_path / name)


def test_a_store_of_an_earlier_daskbatch_without_the_mark_still_refuses(tmp_path: pathlib.Path) -> None:
    """Before the attribute existed, synth and ingest stores were known by their 'daskbatch' group attribute."""
    path = _synth_copy(tmp_path)
    for name in ("X", "y"):
        del zarr.open_array(str(path / name), mode="r+").attrs["daskbatch:writes_every_chunk"]
        assert "daskbatch:writes_every_chunk" not in zarr.open_array(str(path / name), mode="r").attrs
    (path / "X" / "c" / "0" / "0").unlink()
    with pytest.raises(DataError, match="X/c/0/0.*daskbatch wrote every chunk"):
        db.open_dataset(path)
    assert CliRunner().invoke(main, ["verify", str(path)]).exit_code == 1


def test_the_summary_tells_lost_chunks_read_as_fill_values_and_skipped_rows(tmp_path: pathlib.Path) -> None:
    """Issue round 2, item 13: the text table and the HTML say what happened to absent chunks, in one line."""
    path = _synth_copy(tmp_path)
    whole = db.describe(path, stats=("moments",), run=db.RunOptions(plan=None))
    assert "absent" not in repr(whole) and "absent from the store" not in whole._repr_html_()
    (path / "X" / "c" / "2" / "0").unlink()
    with pytest.warns(MissingChunksWarning):
        filled = db.describe(path, stats=("moments",), run=db.RunOptions(plan=None, missing="fill"))
    lines = [x for x in repr(filled).splitlines() if "absent" in x]
    assert lines == [
        "1 chunk absent from the store, 1 of them lost (daskbatch wrote every chunk), read as their fill value "
        "(X: 0.0) as zarr reads them; missing='raise' (--missing raise) refuses them"
    ]
    with pytest.warns(MissingChunksWarning):
        skipped = db.describe(path, stats=("moments",), run=db.RunOptions(plan=None, missing="skip"))
    assert [x for x in repr(skipped).splitlines() if "absent" in x] == [
        "1 chunk absent from the store, 1 of them lost (daskbatch wrote every chunk): their 100 rows left out "
        "(missing='skip', --missing skip)"
    ]
    assert "their 100 rows left out" in skipped._repr_html_()


def test_the_cli_describe_prints_the_absent_chunks_line(xarray_fill_v2: Foreign) -> None:
    result = CliRunner().invoke(main, ["describe", xarray_fill_v2.path, "--label", "y", "--cluster", "threads", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (
        "2 chunks absent from the store, read as their fill value (X: nan; y: 0) as zarr reads them; "
        "missing='raise' (--missing raise) refuses them"
    ) in result.output.splitlines()
