"""cancel= and progress callbacks on describe, ingest and synth: stop at a block boundary, keep, resume."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.runtime import progress as progress_module


def _data(rows: int = 4000, d: int = 5) -> np.ndarray:
    return np.random.default_rng(0).normal(10.0, 2.0, size=(rows, d))


def test_cancel_is_an_exception_and_a_checkpointed_describe_resumes(tmp_path: Path) -> None:
    x = da.from_array(_data(), chunks=(250, -1))
    cancel, seen = threading.Event(), []

    def stop_after_five(done: int, total: int | None, phase: str) -> None:
        seen.append((done, total, phase))
        if done >= 5:
            cancel.set()

    ck = tmp_path / "ck"
    with pytest.raises(Exception, match="cancelled after") as stopped:  # noqa: PT011 - any Exception handler sees it
        db.describe(x, stats=("moments", "cov"), range=(0.0, 20.0), run=db.RunOptions(cancel=cancel, plan=None, checkpoint=ck, progress=stop_after_five))
    assert isinstance(stopped.value, db.Cancelled) and "checkpointed in" in str(stopped.value)
    assert seen and all(total == 16 and phase.startswith("pass 1/1") for _, total, phase in seen)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
    resumed = db.describe(x, stats=("moments", "cov"), range=(0.0, 20.0), run=db.RunOptions(plan=None, checkpoint=ck))
    whole = db.describe(x, stats=("moments", "cov"), range=(0.0, 20.0), run=db.RunOptions(plan=None, checkpoint=tmp_path / "fresh"))
    np.testing.assert_array_equal(resumed.mean, whole.mean)
    np.testing.assert_array_equal(resumed.cov, whole.cov)
    np.testing.assert_array_equal(resumed.hist_counts, whole.hist_counts)


def test_cancel_without_checkpoint_and_progress_of_both_passes() -> None:
    x = da.from_array(_data(), chunks=(500, -1))
    phases: list[str] = []
    db.describe(x, stats=("moments", "hist"), run=db.RunOptions(plan=None, progress=lambda done, total, phase: phases.append(phase)))
    assert {p.split(":")[0] for p in phases} == {"pass 1/2", "pass 2/2"}
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(db.Cancelled, match="pass 1/2"):
        db.describe(x, stats=("moments", "hist"), run=db.RunOptions(cancel=cancel, plan=None))


def test_progress_is_logged_periodically_without_a_bar(monkeypatch, caplog) -> None:
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="daskbatch.runtime.progress"):
        db.describe(da.from_array(_data(), chunks=(1000, -1)), stats=("moments",), run=db.RunOptions(plan=None))
    lines = [r.getMessage() for r in caplog.records if "blocks" in r.getMessage() and "pass 1/1" in r.getMessage()]
    assert any("/4 blocks" in line for line in lines), lines


def test_ingest_cancels_and_resumes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    x = _data(3000, 4)
    for i in range(6):
        np.save(src / f"b{i}.npy", x[i * 500:(i + 1) * 500])
    cancel, counts = threading.Event(), []

    def stop_after_two(done: int, total: int | None, phase: str) -> None:
        counts.append(done)
        if done >= 2:
            cancel.set()

    out = tmp_path / "out.zarr"
    with pytest.raises(db.Cancelled):
        db.ingest(str(src / "b*.npy"), out, chunk_rows=250, workers=1, progress=stop_after_two, cancel=cancel)
    assert counts[-1] < 12
    report = db.ingest(str(src / "b*.npy"), out, chunk_rows=250, workers=1)
    np.testing.assert_array_equal(db.open_dataset(report.path).x.compute(), x)


def test_synth_progress_and_cancel(tmp_path: Path) -> None:
    counts: list[int] = []
    db.synth(tmp_path / "a.zarr", rows=5000, features=3, chunk_rows=1000, progress=lambda d, t, p: counts.append(d))
    assert counts[-1] >= 5 and counts == sorted(counts)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(db.Cancelled, match="synth"):
        db.synth(tmp_path / "b.zarr", rows=5000, features=3, chunk_rows=1000, cancel=cancel)
