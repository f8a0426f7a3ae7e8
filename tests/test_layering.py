"""Layering: imports inside daskbatch point down the layers, and the pure layers stay light.

Two checks from an AST scan of the package:

- **Direction and cycles.** Every import of a daskbatch module, at module level or
  inside a function, goes to the same layer or one below (see ``LAYERS``), and the
  module-level import graph has no cycle.
- **Light layers.** ``stats`` and ``planning`` import no dask, distributed, zarr or
  cupy at module level (function bodies may import lazily), followed through
  daskbatch's own modules, so ``stats -> daskbatch.config -> dask`` is caught too.
- **Lazy imports say why.** An import inside a function, of daskbatch's own modules or
  of a heavy package (``LAZY_CHECKED``), carries ``# lazy: <what it defers>`` on its
  first line; every other import belongs at module level.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskbatch"
FORBIDDEN = ("dask", "distributed", "zarr", "cupy", "xarray", "scipy", "sklearn", "pandas")
#: What ``import daskbatch`` itself may not load at module level (each public name is imported on use).
FORBIDDEN_AT_TOP = (*FORBIDDEN, "numba", "matplotlib")
PURE = sorted(
    list((PACKAGE / "stats").rglob("*.py"))
    + list((PACKAGE / "planning").glob("*.py"))
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


def _packages_run_by(path: Path) -> list[tuple[int, str]]:
    """The packages whose ``__init__`` importing ``path``'s module runs first (``daskbatch``, ``daskbatch.stats``, ...)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    return [(0, ".".join(parts[:i])) for i in range(1, len(parts) + 1)]


def _init_of(module: str) -> Path | None:
    """A daskbatch module's file, the package ``daskbatch`` itself included."""
    return PACKAGE / "__init__.py" if module == "daskbatch" else _source_of(module)


def forbidden_chain(path: Path, seen: set[Path] | None = None, forbidden: tuple[str, ...] = FORBIDDEN) -> list[str] | None:
    """The import chain from ``path`` to a forbidden package, or None (parent packages' ``__init__`` included)."""
    seen = set() if seen is None else seen
    seen.add(path)
    for line, module in [*_packages_run_by(path), *module_level_imports(path)]:
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        if module.split(".")[0] in forbidden:
            return [where]
        source = _init_of(module)
        if source is not None and source not in seen:
            rest = forbidden_chain(source, seen, forbidden)
            if rest is not None:
                return [where, *rest]
    return None


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_heavy_imports_at_module_level(path: Path) -> None:
    chain = forbidden_chain(path)
    assert chain is None, " -> ".join(chain)


def test_import_daskbatch_stays_light() -> None:
    chain = forbidden_chain(PACKAGE / "__init__.py", forbidden=FORBIDDEN_AT_TOP)
    assert chain is None, " -> ".join(chain)


def test_scan_sees_what_it_should() -> None:
    """The scanner itself: module-level, nested and relative imports count; lazy ones do not."""
    assert any(p.name == "moments.py" for p in PURE) and PACKAGE / "stats" / "numerics.py" in PURE
    found = {m for _, m in module_level_imports(PACKAGE / "engine" / "passes.py")}
    assert {"dask", "dask.array", "daskbatch.stats._base"} <= found
    assert forbidden_chain(PACKAGE / "engine" / "passes.py") is not None
    lazy = {m for _, m in module_level_imports(PACKAGE / "stats" / "kernels" / "__init__.py")}
    assert "daskbatch.stats.kernels._numba_moments" not in lazy  # imported inside moments only (numba)
    rel = {m for _, m in module_level_imports(PACKAGE / "stats" / "moments.py")}
    assert "daskbatch.stats._base" in rel
    # importing a module runs its packages' __init__ first: daskbatch's own is followed too
    assert (0, "daskbatch") in _packages_run_by(PACKAGE / "stats" / "moments.py")


# Layers from the bottom up: a module may import its own layer or any layer below.
# An entry names a module or package and everything under it; "daskbatch" alone
# (the package's own __init__) is matched exactly, so a new module that no entry
# names is reported instead of falling into the top layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("daskbatch._common", "daskbatch._version", "daskbatch.errors", "daskbatch.config"),
    ("daskbatch.stats",),
    ("daskbatch.planning",),
    ("daskbatch.runtime",),
    ("daskbatch.io",),
    ("daskbatch.engine",),
    ("daskbatch.summary",),
    ("daskbatch.selection", "daskbatch.transforms"),
    ("daskbatch.describing", "daskbatch.incremental", "daskbatch.accumulator", "daskbatch.batches",
     "daskbatch.testing", "daskbatch.precompile"),
    ("daskbatch.jobs", "daskbatch.demo"),
    ("daskbatch", "daskbatch.__main__", "daskbatch.cli", "daskbatch._dask_setup"),
)
EXACT = {"daskbatch"}

#: Upward imports kept on purpose, each with its reason and when it goes.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix matching ``module`` (a KeyError names unplaced modules)."""
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            under = module.startswith(prefix + ".") and prefix not in EXACT
            if (module == prefix or under) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")
    return best[0]


def all_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every daskbatch import in ``path`` that can run, lazy ones included.

    Imports under ``if TYPE_CHECKING:`` never run and are left out.
    """
    found: list[tuple[int, str]] = []
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only = {
        id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
        for stmt in node.body for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            # ``from pkg import sub`` imports the submodule pkg.sub when there is one.
            subs = [f"{name}.{a.name}" for a in node.names if _source_of(f"{name}.{a.name}") is not None]
            found.extend((node.lineno, s) for s in subs) if subs else found.append((node.lineno, name))
    return [(line, m) for line, m in found if m.split(".")[0] == "daskbatch"]


def test_every_module_has_a_layer() -> None:
    for path in MODULES:
        layer_of(module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    here = module_name(path)
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} (layer {layer_of(module)} > {layer_of(here)})"
        for line, module in all_imports(path)
        if layer_of(module) > layer_of(here) and (here, module) not in ALLOWED_UPWARD
    ]
    assert not upward, "; ".join(upward)


def import_graph() -> dict[str, set[str]]:
    """Module -> the daskbatch modules it may import, at module level or inside a function.

    A module importing its own package (or a package above it) is left out:
    the package's ``__init__`` has run before any of its modules can, so that
    import never starts anything. Allowed upward imports are left out too.
    """
    graph: dict[str, set[str]] = {}
    for p in MODULES:
        here = module_name(p)
        graph[here] = {
            m for _, m in all_imports(p)
            if m != "daskbatch" and _source_of(m) is not None and not here.startswith(m + ".") and m != here
            and (here, m) not in ALLOWED_UPWARD
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its chain of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_no_import_cycle() -> None:
    """All imports that can run, lazy ones included, form a DAG (a cycle is reported as its chain)."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_check_sees_lazy_imports_and_skips_type_only_ones() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    lazy = {m for _, m in all_imports(PACKAGE / "cli" / "describe_cmd.py")}
    assert "daskbatch.describing" in lazy  # imported inside the command only
    assert "daskbatch.summary.record" not in {m for _, m in all_imports(PACKAGE / "summary" / "dataset.py")}


def test_no_module_outside_the_layers() -> None:
    assert layer_of("daskbatch") == len(LAYERS) - 1
    with pytest.raises(KeyError, match="in no layer"):
        layer_of("daskbatch.somewhere_new")


def test_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    assert layer_of("daskbatch.planning.search") < layer_of("daskbatch.runtime.cluster")
    assert layer_of("daskbatch.stats.kernels._numba") == layer_of("daskbatch.stats")
    assert layer_of("daskbatch.cli.describe_cmd") > layer_of("daskbatch.describing")
    assert layer_of("daskbatch.io.rowstore") > layer_of("daskbatch.runtime.progress")  # runtime never imports io


#: Top-level packages whose imports inside a function must say why they are lazy (besides daskbatch's own).
LAZY_CHECKED = (
    "daskbatch", "dask", "distributed", "zarr", "xarray", "pandas", "scipy", "sklearn", "matplotlib", "cupy",
    "numba", "numba_cuda", "rmm", "dask_cuda", "dask_jobqueue", "pyarrow", "fsspec",
)
_LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


def unexplained_lazy_imports(source: str, filename: str = "<string>") -> list[str]:
    """``filename:line`` of each checked import inside a function whose first line has no ``# lazy: <reason>``."""
    tree = ast.parse(source, filename=filename)
    lines = source.splitlines()
    type_only = {
        id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
        for stmt in node.body for inner in ast.walk(stmt)
    }
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    in_function = {
        id(inner) for node in ast.walk(tree) if isinstance(node, functions)
        for stmt in ast.iter_child_nodes(node) for inner in ast.walk(stmt)
    }
    missing = []
    for node in ast.walk(tree):
        if id(node) not in in_function or id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            tops = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            tops = {"daskbatch"} if node.level else {(node.module or "").split(".")[0]}
        else:
            continue
        if tops & set(LAZY_CHECKED) and not _LAZY_REASON.search(lines[node.lineno - 1]):
            missing.append(f"{filename}:{node.lineno}")
    return sorted(missing, key=lambda where: int(where.rsplit(":", 1)[1]))


def test_every_lazy_import_says_why() -> None:
    """Imports inside functions defer a heavy dependency and name it; the rest belong at module level."""
    missing = [
        where for path in MODULES
        for where in unexplained_lazy_imports(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not missing, "import inside a function without '# lazy: <reason>': " + ", ".join(missing)


def test_lazy_import_check_on_a_planted_module() -> None:
    planted = (
        "import dask\n"  # module level: no reason needed
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from daskbatch.summary import Summary\n"  # never runs
        "def explained():\n"
        "    import xarray as xr  # lazy: xarray\n"
        "    from daskbatch.io import (  # lazy: zarr\n"
        "        open_dataset,\n"
        "    )\n"
        "    import json\n"  # not a checked package
        "def unexplained():\n"
        "    from daskbatch.stats import Moments\n"
        "    from ..engine import reduce  # lazy:\n"  # a reason must follow
        "    f = lambda: __import__('x')\n"
        "    import zarr.storage  # why: not the marker\n"
    )
    assert unexplained_lazy_imports(planted) == ["<string>:12", "<string>:13", "<string>:15"]
    assert unexplained_lazy_imports(planted.split("def unexplained")[0]) == []
