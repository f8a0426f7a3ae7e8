"""``daskbatch demo``: generate a dataset, start a local cluster, summarise it, show and save the result."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

from daskbatch.io.outputs import OutputError, OutputTarget, check_output, staged
from daskbatch.summary.reprs import format_report


def run_demo(
    *,
    rows: int = 2_000_000,
    features: int = 64,
    classes: int = 3,
    workers: int | None = None,
    threads_per_worker: int = 1,
    out_dir: str | None = None,
    seed: int = 0,
    echo: Any = print,
) -> str:
    """Run the demo end to end and return the directory that holds its data and results."""
    from distributed import Client, LocalCluster  # lazy: distributed

    from daskbatch.describing import describe  # lazy: dask
    from daskbatch.engine.run_options import RunOptions  # lazy: dask
    from daskbatch.io.synth import synth  # lazy: dask, zarr

    out_dir = out_dir or tempfile.mkdtemp(prefix="daskbatch-demo-")
    os.makedirs(out_dir, exist_ok=True)
    store = os.path.join(out_dir, "data.zarr")
    summary_target = _check_demo_dir(out_dir, store)
    # CPU_COUNT: the cores this process may use (affinity, cgroup quota)
    from dask.system import CPU_COUNT  # lazy: dask

    n_workers = workers or max(1, min(4, CPU_COUNT))

    t0 = time.perf_counter()
    # Here, before the workers start: each worker would otherwise compile the same kernels at once,
    # and the summary's rows/s would report the compile instead of the computation.
    echo("Preparing the CPU kernels (compiled once per machine, about a minute; later runs load them) ...")
    _prepare_kernels(features, classes, seed)
    echo(f"  ready in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    with LocalCluster(
        n_workers=n_workers, threads_per_worker=threads_per_worker, dashboard_address=":0"
    ) as cluster, Client(cluster) as client:
        echo(f"Local cluster: {n_workers} workers x {threads_per_worker} thread(s); dashboard: {client.dashboard_link}")
        echo(f"Writing a synthetic dataset ({rows:,} x {features} float32, {classes} classes) to {store} ...")
        correlated = min(4, features // 4)
        dataset = synth(
            rows, features, classes=classes, informative=min(8, features - correlated),
            correlated=correlated, seed=seed, path=store, overwrite=True,
        )
        t1 = time.perf_counter()
        echo(f"  written in {t1 - t0:.1f} s")
        echo("Computing the summary (moments, covariance, histograms, mutual information) ...")
        summary = describe(dataset, run=RunOptions(progress=True))
        t2 = time.perf_counter()
    echo(f"\n  summary computed in {t2 - t1:.1f} s ({rows / max(t2 - t1, 1e-9):,.0f} rows/s)\n")
    echo(format_report(summary, k=10))
    results = os.path.join(out_dir, "summary.zarr")
    summary.save(summary_target.path)  # checked before the compute; an earlier demo's is replaced
    table = os.path.join(out_dir, "summary.csv")
    with staged(table) as tmp:
        summary.to_dataframe().to_csv(tmp)
    echo(f"\nResults saved: {results} (load with daskbatch.load_summary) and {table}")
    echo(f"Total time {time.perf_counter() - t0:.1f} s")
    return out_dir


def _prepare_kernels(features: int, classes: int, seed: int) -> None:
    """Compile (or load from numba's cache) the kernels the demo's summary uses, on a few in-memory rows."""
    import numpy as np

    from daskbatch.describing import describe  # lazy: dask

    rng = np.random.default_rng(seed)
    # The demo's dtypes (float32 features, integer classes), so that the workers find these specialisations cached.
    x = rng.standard_normal((512, features)).astype(np.float32)
    quiet = logging.getLogger("daskbatch")  # the warm-up's plan and passes are not the demo's
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        describe(x, rng.integers(0, max(classes, 1), 512))
    finally:
        quiet.setLevel(level)


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
