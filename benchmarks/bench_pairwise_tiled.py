"""The cost of the pairwise covariance in feature tiles (``cov_out``), and of the sketch's exact tails.

Two measurements, each alternating what it compares in one process (ratios, not seconds):

- ``tiled_covariance(rows="complete" | "pairwise")`` of a float32 array with 10 % NaN per feature,
  the median of the runs after one warm-up;
- ``Sketch().chunk`` of a lognormal block, and the part of it that keeps each feature's 128
  smallest and largest values (``sketch_tails.tails_chunk``), fastest of 5.

Usage::

    python benchmarks/bench_pairwise_tiled.py --rows 200000 --features 256 --tile 64 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def tiled(rows: int, features: int, tile: int, repeat: int) -> str:
    """Median seconds of the complete-rows and the pairwise tiled covariance, and their ratio."""
    import dask
    import dask.array as da

    from daskbatch.engine.tiled_cov import tiled_covariance

    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(features, features)).astype(np.float32) / np.sqrt(features)
    x = rng.standard_normal((rows, features), dtype=np.float32) @ mixing
    x[rng.random(x.shape) < 0.1] = np.nan
    dx = da.from_array(x, chunks=(25_000, features))
    times: dict[str, list[float]] = {"complete": [], "pairwise": []}
    with dask.config.set(scheduler="threads"), tempfile.TemporaryDirectory() as where:
        for run in range(repeat + 1):
            for kind, seconds in times.items():
                out = os.path.join(where, f"{kind}-{run}.zarr")
                t0 = time.perf_counter()
                tiled_covariance(dx, tile=tile, out=out, rows=kind)
                if run:  # the first round warms the caches
                    seconds.append(time.perf_counter() - t0)
    m = {k: statistics.median(v) for k, v in times.items()}
    return (f"{rows:,} x {features} float32, 10 % NaN, tiles of {tile}: complete {m['complete']:.2f} s, "
            f"pairwise {m['pairwise']:.2f} s, ratio {m['pairwise'] / m['complete']:.1f}x")


def tails() -> str:
    """The sketch's chunk and merge, and the share of them its exact tails take."""
    from daskbatch.stats.sketch import Sketch
    from daskbatch.stats.sketch_tails import merge_tails, tails_chunk

    x = np.random.default_rng(0).lognormal(size=(100_000, 64)).astype(np.float32)
    sketch = Sketch()
    sketch.chunk(x[:1000]), tails_chunk(x[:1000], 128)  # compile once

    def best(f: Callable[[], object]) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            runs.append(time.perf_counter() - t0)
        return min(runs)

    whole, own = best(lambda: sketch.chunk(x)), best(lambda: tails_chunk(x, 128))
    a, b = sketch.chunk(x), sketch.chunk(x)
    merge = best(lambda: sketch.merge(a, b))
    tail_merge = best(lambda: merge_tails((a.tail_low, a.tail_high), (b.tail_low, b.tail_high)))
    return (f"100,000 x 64 float32 lognormal: Sketch.chunk {whole * 1e3:.1f} ms, of which tails {own * 1e3:.1f} ms "
            f"({own / whole:.0%}); merge {merge * 1e3:.2f} ms, of which tails {tail_merge * 1e3:.2f} ms")


def main() -> None:
    """Run both measurements and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--tile", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(tiled(args.rows, args.features, args.tile, args.repeat))
    print(tails())


if __name__ == "__main__":
    main()
