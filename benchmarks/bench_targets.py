"""Benchmark continuous-target scores: daskbatch from a Zarr store against scikit-learn in memory.

One run, one process, the same data for both:

* ``daskbatch f_regression``: ``describe(x, target=y, stats="moments")`` from
  the store (one pass: moments and the feature-target co-moments), then
  ``selection._f_regression``.
* ``sklearn f_regression``: the whole store loaded into memory (timed), then
  ``sklearn.feature_selection.f_regression``.
* ``daskbatch mi``: ``describe(x, target=y, stats=("moments", "hist", "mi"))``
  (two passes: the target's quantile sketch, then the joint histograms).
* ``sklearn mutual_info_regression``: its k-nearest-neighbour estimate on the
  leading ``--mi-rows`` rows only (it is quadratic-ish in memory and time;
  the whole store would take too long), loading included.

Reported: wall seconds, microseconds per row and the ratios to scikit-learn
in the same run, with the agreement of the two MI rankings (Spearman).

Usage::

    python benchmarks/bench_targets.py --rows 1000000 --features 16 --mi-rows 50000 --out benchmarks/RESULTS.md
    python benchmarks/bench_targets.py --rows 20000 --features 8 --mi-rows 5000     # smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))

TITLE = "## continuous targets: f_regression and MI"


def make_store(path: Path, rows: int, features: int, chunk_rows: int) -> None:
    """A make_regression float64 store: ``X`` and a float target ``y``."""
    import numpy as np
    import zarr
    from sklearn.datasets import make_regression

    x, y = make_regression(n_samples=rows, n_features=features, n_informative=max(2, features // 3),
                           noise=10.0, random_state=0)
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x.astype(np.float64), chunks=(chunk_rows, features))
    root.create_array("y", data=y.astype(np.float64), chunks=(chunk_rows,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--chunk-rows", type=int, default=65_536)
    parser.add_argument("--mi-rows", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=None, help=f"write the '{TITLE}' section of this Markdown file")
    args = parser.parse_args()

    import dask
    import dask.array as da
    import numpy as np
    from scipy.stats import spearmanr
    from sklearn.feature_selection import f_regression, mutual_info_regression

    import daskbatch as db
    from daskbatch import selection

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "targets.zarr"
        make_store(store, args.rows, args.features, args.chunk_rows)
        x, y = da.from_zarr(str(store), component="X"), da.from_zarr(str(store), component="y")
        with dask.config.set(scheduler="threads"):
            db.describe(x[:5000], target=y[:5000], stats=("moments", "hist", "mi"), run=db.RunOptions(plan=None))  # warm-up
            t0 = time.perf_counter()
            s = db.describe(x, target=y, stats="moments", run=db.RunOptions(plan=None))
            f_db = selection._f_regression(s)[0]
            t_f_db = time.perf_counter() - t0
            t0 = time.perf_counter()
            s_mi = db.describe(x, target=y, stats=("moments", "hist", "mi"), bins=16, run=db.RunOptions(plan=None))
            t_mi_db = time.perf_counter() - t0
        t0 = time.perf_counter()
        xm, ym = x.compute(), y.compute()
        f_sk = f_regression(xm, ym)[0]
        t_f_sk = time.perf_counter() - t0
        t0 = time.perf_counter()
        xs, ys = x[: args.mi_rows].compute(), y[: args.mi_rows].compute()
        mi_sk = mutual_info_regression(xs, ys, random_state=0)
        t_mi_sk = time.perf_counter() - t0
    rel = float(np.max(np.abs(f_db - f_sk) / np.abs(f_sk)))
    rho = float(spearmanr(s_mi.mi, mi_sk)[0])
    n, m = args.rows, args.mi_rows
    rows = [
        ("daskbatch f_regression (store, 1 pass)", n, t_f_db),
        ("sklearn f_regression (in memory, load included)", n, t_f_sk),
        ("daskbatch mi, 16 x 16 bins (store, 2 passes)", n, t_mi_db),
        ("sklearn mutual_info_regression (leading rows)", m, t_mi_sk),
    ]
    table = ["| contender | rows | wall s | us per row |", "|---|---:|---:|---:|"]
    table += [f"| {name} | {r:,} | {t:.2f} | {1e6 * t / r:.2f} |" for name, r, t in rows]
    load = os.getloadavg()[0]
    text = "\n".join([
        TITLE, "",
        f"Data: make_regression, {n:,} x {args.features} float64 in a Zarr store (chunks of {args.chunk_rows:,} "
        f"rows) with a float64 target. Threaded scheduler, page cache warm, after a warm-up on 5,000 rows.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs (noisy: load average "
        f"{load:.1f} when written); Python {platform.python_version()}, NumPy {np.__version__}, Dask {dask.__version__}.",
        "",
        f"Reproduce: `python benchmarks/bench_targets.py {shlex.join(sys.argv[1:])}`",
        "",
        *table, "",
        f"f_regression: daskbatch takes {t_f_db / t_f_sk:.2f}x scikit-learn's time (which holds the data in memory), "
        f"largest relative difference of F {rel:.1e}. Binned MI per row: {(t_mi_db / n) / (t_mi_sk / m):.3f}x "
        f"the time of mutual_info_regression per row; Spearman of the two MI rankings {rho:.2f} "
        "(different estimators: plug-in on quantile bins vs k-NN).",
        "",
    ])
    print(text)
    if args.out is not None:
        from bench_describe import write_section

        write_section(args.out, text, title=TITLE)


if __name__ == "__main__":
    main()
