"""The cost of the pairwise covariance: ``CoMoments(rows="pairwise")`` against the complete-rows one.

Builds a float32 Zarr store (rows x features, chunked by rows) with a share of
NaN in every feature, then times ``describe(stats=["moments", cov])`` with each
covariance, alternating them in one process (the same page cache and numba
cache), and, per chunk on one thread, each statistic's ``chunk`` (the
complete rows take the compiled kernel, the pairwise the array-API path:
four GEMMs instead of one) and ``merge``.

Usage::

    python benchmarks/bench_pairwise_cov.py --rows 1000000 --features 64 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def build_store(path: str, rows: int, features: int, chunk_rows: int, nan: float) -> None:
    """Write X (float32, correlated normal, a share ``nan`` of each feature's values NaN) to a Zarr store."""
    import zarr

    rng = np.random.default_rng(0)
    mix = rng.normal(size=(features, features)).astype(np.float32) / np.sqrt(features)
    root = zarr.open_group(path, mode="w")
    x = root.create_array(
        "X", shape=(rows, features), dtype="float32", chunks=(chunk_rows, features)
    )
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        block = rng.standard_normal((stop - start, features), dtype=np.float32) @ mix
        block[rng.random(block.shape) < nan] = np.nan
        x[start:stop] = block


def time_describe(path: str, repeat: int) -> dict[str, list[float]]:
    """Wall seconds of describe with each covariance, alternating, after one warm-up of each."""
    import warnings

    import daskbatch as db
    from daskbatch.errors import CompleteRowsWarning
    from daskbatch.stats import CoMoments

    runs: dict[str, list[float]] = {"complete": [], "pairwise": []}
    for i in range(repeat + 1):
        for rows in runs:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CompleteRowsWarning)
                db.describe(path, stats=["moments", CoMoments(rows=rows)])
            if i:  # the first round warms the caches
                runs[rows].append(time.perf_counter() - start)
    return runs


def time_chunks(rows: int, features: int, nan: float, repeat: int) -> dict[str, float]:
    """Fastest seconds of one chunk's ``chunk`` and of one ``merge``, per covariance, on this thread.

    The fastest of ``repeat`` runs: on a shared machine the others measure the neighbours' load.
    """
    from daskbatch.stats import CoMoments

    rng = np.random.default_rng(1)
    block = rng.standard_normal((rows, features)).astype(np.float32)
    block[rng.random(block.shape) < nan] = np.nan
    out = {}
    for kind in ("complete", "pairwise"):
        stat = CoMoments(rows=kind)
        state = stat.chunk(block)  # warm-up (numba compiles once)
        chunk_s, merge_s = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            state = stat.chunk(block)
            chunk_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            stat.merge(state, state)
            merge_s.append(time.perf_counter() - start)
        out[f"{kind} chunk"] = min(chunk_s)
        out[f"{kind} merge"] = min(merge_s)
    return out


def main() -> None:
    """Build the store, time both covariances, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--nan", type=float, default=0.10, help="share of NaN in each feature")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.zarr")
        build_store(path, args.rows, args.features, args.chunk_rows, args.nan)
        runs = time_describe(path, args.repeat)
    per_chunk = time_chunks(args.chunk_rows, args.features, args.nan, max(args.repeat, 5))
    print(
        f"{args.rows:,} rows x {args.features} features, {args.nan:.0%} NaN per feature, "
        f"chunks of {args.chunk_rows:,} rows, {os.cpu_count()} CPUs"
    )
    for kind, seconds in runs.items():
        print(
            f"describe moments+cov ({kind:8s}): median {statistics.median(seconds):.2f} s "
            f"(min {min(seconds):.2f}, {len(seconds)} runs)"
        )
    ratio = statistics.median(runs["pairwise"]) / statistics.median(runs["complete"])
    print(f"pairwise / complete, describe: {ratio:.2f}x")
    for name, seconds in per_chunk.items():
        print(f"{name:16s}: {seconds * 1e3:8.2f} ms (fastest)")
    print(
        f"pairwise / complete, one chunk: {per_chunk['pairwise chunk'] / per_chunk['complete chunk']:.2f}x"
    )


if __name__ == "__main__":
    main()
