"""What the CLI says is true and names the thing (issue 34): job files, scheduler files, interrupts.

Real subprocesses and real signals: ``python -m daskbatch`` as a user types it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import daskbatch as db


def _cli(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m daskbatch ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one ``error:`` line of a refusal (exit 2), checked to name ``words``."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "[Errno" not in done.stderr, done.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_a_missing_job_file_is_named(tmp_path: Path) -> None:
    _one_error_line(_cli(tmp_path, "run", "nojob.yaml"), "nojob.yaml", "no such file")
    _one_error_line(
        _cli(tmp_path, "describe", "x.zarr", "--config", "nosuch.yaml"),
        "nosuch.yaml",
        "no such file",
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store that takes some seconds to describe: 20 blocks of 20,000 rows x 64 features."""
    path = tmp_path_factory.mktemp("signals") / "x.zarr"
    db.synth(path, rows=400_000, features=64, chunk_rows=20_000)
    return path


def _finished_blocks(checkpoint: Path) -> list[Path]:
    """The node files of every pass in ``checkpoint`` (what a resumed run reuses)."""
    return sorted(checkpoint.glob("pass-*/L*.ckpt"))


def _interrupted(
    store: Path, sig: signal.Signals, checkpoint: Path | None, *, after_a_block: bool
) -> str:
    """Run ``describe``, send ``sig`` once it has planned (or once a block is checkpointed); its last line, exit 75."""
    args = [sys.executable, "-m", "daskbatch", "describe", str(store), "--cluster", "threads"]
    args += [] if checkpoint is None else ["--checkpoint", str(checkpoint)]
    with subprocess.Popen(args, stderr=subprocess.PIPE, text=True, cwd=store.parent) as run:
        assert run.stderr is not None
        for line in run.stderr:  # the handlers are in place once it plans
            if "Plan for" in line:
                break
        deadline = time.monotonic() + 120
        while after_a_block and checkpoint is not None and not _finished_blocks(checkpoint):
            assert time.monotonic() < deadline and run.poll() is None, "no block was checkpointed"
            time.sleep(0.05)
        run.send_signal(sig)
        rest = run.stderr.read()
    assert run.returncode == 75, rest
    return rest.strip().splitlines()[-1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_says_which_signal_and_that_nothing_was_kept(
    store: Path, sig: signal.Signals
) -> None:
    line = _interrupted(store, sig, None, after_a_block=False)
    assert line.startswith(f"interrupted by {sig.name}") or line.startswith(
        f"stopped by {sig.name}"
    ), line
    assert "nothing" in line and "kept in" not in line, line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_says_kept_only_what_the_checkpoint_holds(
    store: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """Early (planned, nothing finished) and late (a block checkpointed): the line says what is on disk."""
    for after_a_block in (False, True):
        checkpoint = tmp_path / f"ckpt-{after_a_block}"
        line = _interrupted(store, sig, checkpoint, after_a_block=after_a_block)
        assert sig.name in line and str(checkpoint) in line, line
        kept = _finished_blocks(checkpoint)
        if (
            "are checkpointed in" in line
        ):  # the block runner's own count, per pass: true by construction
            continue
        says_kept = "kept in" in line
        assert says_kept == bool(kept), (line, kept)
        assert after_a_block is False or says_kept, line


def test_a_missing_scheduler_file_is_waited_for_briefly_and_named(tmp_path: Path) -> None:
    """It waited silently up to worker-timeout (10 minutes); now one line says what and how long, then one error."""
    import dask.config
    from dask.utils import parse_timedelta

    from daskbatch import config

    assert parse_timedelta(config.get("scheduler-file-timeout")) <= 60  # the default is short
    db.synth(tmp_path / "x.zarr", rows=100, features=3)
    env = {**os.environ, "DASK_DASKBATCH__SCHEDULER_FILE_TIMEOUT": "2s"}
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "daskbatch",
            "describe",
            "x.zarr",
            "--scheduler-file",
            "nosuch.json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert time.monotonic() - start < 60, done.stderr
    assert "waiting up to 2s for the scheduler file nosuch.json" in done.stderr, done.stderr
    _one_error_line(done, "no scheduler file at nosuch.json after 2s")
    with (
        dask.config.set({"daskbatch.scheduler-file-timeout": "0.5s"}),
        pytest.raises(TimeoutError) as info,
    ):
        with db.cluster(scheduler_file=tmp_path / "nosuch.json"):
            pass
    assert str(tmp_path / "nosuch.json") in str(info.value) and "\n" not in str(info.value)
