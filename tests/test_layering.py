"""Layering: the statistics, backend, planner and resources modules import no dask, distributed, zarr or cupy.

An AST scan of module-level imports (function bodies may import lazily), followed
through daskbatch's own modules, so ``stats -> daskbatch.config -> dask`` is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskbatch"
FORBIDDEN = ("dask", "distributed", "zarr", "cupy")
PURE = sorted(
    [p for p in (PACKAGE / "stats").glob("*.py")]
    + [PACKAGE / name for name in ("backend.py", "planner.py", "plan_text.py", "resources.py") if (PACKAGE / name).exists()]
)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of imports executed when the module is imported."""
    found: list[tuple[int, str]] = []
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # runs only when called
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.extend((node.lineno, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    name = f"{base}.{node.module}" if node.module else base
                else:
                    name = node.module or ""
                found.append((node.lineno, name))
                # ``from daskbatch import config`` imports the submodule daskbatch.config
                found.extend((node.lineno, f"{name}.{a.name}") for a in node.names if name == "daskbatch")
            for field in ("body", "orelse", "finalbody", "handlers"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.stmt)] + [
                        s for h in child if isinstance(h, ast.ExceptHandler) for s in h.body
                    ])

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found


def _source_of(module: str) -> Path | None:
    """The file of a daskbatch submodule (None for the package itself or a non-module name)."""
    parts = module.split(".")
    if parts[0] != "daskbatch" or len(parts) == 1:
        return None
    base = PACKAGE.parent.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def forbidden_chain(path: Path, seen: set[Path] | None = None) -> list[str] | None:
    """The import chain from ``path`` to a forbidden package, or None."""
    seen = set() if seen is None else seen
    seen.add(path)
    for line, module in module_level_imports(path):
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        if module.split(".")[0] in FORBIDDEN:
            return [where]
        source = _source_of(module)
        if source is not None and source not in seen:
            rest = forbidden_chain(source, seen)
            if rest is not None:
                return [where, *rest]
    return None


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_heavy_imports_at_module_level(path: Path) -> None:
    chain = forbidden_chain(path)
    assert chain is None, " -> ".join(chain)


def test_scan_sees_what_it_should() -> None:
    """The scanner itself: module-level, nested and relative imports count; lazy ones do not."""
    assert any(p.name == "moments.py" for p in PURE) and PACKAGE / "backend.py" in PURE
    found = {m for _, m in module_level_imports(PACKAGE / "reduce.py")}
    assert {"dask", "dask.array", "daskbatch.stats.moments"} <= found
    assert forbidden_chain(PACKAGE / "reduce.py") is not None
    lazy = {m for _, m in module_level_imports(PACKAGE / "stats" / "_base.py")}
    assert "daskbatch.backend" not in lazy  # imported inside as_float64 only
    rel = {m for _, m in module_level_imports(PACKAGE / "stats" / "moments.py")}
    assert "daskbatch.stats._base" in rel
