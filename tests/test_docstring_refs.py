"""Every cross-reference in a docstring (``:class:`...```, ``:func:``, ``:mod:``, ...) names something that exists.

Modules move; a docstring that still points at the old place sends the reader
nowhere. Each reference is resolved as Sphinx would: a dotted name from the
top (``daskbatch.stats.sketch.Sketch``), else relative to the module that holds
the docstring (``Sketch``, ``Summary.quantile``), else a builtin or a name of
numpy, dask, distributed, zarr, xarray or scipy.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskbatch"
ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|attr|data|exc|obj):`~?([^`<>]+?)`")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstrings(path: Path) -> list[tuple[int, str, str]]:
    """(line, enclosing class's qualified name or "", docstring) of the module and each class and function in ``path``."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, owner: str) -> None:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = f"{owner}.{node.name}".lstrip(".") if isinstance(node, ast.ClassDef) else owner
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), inner, doc))
            owner = inner
        for child in ast.iter_child_nodes(node):
            visit(child, owner)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def _resolve(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif attr in getattr(obj, "__annotations__", {}):  # a dataclass field without a default
                obj = None
            else:
                return False
        return True
    return False


def _resolves(target: str, module: str, owner: str = "") -> bool:
    target = target.strip().removesuffix("()")
    if _resolve(target):
        return True
    if owner and _resolve(f"{module}.{owner}.{target}"):  # a method or attribute of the class at hand
        return True
    here = module.split(".")
    for depth in range(len(here), 0, -1):  # relative to the module, then to its packages
        if _resolve(".".join(here[:depth] + [target])):
            return True
    head = target.split(".")[0]
    if hasattr(builtins, head):
        return True
    return any(_resolve(f"{lib}.{target}") for lib in ("numpy", "dask", "dask.array", "distributed", "zarr", "xarray"))


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_docstring_references_resolve(path: Path) -> None:
    module = _module_name(path)
    broken = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: :{role}:`{target}`"
        for line, owner, doc in _docstrings(path)
        for role, target in ROLE.findall(doc)
        if not _resolves(target, module, owner)
    ]
    assert broken == [], "\n".join(broken)


def test_a_moved_name_is_caught() -> None:
    assert _resolves("daskbatch.stats.sketch.Sketch", "daskbatch.stats.ranges")
    assert _resolves("Sketch", "daskbatch.stats.sketch")
    assert _resolves("update_many", "daskbatch.accumulator", "Accumulator")
    assert not _resolves("update_many", "daskbatch.accumulator")
    assert not _resolves("daskbatch.steps_old.Standardize", "daskbatch.describing")
    assert not _resolves("daskbatch.scores.Scores", "daskbatch.describing")  # moved to daskbatch.selection
    assert _resolves("daskbatch.transform", "daskbatch.describing")  # the function, not a module path
    assert not _resolves("NoSuchThing", "daskbatch.stats.sketch")
