"""Finding 4: a resumable output regenerated under it is refused, naming the item; overwrite starts over.

Before, outputs knew their input by path, shape, dtype and chunks only: a
store regenerated between a kill and the resume gave a mix of old and new rows
marked complete, and a finished output re-run on regenerated data reported ok
while matching the new input in none of its rows.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import yaml
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import DataError
from daskbatch.io.rowstore import DONE_FILE

ROWS = 600


def regenerate(path: pathlib.Path, seed: int) -> np.ndarray:
    """Write ``X`` (and ``y``) of the store at ``path`` again: same shape, chunks and dtype, other numbers."""
    # Column scales 1 < 5 < 9: the same features rank highest by variance before and after.
    x = np.random.default_rng(seed).normal(size=(ROWS, 3)) * [1.0, 5.0, 9.0] + seed
    group = zarr.open_group(str(path), mode="a")
    group["X"][:] = x
    group["y"][:] = (x[:, 0] > seed).astype(np.int8)
    return x


def as_if_killed(out: pathlib.Path, keep: int) -> None:
    """What a kill leaves: the first ``keep`` blocks logged, ``complete`` false."""
    log = out / DONE_FILE
    log.write_text("".join(f"{b}\n" for b in log.read_text().split()[:keep]))
    zarr.open_group(str(out), mode="r+").attrs["complete"] = False


def standardized(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=0)) / x.std(axis=0)  # the population std, as StandardScaler


def steps(src: pathlib.Path) -> list:
    return [db.steps.standardize(db.describe(str(src), stats=["moments"]))]


def test_transform_interrupted_then_input_regenerated(store: pathlib.Path, tmp_path: pathlib.Path,
                                                      snapshot) -> None:
    out = tmp_path / "z.zarr"
    same = steps(store)
    db.transform(str(store), same, out, chunk_rows=100)
    as_if_killed(out, keep=3)
    before = snapshot(out)
    new = regenerate(store, seed=5)
    # The same steps (the same summary) on the new data: the data differ, so nothing is mixed.
    with pytest.raises(DataError, match="x content"):
        db.transform(str(store), same, out, chunk_rows=100)
    assert snapshot(out) == before
    report = db.transform(str(store), steps(store), out, chunk_rows=100, overwrite=True)
    assert report.written == tuple(range(6))
    np.testing.assert_allclose(db.open_dataset(out).x.compute(), standardized(new), rtol=1e-12, atol=1e-12)


def test_finished_transform_rerun_on_regenerated_data(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "z.zarr"
    same = steps(store)
    db.transform(str(store), same, out, chunk_rows=100)
    regenerate(store, seed=7)
    with pytest.raises(DataError, match="x content"):
        db.transform(str(store), same, out, chunk_rows=100)


def test_map_batches_interrupted_then_input_regenerated(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "m.zarr"
    db.map_batches(np.cbrt, str(store), out=out, batch_rows=100)
    as_if_killed(out, keep=2)
    new = regenerate(store, seed=3)
    with pytest.raises(DataError, match="x content"):
        db.map_batches(np.cbrt, str(store), out=out, batch_rows=100)
    db.map_batches(np.cbrt, str(store), out=out, batch_rows=100, overwrite=True)
    np.testing.assert_array_equal(db.open_dataset(out).x.compute(), np.cbrt(new))


def test_run_job_rerun_on_regenerated_data(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    job = {"input": {"store": str(store), "label": "y"}, "cluster": {"kind": "threads", "threads": 2}, "memory": "2GiB",
           "outputs": {"dir": str(tmp_path / "out")}, "selection": {"score": "variance", "mode": "k", "param": 2},
           "transform": {"steps": ["select"], "chunk_rows": 100}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    first = CliRunner().invoke(main, ["run", str(path)])
    assert first.exit_code == 0, first.output
    new = regenerate(store, seed=9)
    again = CliRunner().invoke(main, ["run", str(path)])
    assert again.exit_code == 2, again.output
    assert "x content" in again.output and "Traceback" not in again.output
    job["transform"]["overwrite"] = True
    path.write_text(yaml.safe_dump({"daskbatch": {"job": job}}))
    fresh = CliRunner().invoke(main, ["run", str(path)])
    assert fresh.exit_code == 0, fresh.output
    got = db.open_dataset(tmp_path / "out" / "transformed.zarr").x.compute()
    np.testing.assert_array_equal(got, new[:, 1:])
