"""Finding 8: work bounded by what the metadata or the arguments claim, for the verbs that write.

Before, ``transform --chunk-rows 1`` over a million rows grew to 4 GB in 150 s
with nothing written (``daskbatch.max-chunks`` was not applied to outputs), and
``synth --rows 1000000000000`` reached 5 GB, then a traceback.  Now both are
refused from the numbers alone, in one line, before anything is allocated.

The runs happen in a child process with its address space capped and a
timeout, so that a regression fails the test instead of the machine.
"""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.errors import DataError

ROOT = pathlib.Path(__file__).parents[2]


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "daskbatch", *argv], env=env, capture_output=True, text=True,
                          timeout=60, preexec_fn=capped)


@pytest.fixture(scope="module")
def million(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("m") / "million.zarr"
    x = np.arange(2_000_000, dtype=np.float32).reshape(1_000_000, 2)
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(100_000, 2))
    return path


def test_transform_and_map_batches_apply_max_chunks(million: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "o.zarr"
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"1,000,000 row blocks of 1 rows > daskbatch.max-chunks 200,000; "
                                        r"use blocks of at least 5 rows"):
        db.transform(str(million), [db.steps.clip(0, 1)], out, chunk_rows=1)
    with pytest.raises(DataError, match=r"1,000,000 row blocks"):
        db.map_batches(np.abs, str(million), out=out, batch_rows=1)
    assert time.perf_counter() - t0 < 5 and not out.exists()
    # At the limit it is allowed (and the same rows come out).
    report = db.map_batches(np.abs, str(million), out=out, batch_rows=5_000)
    assert report.blocks == 200


def test_cli_transform_chunk_rows_one(million: pathlib.Path, tmp_path: pathlib.Path) -> None:
    done = cli("transform", str(million), "--clip", "0:1", "--chunk-rows", "1", "--out", str(tmp_path / "o.zarr"))
    assert done.returncode == 2, done.stderr
    assert "daskbatch.max-chunks" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--rows", "1000000000000", "--features", "4"], "15,258,790 chunks > daskbatch.max-chunks"),
    (["--rows", "100000", "--features", "10000", "--chunk-rows", "100000"], "use chunk_rows <= 53,687"),
    (["--rows", "10", "--features", "100000000"], "use at most 23,170 features"),
])
def test_synth_sizes_checked_before_allocating(tmp_path: pathlib.Path, argv: list[str], message: str) -> None:
    target = tmp_path / "s.zarr"
    t0 = time.perf_counter()
    done = cli("synth", str(target), *argv)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not target.exists() and time.perf_counter() - t0 < 30
    with pytest.raises(DataError, match=message.split(" (")[0]):
        db.synth(target, **{a.strip("-").replace("-", "_"): int(v) for a, v in zip(argv[::2], argv[1::2],
                                                                                    strict=True)})
