"""Work is bounded by what the metadata may claim: too many chunks are refused at once.

Before: a store whose metadata claimed 10^15 rows (and held no data) made
describe, plan and inspect grow until the machine ran out of memory, and 1 x 1
chunks over a million rows were accepted (describe passed 9 GB).  Now every
entry point checks the chunk count against ``daskbatch.max-chunks`` from the
metadata alone, before listing, enumerating or building a graph.

The bombs run in a child process with its address space capped and a timeout,
so that a regression fails the test instead of the machine. "At once" is
measured in memory, not seconds: each refusal may allocate at most
``PEAK_BYTES`` (traced by tracemalloc), where listing a million chunk keys or
building their graph takes hundreds of megabytes.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import dask
import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.errors import DataError

#: Bytes a refusal may allocate (traced inside the child, after imports): a few MB of metadata and messages.
PEAK_BYTES = 32 << 20
CHILD = """
import json, resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from click.testing import CliRunner
import dask.array, distributed, zarr  # what daskbatch loads lazily: imports are not the refusal's cost
import daskbatch as db
from daskbatch.cli import main

store = sys.argv[1]
out = {}
CliRunner().invoke(main, ["describe", "--help"])  # the CLI's own imports, once
tracemalloc.start()
def timed(name, fn):
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        fn()
        out[name] = [tracemalloc.get_traced_memory()[1] - base, None, None]
    except BaseException as exc:
        out[name] = [tracemalloc.get_traced_memory()[1] - base, type(exc).__name__, str(exc)]

def cli(*argv):
    def run():
        r = CliRunner().invoke(main, list(argv))
        if r.exit_code:
            raise SystemExit(f"exit {r.exit_code}: {r.output.strip()}")
    return run

timed("open_dataset", lambda: db.open_dataset(store))
timed("describe", lambda: db.describe(store, run=db.RunOptions(plan=None)))
timed("verify_store", lambda: __import__("daskbatch.io.verify").io.verify.verify_store(store))
timed("cli inspect", cli("inspect", store))
timed("cli plan", cli("plan", store))
timed("cli describe", cli("describe", store, "--cluster", "threads", "--no-progress"))
timed("cli verify", cli("verify", store))
print(json.dumps(out))
"""


def _bomb(tmp_path: pathlib.Path, shape: tuple[int, ...], chunks: tuple[int, ...]) -> str:
    """A v3 group whose X claims ``shape``; only metadata is written."""
    path = tmp_path / "bomb.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.create_array("X", shape=shape, chunks=chunks, dtype="f4")
    return str(path)


def _run_child(store: str) -> dict[str, list]:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), store],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("shape", "chunks", "count"),
    [((10**15, 8), (65536, 8), "15,258,789,063"), ((1_000_000, 1), (1, 1), "1,000,000")],
    ids=["1e15-rows", "1x1-chunks"],
)
def test_every_entry_point_refuses_fast(tmp_path: pathlib.Path, shape, chunks, count) -> None:
    results = _run_child(_bomb(tmp_path, shape, chunks))
    for name, (peak, error, message) in results.items():
        assert error is not None, f"{name} accepted the store"
        assert f"{count} chunks" in message and "> daskbatch.max-chunks 200,000" in message, (name, message)
        assert "rechunk the store (or raise daskbatch.max-chunks)" in message, (name, message)
        assert "\n" not in message.removeprefix("exit 2: error: "), (name, message)
        assert peak < PEAK_BYTES, (name, peak)


def test_missing_chunks_come_from_the_listing(tmp_path: pathlib.Path) -> None:
    """100 chunks of 10^7 rows claimed, none stored: counted from the listing, without reading.

    Zarr's writer leaves out chunks of fill values, so by default they are the
    fill value (counted in the provenance); ``missing="raise"`` names them.
    """
    store = _bomb(tmp_path, (10**9, 8), (10**7, 8))
    prov = db.open_dataset(store).provenance()
    assert prov["absent_chunks"] == prov["absent_fill_chunks"] == 100 and prov["absent_lost_chunks"] == 0
    with pytest.raises(DataError) as err:
        db.open_dataset(store, missing="raise")
    msg = str(err.value)
    assert "100 chunk(s) of array 'X'" in msg and "X/c/0/0" in msg and "(100 in all)" in msg
    assert "(1,000,000,000 rows)" in msg and len(msg) < 600


def test_limit_is_configurable(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.zarr"
    db.synth(1000, 2, chunk_rows=20, path=path)  # 50 chunks
    with dask.config.set({"daskbatch.max-chunks": 10}), pytest.raises(DataError, match=r"50 chunks .*> daskbatch\.max-chunks 10;"):
        db.open_dataset(path)
    with dask.config.set({"daskbatch.max-chunks": 60}):
        np.testing.assert_equal(db.open_dataset(path).shape, (1000, 2))
        # Dask blocks count too: one row per block is 1,000 tasks.
        with pytest.raises(DataError, match=r"1,000 dask blocks > daskbatch\.max-chunks 60"):
            db.open_dataset(path, chunks=1)
