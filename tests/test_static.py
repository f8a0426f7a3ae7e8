"""The code passes its own linters: ruff (lint rules in pyproject.toml) and mypy (types)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "daskbatch", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy", "daskbatch")
    assert result.returncode == 0, result.stdout + result.stderr
