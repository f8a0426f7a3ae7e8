"""What the quantile sketch costs: describe with it (the default ranges) against describe without it.

The sketch is filled in describe's first pass, fused with the moments and
co-moments, and gives the second pass its histogram ranges. Run on the store of
``bench_describe.py`` (built once, reused), this times, in this process:

* ``full, minmax ranges``: moments + cov + hist + mi with ``range="minmax"``
  (no sketch: the behaviour before it existed);
* ``full, quantile ranges``: the same with the default ranges (sketch in the first pass);
* ``first pass`` / ``first pass + sketch``: ``stats=("moments", "cov")`` with and
  without ``"sketch"``, the fused pass alone;
* ``chunk``: one chunk through ``Moments``, ``CoMoments`` and ``Sketch``
  (compiled kernels, then the array-API path).

The target is at most 10 % more time for the full summary. Usage::

    python benchmarks/bench_sketch.py --rows 1000000 --features 64 --repeat 3
    python benchmarks/bench_sketch.py --rows 20000 --features 8 --repeat 1   # smoke run

Times are medians of ``--repeat`` runs after one warm-up (imports, numba's cache, page cache).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):  # run from a source tree without installing
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_describe import default_chunk_rows, ensure_store  # noqa: E402  (the same store and chunking)

#: Largest overhead of the sketch on the full summary that meets the target.
TARGET = 0.10


def timed(func: Any, repeat: int) -> tuple[float, list[float]]:
    """Median seconds of ``repeat`` calls of ``func`` after one warm-up call."""
    func()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs), runs


def chunk_times(store: Path, repeat: int) -> dict[str, float]:
    """Seconds per chunk of each first-pass statistic, compiled kernels and array-API path."""
    import dask.config
    import zarr

    from daskbatch.stats import CoMoments, Moments, Sketch

    block = zarr.open_group(str(store), mode="r")["X"].blocks[0]
    out = {}
    for path in ("compiled", "array-api"):
        with dask.config.set({"daskbatch.kernels": path == "compiled"}):
            for stat in (Moments(), CoMoments(), Sketch()):
                out[f"chunk {type(stat).__name__} ({path})"] = timed(lambda s=stat: s.chunk(block), repeat)[0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=None, help="rows per Zarr chunk (default: ~16 MiB)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    args = p.parse_args(argv)
    if args.chunk_rows is None:
        args.chunk_rows = min(default_chunk_rows(args.features), args.rows)
    store = ensure_store(args)

    import daskbatch as db

    def describe(**kw: Any) -> Any:
        return lambda: db.describe(str(store), label="y", **kw)

    contenders = {
        "full, minmax ranges": describe(range="minmax"),
        "full, quantile ranges": describe(),
        "first pass": describe(stats=("moments", "cov")),
        "first pass + sketch": describe(stats=("moments", "cov", "sketch")),
    }
    results: dict[str, float] = {}
    for name, func in contenders.items():
        results[name], runs = timed(func, args.repeat)
        print(f"{name:<24} {results[name]:8.3f} s   runs: {', '.join(f'{r:.3f}' for r in runs)}", flush=True)
    for name, seconds in chunk_times(store, args.repeat).items():
        print(f"{name:<32} {seconds * 1e3:8.1f} ms", flush=True)
    full = results["full, quantile ranges"] / results["full, minmax ranges"] - 1.0
    first = results["first pass + sketch"] / results["first pass"] - 1.0
    verdict = "meets" if full <= TARGET else "misses"
    print(
        f"sketch overhead: full summary {full:+.1%} ({verdict} the {TARGET:.0%} target), "
        f"first pass {first:+.1%}  [{args.rows:,} x {args.features}, chunks of {args.chunk_rows:,} rows]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
