"""Issue "Every door locked" item 13: a damaged saved summary is one line, in bounded memory, whatever is damaged.

Hypothesis changes one thing in a real saved summary (moments, co-moments,
histogram, sketch, class moments): a value anywhere in a ``zarr.json`` (random
JSON of any shape and size, or nesting 200,000 deep), a file's bytes, an
array's shape or dtype (with or without its state record agreeing).  Every
load runs in one child process whose memory is capped (``RLIMIT_AS``; its
``RLIMIT_RSS`` is the memory daskbatch plans with) and traced (tracemalloc
peak per load).  A load may succeed (a changed title is still a summary) or
raise the project's one-line :class:`~daskbatch.errors.DataError` naming the
summary; never a traceback, a ``MemoryError`` or a child that dies.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskbatch as db

ROOT = pathlib.Path(__file__).parents[2]
#: The memory the child reports as its own (what daskbatch bounds reads by), and its hard address-space cap.
PLANNED_BYTES = 1 << 30
ADDRESS_SPACE_BYTES = 8 << 30
#: The most one load may allocate (traced): the planned memory's half, which reads are bounded by, and some.
PEAK_BYTES = (PLANNED_BYTES // 2) + (64 << 20)

CHILD = r"""
import json, resource, sys, tracemalloc, traceback
planned, cap = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_RSS, (planned, planned))  # what distributed (and daskbatch) take as this process's memory
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
sys.setrecursionlimit(3000)
import daskbatch as db
from daskbatch.errors import DataError
db.load_summary(sys.argv[3])  # warm: imports and caches outside the traced loads
tracemalloc.start()
print("ready", flush=True)
for line in sys.stdin:
    tracemalloc.reset_peak()
    out = {}
    try:
        db.load_summary(line.strip())
        out["ok"] = True
    except BaseException as exc:  # the test judges it
        out = {"ok": False, "type": type(exc).__name__, "message": str(exc), "data_error": isinstance(exc, DataError)}
        if not isinstance(exc, DataError):
            out["traceback"] = traceback.format_exc()[-4000:]
    out["peak"] = tracemalloc.get_traced_memory()[1]
    print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A saved summary with every kind of state (kernels off: no compiling)."""
    x = np.random.default_rng(13).normal(size=(120, 3))
    y = (x[:, 0] > 0).astype(np.int64)
    with dask.config.set({"daskbatch.kernels": False, "scheduler": "sync"}):
        summary = db.describe(x, label=y, stats=["moments", "cov", "hist", "sketch", "class_moments"], bins=6)
    path = tmp_path_factory.mktemp("fuzz") / "template.zarr"
    summary.save(path)
    return path


@pytest.fixture(scope="module")
def loader(template: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """The child that loads summaries, one path per line, under its memory caps."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Its stderr goes to a file, not a pipe nobody reads: zarr's event loop logs the tracebacks of some damaged
    # documents there, and a full pipe once blocked the child mid-load (and the test run with it).
    log = tmp_path_factory.mktemp("loader") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(PLANNED_BYTES), str(ADDRESS_SPACE_BYTES), str(template)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
        )
    _LOGS[proc.pid] = log
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if first.strip() != "ready":
        proc.kill()
        proc.wait()
        pytest.fail(f"the loader did not start: {first}{log.read_text()[-3000:]}")
    yield proc
    proc.kill()
    proc.wait()


#: Each loader's stderr file, by its process id.
_LOGS: dict[int, pathlib.Path] = {}


def _load(loader: subprocess.Popen[str], path: pathlib.Path) -> dict[str, Any]:
    assert loader.stdin is not None and loader.stdout is not None
    loader.stdin.write(f"{path}\n")
    loader.stdin.flush()
    line = loader.stdout.readline()
    if not line:
        pytest.fail(f"the loader died (exit {loader.wait()}): {_LOGS[loader.pid].read_text()[-3000:]}")
    return json.loads(line)


# ---------------------------------------------------------------- mutations


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=6),
    max_leaves=30,
)
DEPTHS = st.sampled_from([100, 5_000, 200_000])
SHAPE_DIMS = st.integers(0, 2**40) | st.sampled_from([0, 1, 3, 400_000_000, 2**31, 2**62])
DTYPES = st.sampled_from(["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64",
                          "complex128", "string", "nonsense", 7])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (keys and indices), the root included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """``doc`` with the value at ``path`` replaced."""
    if not path:
        return value
    doc[path[0]] = _set(doc[path[0]], path[1:], value)
    return doc


def _files(root: pathlib.Path, metadata: bool) -> list[pathlib.Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and (p.name == "zarr.json") == metadata)


def _arrays(root: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in _files(root, True) if json.loads(p.read_text()).get("node_type") == "array"]


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, Any]:
    """One damage, as (kind, parameters drawn); applied by :func:`_apply` to a copy of the template."""
    kind = draw(st.sampled_from(["json", "deep", "bytes", "shape", "dtype"]))
    seed = draw(st.integers(0, 2**32 - 1))
    if kind == "json":
        return kind, (seed, draw(JSON_VALUES))
    if kind == "deep":
        return kind, (seed, draw(DEPTHS), draw(st.sampled_from("[{")))
    if kind == "bytes":
        return kind, (seed, draw(st.booleans()), draw(st.binary(max_size=300)))
    if kind == "shape":
        return kind, (seed, draw(st.lists(SHAPE_DIMS, min_size=0, max_size=3)), draw(st.booleans()),
                      draw(st.booleans()))
    return kind, (seed, draw(DTYPES), draw(st.booleans()))


def _state_record(array_json: pathlib.Path) -> tuple[pathlib.Path, dict[str, Any], int] | None:
    """The state group's metadata that records this array, and the field's index there (None outside states)."""
    group_json = array_json.parent.parent / "zarr.json"
    if "states" not in array_json.parts or not group_json.exists():
        return None
    doc = json.loads(group_json.read_text())
    fields = doc.get("attributes", {}).get("fields") or []
    names = [f[0] for f in fields]
    return (group_json, doc, names.index(array_json.parent.name)) if array_json.parent.name in names else None


def _dtype_str(dtype: Any) -> str:
    """The record's spelling of ``dtype`` (NumPy's ``str``), or the text itself when NumPy has no such dtype."""
    try:
        return np.dtype(dtype).str
    except TypeError:
        return str(dtype)


def _apply(root: pathlib.Path, kind: str, params: Any) -> str:
    """Damage the summary at ``root``; say what was done (for the failure message)."""
    seed, *rest = params
    rng = random.Random(seed)
    if kind in ("json", "deep"):
        target = rng.choice(_files(root, True))
        doc = json.loads(target.read_text())
        path = rng.choice(_paths(doc))
        if kind == "json":
            target.write_text(json.dumps(_set(doc, path, rest[0])))
            return f"{target.relative_to(root)} at {path} = {rest[0]!r:.200}"
        depth, opener = rest
        closer = "]" if opener == "[" else "}"
        nested = (opener + ('"a":' if opener == "{" else "")) * depth + "1" + closer * depth
        marker = "\u0000MARK"
        text = json.dumps(_set(doc, path, marker)).replace(json.dumps(marker), nested)
        target.write_text(text)
        return f"{target.relative_to(root)} at {path}: {depth}-deep {opener}"
    if kind == "bytes":
        metadata, data = rest
        target = rng.choice(_files(root, metadata))
        target.write_bytes(data)
        return f"{target.relative_to(root)} = {data[:40]!r}"
    target = rng.choice(_arrays(root))
    doc = json.loads(target.read_text())
    record = _state_record(target)
    if kind == "shape":
        shape, chunks_too, record_too = rest
        doc["shape"] = shape
        if chunks_too:
            doc["chunk_grid"]["configuration"]["chunk_shape"] = [max(1, s) for s in shape]
        if record_too and record is not None:
            group_json, group_doc, i = record
            group_doc["attributes"]["fields"][i][2] = shape
            group_json.write_text(json.dumps(group_doc))
        target.write_text(json.dumps(doc))
        return f"{target.relative_to(root)} shape {shape} (chunks too: {chunks_too}, record too: {record_too})"
    dtype, record_too = rest
    doc["data_type"] = dtype
    if record_too and record is not None:
        group_json, group_doc, i = record
        group_doc["attributes"]["fields"][i][1] = _dtype_str(dtype)
        group_json.write_text(json.dumps(group_doc))
    target.write_text(json.dumps(doc))
    return f"{target.relative_to(root)} dtype {dtype!r} (record too: {record_too})"


def test_the_template_loads(loader: subprocess.Popen[str], template: pathlib.Path) -> None:
    result = _load(loader, template)
    assert result["ok"], result


@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutation=mutations())
def test_a_damaged_summary_is_one_line_in_bounded_memory(
    loader: subprocess.Popen[str], template: pathlib.Path, tmp_path: pathlib.Path, mutation: tuple[str, Any]
) -> None:
    case = tmp_path / "case.zarr"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(template, case)
    what = _apply(case, *mutation)
    result = _load(loader, case)
    assert result["peak"] <= PEAK_BYTES, (what, result)
    if not result["ok"]:
        assert result["data_error"], (what, result)
        message = result["message"]
        assert "\n" not in message.strip() and len(message) < 1000, (what, message[:3000])
        assert str(case) in message, (what, message)
