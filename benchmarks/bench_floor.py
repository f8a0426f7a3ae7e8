"""The full summary against the read floor, interleaved in one process (issue 18, item 8).

Times, in one process and in turn (so that the load of a shared machine hits
every contender alike), best of ``--repeat``:

* ``read``: read and decode every chunk of ``X`` and ``y`` (the floor);
* ``describe``: ``db.describe(store, label="y")`` with its defaults (moments,
  cov, hist, mi, class_moments; ranges from the quantile sketch, so two passes);
* ``describe, cache=False``: the same, reading the store in both passes.

With ``--blocks`` it also times, on one chunk and one thread, reading it and
each statistic's ``chunk`` of both passes, to say where a block's time goes.

Usage::

    python benchmarks/bench_floor.py --rows 1000000 --features 64 --repeat 5 [--blocks]

The store is the one of ``bench_describe.py`` (float32, zstd level 1, 65,536-row
chunks at 64 features), built on first use under ``--data-dir``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_describe import default_chunk_rows, ensure_store  # noqa: E402


def contenders(store: Path) -> dict[str, Any]:
    """Zero-argument callables, one per contender."""
    import dask
    import dask.array as da

    import daskbatch as db

    x = da.from_zarr(str(store), component="X")
    y = da.from_zarr(str(store), component="y")
    tiny = x.map_blocks(lambda b: b[:1, :1], chunks=(1, 1)).sum() + y.map_blocks(lambda b: b[:1], chunks=(1,)).sum()
    return {
        "read": lambda: dask.compute(tiny),
        "describe": lambda: db.describe(str(store), label="y"),
        "describe, cache=False": lambda: db.describe(str(store), label="y", cache=False),
    }


def blocks(store: Path, rows: int) -> dict[str, float]:
    """Milliseconds of each step on the first chunk, one thread, best of 5."""
    import dask
    import zarr

    from daskbatch.stats import ClassMoments, CoMoments, Histogram, Moments, Sketch
    from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram

    zx, zy = zarr.open_array(str(store / "X"), mode="r"), zarr.open_array(str(store / "y"), mode="r")
    b, lab = zx[:rows], zy[:rows]
    classes = tuple(int(c) for c in np.unique(lab))
    lo, hi = tuple(b.min(0).astype(float)), tuple(b.max(0).astype(float))
    steps = {
        "read X chunk (zarr, decode)": lambda: zx[:rows],
        "read y chunk": lambda: zy[:rows],
        "pass 1: Moments.chunk": lambda: Moments().chunk(b),
        "pass 1: CoMoments.chunk": lambda: CoMoments().chunk(b),
        "pass 1: ClassMoments.chunk": lambda: ClassMoments(classes=classes).chunk(b, lab),
        "pass 1: Sketch.chunk": lambda: Sketch().chunk(b),
        "pass 2: Histogram.chunk (by label)": lambda: Histogram(64, lo, hi, by_label=True, classes=classes).chunk(b, lab),
        "pass 2: QuantileHistogram.chunk": lambda: QuantileHistogram(QUANTILE_BINS, lo, hi).chunk(b),
    }

    def class_moments_reference() -> Any:
        with dask.config.set({"daskbatch.kernels": False}):  # the path every block took before the kernel
            return ClassMoments(classes=classes).chunk(b, lab)

    steps["pass 1: ClassMoments.chunk, array-API path (before)"] = class_moments_reference
    out = {}
    for name, f in steps.items():
        f()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        out[name] = min(times) * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=None)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="threads of the threaded scheduler")
    p.add_argument("--only", nargs="*", help="run only these contenders")
    p.add_argument("--blocks", action="store_true", help="also time each step on one chunk")
    p.add_argument("--data-dir", default=str(HERE / "_data"))
    args = p.parse_args(argv)
    if args.chunk_rows is None:
        args.chunk_rows = default_chunk_rows(args.features)
    import logging
    import os
    import warnings

    import dask

    logging.getLogger("daskbatch").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")  # RangeWarnings of the synthetic data are not what is timed
    dask.config.set(scheduler="threads", num_workers=args.threads)
    store = ensure_store(args)
    runs = contenders(store)
    names = args.only or list(runs)
    for name in names:  # warm-up: imports, numba's cache, the page cache
        runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            t = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - t)
    floor = min(times["read"]) if "read" in times else None
    floor_med = statistics.median(times["read"]) if "read" in times else None
    print(f"{args.rows:,} x {args.features}, chunks of {args.chunk_rows:,} rows, threaded scheduler "
          f"({args.threads} threads), best of {args.repeat}, load average {os.getloadavg()[0]:.1f}")
    print("| contender | best s | median s | x read (best) | x read (medians) |")
    print("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        ratio = f"{best / floor:.2f}" if floor else "-"
        ratio_med = f"{med / floor_med:.2f}" if floor_med else "-"
        print(f"| {name} | {best:.3f} | {med:.3f} | {ratio} | {ratio_med} |")
    if args.blocks:
        print("\n| step (one chunk, one thread, best of 5) | ms |\n|---|---:|")
        for name, ms in blocks(store, args.chunk_rows).items():
            print(f"| {name} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
