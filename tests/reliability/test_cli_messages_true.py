"""What the CLI says is true and names the thing (issue 34): job files, scheduler files, interrupts.

Real subprocesses and real signals: ``python -m daskbatch`` as a user types it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
