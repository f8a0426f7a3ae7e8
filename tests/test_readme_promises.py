"""What the README promises about following and resuming long verbs: progress callables, cancel, resume."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.io.verify import verify_store
from daskbatch.transforms import steps


def _recorder() -> tuple[list[tuple[int, int | None, str]], object]:
    calls: list[tuple[int, int | None, str]] = []
    return calls, lambda done, total, phase: calls.append((done, total, phase))


def _counts_up_to(calls: list[tuple[int, int | None, str]], total: int | None, phase: str) -> None:
    """The callable saw ``phase`` count up to its total (``total``, where the units are known here)."""
    done = [c[0] for c in calls if c[2] == phase]
    totals = {c[1] for c in calls if c[2] == phase}
    assert done and done == sorted(done) and len(totals) == 1, calls
    (seen,) = totals
    assert done[-1] == seen and (total is None or seen == total), calls


def test_transform_calls_a_progress_callable(tmp_path: Path) -> None:
    x = np.arange(4000.0).reshape(1000, 4)
    calls, report = _recorder()
    db.transform(db.open_dataset(_store(tmp_path, x)), [steps.select([0, 2])], tmp_path / "t.zarr",
                 chunk_rows=200, progress=report)
    _counts_up_to(calls, None, "transform")  # tasks the planner sized, each writing whole output chunks


def test_map_batches_calls_a_progress_callable(tmp_path: Path) -> None:
    x = np.arange(4000.0).reshape(1000, 4)
    for out in (None, tmp_path / "m.zarr"):
        calls, report = _recorder()
        db.map_batches(lambda b: b * 2, x, batch_rows=250, out=out, progress=report)
        _counts_up_to(calls, 4, "map_batches")
    calls, report = _recorder()
    assert db.map_batches(lambda items: [i + 1 for i in items], list(range(10)), batch_rows=3, progress=report) == list(
        range(1, 11)
    )
    _counts_up_to(calls, 4, "map_batches")


def test_a_stop_of_results_held_in_memory_does_not_promise_a_resume() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(db.Cancelled, match="nothing is kept") as info:
        db.map_batches(lambda items: items, list(range(10)), batch_rows=3, cancel=stop)
    assert "resume" not in str(info.value)
    with pytest.raises(db.Cancelled, match="nothing is kept"):
        db.map_batches(lambda b: b, np.ones((100, 2)), batch_rows=10, cancel=stop)


def test_update_many_progress_and_cancel() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(100, 3)) for _ in range(6)]
    calls, report = _recorder()
    acc = db.Accumulator(stats=("moments",)).update_many(batches, progress=report)
    _counts_up_to(calls, 6, "update_many")
    np.testing.assert_allclose(acc.summary().mean, np.concatenate(batches).mean(axis=0), rtol=1e-13)

    stop = threading.Event()

    def stop_after_two(done: int, total: int | None, phase: str) -> None:
        if done == 2:
            stop.set()

    kept = db.Accumulator(stats=("moments",)).update_many(batches[:1])
    with pytest.raises(db.Cancelled, match="update_many"):
        kept.update_many(iter(batches[1:]), progress=stop_after_two, cancel=stop)
    assert kept.rows == 100  # as for a bad batch: nothing of the cancelled call was added


def test_verify_store_progress_and_cancel(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    db.synth(path, rows=5000, features=3, classes=2, chunk_rows=1000)
    calls, report = _recorder()
    assert verify_store(path, progress=report).ok
    _counts_up_to(calls, 5, "verify X")
    _counts_up_to(calls, 5, "verify y")
    stop = threading.Event()
    stop.set()
    with pytest.raises(db.Cancelled, match="verify"):
        verify_store(path, cancel=stop)


def test_synth_resumes_after_a_cancel_and_a_torn_chunk(tmp_path: Path) -> None:
    args = {"rows": 5000, "features": 3, "classes": 2, "chunk_rows": 1000, "seed": 3}
    whole = db.synth(tmp_path / "whole.zarr", **args)
    path = tmp_path / "s.zarr"
    stop = threading.Event()

    def stop_after_two(done: int, total: int | None, phase: str) -> None:
        if done >= 2:
            stop.set()

    with pytest.raises(db.Cancelled):
        db.synth(path, **args, progress=stop_after_two, cancel=stop)
    written = sorted(os.listdir(path / "X" / "c"))
    assert 0 < len(written) < 5
    (path / "X" / "c" / written[0] / "0").write_bytes(b"torn by a kill")  # a chunk half-written
    calls, report = _recorder()
    again = db.synth(path, **args, progress=report)  # the same call: resumes
    resumed = [c[0] for c in calls if c[2] == "synth"]
    # The intact chunks were kept (chunks in flight at the cancel may have landed since), the torn one written again.
    assert len(written) - 1 <= resumed[0] < 5
    np.testing.assert_array_equal(again.x.compute(), whole.x.compute())
    np.testing.assert_array_equal(again.label.compute(), whole.label.compute())
    assert again.attrs["complete"] is True
    assert verify_store(path).ok
    db.synth(path, **args)  # finished: the same call opens it as it is
    with pytest.raises(FileExistsError, match=r"started by a different synth \(differs in .*seed: 3 then, 4 now"):
        db.synth(path, **{**args, "seed": 4})
    np.testing.assert_array_equal(db.open_dataset(path).x.compute(), whole.x.compute())  # the refusal kept it


def _store(tmp_path: Path, x: np.ndarray) -> str:
    path = str(tmp_path / "in.zarr")
    g = zarr.open_group(path, mode="w")
    g.create_array("X", data=x, chunks=(200, x.shape[1]))
    return path


def test_describe_reports_each_count_once() -> None:
    # The README's snippet: each pass used to report (1, 1) twice.
    calls, report = _recorder()
    db.describe(np.random.default_rng(0).normal(size=(10_000, 4)), run=db.RunOptions(progress=report))
    phases = {c[2] for c in calls}
    assert len(phases) == 2
    for phase in phases:
        done = [c[0] for c in calls if c[2] == phase]
        assert done == sorted(set(done)) and done[-1] == calls[-1][1], calls


def test_run_job_progress_and_cancel(tmp_path: Path) -> None:
    from daskbatch.jobs import run_job

    store = tmp_path / "data.zarr"
    db.synth(store, rows=6000, features=5, classes=3, chunk_rows=1000, seed=2)
    job = {"daskbatch": {"job": {
        "input": {"store": str(store)}, "cluster": {"kind": "threads", "threads": 2}, "memory": "2GiB",
        "outputs": {"dir": str(tmp_path / "out")}, "checkpoint": str(tmp_path / "ckpt"),
        "transform": {"steps": ["select", "standardize"], "chunk_rows": 1000},
    }}}
    stop = threading.Event()
    with pytest.raises(db.Cancelled):
        run_job(job, cancel=stop, progress=lambda done, total, step: stop.set() if step == "transform" else None)
    assert not (tmp_path / "out" / "transformed.zarr" / "X" / "c").exists() or len(
        os.listdir(tmp_path / "out" / "transformed.zarr" / "X" / "c")) < 6
    calls, report = _recorder()
    done = run_job(job, progress=report)  # the same job again: resumes, and reports every step
    assert done.status == "ok"
    steps_seen = {c[2] for c in calls}
    assert "transform" in steps_seen and any(s.startswith("pass 1/") for s in steps_seen), steps_seen
    _counts_up_to(calls, None, "transform")


def test_describe_reports_each_block_of_a_pass_once_with_the_real_count(tmp_path: Path) -> None:
    # Issue 34 saw (1, 1) per pass: that was the README's one-block array. On a store of several blocks
    # each pass counts 1, 2, ..., n once, n the plan's block count.
    calls, report = _recorder()
    x = np.random.default_rng(0).normal(size=(2_000, 3))
    s = db.describe(_store(tmp_path, x), run=db.RunOptions(progress=report))
    blocks = int(s.provenance["n_chunks"])
    assert blocks > 1
    phases = list(dict.fromkeys(c[2] for c in calls))
    assert len(phases) == 2
    for phase in phases:
        assert [c[:2] for c in calls if c[2] == phase] == [(i, blocks) for i in range(1, blocks + 1)], calls
