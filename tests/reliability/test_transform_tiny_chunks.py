"""Issue "Every door locked" item 12: tiny output chunks no longer hang ``transform``, and SIGTERM is heard.

Before, one dask task per output chunk made a graph whose building grew
quadratically (2,500 / 5,000 / 10,000 chunks of 5 rows: 9 / 27 / 96 s, then
minutes stuck in dask's ``cull`` writing nothing), and a SIGTERM in that time
was held until the graph was built.  Now the planner sizes the tasks: each one
writes a region of many output chunks, which keep the size the user asked for.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr
from dask.callbacks import Callback

import daskbatch as db
from daskbatch.io.rowstore import DONE_FILE

ROOT = pathlib.Path(__file__).parents[2]
ROWS = 50_000


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A store of 50,000 rows x 4 features with a label, in 10,000-row chunks."""
    path = tmp_path_factory.mktemp("tiny") / "in.zarr"
    x = np.random.default_rng(12).normal(size=(ROWS, 4))
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x, chunks=(10_000, 4))
    root.create_array("y", data=(x[:, 0] > 0).astype(np.int8), chunks=(10_000,))
    return path


@pytest.fixture(scope="module")
def reference(source: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The same transform with large chunks."""
    out = tmp_path_factory.mktemp("ref") / "ref.zarr"
    db.transform(db.open_dataset(source, label="y"), [db.steps.clip(-1.0, 1.0)], out, chunk_rows=25_000)
    return out


def _cli(source: pathlib.Path, out: pathlib.Path, chunk_rows: int) -> list[str]:
    return [sys.executable, "-m", "daskbatch", "transform", str(source), "--label", "y", "--clip", "-1:1",
            "--out", str(out), "--chunk-rows", str(chunk_rows), "--no-progress"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _assert_same_bits(out: pathlib.Path, reference: pathlib.Path, chunk_rows: int) -> None:
    got, want = zarr.open_group(str(out), mode="r"), zarr.open_group(str(reference), mode="r")
    for name in ("X", "y"):
        assert got[name].chunks[0] == chunk_rows, (name, got[name].chunks)  # the layout the user asked for
        a, b = np.asarray(got[name][:]), np.asarray(want[name][:])
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes(), name
    assert got.attrs["complete"] is True


def test_10000_chunks_of_5_rows_take_a_few_dask_tasks(source: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Before, one task per output chunk (10,000 here) made the graph's building quadratic: 96 s, then minutes in cull."""
    started: list[object] = []
    with Callback(pretask=lambda key, dsk, state: started.append(key)):
        report = db.transform(db.open_dataset(source, label="y"), [db.steps.clip(-1.0, 1.0)], tmp_path / "t.zarr",
                              chunk_rows=5)
    assert len(report.written) == 10_000
    # The reads of 5 input chunks, their rechunk, and one task a region of many output chunks: tens, not 10,000.
    assert 1 <= sum("db-transform" in str(key) for key in started) < 100, started
    assert len(started) < 200, len(started)


def test_sigterm_while_the_graph_is_built_exits_75_and_resumes(
    source: pathlib.Path, reference: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """SIGTERM while 10,000 chunks of 5 rows are planned: exit 75 at once; the same command writes them all."""
    out = tmp_path / "tiny.zarr"
    proc = subprocess.Popen(_cli(source, out, 5), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr is not None
        before = []
        for line in proc.stderr:  # the log says when the run starts: the graph is built right after
            before.append(line)
            if "transform: started" in line:
                break
        else:
            pytest.fail("".join(before))
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        after = proc.stderr.read()
        code = proc.wait(timeout=60)  # before: stuck building 10,000 tasks for many minutes
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 75, after[-3000:]
    lines = after.strip().splitlines()
    assert lines[-1].startswith("interrupted: "), after[-3000:]
    assert "Traceback" not in after and len(lines) <= 3, after[-3000:]
    assert seconds < 15, seconds
    assert not zarr.open_group(str(out), mode="r").attrs.get("complete")

    again = subprocess.run(_cli(source, out, 5), env=_env(), capture_output=True, text=True, timeout=280)
    assert again.returncode == 0, again.stderr[-3000:]
    # The signal came while the graph was built, before any write: this run writes all 10,000 chunks.
    assert "10000 of 10000 row blocks" in again.stdout, again.stdout
    done = (out / DONE_FILE).read_text().split()
    assert sorted(map(int, done)) == list(range(ROWS // 5))  # every chunk logged once, after it was written
    _assert_same_bits(out, reference, 5)
    assert json.loads((out / "X" / "zarr.json").read_text())["chunk_grid"]["configuration"]["chunk_shape"] == [5, 4]


@pytest.mark.parametrize(
    ("unit", "read", "memory", "expected"),
    [
        (5, None, 8 << 30, 5 * 1024),  # tiny chunks: many per task, at most CHUNKS_PER_TASK
        (5, 100, 8 << 30, 5 * 1020),  # and whole input reads (a multiple of 100 rows) when they fit
        (250_000, None, 8 << 30, 250_000),  # huge chunks: one per task
        (1_000, None, 1 << 19, 1_000),  # a budget below one chunk: still one chunk, the user's layout
    ],
)
def test_task_rows_are_whole_output_chunks(unit: int, read: int | None, memory: int, expected: int) -> None:
    from daskbatch.planning.plan import Resources
    from daskbatch.planning.search import plan_task_rows
    from daskbatch.transforms import CHUNKS_PER_TASK

    rows = plan_task_rows(
        1_000_000, unit, 32, 200, Resources(memory, threads_per_worker=2), read_rows=read,
        max_units=CHUNKS_PER_TASK, memory_fraction=0.5, reserved_bytes=0, target_chunk_bytes=64 << 20,
    )
    assert rows == expected
