"""One BLAS (and numba) thread per dask thread while chunk tasks run side by side."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["limited"]

_lock = threading.Lock()
_inside = 0  # chunk tasks inside the limit now
_restore: Any = None  # threadpoolctl's limiter of the first task in, until the last leaves
_controller: Any = None  # (len(sys.modules) when scanned, threadpoolctl.ThreadpoolController)


def _scheduler_threads() -> int:
    """Count the tasks the scheduler running this one may run at once in this process (1 if unknown)."""
    try:
        from distributed import get_worker  # lazy: distributed

        return int(getattr(get_worker(), "nthreads", 1))
    except (ImportError, ValueError):  # not inside a distributed worker
        pass
    import dask.threaded  # lazy: dask

    # The threaded scheduler runs tasks on threads of its executors; the
    # synchronous one on the caller's thread, which is in none. A thread is
    # matched to its executor by name ("<prefix>_<k>"): the executor's set of
    # threads is filled only after a new thread has started its first task.
    # (_thread_name_prefix and _max_workers are ThreadPoolExecutor's own fields; dask reads the latter too.)
    prefix = threading.current_thread().name.rpartition("_")[0]
    pools = [dask.threaded.default_pool]
    pools += [p for by_count in list(dask.threaded.pools.values()) for p in list(by_count.values())]
    for pool in pools:
        if pool is not None and prefix and prefix == getattr(pool, "_thread_name_prefix", None):
            return int(getattr(pool, "_max_workers", 1))
    return 1


@contextlib.contextmanager
def limited() -> Iterator[None]:
    """Run the body with one BLAS and one numba thread if other tasks may run beside it."""
    if _scheduler_threads() <= 1:
        yield
        return
    _enter_blas()
    numba_before = _set_numba_threads(1)
    try:
        yield
    finally:
        if numba_before is not None:
            _set_numba_threads(numba_before, restore=True)
        _leave_blas()


def _enter_blas() -> None:
    global _inside, _restore, _controller
    with _lock:
        if _inside == 0:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # a dependency, but a missing one must not stop the statistics
                _restore = None
            else:
                # Scanning the loaded libraries costs ~4 ms, so the scan is kept until
                # Python imports something new (which is how a BLAS such as SciPy's gets loaded).
                if _controller is None or _controller[0] != len(sys.modules):
                    _controller = (len(sys.modules), ThreadpoolController())
                _restore = _controller[1].limit(limits=1, user_api="blas")
                _release_openblas()
        _inside += 1


def _leave_blas() -> None:
    global _inside, _restore
    with _lock:
        _inside -= 1
        if _inside == 0 and _restore is not None:
            _restore.restore_original_limits()
            _restore = None
            _release_openblas()


def _release_openblas() -> None:
    """Let any thread set OpenBLAS's limit next (a no-op before threadpoolctl 3.8, which had no owner)."""
    from threadpoolctl import OpenBLASController

    release = getattr(OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release()


def _set_numba_threads(n: int, restore: bool = False) -> int | None:
    """Set numba's threads for this thread; return the old count (None without numba or a threading layer)."""
    try:
        import numba  # a dependency; the chunk's kernels load it anyway  # lazy: numba
    except ImportError:
        return None
    try:
        before = numba.get_num_threads()
        numba.set_num_threads(n if restore else min(n, before))
    except Exception:  # no threading layer on this platform: nothing runs in parallel anyway
        return None
    return before
