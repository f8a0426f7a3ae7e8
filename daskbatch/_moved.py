"""Module paths that moved, kept importable for one release with a DeprecationWarning.

``import daskbatch.<old>`` (or ``from daskbatch.<old> import name``) finds the
module at its new path through a :data:`sys.meta_path` finder, warns once, and
hands back the new module itself, so objects keep one identity (``isinstance``
and pickling see one class). Only the names in :data:`MOVED` are served; the
finder never imports anything else.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: Old module path -> new module path (removed one release after the move).
MOVED: dict[str, str] = {
    # 0.x: the top floor packaged by what it does (summary/, selection/, transforms/)
    "daskbatch.summary_attrs": "daskbatch.summary.attrs",
    "daskbatch.summary_xarray": "daskbatch.summary.dataset",
    "daskbatch.summary_store": "daskbatch.summary.store",
    "daskbatch.summary_extra": "daskbatch.summary.user_results",
    "daskbatch.summary_results": "daskbatch.summary.results",
    "daskbatch.reprs": "daskbatch.summary.reprs",
    "daskbatch.plotting": "daskbatch.summary.plotting",
    "daskbatch.compare": "daskbatch.summary.compare",
    "daskbatch.select": "daskbatch.selection",
    "daskbatch.transform": "daskbatch.transforms",
    "daskbatch.scores": "daskbatch.selection.scores",
    "daskbatch.pca": "daskbatch.transforms.pca",
    "daskbatch.steps": "daskbatch.transforms.steps",
    "daskbatch.steps.columns": "daskbatch.transforms.steps.columns",
    "daskbatch.steps.scaling": "daskbatch.transforms.steps.scaling",
    "daskbatch.planning.explain": "daskbatch.planning.plan",  # Plan and its explanation, one module
    "daskbatch.jobspec": "daskbatch.jobs.spec",
    "daskbatch.job_report": "daskbatch.jobs.report",
    "daskbatch.plans": "daskbatch.engine.planner",
}


# Plain classes, not importlib.abc's, which loads importlib.resources, tempfile and shutil on `import daskbatch`.
class _MovedLoader:
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


class _MovedFinder:
    """Finds the old paths in :data:`MOVED` and nothing else."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """A spec whose loader serves the new module, for an old path; None for any other name."""
        new = MOVED.get(fullname)
        if new is None:
            return None
        loader: Any = _MovedLoader(new)  # typeshed asks for the legacy load_module; the import system does not
        return importlib.util.spec_from_loader(fullname, loader)


def install() -> None:
    """Put the finder first on :data:`sys.meta_path`, once.

    First, because a moved package's old submodule paths (``daskbatch.steps.columns``)
    would otherwise be found by the path finder through the new package's
    ``__path__`` and loaded a second time, with classes of their own.
    """
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
