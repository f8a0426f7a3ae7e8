"""``daskbatch demo``: generate a dataset, start a local cluster, summarise it, show and save the result."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from daskbatch.io.outputs import OutputError, OutputTarget, check_output, staged
from daskbatch.runtime.cluster import (
    drop_heartbeat_failures,
    kernel_cache_dir,
    kernel_compile_lock,
    say,
)
from daskbatch.summary.reprs import format_report

#: The demo's default size: seconds on a laptop (``--rows 2000000`` for the full-size run).
DEMO_ROWS = 200_000
#: Said before a cold cache compiles the kernels (about 10 s on a 2-core VM: benchmarks/RESULTS.md).
_COMPILING = "Compiling the CPU kernels once, about 10 s (later runs load them from numba's cache) ..."
#: Seconds the cluster's shutdown gives each worker process to exit.
SHUTDOWN_SECONDS = 30


def run_demo(
    *,
    rows: int = DEMO_ROWS,
    features: int = 64,
    classes: int = 3,
    workers: int | None = None,
    threads_per_worker: int = 1,
    out_dir: str | None = None,
    keep: bool = False,
    seed: int = 0,
    progress: bool = True,
    echo: Any = print,
    report: Callable[[Any], str] = format_report,
) -> str:
    """Run the demo end to end and return the directory that held its data and results."""
    from dask.utils import format_bytes  # lazy: dask

    from daskbatch.describing import describe  # lazy: dask
    from daskbatch.engine.run_options import RunOptions  # lazy: dask
    from daskbatch.io.synth import synth  # lazy: dask, zarr

    keep = keep or out_dir is not None  # a directory the user named is theirs to remove
    out_dir = out_dir or tempfile.mkdtemp(prefix="daskbatch-demo-")
    os.makedirs(out_dir, exist_ok=True)
    store = os.path.join(out_dir, "data.zarr")
    summary_target = _check_demo_dir(out_dir, store) if keep else None
    # CPU_COUNT: the cores this process may use (affinity, cgroup quota)
    from dask.system import CPU_COUNT  # lazy: dask

    n_workers = workers or max(1, min(4, CPU_COUNT))
    try:
        t0 = time.perf_counter()
        # Once, by a child process, while the cluster starts and the data are written (no kernels there):
        # each worker would otherwise compile the same kernels at once.
        compiled = _compile_in_background("float32", "int32", echo)  # the dtypes synth writes
        t_write = time.perf_counter()
        with _local_client(n_workers, threads_per_worker) as client:
            echo(f"Local cluster: {n_workers} workers x {threads_per_worker} thread(s); dashboard: {_dashboard(client)}")
            echo(f"Writing a synthetic dataset ({rows:,} x {features} float32, {classes} classes) to {store} ...")
            correlated = min(4, features // 4)
            dataset = synth(
                rows, features, classes=classes, informative=min(8, features - correlated),
                correlated=correlated, seed=seed, path=store, overwrite=True,
            )
            echo(f"  written in {time.perf_counter() - t_write:.1f} s: {format_bytes(_disk_bytes(store))} on disk")
            compiled()
            # Each worker process loads the kernels from numba's cache now, so that the summary's rows/s
            # is the computation's alone.
            _load_on_workers(client, dataset.x.dtype, None if dataset.label is None else dataset.label.dtype)
            echo("Computing the summary (moments, covariance, histograms, mutual information) ...")
            t1 = time.perf_counter()
            summary = describe(dataset, run=RunOptions(progress=progress))
            t2 = time.perf_counter()
        echo(f"\n  summary computed in {t2 - t1:.1f} s ({rows / max(t2 - t1, 1e-9):,.0f} rows/s)\n")
        echo(report(summary))
        if summary_target is not None:
            summary.save(summary_target.path)  # checked before the compute; an earlier demo's is replaced
            table = os.path.join(out_dir, "summary.csv")
            with staged(table) as tmp:
                summary.to_dataframe().to_csv(tmp)
            echo(f"\nResults saved: {summary_target.path} (load with daskbatch.load_summary) and {table}")
            echo(f"Kept {out_dir} ({format_bytes(_disk_bytes(out_dir))}): remove it when done")
        echo(f"Total time {time.perf_counter() - t0:.1f} s")
    finally:
        if not keep:
            size = format_bytes(_disk_bytes(out_dir))
            shutil.rmtree(out_dir, ignore_errors=True)  # a directory this call made
            echo(f"Removed the demo's data ({size} in {out_dir}); --keep keeps them and saves the results")
    return out_dir


@contextlib.contextmanager
def _local_client(n_workers: int, threads_per_worker: int) -> Iterator[Any]:
    """A local cluster's client; on exit the workers stop first, then the client, then the cluster, quietly."""
    from distributed import Client, LocalCluster  # lazy: distributed

    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, dashboard_address=":0")
    client = Client(cluster)
    # distributed.core's "Connection to ... has been closed" (INFO) is not the demo's news: not shown.
    with _quieter("distributed.core", logging.WARNING):
        try:
            yield client
        finally:
            # The nanny kills a worker that has not exited 4 s after it was asked to (warning about it):
            # the workers are retired first, each with time to exit, and a late one killed without a word,
            # as nothing of the demo's is left on it.
            with _quieter("distributed.nanny", logging.ERROR):
                with contextlib.suppress(Exception):  # a worker that is gone already: nothing to retire
                    client.run(drop_heartbeat_failures)
                    client.retire_workers(close_workers=True)
                client.close(timeout=SHUTDOWN_SECONDS)
                cluster.close(timeout=SHUTDOWN_SECONDS)


@contextlib.contextmanager
def _quieter(name: str, level: int) -> Iterator[None]:
    """Logger ``name`` at ``level`` for the block, then at its own level again."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def _dashboard(client: Any) -> str:
    """The dashboard's link, or what it needs first: the base install leaves out bokeh, which draws it."""
    from importlib.util import find_spec

    if find_spec("bokeh") is None:
        return f"needs bokeh (pip install bokeh, or the [notebook] extra), then at {client.dashboard_link}"
    return str(client.dashboard_link)


def _disk_bytes(path: str) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed while counting
                total += os.path.getsize(os.path.join(root, name))
    return total


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
            echo(_COMPILING)
        _describe_a_few_rows(x_dtype, label_dtype, stats, range_)
        if cold:
            with contextlib.suppress(OSError):  # no marker: the next run says "compiling" again, no more
                open(marker, "w").close()
    spent = time.perf_counter() - start
    if cold:
        echo(f"  compiled in {spent:.1f} s")
    return spent


def _compile_in_background(x_dtype: str, label_dtype: str, echo: Callable[[str], Any]) -> Callable[[], None]:
    """On a cold cache, start :func:`prepare_kernels` in a child process; the function that waits for it."""
    import subprocess
    import sys

    if os.path.exists(_marker(x_dtype, label_dtype, None, None)):
        return lambda: None  # warm: each worker loads what it needs
    echo(_COMPILING)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this daskbatch, not another
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    code = ("import sys; from daskbatch.demo import prepare_kernels; "
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
    with _quieter("daskbatch", logging.WARNING):  # the warm-up's plan and passes are not the run's
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


def _load_on_workers(client: Any, x_dtype: Any, label_dtype: Any) -> None:
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


def _check_demo_dir(out_dir: str, store: str) -> OutputTarget:
    """Refuse an ``out_dir`` whose data.zarr / summary.csv were not written by an earlier demo (they are replaced)."""
    import zarr  # lazy: zarr

    earlier = False
    if os.path.lexists(store):
        try:
            earlier = "synth" in zarr.open_group(store, mode="r").attrs
        except (OSError, ValueError):  # not a Zarr group: not ours
            earlier = False
        if not earlier:
            raise OutputError(f"--out {out_dir} holds a data.zarr that the demo did not write; choose another directory")
    table = os.path.join(out_dir, "summary.csv")
    if os.path.lexists(table) and not earlier:
        raise OutputError(f"--out {out_dir} holds a summary.csv that the demo did not write; choose another directory")
    return check_output(os.path.join(out_dir, "summary.zarr"), kind="summary", what="--out")
