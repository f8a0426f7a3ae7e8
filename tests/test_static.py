"""The code passes its own linters: ruff (lint rules in pyproject.toml), mypy (types) and numpydoc (docstrings)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _numpydoc_files() -> list[str]:
    """The modules that define the public API: what ``daskbatch`` and ``daskbatch.stats`` export.

    Full numpydoc sections are for what users call; internal helpers carry one line.
    """
    import inspect

    import daskbatch
    import daskbatch.stats

    files = set()
    for module in (daskbatch, daskbatch.stats):
        for name in module.__all__:
            obj = inspect.unwrap(getattr(module, name))
            if inspect.isclass(obj) or inspect.isfunction(obj):
                files.add(pathlib.Path(inspect.getsourcefile(obj)).relative_to(ROOT).as_posix())
    assert len(files) > 10, files  # the public modules, not an empty listing
    return sorted(files)


@pytest.fixture(scope="module")
def linters() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The three linters, started together: mypy takes most of the time, the others run beside it."""
    commands = {
        "ruff": ["ruff", "check", "daskbatch", "tests", "benchmarks", "examples"],
        "mypy": ["mypy", "daskbatch"],
        # the checks and exclusions are [tool.numpydoc_validation] in pyproject.toml
        "numpydoc": ["numpydoc", "lint", *_numpydoc_files()],
    }
    started = {
        name: subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        for name, args in commands.items()
    }
    yield started
    for proc in started.values():
        if proc.returncode is None:  # its test did not wait for it (deselected, or failed before)
            proc.kill()
            proc.communicate()


def _result(linters: dict[str, subprocess.Popen[str]], name: str) -> tuple[int, str]:
    """The exit code and output of one linter, once it has finished."""
    output, _ = linters[name].communicate(timeout=600)
    return linters[name].returncode, output


def test_ruff_is_clean(linters) -> None:
    code, output = _result(linters, "ruff")
    assert code == 0, output


def test_mypy_is_clean(linters) -> None:
    code, output = _result(linters, "mypy")
    assert code == 0, output


def test_docstrings_follow_numpydoc(linters) -> None:
    code, output = _result(linters, "numpydoc")
    assert code == 0, output
