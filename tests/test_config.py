"""daskbatch's settings live in dask.config: packaged defaults, overridable from a batch script's environment."""

from __future__ import annotations

import ast
import operator
import os
import pathlib
import subprocess
import sys
from typing import Any

import dask
import pytest
import yaml
from dask.utils import parse_bytes, parse_timedelta

import daskbatch
from daskbatch import config


def test_packaged_defaults_are_loaded() -> None:
    assert config.get("split-every") == 8 and config.get("memory-fraction") == 0.5
    with dask.config.set({"daskbatch.split-every": 3}):
        assert config.get("split-every") == 3


def test_environment_variable_overrides_a_default() -> None:
    env = {**os.environ, "DASK_DASKBATCH__SPLIT_EVERY": "16"}
    code = "from daskbatch import config; print(config.get('split-every'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "16"


# --------------------------------------------------------------------------- one source of defaults

PACKAGE = pathlib.Path(daskbatch.__file__).parent
YAML = yaml.safe_load((PACKAGE / "daskbatch.yaml").read_text())["daskbatch"]
#: The Python names a setting goes by where they differ from its key (``reserved-memory`` is a byte count).
ALIASES = {"reserved-memory": ("reserved_bytes", "reserved_memory")}
_OPERATORS = {ast.Mult: operator.mul, ast.Pow: operator.pow, ast.Add: operator.add, ast.Sub: operator.sub}


def _setting_value(value: Any) -> Any:
    """A yaml setting as a number: byte sizes in bytes, durations in seconds; others as they are."""
    if isinstance(value, str):
        for parse in (parse_bytes, parse_timedelta):
            try:
                return parse(value)
            except (TypeError, ValueError, KeyError):
                pass
    return value


def _literal(node: ast.AST) -> Any:
    """The value of a literal expression such as ``64 * 2**20``, or a sentinel when it is not one."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _literal(node.left), _literal(node.right)
        if isinstance(left, int | float) and isinstance(right, int | float):
            return _OPERATORS[type(node.op)](left, right)
    return _literal


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind (True is not 1)."""
    return isinstance(a, bool) == isinstance(b, bool) and not isinstance(a, str | type(None)) and a == b


def repeated_defaults(source: str, filename: str = "<string>") -> list[str]:
    """``file:line`` of each Python copy of a top-level ``daskbatch.yaml`` default in ``source``.

    Two shapes: a name for the setting (a constant, a field or a parameter's
    default) bound to the yaml's value, and a ``get("daskbatch.<key>", default)``
    with a fallback of its own (which the yaml makes dead, or contradicts).
    """
    settings = {k: _setting_value(v) for k, v in YAML.items() if not isinstance(v, dict)}
    names = {k: ALIASES.get(k, (k.replace("-", "_"),)) for k in settings}
    found: list[str] = []

    def check(name: str, value_node: ast.AST | None, line: int) -> None:
        if value_node is None:
            return
        value = _literal(value_node)
        for key, idents in names.items():
            if any(i in name.lower() for i in idents) and _same(value, settings[key]):
                found.append(f"{filename}:{line} {name} = {value!r} repeats daskbatch.{key}")

    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    check(target.id, node.value, node.lineno)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            check(node.target.id, node.value, node.lineno)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True):
                check(arg.arg, default, default.lineno)
            for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                check(arg.arg, kw_default, arg.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            key = node.args[0] if node.args else None
            named = isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("daskbatch.")
            if named and (len(node.args) > 1 or any(k.arg == "default" for k in node.keywords)):
                found.append(f"{filename}:{node.lineno} get({key.value!r}, ...) has a fallback of its own")
    return sorted(found, key=lambda where: int(where.split(" ")[0].rsplit(":", 1)[1]))


def test_no_default_of_daskbatch_yaml_is_repeated_in_python() -> None:
    # stats/classes.py keeps max_classes=1000 for statistics built by hand: stats is pure (no dask.config)
    # and engine.planner.max_classes() passes the configured limit to every statistic daskbatch builds.
    known = {"stats/classes.py"}
    found = [
        where for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in known
        for where in repeated_defaults(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert not found, "; ".join(found)


def test_repeated_default_check_on_a_planted_module() -> None:
    planted = (
        "DEFAULT_SPLIT_EVERY = 8\n"
        "AUTO_CHUNK_BYTES = 128 * 2**20\n"  # another value than the yaml's: only its fallback use below counts
        "def plan(memory_fraction: float = 0.5, *, reserved_bytes=256 * 2**20, split_every=None):\n"
        "    return dask.config.get('daskbatch.target-chunk-bytes', AUTO_CHUNK_BYTES)\n"
        "LOCK_STALE_AFTER_S = 300.0\n"
        "MAX_CLASSES = 1000\n"
        "use_kernels = 1\n"  # True in the yaml: 1 is another kind
        "bins = 8\n"  # not a setting's name
        "config.get('daskbatch.split-every')\n"
    )
    found = [w.split(" ")[0] for w in repeated_defaults(planted)]
    assert found == ["<string>:1", "<string>:3", "<string>:3", "<string>:4", "<string>:5", "<string>:6"]
    assert repeated_defaults("max_chunks = 200_000") and not repeated_defaults("max_chunks = 100_000")


def raw_reads(source: str, filename: str = "<string>") -> list[str]:
    """``file:line`` of each ``dask.config.get("daskbatch....")``: daskbatch's settings are read through config.get."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "dask.config.get" and node.args:
            key = node.args[0]
            if isinstance(key, ast.Constant) and str(key.value).split(".")[0] == "daskbatch":
                found.append(f"{filename}:{node.lineno}")
    return found


def test_settings_are_read_one_way() -> None:
    found = [
        where for path in sorted(PACKAGE.rglob("*.py")) if path.name != "config.py" or path.parent != PACKAGE
        for where in raw_reads(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert not found, "read daskbatch settings with daskbatch.config.get: " + ", ".join(found)
    planted = "import dask\ndask.config.get('daskbatch.kernels')\ndask.config.get('scheduler', None)\nconfig.get('kernels')\n"
    assert raw_reads(planted) == ["<string>:2"]


def test_a_whole_mapping_set_keeps_the_defaults_it_leaves_out() -> None:
    """``dask.config.set`` of a nested mapping replaces it; the keys it leaves out keep daskbatch.yaml's values."""
    import dask.config

    from daskbatch import config

    before = config.get("job.cluster.address")
    with dask.config.set({"daskbatch.job.cluster": {"kind": "threads"}}):
        assert config.get("job.cluster.kind") == "threads"
        assert config.get("job.cluster.address") == before
    with pytest.raises(KeyError):
        config.get("no-such-setting")
