"""The walk of one array through the package: ``describe`` of a small store with a label, traced.

``sys.setprofile`` records every call from one package file into another (or from
outside into the package) while ``describe`` runs on the synchronous scheduler;
the compiled kernels and the tasks the scheduler runs (a block's chunk or merge:
arithmetic repeated per block) are left aside. The walk is the sequence of files
those calls enter, consecutive calls into one file making one *stop*. A stop in a
file visited before is a *return to a file already left* when no frame of that
file is on the stack any more, else a *climb back up* (a callback). The issue's
target is at most 12 files and no return; the io open path and the statistics are
being rewritten at the same time, so the engine's part is asserted and the whole
walk printed.

That walk counts every call between package files: the statistics' set-up and the
configuration's look-ups as much as the data. The issue's measurement follows the
array (:func:`follow`): the path given to ``describe`` until a reader has opened it,
then what holds or lazily reads its values: the reader and its store, the zarr array,
the dask arrays, the FeatureMatrix, the kept blocks and the task graph built on them.
A call *carries* it when one of its arguments is, or holds, one of those; what a
carrying call returns joins them when it is an array or a graph (NumPy, Dask, Zarr),
holds a value followed, or comes from a call out of the package (``dataclasses.replace``,
a dask array's ``rechunk``). What ``compute`` returns is statistics, not the array: the
results' walk, from the passes to the Summary, is measured apart (the literal tracker,
which follows every value a carrying call returns, is printed for the record).
"""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from types import FrameType
from typing import Any

import dask
import numpy as np

import daskbatch as db

PACKAGE = str(Path(db.__file__).parent) + "/"
ASIDE = ("stats/kernels/",)  # compiled kernels and their dispatch: arithmetic, not the walk
TASKS = "dask/local.py"  # the synchronous scheduler running a task
#: engine and planning files the walk visits today (run options with the device choice, the pipeline, inputs,
#: reduce, the planner, planning search, memory and plan, the rows' fingerprint, passes).
ENGINE_FILES = 10
#: Returns into those files today (main before the pipeline: 16 files, 70 returns; 38 before the memory model asked
#: each statistic's footprint once per plan; 18 before the planner read the classes a store records, 17 before
#: describe's layout was one call): most are the pure planner's search calling the memory model (planning/plan.py)
#: and the passes calling reduce.
ENGINE_RETURNS = 15
#: io files the walk visits: the readers, the table-path check, the store (its open path, with outputs' zarr
#: target and the chunk grid behind it), the Dataset, and the object store's twin for the rows' checksums.
IO_FILES = 7
#: Returns into io: the engine wrapping the reader's array (io/readers.py) and the pipeline asking the chunk grid
#: for the rows' checksums (io/chunk_grid.py). Opening the store returns to none (main before it was one call: 4).
IO_RETURNS = 2
#: The array's walk (:func:`follow`): the issue's target, at most 12 files and no return (main before: the path, readers,
#: store, grid, Dataset, inputs, pipeline, planner, passes, reduce, progress and more: 16 files, 22 stops, 6 returns).
ARRAY_FILES = 12
ARRAY_RETURNS = 0
#: The results' walk: the literal tracker's stops from the passes on, where the merged states become results and
#: the Summary (and pass 2's graph is built). Today's numbers are the bar, so that it cannot grow.
RESULTS_FILES = 19
RESULTS_STOPS = 51
RESULTS_RETURNS = 31


def _package_file(frame: FrameType | None) -> str | None:
    """The frame's file relative to the package, or None outside it (and for the kernels)."""
    name = "" if frame is None else frame.f_code.co_filename
    if not name.startswith(PACKAGE) or name[len(PACKAGE):].startswith(ASIDE):
        return None
    return name[len(PACKAGE):]


def walk(call: Any, within: str | None = None) -> list[tuple[str, bool]]:
    """Run ``call()`` traced: each stop's file, and whether a frame of that file was on the stack already.

    ``within``: only the stops under a call of the package function of that name (``open_reader``: opening the data).
    """
    stops: list[tuple[str, bool]] = []

    def on_event(frame: FrameType, event: str, arg: Any) -> None:
        here = _package_file(frame) if event == "call" else None
        if here is None or _package_file(frame.f_back) == here:
            return  # outside the walk, or a call within one file
        on_stack, inside, caller = False, within in (None, frame.f_code.co_name), frame.f_back
        while caller is not None:
            if caller.f_code.co_filename.endswith(TASKS):
                return
            on_stack = on_stack or _package_file(caller) == here
            inside = inside or (caller.f_code.co_name == within and _package_file(caller) is not None)
            caller = caller.f_back
        if inside and (not stops or stops[-1][0] != here):
            stops.append((here, on_stack))

    with dask.config.set(scheduler="sync"):
        sys.setprofile(on_event)
        try:
            call()
        finally:
            sys.setprofile(None)
    return stops


#: Values that are not the data, however they were made: scalars, text, types, functions, modules, dtypes.
PLAIN = (type(None), bool, int, float, complex, str, bytes, type, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, types.ModuleType, np.dtype, np.generic)


def _trivial(value: Any) -> bool:
    """Whether ``value`` carries no data: a plain value, or a tuple of them."""
    if isinstance(value, tuple):
        return all(map(_trivial, value))
    return isinstance(value, PLAIN)


def _parts(value: Any) -> list[Any]:
    """``value`` and what it holds one level down: a container's items, an object's attributes."""
    if isinstance(value, tuple | list | set | frozenset):
        inner = list(value)
    elif isinstance(value, dict):
        inner = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    else:
        inner = list(getattr(value, "__dict__", {}).values())
    return [value, *inner]


#: Calls whose returns are statistics, not the array: the scheduler's results (dask's and the package's compute).
COMPUTES = frozenset({"compute"})
#: Modules of the values that are the array itself when a call carrying it returns them: arrays and task graphs.
ARRAYS = frozenset({"numpy", "dask", "zarr", "cupy"})


def _holds(value: Any, held: dict[int, Any]) -> bool:
    """Whether ``value``, an item or attribute of it, or one of theirs (two levels down) is followed."""
    return any(id(part) in held for inner in _parts(value) for part in _parts(inner))


def follow(
    call: Any, start: Any, package: str = PACKAGE, aside: tuple[str, ...] = ASIDE, *,
    opened_by: str = "open_reader", literal: bool = False,
) -> list[tuple[str, bool]]:
    """Run ``call()`` traced: the stops of the calls into ``package``'s files that carry ``start`` or what it became.

    A call carries the data when an argument, or an item or attribute of one (two levels down: the runner holding
    the FeatureMatrix holding the array), is by identity one of the values followed: ``start`` until the package's
    function ``opened_by`` returns (the path, until a reader has opened it), and what carrying calls returned. What
    a carrying call returns (each value of a tuple returned, not the attributes of an object returned) joins them
    when it is an array or a graph (:data:`ARRAYS`), holds a value followed, or comes from a call out of the
    package (``dataclasses.replace``, a dask array's ``rechunk``); never what a call named in :data:`COMPUTES`
    returns: statistics. ``literal``: every value not trivial a carrying call returns joins, and ``start`` stays
    (the walk of the data through its results to the Summary).
    """
    held: dict[int, Any] = {id(start): start}  # by identity; the values are kept alive so that no id is reused
    carrying: set[int] = set()  # the frames of the calls that carry the data, until they return
    stops: list[tuple[str, bool]] = []

    def inside(name: str) -> str | None:
        """The file relative to ``package``, or None outside it (and for the files set aside)."""
        if not name.startswith(package) or name[len(package):].startswith(aside):
            return None
        return name[len(package):]

    def carries(frame: FrameType) -> bool:
        """Whether one of the frame's arguments is the data or holds it."""
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        return any(_holds(frame.f_locals.get(a), held) for a in code.co_varnames[:n])

    def joins(value: Any, frame: FrameType) -> bool:
        """Whether ``value``, returned by the carrying call of ``frame``, is the data too."""
        if _trivial(value):
            return False
        if literal:
            return True
        if frame.f_code.co_name in COMPUTES:
            return False
        return (type(value).__module__.split(".")[0] in ARRAYS or _holds(value, held)
                or inside(frame.f_code.co_filename) is None)

    def on_event(frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if id(frame) in carrying:
                carrying.discard(id(frame))
                for value in (arg, *arg) if isinstance(arg, tuple) else (arg,):  # a tuple: several values returned
                    if joins(value, frame):
                        held.setdefault(id(value), value)
                if not literal and frame.f_code.co_name == opened_by and inside(frame.f_code.co_filename):
                    held.pop(id(start), None)  # opened: the path is a name from now on, the reader the data
            return
        if event != "call":
            return
        here, caller = inside(frame.f_code.co_filename), frame.f_back
        from_package = caller is not None and inside(caller.f_code.co_filename) is not None
        if here is None and not from_package:
            return  # neither a call into the package nor one the package makes
        up = caller
        while up is not None:
            if up.f_code.co_filename.endswith(TASKS) or (here is not None and inside(up.f_code.co_filename) is None
                                                          and up.f_code.co_filename.startswith(package)):
                return  # a task the scheduler runs, or a call under the files set aside
            up = up.f_back
        if not carries(frame):
            return
        carrying.add(id(frame))
        if here is None or (caller is not None and inside(caller.f_code.co_filename) == here):
            return  # a call out of the package, or within one file: no stop
        on_stack, up = False, caller
        while up is not None:
            on_stack = on_stack or inside(up.f_code.co_filename) == here
            up = up.f_back
        if not stops or stops[-1][0] != here:
            stops.append((here, on_stack))

    with dask.config.set(scheduler="sync"):
        sys.setprofile(on_event)
        try:
            call()
        finally:
            sys.setprofile(None)
    return stops


def returns(stops: list[tuple[str, bool]]) -> tuple[list[str], list[str]]:
    """The returns to a file already left, and the climbs back up (in a file with a frame on the stack)."""
    seen = [f for f, _ in stops]
    again = [(f, held) for i, (f, held) in enumerate(stops) if f in seen[:i]]
    return [f for f, held in again if not held], [f for f, held in again if held]


def test_returns_tell_a_file_left_from_a_callback() -> None:
    assert returns([("a", False), ("b", False), ("c", False)]) == ([], [])
    # a calls b, b returns, a calls c, c calls back into a (a climb), then a calls b again (a return)
    assert returns([("a", False), ("b", False), ("c", False), ("a", True), ("b", False)]) == (["b"], ["a"])


CHAIN = {
    "front.py": """
import dataclasses
from chain import opener, work

@dataclasses.dataclass
class Matrix:
    x: object
    rows: int

def describe(path):
    reader = opener.open_it(path)
    work.settings(3)  # no data: not a stop
    work.settings(path)  # the path, once opened, is only a name: not a stop
    # made outside the chain from the data: the new Matrix holds none of the values followed, only replace knows
    data = dataclasses.replace(Matrix(reader.block(), 2), x=None)
    means = work.compute(data)  # statistics: what it returns is not the data
    opener.size_of(means)  # not a stop
    return work.run(data)

def helper(data):
    return data.rows
""",
    "opener.py": """
import numpy as np

class Reader:
    def __init__(self, path):
        self.path = path
    def block(self):
        return np.array([1.0, 2.0])

def open_it(path):
    return Reader(path)

def shape_of(data):
    return (data.rows,)

def size_of(values):
    return len(values)
""",
    "work.py": """
import numpy as np
from chain import front, opener

def settings(n):
    return {"n": n}

def compute(data):
    return np.full(2, float(data.rows))

def run(data):
    opener.shape_of(data)  # back into a file left: a return
    return front.helper(data)  # into a file on the stack: a climb
""",
}


def test_follow_tracks_the_data_through_a_chain(tmp_path: Path, monkeypatch: Any) -> None:
    package = tmp_path / "chain"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in CHAIN.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    from chain import front  # type: ignore[import-not-found]

    path = str(tmp_path / "data.zarr")
    where = {"package": str(package) + "/", "aside": (), "opened_by": "open_it"}
    stops = follow(lambda: front.describe(path), path, **where)
    # front (from outside), opener (open_it, the Reader and its block: one stop), work (settings of the opened
    # path and of 3 carry nothing, compute and run carry the Matrix holding the block), opener again (a return:
    # size_of the means is no stop), front (a climb)
    assert stops == [("front.py", False), ("opener.py", False), ("work.py", False), ("opener.py", False),
                     ("front.py", True)], stops
    assert returns(stops) == (["opener.py"], ["front.py"])
    # literally: the path stays the data after the open, and the means are the data too
    stops = follow(lambda: front.describe(path), path, **where, literal=True)
    assert [f for f, _ in stops] == ["front.py", "opener.py", "work.py", "opener.py", "work.py", "opener.py",
                                     "work.py", "opener.py", "front.py"], stops
    # nothing carries another path
    assert follow(lambda: front.describe(path), str(tmp_path), **where) == []


def test_one_describe_walks_the_pipeline_once(tmp_path: Path) -> None:
    store = tmp_path / "small.zarr"
    db.synth(store, rows=400, features=5, classes=3, chunk_rows=100, seed=1)
    db.describe(str(store), label="y")  # warm: first imports and compilations are not the walk
    stops = walk(lambda: db.describe(str(store), label="y"))
    files = list(dict.fromkeys(f for f, _ in stops))
    back, climbs = returns(stops)
    print(f"\n{len(files)} package files, {len(stops)} stops, {len(back)} returns to a file already left, "
          f"{len(climbs)} climbs back up")
    for f in files:
        print(f"  {f}: {sum(s == f for s, _ in stops)} stops, {back.count(f)} returns, {climbs.count(f)} climbs")
    assert np.isfinite(db.describe(str(store), label="y").mi).all()
    engine = [f for f in files if f.startswith(("engine/", "planning/"))]
    # inputs -> layout (plan) -> passes: the pipeline's own modules, first visited in that order
    ours = ("engine/pipeline.py", "engine/planner.py", "engine/passes.py")
    assert [f for f in engine if f in ours] == list(ours)
    assert len(engine) <= ENGINE_FILES, engine
    engine_back = [f for f in back if f in engine]
    print("returns into the engine:", {f: engine_back.count(f) for f in dict.fromkeys(engine_back)})
    assert len(engine_back) <= ENGINE_RETURNS, engine_back
    assert "engine/passes.py" not in engine_back  # the passes run as one call: run(first, second)
    assert engine_back.count("engine/reduce.py") <= 5  # each pass builds its graph in one go
    io = [f for f in files if f.startswith("io/")]
    io_back = [f for f in back if f in io]
    print("returns into io:", {f: io_back.count(f) for f in dict.fromkeys(io_back)})
    assert len(io) <= IO_FILES, io
    assert len(io_back) <= IO_RETURNS, io_back


def _print_walk(stops: list[tuple[str, bool]], what: str) -> tuple[list[str], list[str], list[str]]:
    """Print the walk's totals and each file's stops, returns and climbs; its files, returns and climbs."""
    files = list(dict.fromkeys(f for f, _ in stops))
    back, climbs = returns(stops)
    print(f"\n{what}: {len(files)} package files, {len(stops)} stops, {len(back)} returns to a file already left, "
          f"{len(climbs)} climbs back up")
    print("  " + " -> ".join(f + ("^" if held else "") for f, held in stops))
    for f in files:
        print(f"  {f}: {sum(s == f for s, _ in stops)} stops, {back.count(f)} returns, {climbs.count(f)} climbs")
    return files, back, climbs


def test_the_array_walks_few_files_and_returns_to_none(tmp_path: Path) -> None:
    store = tmp_path / "small.zarr"
    db.synth(store, rows=400, features=5, classes=3, chunk_rows=100, seed=1)
    path = str(store)
    db.describe(path, label="y")  # warm: first imports and compilations are not the walk
    literal = follow(lambda: db.describe(path, label="y"), path, literal=True)
    _print_walk(literal, "for the record, the literal walk (every value a carrying call returns)")
    stops = follow(lambda: db.describe(path, label="y"), path)
    files, back, climbs = _print_walk(stops, "the array")
    assert "io/zarr_store.py" in files and "engine/passes.py" in files  # it follows the array into the passes
    assert len(files) <= ARRAY_FILES, files
    assert len(back) <= ARRAY_RETURNS, back
    into_passes = [f for f, _ in literal].index("engine/passes.py")
    files, back, _ = _print_walk(literal[into_passes:], "the results (the literal walk from the passes on)")
    assert len(files) <= RESULTS_FILES, files
    assert len(literal) - into_passes <= RESULTS_STOPS
    assert len(back) <= RESULTS_RETURNS, back


def test_opening_a_store_enters_each_file_once(tmp_path: Path) -> None:
    # The reader's open of a store: the store's open path is one call (integrity, absent chunks and the chunk
    # grid behind it), and no file is entered twice, neither returned to nor climbed back into.
    store = tmp_path / "small.zarr"
    db.synth(store, rows=400, features=5, classes=3, chunk_rows=100, seed=1)
    db.describe(str(store), label="y")
    opening = walk(lambda: db.describe(str(store), label="y"), within="open_reader")
    print("\nopening the store:", " -> ".join(f for f, _ in opening))
    assert [f for f, _ in opening].count("io/zarr_store.py") == 1, opening
    assert returns(opening) == ([], []), opening
