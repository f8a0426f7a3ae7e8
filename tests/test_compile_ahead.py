"""A new install's first call compiles in two processes: the parent from the front, a helper from the back.

Each run is a fresh ``python`` with its own ``NUMBA_CACHE_DIR``, describing a real Zarr store
with a label (``daskbatch.stats.kernels.ahead``): on an empty cache the first chunk task
starts a helper process that compiles the kernels the parent reaches last; the parent
loads those from the cache (numba's cache hits) and compiles the others (misses). The
answers are bitwise those of a parent that compiles alone, the helper is gone when the
parent exits, and a warm cache starts no helper.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, hashlib, json, sys
import numpy as np
import daskbatch as db
from numba.core.dispatcher import Dispatcher
from daskbatch.stats.kernels import ahead

from dask.callbacks import Callback
from dask.utils import key_split

parts = []  # the keys of a block's separate tasks (a pass's statistics in two tasks a block)
with Callback(posttask=lambda key, *_: parts.append(key) if key_split(key).startswith("db-part") else None):
    summary = db.describe(sys.argv[1], label="y")
digest = hashlib.sha256()
for name in sorted(summary.variables):
    value = getattr(summary.arrays, name)
    if isinstance(value, np.ndarray):
        digest.update(name.encode() + np.ascontiguousarray(value).view(np.uint8).tobytes())
loaded, compiled = [], []  # the kernels loaded from numba's cache, or compiled here
for kernel in gc.get_objects():
    if isinstance(kernel, Dispatcher) and kernel.py_func.__module__.startswith("daskbatch.stats.kernels"):
        if sum(kernel.stats.cache_misses.values()):
            compiled.append(kernel.py_func.__qualname__)
        elif sum(kernel.stats.cache_hits.values()):
            loaded.append(kernel.py_func.__qualname__)
print(json.dumps({"digest": digest.hexdigest(), "helper": ahead.child_pid(), "loaded": sorted(loaded),
                  "compiled": sorted(compiled), "parts": len(parts)}))
"""


def fresh_process(script: str, *args: str, cache: pathlib.Path, timeout: float = 280,
                  **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a new Python with numba's cache in ``cache`` and ``env`` set; its captured run."""
    environ = dict(os.environ, NUMBA_CACHE_DIR=str(cache), **env,
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", script, *args], env=environ, capture_output=True, text=True,
                          timeout=timeout)


def describe_in_a_fresh_process(store: pathlib.Path, cache: pathlib.Path, **env: str) -> dict:
    """Run :data:`CHILD` on ``store`` with numba's cache in ``cache``; what it printed."""
    done = fresh_process(CHILD, str(store), cache=cache, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def gone(pid: int) -> bool:
    """Whether no process ``pid`` exists (the helper was ended and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper runs only with two or more cores"
)
def test_a_cold_cache_compiles_in_two_processes_with_the_same_bits(tmp_path: pathlib.Path) -> None:
    import daskbatch as db

    store = tmp_path / "data.zarr"
    # Blocks of 8,192 rows take the tails' loop over candidates; the last, short one may be the first chunk task.
    db.synth(20000, 8, classes=3, path=str(store), chunk_rows=8192)

    # On whatever the machine's load (by default a busy machine, no core idle, starts no helper).
    shared = describe_in_a_fresh_process(store, tmp_path / "shared", DASKBATCH_COMPILE_AHEAD="1")
    assert shared["helper"] is not None
    assert gone(shared["helper"])  # nothing outlives the parent
    # The parent compiled some kernels and loaded the helper's others from the cache, none twice.
    assert shared["compiled"] and shared["loaded"], shared
    assert not set(shared["compiled"]) & set(shared["loaded"])
    # The second pass's histogram loop, which the parent reaches last, was the helper's first compile; then the
    # sketch's loops from its back (the tails' of full blocks, from a short first chunk repeated to their size,
    # and the grid's sweep that fills their block minima).
    assert {"_count_rows", "grid_tail_blocks", "tail_candidates"} <= set(shared["loaded"]), shared
    # While the helper compiles, a block's statistics stay in one task, in the order the two processes share out.
    assert shared["parts"] == 0

    alone = describe_in_a_fresh_process(store, tmp_path / "alone", DASKBATCH_COMPILE_AHEAD="0")
    assert alone["helper"] is None and not alone["loaded"]
    # The same kernels, split between the processes (callees compile with their callers: the loaded ones' are absent).
    assert set(shared["compiled"] + shared["loaded"]) <= set(alone["compiled"])
    assert shared["digest"] == alone["digest"]  # every result array, bit for bit

    warm = describe_in_a_fresh_process(store, tmp_path / "shared", DASKBATCH_COMPILE_AHEAD="1")
    assert (
        warm["helper"] is None and not warm["compiled"]
    )  # a warm cache: no helper, everything loaded
    assert warm["parts"] > 0  # and the co-moments of each block in a task of their own
    assert warm["digest"] == alone["digest"]


EARLY = r"""
import json, sys
import daskbatch as db
from daskbatch.engine import reduce
from daskbatch.stats.kernels import ahead

at_first_chunk = []  # the helper's pid when each chunk task asks for it
asked = reduce.compile_ahead
reduce.compile_ahead = lambda *args: (at_first_chunk.append(ahead.child_pid()), asked(*args))
db.describe(sys.argv[1], label="y")
print(json.dumps({"at_first_chunk": at_first_chunk[0], "helper": ahead.child_pid()}))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper runs only with two or more cores"
)
def test_the_helper_imports_before_the_first_chunk_task(tmp_path: pathlib.Path) -> None:
    import daskbatch as db

    store = tmp_path / "data.zarr"
    db.synth(3000, 4, classes=2, path=str(store), chunk_rows=1000)
    done = fresh_process(EARLY, str(store), cache=tmp_path / "cache", DASKBATCH_COMPILE_AHEAD="1")
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Started while describe planned (its imports overlap the run's start), then given the first chunk's sample.
    assert seen["at_first_chunk"] is not None and seen["at_first_chunk"] == seen["helper"], seen
    assert gone(seen["helper"])
    # It compiled into the cache: the first-pass kernels the parent reaches last are there.
    assert any(name.endswith(".nbi") for _, _, files in os.walk(tmp_path / "cache") for name in files)



EXIT_NOW = r"""
import numpy as np
from daskbatch.runtime.runlock import exit_now
from daskbatch.stats import Bundle, Moments, Sketch
from daskbatch.stats.kernels import ahead

x = np.random.default_rng(0).standard_normal((2000, 4)).astype(np.float32)
ahead.start(Bundle((Moments(), Sketch())), x, None, {})  # the helper compiles their kernels for seconds
print(ahead.child_pid(), flush=True)
exit_now(2)
"""


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper runs only with two or more cores"
)
def test_exit_now_ends_the_helper_too(tmp_path: pathlib.Path) -> None:
    # The CLI leaves on an interrupt, or a refusal once a pass has read, by exit_now (no exit hooks, no
    # finalisation: reads may be in flight); it ends the helper, which would outlive the parent compiling.
    done = fresh_process(EXIT_NOW, cache=tmp_path / "cache", timeout=120, DASKBATCH_COMPILE_AHEAD="1")
    assert done.returncode == 2, done.stderr[-2000:]
    helper = int(done.stdout.split()[-1])
    assert gone(helper)


FAILED_RUN = r"""
import sys
import daskbatch as db
from daskbatch.engine import pipeline
from daskbatch.stats.kernels import ahead

spawned = []
spawn = ahead._spawn
ahead._spawn = lambda sample: spawned.append(spawn(sample)) or spawned[-1]
def refuse(*args, **kwargs):
    raise ValueError("refused after the helper started")
pipeline.describe_statistics = refuse  # the run fails after the helper starts, before any chunk task
try:
    db.describe(sys.argv[1], label="y")
except ValueError:
    pass
print(len(spawned), ahead.child_pid(), spawned[0].wait(timeout=60) if spawned else None, flush=True)
"""


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper runs only with two or more cores"
)
def test_a_run_that_fails_before_its_first_chunk_task_ends_the_waiting_helper(tmp_path: pathlib.Path) -> None:
    # The helper starts while describe plans and waits for the first chunk task's sample: a run that fails in
    # between tells it so, and it ends (it waited SAMPLE_WAIT_SECONDS, 300 s, in a live notebook).
    import daskbatch as db

    store = tmp_path / "data.zarr"
    db.synth(3000, 4, classes=2, path=str(store), chunk_rows=1000)
    done = fresh_process(FAILED_RUN, str(store), cache=tmp_path / "cache", timeout=120, DASKBATCH_COMPILE_AHEAD="1")
    assert done.returncode == 0, done.stderr[-2000:]
    started, pid, code = done.stdout.split()
    assert (started, pid, code) == ("1", "None", "0")  # one helper, no longer this process's, ended by itself
