"""Finding 8 (issue 17): a store whose metadata claims 10^8 features is refused before any name or state is built."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import dask
import pytest
import zarr

import daskbatch as db


@pytest.fixture()
def claims_1e8_features(tmp_path) -> str:
    path = str(tmp_path / "wide.zarr")
    g = zarr.open_group(path, mode="w")
    g.create_array("X", shape=(10, 10**8), chunks=(10, 10**6), dtype="float32")  # 100 chunks, none written
    return path


def test_describe_and_open_refuse_in_bounded_memory(claims_1e8_features: str) -> None:
    tracemalloc.start()
    for call in (lambda: db.open_dataset(claims_1e8_features), lambda: db.describe(claims_1e8_features, run=db.RunOptions(missing="fill"))):
        with pytest.raises(db.DataError, match=r"claims 100,000,000 features > daskbatch.max-features 2,000,000"):
            call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * 2**20  # not 10^8 names (about 6 GB)


def test_inspect_is_one_line_exit_2(claims_1e8_features: str) -> None:
    done = subprocess.run([sys.executable, "-m", "daskbatch", "inspect", claims_1e8_features],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "daskbatch.max-features" in lines[0], done.stderr


def test_the_limit_is_a_setting(tmp_path) -> None:
    path = str(tmp_path / "w.zarr")
    zarr.open_group(path, mode="w").create_array("X", data=__import__("numpy").ones((4, 30)))
    with dask.config.set({"daskbatch.max-features": 20}), pytest.raises(db.DataError, match="claims 30 features"):
        db.open_dataset(path)
    assert db.open_dataset(path).x.shape == (4, 30)
