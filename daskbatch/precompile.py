"""The CPU kernels compiled (or loaded from numba's cache) once per machine, before a local cluster's workers start.

Worker processes that start on a cold cache would each compile the same kernels at once. ``daskbatch demo``,
``describe --cluster local`` and ``cluster: local`` jobs call :func:`prepare_kernels` first (the demo in a child
process, while its cluster starts: :func:`compile_in_background`), under one lock per machine; a marker file in
numba's cache then says that it holds them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from daskbatch.runtime.cluster import kernel_cache_dir, kernel_compile_lock, say

__all__ = ["compile_in_background", "load_on_workers", "prepare_kernels", "quieter"]

#: Said before a cold cache compiles the kernels (about 10 s on a 2-core VM: benchmarks/RESULTS.md).
COMPILING = "Compiling the CPU kernels once, about 10 s (later runs load them from numba's cache) ..."


def prepare_kernels(
    x_dtype: Any, label_dtype: Any = None, stats: Any = None, range_: Any = None, *, echo: Callable[[str], Any] = say,
) -> float:
    """Compile (or load from numba's cache) the CPU kernels a summary of such data uses, once per machine."""
    start = time.perf_counter()
    marker = _marker(x_dtype, label_dtype, stats, range_)
    # A warm cache is loaded without the lock: processes load at once, only compiling is one at a time.
    with contextlib.nullcontext() if os.path.exists(marker) else kernel_compile_lock():
        cold = not os.path.exists(marker)  # another process may have compiled while this one waited
        if cold:
            echo(COMPILING)
        _describe_a_few_rows(x_dtype, label_dtype, stats, range_)
        if cold:
            with contextlib.suppress(OSError):  # no marker: the next run says "compiling" again, no more
                open(marker, "w").close()
    spent = time.perf_counter() - start
    if cold:
        echo(f"  compiled in {spent:.1f} s")
    return spent


def compile_in_background(x_dtype: str, label_dtype: str, echo: Callable[[str], Any]) -> Callable[[], None]:
    """On a cold cache, start :func:`prepare_kernels` in a child process; the function that waits for it."""
    import subprocess
    import sys

    if os.path.exists(_marker(x_dtype, label_dtype, None, None)):
        return lambda: None  # warm: each worker loads what it needs
    echo(COMPILING)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this daskbatch, not another
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    code = ("import sys; from daskbatch.precompile import prepare_kernels; "
            "print(prepare_kernels(sys.argv[1], sys.argv[2], echo=lambda text: None))")
    child = subprocess.Popen([sys.executable, "-c", code, x_dtype, label_dtype], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait() -> None:
        """Wait for the child; compile here, raising its error, if it failed."""
        out, _ = child.communicate()
        try:
            spent = float(out.strip().splitlines()[-1])
        except (ValueError, IndexError):  # it failed: here the error is raised, or the compile done
            spent = prepare_kernels(x_dtype, label_dtype, echo=lambda text: None)
        echo(f"  kernels compiled in {spent:.1f} s")

    return wait


def _marker(*settings: Any) -> str:
    """The marker file that says numba's cache holds the kernels for ``settings`` (dtypes, stats, range)."""
    return os.path.join(kernel_cache_dir(), f"daskbatch-kernels-{_kernels_key(*settings)}.ready")


def _describe_a_few_rows(x_dtype: Any, label_dtype: Any, stats: Any, range_: Any) -> None:
    """Describe 512 random rows of these dtypes, quietly: numba compiles per dtype, not per size."""
    import numpy as np

    from daskbatch.describing import describe  # lazy: dask

    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 8)).astype(x_dtype)
    label = None if label_dtype is None else rng.integers(0, 3, 512).astype(label_dtype)
    settings = {} if stats is None else {"stats": stats}
    with quieter("daskbatch", logging.WARNING):  # the warm-up's plan and passes are not the run's
        describe(x, label, range=range_, **settings)


def _kernels_key(*settings: Any) -> str:
    """A short hash of the kernels' sources (names, sizes, times), numba's and Python's versions, and ``settings``."""
    import hashlib
    import sys

    import numba  # lazy: numba

    from daskbatch.stats import kernels  # lazy: numba

    where = os.path.dirname(kernels.__file__)
    sources = sorted(
        (name, st.st_size, st.st_mtime_ns)
        for name in os.listdir(where) if name.endswith(".py")
        for st in [os.stat(os.path.join(where, name))]
    )
    text = repr((sources, numba.__version__, sys.version, [str(s) for s in settings]))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def load_on_workers(client: Any, x_dtype: Any, label_dtype: Any) -> None:
    """Have each worker process load the demo's kernels (from numba's cache), in parallel, before the timing."""
    futures = [
        client.submit(_load_kernels, str(x_dtype), None if label_dtype is None else str(label_dtype),
                      workers=[address], pure=False)
        for address in client.scheduler_info(n_workers=-1)["workers"]
    ]
    client.gather(futures)


def _load_kernels(x_dtype: str, label_dtype: str | None) -> None:
    """On a worker: prepare the kernels in this process, on dask's synchronous scheduler, saying nothing."""
    import dask  # lazy: dask

    # The worker's own "Connection to ... has been closed" INFO lines, at the end, are not the demo's news.
    logging.getLogger("distributed.core").setLevel(logging.WARNING)
    with dask.config.set(scheduler="synchronous"):
        prepare_kernels(x_dtype, label_dtype, echo=lambda text: None)


@contextlib.contextmanager
def quieter(name: str, level: int) -> Iterator[None]:  # numpydoc ignore=PR01,YD01
    """Logger ``name`` at ``level`` for the block, then at its own level again."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)
