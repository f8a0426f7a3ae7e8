"""``daskbatch demo``: generate a dataset, start a local cluster, summarise it, show and save the result."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from daskbatch.report import format_report


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
    """Run the demo end to end and return the directory that holds its data and results.

    Parameters
    ----------
    rows, features, classes : int
        Size of the synthetic dataset (float32 features, integer label).
    workers : int, optional
        Worker processes of the local cluster (default: one per core, at most 4).
    threads_per_worker : int, default 1
        Threads per worker.
    out_dir : str, optional
        Where to write the store and the results (a new temporary directory by default).
    seed : int, default 0
        Seed of the synthetic data.
    echo : callable, default print
        Where progress lines go.
    """
    from distributed import Client, LocalCluster

    from daskbatch.describe import describe
    from daskbatch.io.synth import synth

    out_dir = out_dir or tempfile.mkdtemp(prefix="daskbatch-demo-")
    os.makedirs(out_dir, exist_ok=True)
    store = os.path.join(out_dir, "data.zarr")
    n_workers = workers or max(1, min(4, os.cpu_count() or 1))

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
        summary = describe(dataset, progress=True)
        t2 = time.perf_counter()
    echo(f"\n  summary computed in {t2 - t1:.1f} s ({rows / max(t2 - t1, 1e-9):,.0f} rows/s)\n")
    echo(format_report(summary, top=10))
    results = os.path.join(out_dir, "summary.zarr")
    summary.save(results)
    table = os.path.join(out_dir, "summary.csv")
    summary.to_dataframe().to_csv(table)
    echo(f"\nResults saved: {results} (load with daskbatch.load_summary) and {table}")
    echo(f"Total time {time.perf_counter() - t0:.1f} s")
    return out_dir
