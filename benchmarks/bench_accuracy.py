"""Accuracy of describe's quantiles and of its MI under contamination, against numpy and scikit-learn.

Two tables for ``benchmarks/RESULTS.md``:

* **Quantile accuracy**: ``Summary.quantile`` on one column per distribution
  (offset normals, pressure-like, Pareto α = 1.5, signed Cauchy, zero-heavy,
  integer pixels, a constant) against ``numpy.quantile(..., method="inverted_cdf")``:
  the rank error (distance of q from the ranks the estimate holds) and the
  value error in per cent of the interquartile range and of ``|v|``.
* **MI under contamination**: features that depend on a 2-class label, with
  0 to 5 % of their values set to 1e12 (and, at 5 %, other contaminants): the
  MI relative to the clean rows, with scikit-learn's ``mutual_info_score`` on
  the same bins and its k-nearest-neighbour ``mutual_info_classif`` on the
  clean data for scale.

And, with ``--overhead``, the cost of the quantile histogram in describe's
second pass: the full describe (best of ``--repeat``) and the quantile
histogram's own chunk work on the same block. Usage::

    python benchmarks/bench_accuracy.py --rows 200000              # both tables (CI-sized: a minute)
    python benchmarks/bench_accuracy.py --overhead --rows 1000000 --features 64 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import zarr

import daskbatch as db
from daskbatch.errors import RangeWarning

QS = (0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999)
FRACTIONS = (0.0, 0.0005, 0.001, 0.002, 0.01, 0.05)


def store(path: Path, x: np.ndarray, y: np.ndarray | None = None, chunk_rows: int = 25_000) -> str:
    """Write X (and y) to a Zarr group, chunked by rows."""
    root = zarr.open_group(str(path), mode="w")
    root.create_array("X", data=x, chunks=(min(chunk_rows, x.shape[0]), x.shape[1]))
    if y is not None:
        root.create_array("y", data=y, chunks=(min(chunk_rows, x.shape[0]),))
    return str(path)


def distributions(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """One column per distribution of the issue."""
    return {
        "290 + N(0,1)": 290.0 + rng.normal(size=n),
        "1e6 + N(0,1)": 1e6 + rng.normal(size=n),
        "1013 + 5 N(0,1)": 1013.0 + 5.0 * rng.normal(size=n),
        "pressure 1013 + 8 t5": 1013.25 + 8.0 * rng.standard_t(5, n),
        "Pareto a=1.5": rng.pareto(1.5, n) + 1.0,
        "signed Cauchy": rng.standard_cauchy(n),
        "zero-heavy (70 % 0)": np.where(rng.random(n) < 0.7, 0.0, rng.exponential(3.0, n)),
        "pixels 0..255": rng.integers(0, 256, n).astype(np.float64),
        "constant": np.full(n, 7.25),
    }


def quantile_table(rows: int, tmp: Path) -> None:
    """Print the quantile accuracy table (markdown)."""
    cols = distributions(np.random.default_rng(0), rows)
    x = np.column_stack(list(cols.values()))
    s = db.describe(store(tmp / "q.zarr", x), stats=("moments", "hist"), run=db.RunOptions(feature_names=list(cols)))
    est = s.quantile(list(QS)).to_numpy()
    print(f"rows: {rows:,}; per cell: rank error % / value error in % of the IQR / in % of |v|")
    print("| distribution | " + " | ".join(f"q={q}" for q in QS) + " |")
    print("|---|" + "---|" * len(QS))
    for d, name in enumerate(cols):
        col = np.sort(x[:, d])
        exact = np.quantile(col, QS, method="inverted_cdf")
        q25, q75 = np.quantile(col, [0.25, 0.75], method="inverted_cdf")
        below = np.searchsorted(col, est[d], side="left") / rows
        upto = np.searchsorted(col, est[d], side="right") / rows
        rank = np.maximum(0.0, np.maximum(below - np.asarray(QS), np.asarray(QS) - upto))
        err = np.abs(est[d] - exact)
        iqr = np.where(q75 > q25, err / max(q75 - q25, 1e-300), np.where(err == 0, 0.0, np.inf))
        rel = np.where(exact != 0, err / np.where(exact != 0, np.abs(exact), 1.0), np.where(err == 0, 0.0, np.inf))
        cells = [f"{100 * r:.2f} / {100 * i:.2f} / {100 * v:.3f}" for r, i, v in zip(rank, iqr, rel, strict=True)]
        print(f"| {name} | " + " | ".join(cells) + " |")


def labelled(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features that depend on a 2-class label."""
    y = rng.integers(0, 2, n)
    x = np.column_stack([
        rng.normal(size=n) + 0.5 * y, 290.0 + rng.normal(size=n) + 0.5 * y,
        rng.lognormal(size=n) * (1.0 + 0.5 * y), (rng.pareto(1.5, n) + 1.0) * (1.0 + 0.5 * y),
    ])
    return x, y, ["N(0,1)+0.5y", "290+N(0,1)+0.5y", "lognormal*(1+0.5y)", "Pareto*(1+0.5y)"]


def mi_of(path: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """MI, out-of-range fraction, and whether a RangeWarning was raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RangeWarning)
        s = db.describe(path, label="y", stats=("mi",))
    return s.mi, s.out_of_range_fraction, any(issubclass(w.category, RangeWarning) for w in caught)


def mi_table(rows: int, tmp: Path) -> None:
    """Print the MI under contamination table (markdown)."""
    from sklearn.feature_selection import mutual_info_classif

    x, y, names = labelled(np.random.default_rng(1), rows)
    clean = db.describe(store(tmp / "c.zarr", x, y), label="y", stats=("mi",))
    knn = mutual_info_classif(x, y, discrete_features=False, random_state=0)
    print(f"rows: {rows:,}; clean MI (nats, 64 bins) / scikit-learn kNN mutual_info_classif: "
          + ", ".join(f"{n} {m:.4f} / {k:.4f} ({m / k:.2f}x)" for n, m, k in zip(names, clean.mi, knn, strict=True)))
    print("per cell: MI change vs the clean rows in % (out-of-range %); W: RangeWarning")
    print("| contaminant | fraction | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    rng = np.random.default_rng(2)
    cases = [(1e12, f) for f in FRACTIONS] + [(v, 0.05) for v in (-1e12, np.inf, -999.0, 1e30)]
    for value, fraction in cases:
        replaced = rng.random(rows) < fraction
        hit = x.copy()
        hit[replaced] = value
        mi, out, warned = mi_of(store(tmp / "h.zarr", hit, y))
        ref, _, _ = mi_of(store(tmp / "k.zarr", x[~replaced], y[~replaced]))
        cells = [f"{100 * (m / r - 1):+.2f} ({100 * o:.2f})" for m, r, o in zip(mi, ref, out, strict=True)]
        print(f"| {value:g} | {100 * fraction:g} %{' W' if warned else ''} | " + " | ".join(cells) + " |")


def overhead(rows: int, features: int, repeat: int, tmp: Path) -> None:
    """Describe's time (best of ``repeat``) and the quantile histogram's chunk work on the same data."""
    from daskbatch.stats.histogram import QUANTILE_BINS, Histogram, QuantileHistogram

    rng = np.random.default_rng(3)
    sigma = np.linspace(0.5, 5.0, features)
    x = (1000.0 + rng.normal(size=(rows, features)) * sigma).astype(np.float64)
    path = store(tmp / "o.zarr", x, chunk_rows=125_000)
    best = np.inf
    for _ in range(repeat + 1):  # the first run warms imports, numba's cache and the page cache
        t0 = time.perf_counter()
        s = db.describe(path, stats=("moments", "cov", "hist"))
        best = min(best, time.perf_counter() - t0)
    lo, hi = s.arrays.quantile_range[:, 0], s.arrays.quantile_range[:, 1]
    fine = QuantileHistogram(bins=QUANTILE_BINS, lo=tuple(lo), hi=tuple(hi))
    coarse = Histogram(bins=64, lo=tuple(s.arrays.hist_edges[:, 0]), hi=tuple(s.arrays.hist_edges[:, -1]))
    block = x[:125_000]
    times = {}
    for name, stat in (("64-bin histogram", coarse), ("quantile histogram", fine)):
        stat.chunk(block)
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            stat.chunk(block)
            t.append(time.perf_counter() - t0)
        times[name] = min(t) * rows / block.shape[0]
    print(f"describe moments+cov+hist, {rows:,} x {features}: best of {repeat}: {best:.2f} s; "
          f"pass seconds {s.provenance['pass_seconds']}")
    for name, t in times.items():
        print(f"  {name} chunk work over all rows (single thread, best of {repeat}): {t:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--overhead", action="store_true", help="time describe and the quantile histogram instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="daskbatch-accuracy-") as tmp:
        if args.overhead:
            overhead(args.rows, args.features, args.repeat, Path(tmp))
        else:
            quantile_table(args.rows, Path(tmp))
            print()
            mi_table(args.rows, Path(tmp))


if __name__ == "__main__":
    main()
