"""Ingest with seven label heads and seven masks per batch against X alone and X with one label.

The cost of the 1-D arrays beside X: each output chunk writes one more
(small) Zarr chunk per label or mask, and a compressed ``.npz`` file is
inflated once per array it holds, whatever the number of output chunks that
read it.  Every variant ingests the same files into a fresh store, in one
process, alternating variants over ``--repeat`` rounds; the table gives the
median seconds and the ratio to X alone.

Run (about a minute and a half each on 2 shared cores)::

    python benchmarks/bench_ingest_labels.py --files 20 --rows 20000 --features 64 --repeat 3
    python benchmarks/bench_ingest_labels.py --files 20 --rows 20000 --features 64 --repeat 3 --chunk-rows 8192

With ``PYTHONPATH`` set to an earlier checkout and ``--variants x,label`` (the
earlier code has no ``labels=``), the same command compares versions
(``benchmarks/RESULTS.md``, section Ingest).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time

import numpy as np

import daskbatch as db

HEADS = 7


def _write(folder: str, files: int, rows: int, features: int, compressed: bool) -> None:
    rng = np.random.default_rng(0)
    save = np.savez_compressed if compressed else np.savez
    for i in range(files):
        arrays = {"X": rng.standard_normal((rows, features)).astype("f4")}
        for k in range(HEADS):
            arrays[f"h{k}"] = rng.integers(0, 10, rows).astype("i4")
            arrays[f"m{k}"] = rng.random(rows) < 0.8
        save(os.path.join(folder, f"b{i}.npz"), **arrays)


VARIANTS = {  # short name: (table name, ingest keywords)
    "x": ("X alone", {}),
    "label": ("X + label_key", {"label_key": "h0"}),
    "heads": ("X + 7 labels + 7 masks", {"labels": [f"h{k}" for k in range(HEADS)],
                                         "masks": [f"m{k}" for k in range(HEADS)]}),
}


def main() -> None:
    """Run the comparison and print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--chunk-rows", type=int, default=None, help="default: ingest's (about 16 MiB of X)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default="x,label,heads", help="of: x, label, heads (x first: the ratios' base)")
    ap.add_argument("--sources", default="npz,compressed", help="of: npz, compressed")
    args = ap.parse_args()
    variants = {k: VARIANTS[k] for k in args.variants.split(",")}
    print(f"{platform.node()}: {os.cpu_count()} CPUs; {args.files} files x {args.rows} rows x {args.features} "
          f"float32, chunk_rows={args.chunk_rows}, workers={args.workers}\n")
    print(f"| sources | variant | median s | ratio to {next(iter(variants.values()))[0]} |")
    print("|---|---|---:|---:|")
    for compressed in [kind == "compressed" for kind in args.sources.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            _write(src, args.files, args.rows, args.features, compressed)
            # Untimed: imports, and the source files into the page cache.
            db.ingest(os.path.join(src, "b*.npz"), os.path.join(tmp, "warm.zarr"), **list(variants.values())[-1][1])
            shutil.rmtree(os.path.join(tmp, "warm.zarr"))
            times: dict[str, list[float]] = {name: [] for name, _ in variants.values()}
            for _ in range(args.repeat):
                for name, kw in variants.values():
                    out = os.path.join(tmp, "out.zarr")
                    t0 = time.perf_counter()
                    db.ingest(os.path.join(src, "b*.npz"), out, chunk_rows=args.chunk_rows, workers=args.workers,
                              **kw)  # type: ignore[arg-type]
                    times[name].append(time.perf_counter() - t0)
                    shutil.rmtree(out)
            base = statistics.median(next(iter(times.values())))
            for name, ts in times.items():
                med = statistics.median(ts)
                kind = "compressed .npz" if compressed else ".npz"
                print(f"| {kind} | {name} | {med:.2f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
