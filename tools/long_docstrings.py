"""List the short functions whose docstring is long: a body of 1-2 lines after a docstring of 8+ lines.

Usage::

    python tools/long_docstrings.py [--private] [daskbatch]

Prints ``path:line  name  docstring-lines  body-lines  where`` per function
(``where``: its class, or ``nested``), then the count. Public names must keep
their numpydoc sections (tests/test_static.py); a private helper (a leading
underscore, so numpydoc skips it) needs one line.

``--private`` lists instead every private helper (a leading underscore, dunders
aside) whose docstring spans more than one line, whatever its length: what
says why belongs in a comment. A nested function is checked by numpydoc like
any other, so it is private only with a leading underscore too.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def _functions(node: ast.AST, where: str = "") -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function below ``node`` with its class name, or "nested" inside another function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield child, where
            yield from _functions(child, "nested")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, child.name if where != "nested" else where)
        else:
            yield from _functions(child, where)


def _private(name: str) -> bool:
    """Whether ``name`` is private: one leading underscore, not a dunder."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def main() -> None:
    """Print the list and its count."""
    args = sys.argv[1:]
    private = "--private" in args
    args = [a for a in args if a != "--private"]
    root = Path(args[0] if args else "daskbatch")
    found = 0
    for path in sorted(root.rglob("*.py")):
        for fn, where in _functions(ast.parse(path.read_text())):
            if ast.get_docstring(fn) is None:
                continue
            doc, body = fn.body[0], fn.body[1:]
            doc_lines = (doc.end_lineno or doc.lineno) - doc.lineno + 1
            body_lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1 if body else 0
            if (doc_lines > 1 and _private(fn.name)) if private else (doc_lines >= 8 and 1 <= body_lines <= 2):
                found += 1
                print(f"{path}:{fn.lineno}\t{fn.name}\t{doc_lines}\t{body_lines}\t{where}")
    what = "private helpers with a docstring of 2+ lines" if private else "short functions with a docstring of 8+ lines"
    print(f"{found} {what}")


if __name__ == "__main__":
    main()
