"""Module paths that moved, kept importable for one release with a DeprecationWarning.

``import daskbatch.<old>`` (or ``from daskbatch.<old> import name``) finds the
module at its new path through a :data:`sys.meta_path` finder, warns once, and
hands back the new module itself, so objects keep one identity (``isinstance``
and pickling see one class). Only the names in :data:`MOVED` are served; the
finder never imports anything else.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: Old module path -> new module path (removed one release after the move).
MOVED: dict[str, str] = {
    "daskbatch.jobspec": "daskbatch.jobs.spec",
    "daskbatch.job_report": "daskbatch.jobs.report",
    "daskbatch.plans": "daskbatch.engine.planner",
}


class _MovedLoader(importlib.abc.Loader):
    """Returns the module at its new path in place of the old one."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: Any = None  # the new module's own spec, which the import system overwrites

    def create_module(self, spec: Any) -> ModuleType:
        """Import the new module and hand it back for the old name."""
        warnings.warn(
            f"{spec.name} moved to {self.new}; import it from there (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Give the module back its own spec (the import system set the old path's on it)."""
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths in :data:`MOVED` and nothing else."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """A spec whose loader serves the new module, for an old path; None for any other name."""
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedLoader(new))


def install() -> None:
    """Put the finder on :data:`sys.meta_path` once."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
