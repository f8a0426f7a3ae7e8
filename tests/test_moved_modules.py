"""Module paths that moved stay importable for one release, with a DeprecationWarning, as the same module."""

from __future__ import annotations

import importlib
import sys

import pytest

from daskbatch import _moved


def test_every_old_path_serves_its_new_module_with_a_warning() -> None:
    for old, new in _moved.MOVED.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert module.__spec__.name == new  # the new module keeps its own spec
        assert module.__name__ == new
    # a moved package's submodule through its old path is the one module, not a second copy
    from daskbatch.transforms.steps.columns import Select

    assert importlib.import_module("daskbatch.steps.columns").Select is Select


def test_a_name_not_in_the_map_is_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_moved.MOVED, "daskbatch._moved_probe_old", "daskbatch.errors")
    with pytest.warns(DeprecationWarning):
        assert importlib.import_module("daskbatch._moved_probe_old") is importlib.import_module("daskbatch.errors")
    sys.modules.pop("daskbatch._moved_probe_old")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("daskbatch._never_was_a_module")
