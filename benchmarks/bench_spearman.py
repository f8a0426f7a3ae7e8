"""Spearman rank correlation at 1,000,000 x 64: daskbatch's two passes beside ``scipy.stats.spearmanr`` in memory.

The data mix the shapes users meet (normal, lognormal, far from zero, rounded, Poisson, Cauchy,
uniform, correlated through shared factors). Prints the largest error against scipy, the
largest stated bound, whether every error lies within its bound, and both times (one process;
daskbatch after one warm-up call, so the kernels are loaded).

Usage::

    python benchmarks/bench_spearman.py --rows 1000000 --features 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def mixed(rows: int, features: int, seed: int = 0) -> np.ndarray:
    """``features`` columns of eight shapes, correlated through four shared factors (float64)."""
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(rows, 4))
    columns = []
    for j in range(features):
        z = factors[:, j % 4] * rng.uniform(0.2, 1.0) + rng.normal(size=rows)
        shape = j % 8
        columns.append(
            z if shape == 0 else np.exp(z) if shape == 1 else 1e6 + z if shape == 2 else np.round(2 * z)
            if shape == 3 else rng.poisson(3, rows) + (z > 1) if shape == 4 else z + rng.standard_cauchy(rows)
            if shape == 5 else rng.uniform(size=rows) + 0.3 * z if shape == 6 else z**3
        )
    return np.column_stack(columns)


def main() -> None:
    """Compare once and print one line."""
    import dask.array as da
    import scipy.stats

    import daskbatch as db

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=64)
    args = parser.parse_args()
    x = mixed(args.rows, args.features)
    blocks = da.from_array(x, chunks=(65_536, -1))
    db.describe(blocks[:10_000], stats=("spearman",))  # load the kernels
    t0 = time.perf_counter()
    s = db.describe(blocks, stats=("spearman",))
    ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    reference = scipy.stats.spearmanr(x).statistic
    theirs = time.perf_counter() - t0
    error, bound = np.abs(np.asarray(s.spearman) - reference), np.asarray(s.spearman_bound)
    print(f"{args.rows:,} x {args.features}: largest error {error.max():.2e}, largest bound {bound.max():.2e}, "
          f"median bound {np.median(bound[bound > 0]):.2e}, every error within its bound: "
          f"{bool(np.all(error <= bound + 1e-12))}; daskbatch {ours:.1f} s, scipy.stats.spearmanr {theirs:.1f} s")


if __name__ == "__main__":
    main()
