"""Ingest of many .npz batch files into one Zarr store: daskbatch vs two common approaches.

Each method runs in its own subprocess so that its peak RSS (``ru_maxrss``) is
its own.  All write the same Zarr v3 layout (chunks of ``--chunk-rows`` rows,
zstd level 1), so only the strategy differs:

* ``daskbatch``: ``daskbatch.ingest`` (one task per output chunk, at most
  ``--workers`` in flight; uncompressed .npz members are memory-mapped).
* ``naive``: ``np.load`` every file, ``np.concatenate``, write once.
* ``dask``: ``da.concatenate`` of one lazy block per file, ``rechunk`` to the
  output chunks, ``to_zarr`` (threaded scheduler).

Run (about three minutes on 2 cores; needs ~3x the data size of free disk)::

    python benchmarks/bench_ingest.py --files 1000 --rows 4000 --features 96

and the scaling check of peak RSS against the number of files::

    python benchmarks/bench_ingest.py --files 1000 --scaling 125,250,500,1000 --methods daskbatch
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

RUNNERS = {
    "daskbatch": """
        from daskbatch.io.ingest import ingest
        ingest(files, out, chunk_rows=chunk_rows, workers=workers, compressor="zstd")
    """,
    "naive": """
        import numpy as np, zarr
        from zarr.codecs import ZstdCodec
        x = np.concatenate([np.load(f)["X"] for f in files])
        z = zarr.create_array(out, shape=x.shape, chunks=(chunk_rows, x.shape[1]), dtype=x.dtype,
                              compressors=ZstdCodec(level=1))
        z[:] = x
    """,
    "dask": """
        import dask, dask.array as da, numpy as np
        from zarr.codecs import ZstdCodec
        def load(f):
            with np.load(f) as z:
                return z["X"]
        blocks = []
        for f in files:
            with np.load(f) as z:  # header only: the shape for the lazy block
                shape, dtype = z["X"].shape, z["X"].dtype
            blocks.append(da.from_delayed(dask.delayed(load)(f), shape=shape, dtype=dtype))
        x = da.concatenate(blocks).rechunk({0: chunk_rows, 1: -1})
        with dask.config.set(num_workers=workers):
            x.to_zarr(out, compressors=ZstdCodec(level=1))
    """,
}


def make_files(folder: str, files: int, rows: int, features: int) -> int:
    """Write ``files`` uncompressed .npz batches (np.savez); return total bytes of X."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    # One random block reused with a per-file shift: realistic bytes, cheap to make.
    base = rng.standard_normal((rows, features), dtype=np.float32)
    for i in range(files):
        path = os.path.join(folder, f"batch_{i:05d}.npz")
        if not os.path.exists(path):
            tmp = path + ".tmp.npz"  # rename when complete: a killed run leaves no torn batch
            np.savez(tmp, X=base + np.float32(i % 97))
            os.replace(tmp, path)
    return files * rows * features * 4


def run(method: str, files: list[str], out: str, chunk_rows: int, workers: int) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # do not charge this method for the previous one's dirty pages
    code = (
        textwrap.dedent(
            f"""
        import resource, time, json
        files = {files!r}
        out, chunk_rows, workers = {out!r}, {chunk_rows}, {workers}
        t0 = time.perf_counter()
        """
        )
        + textwrap.dedent(RUNNERS[method])
        + textwrap.dedent(
            """
        wall = time.perf_counter() - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                          "peak_rss_mib": ru.ru_maxrss / 1024}))
        """
        )
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{method} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--rows", type=int, default=4000, help="rows per batch file")
    p.add_argument("--features", type=int, default=96)
    p.add_argument("--chunk-rows", type=int, default=65536)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--methods", default="daskbatch,dask,naive")
    p.add_argument(
        "--scaling", default="", help="comma-separated file counts for a peak-RSS scaling run"
    )
    p.add_argument("--workdir", default=os.path.join(HERE, "_data"))
    p.add_argument("--repeat", type=int, default=2, help="runs per method; best wall time shown")
    p.add_argument("--keep", action="store_true", help="keep the generated files")
    args = p.parse_args()

    src = os.path.join(args.workdir, f"npz_{args.rows}x{args.features}")
    t = time.perf_counter()
    nbytes = make_files(src, args.files, args.rows, args.features)
    files = sorted(
        os.path.join(src, f) for f in os.listdir(src) if f.endswith(".npz") and ".tmp" not in f
    )[: args.files]
    # Same starting point for every method: files flushed to disk and in the page cache.
    os.sync()
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    print(
        f"# {args.files} files x {args.rows} rows x {args.features} float32 = {nbytes / 2**20:,.0f} MiB "
        f"(made in {time.perf_counter() - t:.0f} s); machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs; chunk rows {args.chunk_rows}; workers {args.workers}"
    )
    print(f"# load average before: {os.getloadavg()[0]:.1f}")
    print("| method | files | data MiB | wall s | CPU s | peak RSS MiB | MiB/s (wall) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    counts = [int(n) for n in args.scaling.split(",") if n] or [args.files]
    for n in counts:
        for method in args.methods.split(","):
            out = os.path.join(args.workdir, f"out_{method}.zarr")
            runs = [
                run(method, files[:n], out, args.chunk_rows, args.workers)
                for _ in range(args.repeat)
            ]
            # The best wall time of the repeats, and the largest peak RSS seen.
            r = {
                "wall_s": min(x["wall_s"] for x in runs),
                "cpu_s": min(x["cpu_s"] for x in runs),
                "peak_rss_mib": max(x["peak_rss_mib"] for x in runs),
            }
            mib = n * args.rows * args.features * 4 / 2**20
            print(
                f"| {method} | {n} | {mib:,.0f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['peak_rss_mib']:,.0f} | "
                f"{mib / r['wall_s']:,.0f} |",
                flush=True,
            )
    for method in args.methods.split(","):
        shutil.rmtree(os.path.join(args.workdir, f"out_{method}.zarr"), ignore_errors=True)
    if not args.keep:
        shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main()
