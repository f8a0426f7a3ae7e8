"""On an empty numba cache, a helper process compiles the kernels a chunk task will need later, on another core.

numba compiles one function at a time per process. :func:`prepare` starts the child while ``describe`` plans (its
imports overlap the run's start); :func:`start`, at the first chunk task, hands it that chunk's first rows and the
statistics reversed (after the histogram loop of a later pass when the sketch gives its ranges; a sketch's own
loops from its back), while the parent compiles from the front. Each top-level compile holds a lock file named
after the kernel in numba's cache, so the second comer loads the other's work and the two meet in the middle.
Off when the cache holds a daskbatch kernel, on one core, when every core was busy over the last minute, or
with ``DASKBATCH_COMPILE_AHEAD=0`` (``=1``: whatever the load); the child ends with the parent."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pathlib
import pickle
import select
import subprocess
import sys
import tempfile
import threading
from typing import Any

import numpy as np

__all__ = ["ENV", "SAMPLE_ROWS", "child_pid", "end_helper", "helping", "prepare", "release_unused", "start"]

#: The environment variable that switches the helper off ("0") or on whatever the load ("1"); unset: on
#: when a core is idle. The child runs with it set to "child".
ENV = "DASKBATCH_COMPILE_AHEAD"

#: Rows of the chunk the child reduces: numba compiles per dtype and layout, not per size, but the sketch's tails
#: take their loop over candidates from 4,096 rows (128 coarse blocks of 32 rows) and a shortcut below.
SAMPLE_ROWS = 4096

#: Longest wait of a helper started early for its sample (the parent's first chunk task).
SAMPLE_WAIT_SECONDS = 300.0

_state_lock = threading.Lock()
_decided = False
_child: subprocess.Popen[bytes] | None = None


def child_pid() -> int | None:
    """The process id of the helper this process started, or None."""
    return None if _child is None else _child.pid


def helping() -> bool:
    """Tell whether the helper this process started is still compiling.

    Returns
    -------
    bool
        True from :func:`prepare` until the helper ends.
    """
    return _child is not None and _child.poll() is None


def prepare(meta: Any) -> None:
    """On an empty cache, start the helper's process before the first chunk task, so that its imports overlap the run's start.

    Parameters
    ----------
    meta : array
        An empty array of the chunks' type and dtype (a dask array's ``_meta``).
    """
    global _child
    with _state_lock:
        if _decided or _child is not None or not _wanted(meta):
            return
        # It imports numba and the kernels, then waits for the sample that start() writes to its stdin.
        _child = _spawn("-")
        atexit.register(end_helper)


def release_unused() -> None:
    """End a helper that :func:`prepare` started and no chunk task gave a sample: a run that failed or read nothing.

    Without it the helper would wait for its sample until :data:`SAMPLE_WAIT_SECONDS` pass; a later run on the
    still empty cache starts another.
    """
    global _child
    with _state_lock:
        if _decided or _child is None:
            return
        waiting, _child = _child, None
    _hand_over(waiting, "")  # an empty line: it ends once its imports are done (subprocess reaps it later)


def start(stat: Any, x: Any, label: Any, masks: dict[str, Any]) -> None:
    """On an empty cache, start the helper that compiles ``stat``'s kernels for chunks like ``x`` (once)."""
    global _decided, _child
    if _decided:  # the warm path: one global read per chunk task (and a helper, once done, reaped)
        if _child is not None and _child.returncode is None:
            _child.poll()
        return
    with _state_lock:
        if _decided:
            return
        _decided = True
        waiting = _child  # started by prepare(): it reads the sample's path from its stdin
        sample = None
        try:
            if _wanted(x):
                sample = _sample(stat, x, label, masks)
        except Exception:  # noqa: BLE001 - a statistic that does not pickle: compiled here alone, as before
            sample = None
        if sample is None:
            if waiting is not None:
                _hand_over(waiting, "")  # an empty line: the helper ends
            return
        from daskbatch.stats.kernels import _numba  # lazy: numba

        # From now on each top-level compile here takes its kernel's lock file.
        _numba.sharing.set()
        if waiting is not None:
            _hand_over(waiting, sample)
        else:
            _child = _spawn(sample)
            atexit.register(end_helper)


def _spawn(sample: str) -> subprocess.Popen[bytes]:
    """Start the helper on the pickled ``sample``, or on ``"-"``: the sample's path to come on its stdin."""
    # This daskbatch, not another installed one.
    here = str(pathlib.Path(__file__).resolve().parents[3])
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "daskbatch.stats.kernels.ahead", sample],
        env=dict(os.environ, PYTHONPATH=path, **{ENV: "child"}),
        stdin=subprocess.PIPE if sample == "-" else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _hand_over(child: subprocess.Popen[bytes], sample: str) -> None:
    """Write the sample's path (empty: none) to the waiting helper's stdin and close it."""
    assert child.stdin is not None
    try:
        with child.stdin:
            child.stdin.write(sample.encode() + b"\n")
    except OSError:  # the helper is gone: the parent compiles alone
        if sample:
            with contextlib.suppress(OSError):
                os.remove(sample)


def _wanted(x: Any) -> bool:
    """Whether this process should start the helper for a chunk ``x``."""
    from daskbatch.stats.kernels.path import kernel_path  # lazy: dask config

    setting = os.environ.get(ENV, "")
    if setting in ("0", "child") or type(x) is not np.ndarray:
        return False
    from dask.system import CPU_COUNT as cores  # lazy: dask (affinity and cgroup quotas)

    if cores < 2:  # one core: the helper would only take the parent's time
        return False
    # Every core busy over the last minute: the helper's start-up would be a cost, not a gain. (Not "one
    # core idle": on two cores a user's own notebook or script alone keeps the load near 1.)
    if setting != "1" and hasattr(os, "getloadavg") and os.getloadavg()[0] >= cores:
        return False
    if kernel_path(x).kind != "numba-cpu":  # reads daskbatch.kernels first: numba stays unimported when off
        return False
    return _cache_empty()


def _cache_empty() -> bool:
    """Whether numba's cache directory for the kernels holds no compiled daskbatch kernel yet (a new install)."""
    from daskbatch.stats.kernels import _numba  # lazy: numba

    try:
        return not any(name.endswith(".nbi") for name in os.listdir(_numba.cache_directory()))
    except OSError:  # not made yet: nothing compiled
        return True


def _sample(stat: Any, x: np.ndarray, label: Any, masks: dict[str, Any]) -> str:
    """Pickle ``stat`` with its statistics reversed and the first rows of the chunk; the file's path."""
    if hasattr(stat, "__dataclass_fields__") and isinstance(getattr(stat, "stats", None), tuple):
        # A bundle's statistics from the back: the parent compiles from the front.
        stat = dataclasses.replace(stat, stats=stat.stats[::-1])

    def head(a: Any) -> Any:
        """:data:`SAMPLE_ROWS` rows of a per-row array (a short chunk's repeated), in its memory order (numba compiles per layout)."""
        if a is None:
            return None
        if 0 < a.shape[0] < SAMPLE_ROWS:  # the first chunk task may hold a store's short last block
            fortran = a.flags.f_contiguous and not a.flags.c_contiguous
            return np.array(np.concatenate([a] * -(-SAMPLE_ROWS // a.shape[0]))[:SAMPLE_ROWS], order="F" if fortran else "C")
        return np.array(a[:SAMPLE_ROWS], order="K")

    handle, path = tempfile.mkstemp(prefix="daskbatch-compile-ahead-", suffix=".pkl")
    try:
        with os.fdopen(handle, "wb") as out:
            pickle.dump((stat, head(x), head(label), {k: head(v) for k, v in masks.items()}), out)
    except BaseException:  # nothing of ours left behind in the temporary directory
        os.remove(path)
        raise
    return path


def end_helper() -> None:
    """End the helper if it still runs and reap it: at exit, and before an exit that runs no exit hooks (nothing outlives the parent)."""
    if _child is not None:
        if _child.poll() is None:
            _child.kill()  # numba writes a cache entry atomically: an interrupted one is simply absent
        _child.wait()


def _run_child(path: str) -> None:
    """The helper: reduce the pickled sample with the pickled statistics, compiling under the lock files."""
    from daskbatch.stats.kernels import _numba  # lazy: numba

    global _decided
    _decided = True
    _numba.sharing.set()
    try:
        with open(path, "rb") as f:
            stat, x, label, masks = pickle.load(f)  # noqa: S301 - written by the parent, read once
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
    with np.errstate(all="ignore"):
        if _counts_later(stat):  # the parent's last kernel comes first here
            _later_histogram(x, masks.get("weights"))
        for part in getattr(stat, "stats", (stat,)):
            if _is_sketch(part) and masks.get("weights") is None and x.shape[0]:
                _sketch_from_the_back(part, x)
        stat.chunk(x, label, **masks)


def _is_sketch(stat: Any) -> bool:
    """Whether ``stat`` is a quantile sketch."""
    from daskbatch.stats.sketch import Sketch  # lazy: they import the kernels

    return isinstance(stat, Sketch)


def _counts_later(stat: Any) -> bool:
    """Whether ``stat`` is a first pass whose sketch gives the ranges of histograms counted in a later pass."""
    from daskbatch.stats.histogram import Histogram  # lazy: they import the kernels

    stats = getattr(stat, "stats", (stat,))
    return any(map(_is_sketch, stats)) and not any(isinstance(s, Histogram) for s in stats)


def _sketch_from_the_back(sketch: Any, x: np.ndarray) -> None:
    """Compile an unweighted sketch's loops against its chunk's order: tails, grid, distinct values (the chunk: the rest).

    Within a sketch both processes would otherwise take its loops in the same order, the parent waiting on each:
    where the helper reached the sketch's last loops as the parent began its first, the parent waited on both.
    """
    from daskbatch.stats.kernels._numba_sketch import tail_replay  # lazy: numba
    from daskbatch.stats.kernels.path import float32_block  # lazy: the kernels' package
    from daskbatch.stats.sketch_distinct import (  # lazy: they import the kernels
        compiled_distinct,
        grid_chunk,
    )
    from daskbatch.stats.sketch_tails import tail_bounds, tail_layout  # lazy: the kernels

    x = float32_block(x)  # once, as Sketch.chunk does, for the loops below
    k = sketch.tail_values
    blocks = tail_layout(x.shape[0], x.shape[1], k) if k else None
    if blocks is not None:
        blocks[2][:] = np.inf  # compiled against, not read: no block holds a value (the grid's sweep fills them)
        block, fine, *_ = tail_bounds(x, k, blocks)
        # The row-order heap that a column whose kept values hold a zero replays (data with zeros: most tables).
        tail_replay(x, block, np.empty((fine.shape[1] // 2, k)), 0, fine)
    features = x.shape[1]  # extrema of [0, 1]: any finite ones take the same loop (with the tails' block minima)
    grid_chunk(x, np.zeros(features), np.ones(features), sketch.grid_bins, None, np.dtype(sketch.count_dtype), blocks)
    compiled_distinct(x, sketch.values_kept, None)


def _later_histogram(x: np.ndarray, weights: np.ndarray | None) -> None:
    """Count a histogram of the sample: compiles describe's second-pass loop (every range takes the same one)."""
    from daskbatch.stats.histogram import Histogram  # lazy: they import the kernels

    # Ranges of [0, 1] select the loop of any usual range; the bins, the classes and the number of grids (the
    # second pass counts its two histograms in one sweep, histogram.SweptBundle) do not change the types.
    features = x.shape[1]
    Histogram(bins=2, lo=(0.0,) * features, hi=(1.0,) * features).chunk(x, weights=weights)


def _wait_for_sample() -> None:
    """The helper started early: import numba and the kernels, then take the sample's path from stdin."""
    # Their imports (numba's the most), while the parent plans the run.
    from daskbatch.stats import _base, kernels  # noqa: F401  # lazy: the statistics
    from daskbatch.stats.kernels import _numba_moments, _numba_sketch  # noqa: F401  # lazy: numba

    try:  # a describe that fails before its first chunk task sends nothing: not an idle process for ever
        if not select.select([sys.stdin], [], [], SAMPLE_WAIT_SECONDS)[0]:
            return
    except (OSError, ValueError):  # no select on pipes here: wait for the line (or the parent's end)
        pass
    path = sys.stdin.readline().strip()
    if path:
        _run_child(path)


if __name__ == "__main__":
    if sys.argv[1] == "-":
        _wait_for_sample()
    else:
        _run_child(sys.argv[1])
