"""The cost of sample weights: ``describe(x, label, weights=w)`` against the same call without weights.

Builds a float32 Zarr store (rows x features, chunked by rows, zstd level 1)
with an integer label (4 classes) and float64 weights in the same store, then
times, alternating weighted and unweighted runs in one process (the same
page cache, load and numba cache for both):

* ``fused pass``: moments + cov + hist + mi + class_moments with ``range=`` given,
  so everything is one pass over the data;
* ``describe (default)``: the default statistics, ranges from the data: the
  first pass (moments + cov + class_moments + sketch) and the second (histograms,
  the fine quantile histogram);

and, per chunk on one thread, each statistic's ``chunk`` with and without weights.

Usage::

    python benchmarks/bench_weights.py --rows 1000000 --features 64 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def build_store(path: str, rows: int, features: int, chunk_rows: int, zeros: float = 0.05) -> None:
    """Write X (float32), y (4 classes) and w (gamma-distributed weights, a share ``zeros`` of them 0) to a Zarr store."""
    import zarr

    rng = np.random.default_rng(0)
    root = zarr.open_group(path, mode="w")
    x = root.create_array("X", shape=(rows, features), dtype="float32", chunks=(chunk_rows, features))
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        x[start:stop] = rng.standard_normal((stop - start, features), dtype=np.float32) * 3 + 1
    y = rng.integers(0, 4, rows)
    w = rng.gamma(2.0, 1.0, rows)
    w[rng.random(rows) < zeros] = 0.0
    root.create_array("y", data=y, chunks=(chunk_rows,))
    root.create_array("w", data=w, chunks=(chunk_rows,))


def time_describe(path: str, repeat: int, **options: object) -> tuple[list[tuple[float, float]], ...]:
    """(wall, CPU) seconds of describe without and with weights, alternating, after one warm-up of each.

    CPU seconds (all threads of this process) are steadier than wall time on a shared machine.
    """
    import daskbatch as db

    plain: list[tuple[float, float]] = []
    weighted: list[tuple[float, float]] = []
    for i in range(repeat + 1):
        for weights, out in ((None, plain), ("w", weighted)):
            t0, c0 = time.perf_counter(), time.process_time()
            db.describe(path, "y", weights=weights, **options)
            if i:  # the first round warms the page cache and numba's cache
                out.append((time.perf_counter() - t0, time.process_time() - c0))
    return plain, weighted


def time_chunks(chunk_rows: int, features: int, repeat: int) -> list[tuple[str, float, float]]:
    """Per-chunk times (one thread) of every statistic's chunk, without and with weights."""
    from daskbatch.stats import ClassMoments, CoMoments, Histogram, Moments, Sketch

    rng = np.random.default_rng(1)
    x = rng.standard_normal((chunk_rows, features), dtype=np.float32)
    y = rng.integers(0, 4, chunk_rows)
    w = rng.gamma(2.0, 1.0, chunk_rows)
    lo, hi = (-5.0,) * features, (5.0,) * features
    stats = [Moments(), CoMoments(), Histogram(bins=64, lo=lo, hi=hi, by_label=True, classes=(0, 1, 2, 3)),
             ClassMoments(classes=(0, 1, 2, 3)), Sketch()]
    out = []
    for s in stats:
        s.chunk(x[:64], y[:64])
        s.chunk(x[:64], y[:64], weights=w[:64])
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeat):
            for weighted in (False, True):
                t0 = time.perf_counter()
                s.chunk(x, y, **({"weights": w} if weighted else {}))
                times[weighted].append(time.perf_counter() - t0)
        out.append((type(s).__name__, statistics.median(times[False]), statistics.median(times[True])))
    return out


def main() -> None:
    """Run the benchmark and print a Markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--chunk-rows", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--zeros", type=float, default=0.05, help="Share of rows of weight 0.")
    args = parser.parse_args()

    import dask

    from daskbatch.runtime.capacity import limited

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.zarr")
        build_store(path, args.rows, args.features, args.chunk_rows, args.zeros)
        rows = []
        with dask.config.set(scheduler="threads", num_workers=2):
            fused = dict(stats=("moments", "cov", "hist", "mi", "class_moments"), range=(-15.0, 17.0))
            rows.append(("fused pass (moments+cov+hist+mi+class_moments, range given)",
                         *time_describe(path, args.repeat, **fused)))
            rows.append(("describe (default statistics, 2 passes)", *time_describe(path, args.repeat)))
    with limited():
        per_chunk = time_chunks(args.chunk_rows, args.features, max(5, args.repeat))

    print(f"Data: {args.rows:,} x {args.features} float32 Zarr store, chunks of {args.chunk_rows:,} rows, zstd; "
          "label with 4 classes, float64 weights (gamma(2, 1), "
          f"{args.zeros:.0%} zeros) in the same store. "
          "Scheduler: threads (2 threads); device: cpu.")
    print(f"\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"Python {platform.python_version()}, {platform.platform()}; load average {os.getloadavg()[0]:.1f}.")
    print(f"\nReproduce: `python benchmarks/bench_weights.py --rows {args.rows} --features {args.features} "
          f"--chunk-rows {args.chunk_rows} --repeat {args.repeat} --zeros {args.zeros}`\n")
    print("| run | unweighted wall s | weighted wall s | ratio (wall) | unweighted CPU s | weighted CPU s | ratio (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, plain, weighted in rows:
        a, b = (statistics.median(t[0] for t in runs) for runs in (plain, weighted))
        c, d = (statistics.median(t[1] for t in runs) for runs in (plain, weighted))
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f} | {c:.2f} | {d:.2f} | {d / c:.2f} |")
    print("\nPer chunk (one thread, median):\n")
    print("| statistic | unweighted ms | weighted ms | weighted / unweighted |")
    print("|---|---:|---:|---:|")
    for name, a, b in per_chunk:
        print(f"| {name}.chunk | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
