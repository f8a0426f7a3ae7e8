"""Absent chunks of a store daskbatch wrote refuse by default; skip and fill are explicit and recorded.

Before: a deleted chunk gave a warning and statistics over zarr's fill values
(a deleted label chunk changed MI while ``inspect`` said "missing chunks none"),
and the provenance said ``complete: True`` next to ``missing_chunks``.

daskbatch records on every array it writes that it stores every chunk
(``daskbatch:writes_every_chunk``), so there an absent chunk is a loss; stores
of other writers read absent chunks as the fill value (tests/foreign/).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import warnings

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError, MissingChunksWarning

ROWS, FEATURES, CHUNK = 1200, 3, 200


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, np.ndarray, np.ndarray]:
    path = tmp_path_factory.mktemp("miss") / "s.zarr"
    db.synth(ROWS, FEATURES, classes=3, chunk_rows=CHUNK, seed=7, path=path)
    g = zarr.open_group(str(path), mode="r")
    return path, np.asarray(g["X"][:], dtype=np.float64), np.asarray(g["y"][:])


def _copy(tmp_path: pathlib.Path, source: tuple[pathlib.Path, np.ndarray, np.ndarray], *remove: str) -> pathlib.Path:
    path = tmp_path / "s.zarr"
    shutil.copytree(source[0], path)
    for key in remove:
        (path / key).unlink()
    return path


def _describe(path: pathlib.Path, missing: str) -> db.Summary:
    with pytest.warns(MissingChunksWarning):
        return db.describe(path, stats=("moments", "cov", "mi"), range=(-60, 60), bins=16, run=db.RunOptions(plan=None, missing=missing))


def test_deleted_label_chunk_refuses_and_inspect_lists_it(tmp_path, source) -> None:
    path = _copy(tmp_path, source, "y/c/2")
    g = zarr.open_group(str(path), mode="r")
    assert g["X"].attrs["daskbatch:writes_every_chunk"] is True and g["y"].attrs["daskbatch:writes_every_chunk"] is True
    with pytest.raises(DataError, match=r"1 chunk\(s\) of label 'y' are missing: y/c/2 \(200 rows\)") as err:
        db.describe(path)
    assert "\n" not in str(err.value)
    # The store lost rows: the message never offers to compute without them.
    assert "daskbatch wrote every chunk" in str(err.value) and "skip" not in str(err.value)
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.strip().startswith("missing chunks"))
    assert "y/c/2" in line
    assert "chunks not decoded: run daskbatch verify" in result.output
    facts = json.loads(CliRunner().invoke(main, ["inspect", str(path), "--json"]).output.split("\nwarning")[0])
    assert facts["label_missing_chunk_keys"] == ["y/c/2"] and facts["complete"] is False
    assert facts["chunks_decoded"] is False


def test_skip_computes_on_the_rows_present(tmp_path, source) -> None:
    _, x, y = source
    path = _copy(tmp_path, source, "y/c/2", "X/c/4/0")
    keep = np.ones(ROWS, bool)
    keep[2 * CHUNK : 3 * CHUNK] = keep[4 * CHUNK : 5 * CHUNK] = False
    s = _describe(path, "skip")
    np.testing.assert_allclose(s.mean, x[keep].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(s.cov, np.cov(x[keep], rowvar=False), rtol=1e-10)
    # MI equals that of the same rows given in memory.
    ref = db.describe(x[keep], y[keep], stats=("moments", "mi"), range=(-60, 60), bins=16, run=db.RunOptions(plan=None))
    np.testing.assert_allclose(s.mi, ref.mi, rtol=1e-12)
    p = s.provenance
    assert p["rows"] == keep.sum() and p["rows_skipped"] == 2 * CHUNK and p["complete"] is False
    assert p["missing_chunks"] == [[4, 0]] and p["label_missing_chunks"] == [[2]]
    assert p["skipped_rows"] == [[400, 600], [800, 1000]] and p["missing_policy"] == "skip"


def test_fill_reads_fill_values_and_says_incomplete(tmp_path, source) -> None:
    _, x, _ = source
    path = _copy(tmp_path, source, "X/c/1/0")
    s = _describe(path, "fill")
    filled = x.copy()
    filled[CHUNK : 2 * CHUNK] = 0.0  # synth's fill value
    np.testing.assert_allclose(s.mean, filled.mean(axis=0), rtol=1e-12)
    assert s.provenance["complete"] is False and s.provenance["missing_chunks"] == [[1, 0]]
    assert s.provenance["rows_skipped"] == 0 and s.provenance["missing_policy"] == "fill"


def test_many_missing_name_the_first_keys_and_the_count(tmp_path, source) -> None:
    path = _copy(tmp_path, source, *(f"X/c/{i}/0" for i in range(6)))
    with pytest.raises(DataError) as err:
        db.open_dataset(path)
    msg = str(err.value)
    assert "6 chunk(s) of array 'X'" in msg and "X/c/0/0, X/c/1/0" in msg and "(6 in all)" in msg
    with pytest.raises(DataError, match="every row has a missing chunk"):
        db.open_dataset(path, missing="skip")


def test_describe_cli_missing_option(tmp_path, source) -> None:
    path = _copy(tmp_path, source, "X/c/5/0")
    refused = CliRunner().invoke(main, ["describe", str(path), "--cluster", "threads", "--no-progress"])
    assert refused.exit_code == 2 and "X/c/5/0" in refused.output
    out = tmp_path / "s.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingChunksWarning)  # the CLI prints it as one line
        result = CliRunner().invoke(
            main,
            ["describe", str(path), "--cluster", "threads", "--no-progress", "--stats", "moments",
             "--missing", "skip", "--json", str(out)],
        )
    assert result.exit_code == 0, result.output
    prov = json.loads(out.read_text())["provenance"]
    assert prov["rows"] == ROWS - CHUNK and prov["rows_skipped"] == CHUNK and prov["complete"] is False
