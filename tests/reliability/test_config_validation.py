"""Finding 11: bad settings are one-line errors, not tracebacks, and nonsense is refused.

Before, a malformed dask YAML file or an unusable temporary directory gave a
traceback, and ``memory-fraction: 7`` was accepted (a plan for 7x the memory).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import dask
import pytest
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main

ROOT = pathlib.Path(__file__).parents[2]


def child(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, *code_or_args], env=full, capture_output=True, text=True, timeout=120)


def test_malformed_dask_yaml(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    folder = tmp_path / "dask-config"
    folder.mkdir()
    (folder / "mine.yaml").write_text("daskbatch:\n  split-every: [8\n")
    done = child(["-m", "daskbatch", "plan", str(store), "--x", "X"], DASK_CONFIG=str(folder))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert "mine.yaml' is malformed" in done.stderr and "line 2" in done.stderr
    # import daskbatch loads no dask: the file is read when daskbatch first needs dask
    assert child(["-c", "import daskbatch"], DASK_CONFIG=str(folder)).returncode == 0
    imported = child(["-c", "import daskbatch as db; db.describe"], DASK_CONFIG=str(folder))
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: A dask config file at") and "mine.yaml" in last


def test_unusable_temporary_directory(tmp_path: pathlib.Path, store: pathlib.Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    with dask.config.set({"temporary-directory": str(a_file)}):
        result = CliRunner().invoke(main, ["describe", str(store), "--cluster", "local", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"the temporary directory '{a_file}' is not usable" in result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1


@pytest.mark.parametrize("fraction", [7, 0, -0.5, "half", True])
def test_memory_fraction_out_of_range(store: pathlib.Path, fraction: object) -> None:
    with dask.config.set({"daskbatch.memory-fraction": fraction}):
        result = CliRunner().invoke(main, ["plan", str(store), "--x", "X"])
        assert result.exit_code == 2, result.output
        assert "daskbatch.memory-fraction must be a number in (0, 1]" in result.output
        if not isinstance(fraction, str | bool):  # the API plans with float(value): numbers only
            with pytest.raises(ValueError, match=r"memory-fraction must be a number in \(0, 1\]"):
                db.describe(str(store), stats=["moments"])
