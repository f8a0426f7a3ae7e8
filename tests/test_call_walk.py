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
"""

from __future__ import annotations

import sys
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
#: each statistic's footprint once per plan): most are the pure planner's search calling the memory model
#: (planning/plan.py) and the passes calling reduce.
ENGINE_RETURNS = 18
#: io files the walk visits: the readers, the table-path check, the store (its open path, with outputs' zarr
#: target and the chunk grid behind it), the Dataset, and the object store's twin for the rows' checksums.
IO_FILES = 7
#: Returns into io: the engine wrapping the reader's array (io/readers.py) and the pipeline asking the chunk grid
#: for the rows' checksums (io/chunk_grid.py). Opening the store returns to none (main before it was one call: 4).
IO_RETURNS = 2


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


def returns(stops: list[tuple[str, bool]]) -> tuple[list[str], list[str]]:
    """The returns to a file already left, and the climbs back up (in a file with a frame on the stack)."""
    seen = [f for f, _ in stops]
    again = [(f, held) for i, (f, held) in enumerate(stops) if f in seen[:i]]
    return [f for f, held in again if not held], [f for f, held in again if held]


def test_returns_tell_a_file_left_from_a_callback() -> None:
    assert returns([("a", False), ("b", False), ("c", False)]) == ([], [])
    # a calls b, b returns, a calls c, c calls back into a (a climb), then a calls b again (a return)
    assert returns([("a", False), ("b", False), ("c", False), ("a", True), ("b", False)]) == (["b"], ["a"])


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
