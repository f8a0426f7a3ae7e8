"""What the windowed quantile sketch costs: merging wide states, and the chunk kernel per block.

Times, in this process:

* ``merge``: one merge of two 5,000-feature sketch states (``--features``),
  each from ``--state-rows`` rows of signed lognormal data, for the sketch of
  every bucket (``Sketch()``, 221 kB a feature: its merge is the same int64
  addition the sketch made before it had windows, plus the window
  bookkeeping) and the windowed sketch ``Sketch(window=WINDOW)`` (33 kB a
  feature), each with the compiled merge and the array-API merge
  (``daskbatch.kernels: false``); and the plain addition of the full
  states' counts (``numpy +``), the merge of the design before windows;
* ``chunk``: the sketch's compiled kernel on one ``--rows`` x 64 block of
  normal float64 data (default and windowed sketch, which key the same values),
  next to ``Moments`` on the same block as the peer.

Usage::

    python benchmarks/bench_sketch_wide.py --features 5000 --rows 1000000 --repeat 3
    python benchmarks/bench_sketch_wide.py --features 200 --rows 20000 --repeat 1   # smoke run

Times are medians of ``--repeat`` runs after one warm-up (imports, numba's cache).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def timed(func: Any, repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``func`` after one warm-up call."""
    func()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> None:
    """Print the merge and chunk times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=5000)
    parser.add_argument("--state-rows", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    import dask.config
    import numpy as np

    from daskbatch.stats import Moments, Sketch
    from daskbatch.stats.sketch import WINDOW

    rng = np.random.default_rng(0)
    d = args.features
    halves = [rng.lognormal(0.0, 2.0, (args.state_rows, d)) * rng.choice([-1.0, 1.0], (args.state_rows, d))
              for _ in range(2)]
    print(f"merge of two {d:,}-feature states ({args.state_rows} rows each), median of {args.repeat}:")
    for label, sk in (("every bucket", Sketch()), (f"window {WINDOW}", Sketch(window=WINDOW))):
        a, b = (sk.chunk(h) for h in halves)
        mib = a.counts.nbytes / 2**20
        for path, on in (("compiled", True), ("array-api", False)):
            with dask.config.set({"daskbatch.kernels": on}):
                seconds = timed(lambda sk=sk, a=a, b=b: sk.merge(a, b), args.repeat)
            print(f"  {label:>13} {path:>9}: {seconds * 1e3:8.1f} ms  (state {mib:,.0f} MiB)")
        if sk.window is None:
            seconds = timed(lambda a=a, b=b: a.counts + b.counts, args.repeat)
            print(f"  {label:>13}   numpy +: {seconds * 1e3:8.1f} ms  (the merge before windows)")

    x = rng.standard_normal((args.rows, 64))
    print(f"chunk kernels on one {args.rows:,} x 64 float64 block, median of {args.repeat}:")
    for label, stat in (("sketch", Sketch()), (f"sketch window {WINDOW}", Sketch(window=WINDOW)),
                        ("moments (peer)", Moments())):
        seconds = timed(lambda stat=stat: stat.chunk(x), args.repeat)
        print(f"  {label:>20}: {seconds:6.3f} s")


if __name__ == "__main__":
    main()
