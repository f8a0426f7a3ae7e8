"""Drift between two wide summaries: ``db.compare`` against re-reading the data with scipy and numpy.

Two summaries of ``--features`` features (moments and histograms, the second
described on the first one's bins with ``like=``) are compared ``--repeat``
times; the peer is what a user without the summaries would run on the raw data
held in memory: ``scipy.stats.ks_2samp`` and a ``numpy.histogram`` PSI per
feature. The target is under one second for two 5,000-feature summaries (not met
in issue 36's follow-up: 3.5 s, where KS and Wasserstein read ~12,000 breakpoints per
feature pair). Usage::

    python benchmarks/bench_compare.py --rows 5000 --features 5000 --repeat 5 --out benchmarks/RESULTS.md
    python benchmarks/bench_compare.py --rows 2000 --features 200 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):  # run from a source tree without installing
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_describe import write_section  # noqa: E402  (one writer of RESULTS.md sections)


def best(func: Any, repeat: int) -> float:
    """Best seconds of ``repeat`` calls of ``func``."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        runs.append(time.perf_counter() - t)
    return min(runs)


def peer(ref: np.ndarray, new: np.ndarray, edges: np.ndarray) -> None:
    """KS and PSI feature by feature on the raw data (what compare replaces)."""
    import scipy.stats

    for j in range(ref.shape[1]):
        scipy.stats.ks_2samp(ref[:, j], new[:, j])
        p = np.maximum(np.histogram(ref[:, j], edges[j])[0] / len(ref), 1e-4)
        q = np.maximum(np.histogram(new[:, j], edges[j])[0] / len(new), 1e-4)
        float(np.sum((q - p) * np.log(q / p)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--features", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the '## compare' section of this Markdown file")
    args = parser.parse_args()

    import warnings

    import daskbatch as db

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(args.rows, args.features)).astype(np.float32)
    new = (rng.normal(size=(args.rows, args.features)) * 1.1 + 0.05).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", db.RangeWarning)  # the new data reach outside the reference's ranges
        s_ref = db.describe(ref, stats=("moments", "hist"))
        s_new = db.describe(new, stats=("moments", "hist"), run=db.RunOptions(like=s_ref))
    t_compare = best(lambda: db.compare(s_ref, s_new), args.repeat)
    assert s_ref.hist_edges is not None
    t_peer = best(lambda: peer(ref, new, s_ref.hist_edges), max(1, min(args.repeat, 2)))
    text = "\n".join([
        f"{args.features:,} features, summaries of {args.rows:,} rows each (moments + 64-bin histograms, and the "
        "quantile sketch and 2,048-bin quantile histogram their ranges come from: KS and Wasserstein read them all); "
        f"best of {args.repeat}; {platform.processor() or platform.machine()}, {platform.python_version()}, "
        f"daskbatch {db.__version__}.",
        "",
        "| contender | seconds | ratio to compare |",
        "|---|---:|---:|",
        f"| `db.compare(s_ref, s_new)` (reads no data) | {t_compare:.3f} | 1.0 |",
        f"| scipy `ks_2samp` + numpy PSI per feature, data in memory | {t_peer:.3f} | {t_peer / t_compare:.1f}x |",
        "",
        f"`python benchmarks/bench_compare.py --rows {args.rows} --features {args.features} --repeat {args.repeat}"
        " --out benchmarks/RESULTS.md`",
    ])
    print(text)
    if args.out:
        write_section(Path(args.out), text, "## compare")


if __name__ == "__main__":
    main()
