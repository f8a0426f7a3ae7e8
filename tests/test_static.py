"""The code passes its own linters: ruff (lint rules in pyproject.toml), mypy (types) and numpydoc (docstrings)."""

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


def test_docstrings_follow_numpydoc() -> None:
    # Every tracked module of the package (a git pathspec's * also matches "/"); the checks
    # and exclusions are [tool.numpydoc_validation] in pyproject.toml.
    files = subprocess.run(
        ["git", "ls-files", "daskbatch/*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(files) > 50, files  # the whole package, not an empty or partial listing
    result = _run("numpydoc", "lint", *files)
    assert result.returncode == 0, result.stdout + result.stderr
