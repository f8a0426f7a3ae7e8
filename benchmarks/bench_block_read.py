"""A store's row blocks read by zarr and by daskbatch's direct chunk decoding, interleaved in one process.

describe reads a local store in blocks of several storage chunks (262,144 rows of the 64-feature store: four
16 MiB chunks). zarr-python decodes each chunk into a buffer of its own, then copies it into the block;
``daskbatch.io.chunk_decode.DirectBlocks`` has the same numcodecs codec decode each chunk into the block's rows.
Both read every block of ``X`` on ``--threads`` threads (the blocks dealt out in turn), in rounds that
alternate the two, best of ``--repeat`` per round; each row gives wall seconds, the process's CPU seconds
(user and system) and its minor page faults per read of the whole array, and checks both blocks bit for bit.

Usage::

    python benchmarks/bench_block_read.py --rows 1000000 --features 64 --classes 8 [--block-rows 262144]

The store is ``bench_floor.py``'s (built on first use under ``--data-dir``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_floor import ensure_classes_store  # noqa: E402


def read_all(read: Any, blocks: list[tuple[int, int]], threads: int) -> list[np.ndarray]:
    """Every block through ``read(start, stop)``, the blocks dealt out in turn to ``threads`` threads."""
    out: list[Any] = [None] * len(blocks)

    def work(k: int) -> None:
        for i in range(k, len(blocks), threads):
            out[i] = read(*blocks[i])

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return out


def timed(read: Any, blocks: list[tuple[int, int]], threads: int, repeat: int) -> tuple[float, float, float, float]:
    """Best wall seconds of ``repeat`` reads, and per read the mean user and system CPU seconds and minor faults."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        got = read_all(read, blocks, threads)
        best = min(best, time.perf_counter() - start)
        del got
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (best, (after.ru_utime - before.ru_utime) / repeat, (after.ru_stime - before.ru_stime) / repeat,
            (after.ru_minflt - before.ru_minflt) / repeat)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=65_536)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--block-rows", type=int, default=262_144)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data-dir", default=str(HERE / "_data"))
    args = p.parse_args(argv)

    import zarr

    from daskbatch.io.chunk_decode import direct_blocks

    store = ensure_classes_store(args)
    x = zarr.open_group(str(store), mode="r")["X"]
    direct = direct_blocks(x)
    if direct is None:
        print(f"{store}: not a layout daskbatch decodes directly (zarr reads it)")
        return 1
    blocks = [(s, min(s + args.block_rows, x.shape[0])) for s in range(0, x.shape[0], args.block_rows)]
    readers = {"zarr (`x[a:b]`)": lambda a, b: np.asarray(x[a:b]), "daskbatch `DirectBlocks.read`": direct.read}
    for a, b in blocks:  # the same bits (and a warm page cache)
        assert np.asarray(x[a:b]).tobytes() == direct.read(a, b).tobytes(), (a, b)
    rows: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in readers}
    for _ in range(args.rounds):
        for name, read in readers.items():
            rows[name].append(timed(read, blocks, args.threads, args.repeat))
    print(f"{x.shape[0]:,} x {x.shape[1]} {x.dtype}, {x.chunks[0]:,}-row chunks ({x.metadata.codecs}), "
          f"blocks of {args.block_rows:,} rows on {args.threads} threads; best of {args.repeat}, "
          f"{args.rounds} interleaved rounds (median of the rounds)")
    print("| reader | best s | user CPU s | system CPU s | minor faults |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in rows.items():
        wall, user, system, faults = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"| {name} | {wall:.3f} | {user:.3f} | {system:.3f} | {faults:,.0f} |")
    print(f"\nReproduce: python benchmarks/bench_block_read.py --rows {args.rows} --features {args.features} "
          f"--classes {args.classes} --block-rows {args.block_rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
