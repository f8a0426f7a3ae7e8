"""Checkpoint / resume of describe: bitwise identity, real kills, damage, fingerprint mismatch."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.checkpoint import MANIFEST, read_runs, sigterm_as_interrupt
from daskbatch.errors import CheckpointMismatchError, Interrupted
from daskbatch.io.dataset import open_dataset
from daskbatch.io.synth import synth

REPO = Path(__file__).resolve().parents[1]
# Keep the input's chunks (no planning): the tests are about given block grids.
RUN = db.RunOptions(plan=None)
describe = functools.partial(db.describe, run=RUN)
ROWS_PER_BLOCK = 500
N_BLOCKS = 24


def assert_bitwise_equal(a: db.Summary, b: db.Summary) -> None:
    """Every array field of two summaries holds exactly the same bits."""
    checked = 0
    assert a.variables.keys() == b.variables.keys()
    for name in a.variables:
        va, vb = getattr(a.arrays, name), getattr(b.arrays, name)
        if isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
            assert va is not None and vb is not None, name
            assert va.dtype == vb.dtype and va.shape == vb.shape, name
            if va.dtype.kind in "biuf":  # bits, so that NaN payloads and -0.0 count too
                va, vb = np.ascontiguousarray(va).view(np.uint8), np.ascontiguousarray(vb).view(np.uint8)
            assert np.array_equal(va, vb), f"{name} differs"
            checked += 1
    assert checked >= 10


def covered_blocks(folder: Path, split_every: int, n_blocks: int) -> set[int]:
    """Blocks merged into the node files of one pass folder (from their names)."""
    blocks: set[int] = set()
    for p in folder.glob("L*.ckpt"):
        level, index = map(int, re.fullmatch(r"L(\d+)-(\d+)\.ckpt", p.name).groups())  # type: ignore[union-attr]
        span = split_every ** (level + 1)
        blocks.update(range(index * span, min((index + 1) * span, n_blocks)))
    return blocks


class CountingBlocks:
    """An identity map_blocks function that counts the (non-empty) blocks it sees."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.lock = 0, fail_at, threading.Lock()

    def __call__(self, block: np.ndarray, block_info: dict | None = None) -> np.ndarray:
        if block.shape[0]:
            if self.fail_at is not None and block_info and block_info[0]["chunk-location"][0] == self.fail_at:
                raise RuntimeError("injected failure")
            with self.lock:
                self.n += 1
        return block


def counted(ds: object, counter: CountingBlocks) -> object:
    x = ds.x  # type: ignore[attr-defined]
    return dataclasses.replace(ds, x=x.map_blocks(counter, dtype=x.dtype, meta=np.empty((0, 0), x.dtype)))  # type: ignore[type-var]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "data.zarr"
    synth(N_BLOCKS * ROWS_PER_BLOCK, 6, classes=3, correlated=2, chunk_rows=ROWS_PER_BLOCK, seed=3, path=path)
    return path


@pytest.mark.parametrize(("rows", "chunk", "split_every"), [(1000, 37, 3), (90, 30, 4), (50, 50, 2), (640, 40, 2)])
# 2 % NaN in each of 5 features can leave out more than 10 % of the rows from the covariance: said
# (CompleteRowsWarning, tested in test_pairwise_cov.py), not what this test is about.
@pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning")
def test_checkpointed_and_reloaded_are_bitwise_plain(tmp_path: Path, rows: int, chunk: int, split_every: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.normal(5.0, 3.0, (rows, 5))
    x[rng.random(x.shape) < 0.02] = np.nan
    y = rng.integers(0, 3, rows)
    dx, dy = da.from_array(x, chunks=(chunk, 5)), da.from_array(y, chunks=chunk)
    plain = describe(dx, dy, run=db.RunOptions(plan=None, split_every=split_every))
    first = describe(dx, dy, run=db.RunOptions(plan=None, split_every=split_every, checkpoint=tmp_path))
    again = describe(dx, dy, run=db.RunOptions(plan=None, split_every=split_every, checkpoint=tmp_path))
    assert_bitwise_equal(plain, first)
    assert_bitwise_equal(plain, again)
    runs = read_runs(tmp_path, "moments-cov-class_moments-sketch")
    assert [r["computed_blocks"] for r in runs] == [dx.numblocks[0], 0]
    assert [r["computed_blocks"] for r in read_runs(tmp_path, "hist-qhist")] == [dx.numblocks[0], 0]
    # Completed passes are merged up to a single root file each.
    assert sorted(p.name for p in (tmp_path / "pass-hist-qhist").glob("*.ckpt")) == [
        sorted(p.name for p in (tmp_path / "pass-hist-qhist").glob("L*.ckpt"))[-1]
    ]


def test_failure_midway_resumes_only_missing_blocks(tmp_path: Path, store: Path) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    plain = describe(ds, run=db.RunOptions(plan=None, split_every=2))
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        describe(counted(ds, CountingBlocks(fail_at=17)), run=db.RunOptions(split_every=2, checkpoint=tmp_path))
    done = covered_blocks(tmp_path / "pass-moments-cov-class_moments-sketch", 2, N_BLOCKS)
    assert 0 < len(done) < N_BLOCKS and 17 not in done
    counter = CountingBlocks()
    resumed = describe(counted(ds, counter), run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path))
    assert counter.n == (N_BLOCKS - len(done)) + N_BLOCKS  # pass 1 missing blocks + the whole pass 2
    assert read_runs(tmp_path, "moments-cov-class_moments-sketch")[-1]["computed_blocks"] == N_BLOCKS - len(done)
    assert_bitwise_equal(plain, resumed)


SCRIPT = textwrap.dedent(
    """
    import dataclasses, sys, time
    import dask
    import daskbatch as db
    from daskbatch.engine.checkpoint import sigterm_as_interrupt
    from daskbatch.io.dataset import open_dataset
    from daskbatch.errors import Interrupted

    path, ckpt, delay, rows = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    ds = open_dataset(path, chunks=rows)

    def slow(block):
        time.sleep(delay)
        return block

    ds = dataclasses.replace(ds, x=ds.x.map_blocks(slow, dtype=ds.x.dtype))
    with dask.config.set(num_workers=2), sigterm_as_interrupt():
        try:
            db.describe(ds, stats=("moments", "cov"), run=db.RunOptions(split_every=2, plan=None, checkpoint=ckpt))
        except Interrupted as exc:
            print(exc, file=sys.stderr)
            sys.exit(75)
    print("finished")
    """
)


#: Seconds each block sleeps in the subprocess: long enough that a loaded machine still
#: sees the first checkpoints and signals the run well before it could finish.
BLOCK_DELAY_S = 0.25


def start_and_stop(tmp_path: Path, store: Path, sig: int, *, min_blocks: int = 4) -> tuple[subprocess.Popen, set[int]]:
    """Run the slow describe in a subprocess; send ``sig`` once ``min_blocks`` are checkpointed."""
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store), str(ckpt), str(BLOCK_DELAY_S), str(ROWS_PER_BLOCK)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    folder = ckpt / "pass-moments-cov"
    deadline = time.monotonic() + 60
    while len(covered_blocks(folder, 2, N_BLOCKS)) < min_blocks:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    return proc, covered_blocks(folder, 2, N_BLOCKS)


@pytest.mark.slow  # a subprocess (~3 s of imports) per case
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_subprocess_resumes_only_missing_blocks(tmp_path: Path, store: Path, sig: int) -> None:
    proc, done = start_and_stop(tmp_path, store, sig)
    out, err = proc.communicate()
    assert "finished" not in out
    if sig == signal.SIGTERM:
        assert proc.returncode == 75, err
        assert "run the same command again to resume" in err
    else:
        assert proc.returncode == -signal.SIGKILL
    assert 4 <= len(done) < N_BLOCKS
    assert not list((tmp_path / "ckpt" / "pass-moments-cov").glob(".tmp-*")) or sig == signal.SIGKILL

    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    counter = CountingBlocks()
    resumed = describe(counted(ds, counter), stats=("moments", "cov"), run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path / "ckpt"))
    assert counter.n == N_BLOCKS - len(done)
    run = read_runs(tmp_path / "ckpt", "moments-cov")[-1]
    assert (run["reused_blocks"], run["computed_blocks"]) == (len(done), N_BLOCKS - len(done))
    assert_bitwise_equal(describe(ds, stats=("moments", "cov"), run=db.RunOptions(plan=None, split_every=2)), resumed)


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_damaged_file_is_recomputed_never_merged(tmp_path: Path, store: Path, damage: str) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    plain = describe(ds, stats="moments", run=db.RunOptions(plan=None, split_every=2))
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError):
        describe(counted(ds, CountingBlocks(fail_at=N_BLOCKS - 1)), stats="moments", run=db.RunOptions(split_every=2, checkpoint=tmp_path))
    folder = tmp_path / "pass-moments"
    files = sorted(folder.glob("L*.ckpt"))
    victim = files[0]
    raw = bytearray(victim.read_bytes())
    if damage == "flip":
        raw[-100] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw[:1] = b"#"
    victim.write_bytes(bytes(raw))
    done = covered_blocks(folder, 2, N_BLOCKS)
    lost = range(*_blocks_of(victim.name, 2, N_BLOCKS))  # nodes never overlap
    counter = CountingBlocks()
    resumed = describe(counted(ds, counter), stats="moments", run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path))
    assert counter.n == N_BLOCKS - len(done) + len(lost)
    assert read_runs(tmp_path, "moments")[-1]["damaged"] == [victim.name]
    assert_bitwise_equal(plain, resumed)


def _blocks_of(name: str, split_every: int, n_blocks: int) -> tuple[int, int]:
    level, index = map(int, re.fullmatch(r"L(\d+)-(\d+)\.ckpt", name).groups())  # type: ignore[union-attr]
    span = split_every ** (level + 1)
    return index * span, min((index + 1) * span, n_blocks)


def test_mismatch_names_the_item_and_force_starts_fresh(tmp_path: Path, store: Path) -> None:
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    describe(ds, stats=("moments", "hist"), bins=16, run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path))
    with pytest.raises(CheckpointMismatchError, match=r"split_every \(2 in the checkpoint, 3 now\).*--force"):
        describe(ds, stats=("moments", "hist"), bins=16, run=db.RunOptions(plan=None, split_every=3, checkpoint=tmp_path))
    with pytest.raises(CheckpointMismatchError, match=r"hist\.bins \(16 in the checkpoint, 8 now\)"):
        describe(ds, stats=("moments", "hist"), bins=8, run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path))
    other = open_dataset(store, chunks=2 * ROWS_PER_BLOCK)
    # plan=None asks for the input's own blocks: another grid than the checkpoint's is refused, named
    with pytest.raises(CheckpointMismatchError, match="chunk grid"):
        describe(other, stats=("moments", "hist"), bins=16, run=db.RunOptions(plan=None, split_every=2, checkpoint=tmp_path))
    # the automatic plan resumes on the checkpoint's layout, and says so in the provenance
    resumed = db.describe(other, stats=("moments", "hist"), bins=16, run=db.RunOptions(split_every=2, plan="auto", checkpoint=tmp_path))
    assert resumed.provenance["layout"] == "checkpoint" and resumed.provenance["chunk_rows"] == ROWS_PER_BLOCK
    forced = describe(other, stats=("moments", "hist"), bins=8, run=db.RunOptions(plan=None, split_every=3, force=True, checkpoint=tmp_path))
    assert_bitwise_equal(describe(other, stats=("moments", "hist"), bins=8, run=db.RunOptions(plan=None, split_every=3)), forced)
    assert "3" == __import__("json").loads((tmp_path / MANIFEST).read_text())["input"]["split_every"]


def test_sigterm_waits_for_a_write_in_progress() -> None:
    from daskbatch.runtime.runlock import no_interrupt as _no_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt():
        with pytest.raises(Interrupted, match="SIGTERM"):
            with _no_interrupt():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler has run, and held the exception back
                reached = True
        assert reached
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_is_not_swallowed_by_a_library_fallback() -> None:
    """The signal lands wherever the main thread is, e.g. in a quiet ``except Exception``."""
    with sigterm_as_interrupt(), pytest.raises(Interrupted, match="SIGTERM"):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler raises here
        except Exception:  # as dask's tokenize does around pickling
            pass


def test_with_a_distributed_client_units_are_checkpointed_as_they_finish(tmp_path: Path, store: Path) -> None:
    distributed = pytest.importorskip("distributed")
    ds = open_dataset(store, chunks=ROWS_PER_BLOCK)
    plain = describe(ds, run=db.RunOptions(plan=None, split_every=3))
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="injected"):
        describe(counted(ds, CountingBlocks(fail_at=20)), run=db.RunOptions(split_every=3, checkpoint=tmp_path))
    done = covered_blocks(tmp_path / "pass-moments-cov-class_moments-sketch", 3, N_BLOCKS)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c, \
            distributed.Client(c):
        resumed = describe(ds, run=db.RunOptions(plan=None, split_every=3, checkpoint=tmp_path))
    assert_bitwise_equal(plain, resumed)
    run = read_runs(tmp_path, "moments-cov-class_moments-sketch")[-1]
    assert (run["reused_blocks"], run["computed_blocks"]) == (len(done), N_BLOCKS - len(done))
    assert read_runs(tmp_path, "hist-qhist")[-1]["computed_blocks"] == N_BLOCKS
