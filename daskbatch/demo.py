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
from daskbatch.precompile import compile_in_background, load_on_workers, quieter
from daskbatch.runtime.cluster import drop_close_noise
from daskbatch.summary.reprs import format_report

#: The demo's default size: seconds on a laptop (``--rows 2000000`` for the full-size run).
DEMO_ROWS = 200_000
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
        compiled = compile_in_background("float32", "int32", echo)  # the dtypes synth writes
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
            load_on_workers(client, dataset.x.dtype, None if dataset.label is None else dataset.label.dtype)
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
    with quieter("distributed.core", logging.WARNING):
        try:
            yield client
        finally:
            # The nanny kills a worker that has not exited 4 s after it was asked to (warning about it):
            # the workers are retired first, each with time to exit, and a late one killed without a word,
            # as nothing of the demo's is left on it.
            with quieter("distributed.nanny", logging.ERROR):
                with contextlib.suppress(Exception):  # a worker that is gone already: nothing to retire
                    client.run(drop_close_noise)
                    client.retire_workers(close_workers=True)
                client.close(timeout=SHUTDOWN_SECONDS)
                cluster.close(timeout=SHUTDOWN_SECONDS)


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
