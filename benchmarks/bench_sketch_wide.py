"""What the quantile sketch costs on wide data: merging two wide states, and the chunk kernel per block.

For the sketch of every bucket (``Sketch()``, 221 kB a feature, with ``--full``)
and every sketch ``describe`` plans for wide data (:data:`~daskbatch.stats.sketch_windows.WINDOWS`:
2,048 buckets per sign in int64 and int32, then 1,024 and 512 buckets of twice
the width in int32), times, in this process:

* ``merge``: one merge of two ``--features``-feature states, each from
  ``--state-rows`` rows of signed lognormal data (the windows move and
  collapse), with the compiled merge and the array-API merge (the GPU's path,
  ``daskbatch.kernels: false``);
* ``chunk``: the sketch's compiled kernel on one ``--rows`` x 64 block of
  normal float64 data, next to ``Moments`` on the same block as the peer.

Every figure is the best of ``--repeat`` runs, the candidates interleaved run
by run (so that a burst of load on a shared machine hits them alike), after
one warm-up each (imports, numba's cache).

Usage::

    python benchmarks/bench_sketch_wide.py --features 5000 --rows 65536 --repeat 5
    python benchmarks/bench_sketch_wide.py --features 200 --rows 20000 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))


def best_interleaved(funcs: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Best seconds of ``repeat`` calls of each function, run in turn, after one warm-up call each."""
    for func in funcs.values():
        func()
    best = dict.fromkeys(funcs, float("inf"))
    for _ in range(repeat):
        for name, func in funcs.items():
            t = time.perf_counter()
            func()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> None:
    """Print the merge and chunk times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=5000)
    parser.add_argument("--state-rows", type=int, default=200)
    parser.add_argument("--rows", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also the sketch of every bucket (1 GiB a state at 5,000)")
    args = parser.parse_args(argv)

    import dask.config
    import numpy as np

    from daskbatch.stats import Moments, Sketch
    from daskbatch.stats.sketch_windows import WINDOWS, state_bytes_per_feature

    sketches = {f"window {w} {c} alpha {a:.4f}": Sketch(alpha=a, window=w, count_dtype=c) for w, c, a in WINDOWS}
    if args.full:
        sketches = {"every bucket int64": Sketch(), **sketches}
    rng = np.random.default_rng(0)
    d = args.features
    halves = [rng.lognormal(0.0, 2.0, (args.state_rows, d)) * rng.choice([-1.0, 1.0], (args.state_rows, d))
              for _ in range(2)]
    states = {label: tuple(sk.chunk(h) for h in halves) for label, sk in sketches.items()}
    print(f"merge of two {d:,}-feature states ({args.state_rows} rows each), best of {args.repeat}, interleaved:")
    for path, on in (("compiled", True), ("array-api", False)):
        with dask.config.set({"daskbatch.kernels": on}):
            best = best_interleaved(
                {label: (lambda sk=sk, s=states[label]: sk.merge(*s)) for label, sk in sketches.items()}, args.repeat
            )
        for label, sk in sketches.items():
            mib = d * state_bytes_per_feature(sk.window if sk.window is not None and sk.window < sk.n_buckets else None,
                                              sk.count_dtype) / 2**20
            print(f"  {label:>32} {path:>9}: {best[label] * 1e3:8.1f} ms  (state {mib:,.0f} MiB)")

    x = rng.standard_normal((args.rows, 64))
    print(f"chunk kernels on one {args.rows:,} x 64 float64 block, best of {args.repeat}, interleaved:")
    kernels: dict[str, Any] = {**sketches, "moments (peer)": Moments()}
    best = best_interleaved({label: (lambda s=s: s.chunk(x)) for label, s in kernels.items()}, args.repeat)
    for label, seconds in best.items():
        print(f"  {label:>32}: {seconds * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
