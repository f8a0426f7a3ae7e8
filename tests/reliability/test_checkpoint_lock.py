"""One run at a time on a checkpoint directory or an ingest output (real processes, real lock files).

Finding: two runs on one checkpoint directory started 2-5 s apart failed 4 of 5
times with ``No such file or directory: 'ck/pass-hist/L0-000000.ckpt'``; two
ingests of the same sources into one output duplicated done-log entries and one
exited with a misleading "cannot create" error.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.checkpoint import read_runs
from daskbatch.io.dataset import open_dataset
from daskbatch.io.rowstore import DONE_FILE, MANIFEST_FILE
from daskbatch.io.synth import synth

REPO = Path(__file__).resolve().parents[2]
ROWS_PER_BLOCK, N_BLOCKS = 200, 16
RUN = db.RunOptions(split_every=2, plan=None)
describe = functools.partial(db.describe, stats="moments", run=RUN)
# This source tree first; the rest of the caller's path is kept.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
LOCK_ERROR = re.compile(r"^error: .* is in use by another run: lock file (\S+) is held by pid (\d+) on host (\S+) since ")

# A describe whose blocks from GATED_FROM on wait for a gate file: it holds the lock as long as the test wants.
DESCRIBE_SCRIPT = textwrap.dedent(
    """
    import dataclasses, os, sys, time
    import dask
    import daskbatch as db
    from daskbatch.io.dataset import open_dataset

    store, ckpt, gate, gated_from = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def wait_at_gate(block, block_info=None):
        if block_info and block_info[0]["chunk-location"][0] >= gated_from:
            while not os.path.exists(gate):
                time.sleep(0.02)
        return block

    ds = open_dataset(store, chunks=int(sys.argv[5]))
    ds = dataclasses.replace(ds, x=ds.x.map_blocks(wait_at_gate, dtype=ds.x.dtype))
    with dask.config.set(num_workers=2):
        s = db.describe(ds, stats="moments", run=db.RunOptions(split_every=2, plan=None, checkpoint=ckpt))
    print("finished", repr(float(s.arrays.mean[0])))
    """
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lock") / "data.zarr"
    synth(N_BLOCKS * ROWS_PER_BLOCK, 4, classes=3, chunk_rows=ROWS_PER_BLOCK, seed=7, path=path)
    return path


def start_gated(tmp_path: Path, store: Path, gated_from: int) -> tuple[subprocess.Popen, Path, Path]:
    script, gate, ck = tmp_path / "run.py", tmp_path / "gate", tmp_path / "ck"
    script.write_text(DESCRIBE_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store), str(ck), str(gate), str(gated_from), str(ROWS_PER_BLOCK)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return proc, gate, ck


def covered_blocks(folder: Path) -> int:
    """Blocks merged into the node files of a pass folder (split_every 2: node L<l>-<i> holds 2**(l+1)).

    A union of block ranges, not a sum: while a parent is written its children are
    still on disk for a moment, and counting both would see blocks twice.
    """
    blocks: set[int] = set()
    for p in folder.glob("L*.ckpt"):
        if m := re.fullmatch(r"L(\d+)-(\d+)\.ckpt", p.name):
            span = 2 ** (int(m.group(1)) + 1)
            blocks.update(range(int(m.group(2)) * span, (int(m.group(2)) + 1) * span))
    return len(blocks)


def wait_for(condition: object, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.slow  # two subprocesses (~3 s of imports each)
def test_second_run_on_a_held_checkpoint_fails_at_once_naming_the_holder(tmp_path: Path, store: Path) -> None:
    first, gate, ck = start_gated(tmp_path, store, gated_from=0)
    lock = ck / "daskbatch.lock"
    try:
        # The manifest is written under the lock (and also exists where there is no lock).
        wait_for((ck / "daskbatch-checkpoint.json").exists, first, "the first run's manifest")
        second = subprocess.run(
            [sys.executable, "-m", "daskbatch", "describe", str(store), "--checkpoint", str(ck), "--stats", "moments",
             "--cluster", "threads", "--no-progress"],
            env=ENV, capture_output=True, text=True, timeout=120,
        )
        assert first.poll() is None  # still holding the lock, untouched by the second run
    finally:
        gate.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and "finished" in out, err
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    match = LOCK_ERROR.match(lines[-1])
    assert match is not None, second.stderr
    assert match.group(1).rstrip(";") == str(lock) and int(match.group(2)) == first.pid
    assert match.group(3) == socket.gethostname()
    assert not lock.exists()  # released at the end of the first run
    runs = read_runs(ck, "moments")
    assert [r["pid"] for r in runs] == [first.pid] and runs[0]["computed_blocks"] == N_BLOCKS
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    assert float(out.split()[-1]) == float(describe(ds).arrays.mean[0])


@pytest.mark.slow
def test_lock_of_a_killed_run_is_taken_over_and_its_blocks_reused(
    tmp_path: Path, store: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    first, gate, ck = start_gated(tmp_path, store, gated_from=N_BLOCKS // 2)
    folder = ck / "pass-moments"
    wait_for(lambda: covered_blocks(folder) >= N_BLOCKS // 2, first, "half the blocks")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert (ck / "daskbatch.lock").exists()  # left behind by the kill
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    with caplog.at_level(logging.WARNING, logger="daskbatch.runtime.runlock"):
        resumed = describe(ds, run=dataclasses.replace(RUN, checkpoint=ck))
    assert any(f"pid {first.pid} on {socket.gethostname()} is not running" in r.getMessage() for r in caplog.records)
    run = read_runs(ck, "moments")[-1]
    assert run["reused_blocks"] == N_BLOCKS // 2 and run["computed_blocks"] == N_BLOCKS // 2
    assert np.asarray(resumed.mean).tobytes() == np.asarray(describe(ds).mean).tobytes()
    assert not (ck / "daskbatch.lock").exists()


# --------------------------------------------------------------------------- lock files left by others

def write_lock(ck: Path, *, pid: int, host: str, since: float, age: float = 0.0) -> Path:
    ck.mkdir(exist_ok=True)
    lock = ck / "daskbatch.lock"
    lock.write_text(json.dumps({"pid": pid, "host": host, "since": since, "token": "x"}))
    os.utime(lock, (time.time() - age, time.time() - age))
    return lock


def test_live_holder_on_this_host_is_refused(tmp_path: Path, store: Path) -> None:
    # The parent process (pytest's launcher or shell) is alive and older than the lock.
    write_lock(tmp_path, pid=os.getppid(), host=socket.gethostname(), since=time.time())
    with pytest.raises(OSError, match=rf"lock file {re.escape(str(tmp_path))}/daskbatch\.lock is held by "
                       rf"pid {os.getppid()} on host {re.escape(socket.gethostname())} since"):
        describe(open_dataset(store, chunks=ROWS_PER_BLOCK), run=dataclasses.replace(RUN, checkpoint=tmp_path))


def test_reused_pid_on_this_host_is_stale(tmp_path: Path, store: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Our own pid, but the lock predates this process: the pid was reused since.
    write_lock(tmp_path, pid=os.getpid(), host=socket.gethostname(), since=time.time() - 10 * 86400)
    with caplog.at_level(logging.WARNING, logger="daskbatch.runtime.runlock"):
        describe(open_dataset(store, chunks=ROWS_PER_BLOCK), run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert any("was reused" in r.getMessage() for r in caplog.records)


def test_other_host_fresh_heartbeat_is_refused_old_one_is_stale(
    tmp_path: Path, store: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    write_lock(tmp_path, pid=1, host="elsewhere.invalid", since=time.time() - 3600, age=5)
    with pytest.raises(OSError, match="held by pid 1 on host elsewhere.invalid"):
        describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    write_lock(tmp_path, pid=1, host="elsewhere.invalid", since=time.time() - 3600, age=3600)
    with caplog.at_level(logging.WARNING, logger="daskbatch.runtime.runlock"):
        describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))
    assert any("no heartbeat for 3600 s" in r.getMessage() for r in caplog.records)


def test_heartbeat_keeps_a_long_run_fresh(tmp_path: Path) -> None:
    from daskbatch.runtime.runlock import RunLock

    lock = tmp_path / "held.lock"
    with RunLock(lock, "test", stale_after=0.4):
        os.utime(lock, (0, 0))
        time.sleep(0.5)  # about five heartbeats
        assert time.time() - lock.stat().st_mtime < 0.4
    assert not lock.exists()


# --------------------------------------------------------------------------- ingest

INGEST_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from daskbatch.io import ingest as ingest_module
    from daskbatch.io.ingest import ingest

    src, out, gate = sys.argv[1], sys.argv[2], sys.argv[3]
    original = ingest_module.write_chunk

    def gated(scan, writer, c):
        while not os.path.exists(gate):
            time.sleep(0.02)
        return original(scan, writer, c)

    ingest_module.write_chunk = gated
    report = ingest(src, out, label_key="y", chunk_rows=64, workers=2)
    print("done", report.chunks_written)
    """
)


@pytest.mark.slow
def test_second_ingest_into_one_output_fails_at_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    src.mkdir()
    for i, n in enumerate([100, 130, 90]):
        np.savez(src / f"b{i}.npz", X=rng.standard_normal((n, 3)).astype("f4"), y=rng.integers(0, 3, n))
    out, gate, script = tmp_path / "out.zarr", tmp_path / "gate", tmp_path / "ingest.py"
    script.write_text(INGEST_SCRIPT)
    first = subprocess.Popen([sys.executable, str(script), str(src / "b*.npz"), str(out), str(gate)],
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / ".out.zarr.daskbatch-lock"
    try:
        wait_for(lambda: (out / MANIFEST_FILE).exists(), first, "the first ingest's manifest")
        second = subprocess.run(
            [sys.executable, "-m", "daskbatch", "ingest", str(src / "b*.npz"), str(out), "--label-key", "y",
             "--chunk-rows", "64", "--workers", "2"],
            env=ENV, capture_output=True, text=True, timeout=120,
        )
    finally:
        gate.touch()
    stdout, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert stdout.split() == ["done", "5"]
    assert second.returncode != 0
    match = LOCK_ERROR.match(second.stderr.strip().splitlines()[-1])
    assert match is not None, second.stderr
    assert match.group(1).rstrip(";") == str(lock) and int(match.group(2)) == first.pid
    done = (out / DONE_FILE).read_text().split()
    assert sorted(done) == ["0", "1", "2", "3", "4"]  # each chunk once
    assert not lock.exists()
    assert open_dataset(out).complete


def test_describe_holds_the_lock_between_its_passes(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between pass 1 and pass 2 no other run may take the directory (it would fail this run halfway)."""
    import daskbatch.engine.checkpoint as checkpoint

    original, holders = checkpoint.run_checkpointed, []

    def spy(*args: object, **kwargs: object) -> object:
        result = original(*args, **kwargs)  # type: ignore[arg-type]
        lock = tmp_path / "daskbatch.lock"
        holders.append(json.loads(lock.read_text())["pid"] if lock.exists() else None)
        return result

    monkeypatch.setattr(checkpoint, "run_checkpointed", spy)
    db.describe(open_dataset(store, chunks=ROWS_PER_BLOCK), stats=("moments", "hist"), run=db.RunOptions(split_every=2, plan=None, checkpoint=tmp_path))
    assert holders == [os.getpid(), os.getpid()]  # still held after each pass returned
    assert not (tmp_path / "daskbatch.lock").exists()


def test_another_thread_of_this_process_is_refused(tmp_path: Path, store: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from daskbatch.engine.checkpoint import checkpoint_lock

    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    with checkpoint_lock(tmp_path):
        describe(ds, run=dataclasses.replace(RUN, checkpoint=tmp_path))  # the holding thread may run
        with ThreadPoolExecutor(1) as pool, pytest.raises(OSError, match=f"held by pid {os.getpid()}"):
            pool.submit(describe, ds, run=dataclasses.replace(RUN, checkpoint=tmp_path)).result()
    assert not (tmp_path / "daskbatch.lock").exists()
