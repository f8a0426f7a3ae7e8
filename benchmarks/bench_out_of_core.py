"""Out-of-core benchmark: describe a Zarr array several times larger than the cluster's memory.

Starts a ``LocalCluster`` of process workers with a low ``memory_limit``, writes
(or reuses) a float64 store ``--ratio`` times the workers' total memory, plans
the chunking with :func:`daskbatch.planning.search.plan`, runs :func:`daskbatch.describe`
and reports: wall time, worker restarts (pids before/after), each worker's
baseline and peak RSS against the plan's projected task bytes, and the largest
relative difference from a two-pass numpy reference streamed chunk by chunk.

Usage::

    python benchmarks/bench_out_of_core.py --workers 2 --memory-limit 512MiB --ratio 4 \\
        --store /tmp/ooc.zarr --markdown
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes


def weyl_block(block: np.ndarray, block_info: dict | None = None) -> np.ndarray:
    """Cheap deterministic correlated columns (fractional parts of i times irrationals)."""
    start = block_info[None]["array-location"][0][0] if block_info else 0  # type: ignore[index]
    d = block.shape[1]
    i = np.arange(start, start + block.shape[0], dtype=np.float64)[:, None]
    j = np.arange(d, dtype=np.float64)[None, :]
    return (100.0 * j - 50.0) + (1.0 + j) * np.modf(i * np.sqrt(2.0 + j))[0] + (j % 3) * np.modf(i * 0.618034)[0]


def write_store(path: Path, rows: int, d: int, storage_rows: int) -> None:
    group = zarr.open_group(path, mode="w")
    target = group.create_array("X", shape=(rows, d), chunks=(storage_rows, d), dtype="f8", compressors=None)
    da.store(da.zeros((rows, d), chunks=(storage_rows, d)).map_blocks(weyl_block, dtype="f8"), target, lock=False)


def reference(path: Path, storage_rows: int) -> dict[str, np.ndarray]:
    """Mean, variance and covariance by two streamed passes in float64 (math.fsum across chunks)."""
    arr = zarr.open_array(path, path="X", mode="r")
    rows, d = arr.shape
    parts = [np.asfortranarray(arr[a : a + storage_rows]).sum(axis=0) for a in range(0, rows, storage_rows)]
    mean = np.array([math.fsum(p[j] for p in parts) for j in range(d)]) / rows
    co = np.zeros((d, d))
    for a in range(0, rows, storage_rows):
        c = arr[a : a + storage_rows] - mean
        co += c.T @ c
    return {"mean": mean, "var": np.diag(co) / (rows - 1), "cov": co / (rows - 1)}


def worker_facts() -> tuple[int, int, int]:
    """(pid, current RSS, peak RSS) of the calling worker process, in bytes."""
    import resource

    import psutil

    return os.getpid(), psutil.Process().memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="512MiB")
    ap.add_argument("--ratio", type=float, default=4.0, help="data bytes / total worker memory")
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--storage-rows", type=int, default=32_768)
    ap.add_argument("--reserved", default="160MiB", help="daskbatch.reserved-memory (the worker's interpreter)")
    ap.add_argument("--store", type=Path, default=Path("/tmp/daskbatch-ooc.zarr"))
    ap.add_argument("--stats", default="moments,cov,hist")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    import distributed

    import daskbatch as db
    from daskbatch.engine.planner import plan
    from daskbatch.io.dataset import open_dataset
    from daskbatch.planning.plan import Resources

    limit = parse_bytes(args.memory_limit)
    rows = math.ceil(args.ratio * args.workers * limit / (8 * args.features))
    if not (args.store / "X").exists() or zarr.open_array(args.store, path="X").shape != (rows, args.features):
        t = time.perf_counter()
        write_store(args.store, rows, args.features, args.storage_rows)
        print(f"wrote {args.store} in {time.perf_counter() - t:.1f} s")
    stats = tuple(args.stats.split(","))
    config = {"daskbatch.reserved-memory": args.reserved}
    with dask.config.set(config), distributed.LocalCluster(
        n_workers=args.workers, threads_per_worker=1, memory_limit=limit, processes=True,
        dashboard_address=None, silence_logs=40,
    ) as cluster, distributed.Client(cluster) as client:
        p = plan(open_dataset(args.store), stats=stats, resources=Resources(limit, 1, args.workers))
        data = open_dataset(args.store, chunks=p.chunk_rows)
        before = client.run(worker_facts)
        t = time.perf_counter()
        summary = db.describe(data, stats=stats, run=db.RunOptions(plan=p))
        wall = time.perf_counter() - t
        after = client.run(worker_facts)
    restarts = sum(1 for a in before if a not in after or after[a][0] != before[a][0])
    ref = reference(args.store, args.storage_rows)
    diff = {k: float(np.max(np.abs(getattr(summary, k) - v) / np.abs(v).clip(1e-300))) for k, v in ref.items()}
    row = {
        "data": format_bytes(rows * args.features * 8),
        "shape": f"{rows:,} x {args.features}",
        "workers": f"{args.workers} x {format_bytes(limit)}",
        "ratio": rows * args.features * 8 / (args.workers * limit),
        "chunk": f"{p.chunk_rows:,} rows ({format_bytes(p.chunk_rows * args.features * 8)})",
        "budget": format_bytes(p.budget_bytes),
        "projected task": format_bytes(p.task_bytes),
        "baseline rss": ", ".join(format_bytes(v[1]) for v in before.values()),
        "peak rss": ", ".join(format_bytes(v[2]) for v in after.values()),
        "peak - baseline": ", ".join(format_bytes(after[a][2] - before[a][1]) for a in after if a in before),
        "restarts": restarts,
        "wall s": round(wall, 1),
        "max rel diff": ", ".join(f"{k} {v:.1e}" for k, v in diff.items()),
        "kernels": dask.config.get("daskbatch.kernels", None),
    }
    if args.markdown:
        print("| " + " | ".join(row) + " |")
        print("|" + "---|" * len(row))
        print("| " + " | ".join(str(v) for v in row.values()) + " |")
    else:
        for k, v in row.items():
            print(f"{k:>16}: {v}")
    return row


if __name__ == "__main__":
    main()
