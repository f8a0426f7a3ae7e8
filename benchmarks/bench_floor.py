"""The full summary against the read floor, interleaved in one process (issue 18, item 8).

Times, in one process and in turn (so that the load of a shared machine hits
every contender alike), best of ``--repeat``:

* ``read``: read and decode every chunk of ``X`` and ``y`` (the floor);
* ``describe``: ``db.describe(store, label="y")`` with its defaults (moments,
  cov, hist, mi, class_moments; ranges from the quantile sketch, so two passes);
* ``describe, cache=False``: the same, reading the store in both passes.

With ``--blocks`` it also times, on one chunk and one thread, reading it and
each statistic's ``chunk`` of both passes, to say where a block's time goes, and
adds up their CPU time over the store's chunks: the least CPU the full summary
needs (the read plus each statistic's loop, nothing else), against the CPU that
``--threads`` cores give in 2.5 times the read floor (issue 18's target).
With ``--against DIR`` (another checkout, e.g. ``main``'s) it times the numba
loops of that checkout's ``daskbatch/stats/kernels`` against this one's on
that chunk, in turn, after checking that both give the same state bit for bit.

With ``--classes K`` it times issue 33's rows instead: data with means near 1,000,
spreads from 0.01 to 100 and K classes, ``stats=("moments", "cov", "hist", "mi")``,
64 bins, given as a store path (``open_dataset``) and as ``da.from_zarr`` arrays. Each row also counts the
dask tasks one call runs (a count the machine's load does not move).

Usage::

    python benchmarks/bench_floor.py --rows 1000000 --features 64 --repeat 5 [--blocks] [--against DIR]
    python benchmarks/bench_floor.py --rows 1000000 --features 64 --repeat 5 --classes 8

The store is the one of ``bench_describe.py`` (float32, zstd level 1, 65,536-row
chunks at 64 features), built on first use under ``--data-dir``.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_describe import default_chunk_rows, ensure_store  # noqa: E402

#: The statistics of issue 33's in-loop rows (no class moments: ``describe``'s defaults add them).
ISSUE33_STATS = ("moments", "cov", "hist", "mi")


def build_classes_store(path: Path, rows: int, features: int, chunk_rows: int, classes: int) -> None:
    """Issue 33's data: float32 X with means near 1,000 and spreads from 0.01 to 100, y of ``classes`` classes."""
    import zarr
    from zarr.codecs import ZstdCodec

    rng = np.random.default_rng(33)
    group = zarr.open_group(str(path), mode="w")
    x = group.create_array("X", shape=(rows, features), chunks=(chunk_rows, features), dtype="float32",
                           compressors=[ZstdCodec(level=1)])
    y = group.create_array("y", shape=(rows,), chunks=(chunk_rows,), dtype="int32", compressors=[ZstdCodec(level=1)])
    means = 1000 + rng.uniform(-50, 50, features)
    spreads = np.logspace(-2, 2, features)
    for start in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - start)
        labels = rng.integers(0, classes, n)
        x[start:start + n] = (means + spreads * (rng.standard_normal((n, features)) + 0.1 * labels[:, None])).astype(np.float32)
        y[start:start + n] = labels
    group.attrs["bench"] = {"rows": rows, "features": features, "chunk_rows": chunk_rows, "classes": classes}


def ensure_classes_store(args: argparse.Namespace) -> Path:
    """The store of :func:`build_classes_store` for ``args``, built on first use."""
    path = Path(args.data_dir) / f"floor_{args.rows}x{args.features}_c{args.chunk_rows}_k{args.classes}.zarr"
    if not (path / "X" / "zarr.json").exists():
        print(f"building {path} ...", flush=True)
        build_classes_store(path, args.rows, args.features, args.chunk_rows, args.classes)
    return path


def contenders(store: Path, issue33: bool = False) -> dict[str, Any]:
    """Zero-argument callables, one per contender (``issue33``: the store path and ``da.from_zarr`` of issue 33)."""
    import dask
    import dask.array as da

    import daskbatch as db

    x = da.from_zarr(str(store), component="X")
    y = da.from_zarr(str(store), component="y")
    tiny = x.map_blocks(lambda b: b[:1, :1], chunks=(1, 1)).sum() + y.map_blocks(lambda b: b[:1], chunks=(1,)).sum()
    if issue33:  # each call opens its input anew, as a user's call does
        return {
            "read": lambda: dask.compute(tiny),
            "describe(open_dataset(store))": lambda: db.describe(
                db.open_dataset(str(store), label="y"), stats=ISSUE33_STATS, bins=64),
            "describe(da.from_zarr(...))": lambda: db.describe(
                da.from_zarr(str(store), component="X"), label=da.from_zarr(str(store), component="y"),
                stats=ISSUE33_STATS, bins=64),
        }
    return {
        "read": lambda: dask.compute(tiny),
        "describe": lambda: db.describe(str(store), label="y"),
        "describe, cache=False": lambda: db.describe(str(store), label="y", run=db.RunOptions(cache=False)),
    }


def _tasks_of(run: Any) -> int:
    """How many dask tasks one call of ``run`` runs (every compute of it: a label scan's, both passes')."""
    from dask.callbacks import Callback

    ran = [0]

    def pretask(key: Any, dsk: Any, state: Any) -> None:
        ran[0] += 1

    with Callback(pretask=pretask):
        run()
    return ran[0]


def blocks(store: Path, rows: int) -> dict[str, tuple[float, float]]:
    """Milliseconds (wall, CPU) of each step on the first chunk, one thread, best of 5 each.

    CPU is the process's (zarr decodes a read's chunks on threads of its own); the
    statistics are those of ``describe``'s passes, the sketch counting in int32 as there.
    """
    import dask
    import zarr

    from daskbatch.stats import ClassMoments, CoMoments, Histogram, Moments, Sketch
    from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram

    zx, zy = zarr.open_array(str(store / "X"), mode="r"), zarr.open_array(str(store / "y"), mode="r")
    b, lab = np.asarray(zx[:rows]), np.asarray(zy[:rows])
    classes = tuple(int(c) for c in np.unique(lab))
    lo, hi = tuple(b.min(0).astype(float)), tuple(b.max(0).astype(float))
    steps = {
        "read X chunk (zarr, decode)": lambda: zx[:rows],
        "read y chunk": lambda: zy[:rows],
        "pass 1: Moments.chunk": lambda: Moments().chunk(b),
        "pass 1: CoMoments.chunk": lambda: CoMoments().chunk(b),
        "pass 1: ClassMoments.chunk": lambda: ClassMoments(classes=classes).chunk(b, lab),
        "pass 1: Sketch.chunk": lambda: Sketch(count_dtype="int32").chunk(b),
        "pass 2: Histogram.chunk (by label)": lambda: Histogram(64, lo, hi, by_label=True, classes=classes).chunk(b, lab),
        "pass 2: QuantileHistogram.chunk": lambda: QuantileHistogram(QUANTILE_BINS, lo, hi).chunk(b),
    }

    def class_moments_reference() -> Any:
        with dask.config.set({"daskbatch.kernels": False}):  # the path every block took before the kernel
            return ClassMoments(classes=classes).chunk(b, lab)

    steps["pass 1: ClassMoments.chunk, array-API path (before)"] = class_moments_reference
    import numba
    from threadpoolctl import threadpool_limits

    out = {}
    numba.set_num_threads(1)  # one BLAS and one numba thread, as each scheduler thread of describe has
    with threadpool_limits(1):
        for name, f in steps.items():
            out[name] = _best_of_5(f)
    return out


def _best_of_5(f: Any) -> tuple[float, float]:
    """Milliseconds (wall, CPU) of ``f()``, each the least of 5 calls after one to warm."""
    f()
    walls, cpus = [], []
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        f()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls) * 1e3, min(cpus) * 1e3


def least_cpu(steps: dict[str, tuple[float, float]], rows: int, chunk_rows: int) -> float:
    """CPU seconds of reading every chunk once and running each statistic's loop on it (the 'before' row left out)."""
    per_chunk = sum(cpu for name, (_, cpu) in steps.items() if "(before)" not in name)
    return per_chunk / 1e3 * rows / chunk_rows


#: The kernel modules that ``--against`` copies from each checkout: the helpers they share, then the loops it times.
AGAINST = ("_numba", "_numba_histogram", "_numba_sketch", "_sketch_table", "_numba_moments")


def _kernel_modules(root: Path, tag: str, scratch: Path) -> dict[str, Any]:
    """The loop modules of :data:`AGAINST` from checkout ``root``, imported as ``<tag>_<name>``.

    Copied into ``scratch`` first: numba caches next to the file, and the other checkout may be read-only.
    A module's imports of the others point to the copies of the same checkout (numba inlines helpers
    across modules).
    """
    import importlib.util

    out = {}
    for name in AGAINST:
        path = scratch / f"{tag}{name}.py"
        text = (root / "daskbatch" / "stats" / "kernels" / f"{name}.py").read_text()
        for other in AGAINST:
            text = text.replace(f"from daskbatch.stats.kernels.{other} import", f"from {tag}{other} import")
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"{tag}{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # numba's cache finds a loop's module by name
        spec.loader.exec_module(module)
        out[name] = module
    return out


def against(store: Path, rows: int, other: Path, repeat: int) -> dict[str, tuple[float, float]]:
    """Milliseconds (other, this) of each numba loop on the first chunk, one thread, in turn, best of ``repeat``."""
    import tempfile

    import zarr

    from daskbatch.stats import Sketch
    from daskbatch.stats.histogram import QUANTILE_BINS
    from daskbatch.stats.sketch_distinct import _grid_steps as grid_steps
    from daskbatch.stats.sketch_distinct import grid_bins
    from daskbatch.stats.sketch_tails import tail_layout

    b = np.asarray(zarr.open_array(str(store / "X"), mode="r")[:rows])
    lab = np.asarray(zarr.open_array(str(store / "y"), mode="r")[:rows])
    codes = np.unique(lab, return_inverse=True)[1].astype(np.int64).reshape(-1)
    k = int(codes.max()) + 1
    d = b.shape[1]
    lo, hi = b.min(0).astype(np.float64), b.max(0).astype(np.float64)
    sk = Sketch()
    k_min, k_max = sk.key_range
    n = sk.n_buckets

    def call(f: Any, *args: Any) -> Any:
        """``f(b, *args)``, with the decoding table (None) that the kernels before session 27 took after the block."""
        takes_table = "lut" in inspect.signature(getattr(f, "py_func", f)).parameters
        return f(b, None, *args) if takes_table else f(b, *args)

    def hist(m: Any, bins: int, labels: np.ndarray, classes: int) -> tuple[Any, ...]:
        counts = np.zeros(d * (bins + 3) * classes, dtype=np.int64)
        call(m.histogram_counts, lo, hi, (hi - lo) / bins, bins / (hi - lo), bins, labels, classes, counts, None)
        return (counts,)

    def sketch(m: Any) -> tuple[Any, ...]:
        counts, offset = np.zeros((d, 2 * n + 4), dtype=np.int64), np.empty((d, 2), dtype=np.int64)
        extrema = call(m.sketch_counts_all, sk.ln_gamma, sk.min_magnitude, k_min, k_max, n, counts, offset, None)
        return (counts, offset, *extrema)

    def sketch_f32(m: Any) -> tuple[Any, ...]:
        # The float32 chunk keyed from its bits (describe's sketch of float32 data), int32 counts as there.
        counts, offset = np.zeros((d, 2 * n + 4), dtype=np.int32), np.empty((d, 2), dtype=np.int64)
        extrema = m.sketch_float32(b, sk.ln_gamma, sk.min_magnitude, k_min, k_max, n, n, counts, offset, None, None)
        return (counts, offset, *extrema)

    def grid_tails(m: Any) -> tuple[Any, ...]:
        # The sweep of the sketch's grid and its tails' block minima, as a chunk of this store has them.
        step, first = grid_steps(lo, hi, grid_bins(n))
        counts = np.zeros((d, grid_bins(n)), dtype=np.int64)
        block, per_coarse, fine, coarse = tail_layout(*b.shape, sk.tail_values)
        call(m.grid_tail_blocks, step, first, counts, block, per_coarse, fine, coarse)
        return counts, fine, coarse

    def class_moments(m: Any) -> tuple[Any, ...]:
        fields = [np.zeros((k, d), dtype=np.int64)] + [np.zeros((k, d)) for _ in range(4)]
        call(m.class_moments_chunk, codes, *fields, None)
        return tuple(fields)

    loops = {
        f"Histogram by label ({64} bins x {k} classes)": ("_numba_histogram", lambda m: hist(m, 64, codes, k)),
        f"QuantileHistogram ({QUANTILE_BINS} bins)": (
            "_numba_histogram", lambda m: hist(m, QUANTILE_BINS, np.empty(0, dtype=np.int64), 1)),
        "Sketch (every bucket kept)": ("_numba_sketch", sketch),
        "Sketch of float32 (every bucket kept)": ("_sketch_table", sketch_f32),
        "Sketch's grid and tail blocks": ("_sketch_table", grid_tails),
        f"ClassMoments ({k} classes)": ("_numba_moments", class_moments),
        "Moments": ("_numba_moments", lambda m: call(m.moments_chunk, None)),
    }
    with tempfile.TemporaryDirectory() as scratch:
        sides = [_kernel_modules(other, "against", Path(scratch)), _kernel_modules(HERE.parent, "this", Path(scratch))]
        out = {}
        for name, (module, f) in loops.items():
            first, second = (f(side[module]) for side in sides)
            if not all(np.array_equal(a, c) for a, c in zip(first, second, strict=True)):
                raise AssertionError(f"{name}: the two checkouts' states differ")
            times: list[list[float]] = [[], []]
            for _ in range(repeat):
                for side, ts in zip(sides, times, strict=True):
                    t = time.perf_counter()
                    f(side[module])
                    ts.append(time.perf_counter() - t)
            out[name] = (min(times[0]) * 1e3, min(times[1]) * 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=None)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="threads of the threaded scheduler")
    p.add_argument("--only", nargs="*", help="run only these contenders (none, with --against: only that)")
    p.add_argument("--blocks", action="store_true", help="also time each step on one chunk")
    p.add_argument("--data-dir", default=str(HERE / "_data"))
    p.add_argument("--against", type=Path, help="another checkout: time its numba loops against this one's")
    p.add_argument("--classes", type=int, default=None,
                   help="issue 33's data with this many classes (means near 1,000, spreads 0.01 to 100), its "
                        "statistics and inputs: the store path and da.from_zarr")
    args = p.parse_args(argv)
    if args.chunk_rows is None:
        args.chunk_rows = default_chunk_rows(args.features)
    import logging
    import os
    import warnings

    import dask

    logging.getLogger("daskbatch").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")  # RangeWarnings of the synthetic data are not what is timed
    dask.config.set(scheduler="threads", num_workers=args.threads)
    store = ensure_store(args) if args.classes is None else ensure_classes_store(args)
    if args.against is not None:
        print(f"numba loops, one chunk, one thread, best of {2 * args.repeat + 1}, in turn, load average "
              f"{os.getloadavg()[0]:.1f}\n| loop | {args.against} ms | this ms | this / that |\n|---|---:|---:|---:|")
        for name, (that, this) in against(store, args.chunk_rows, args.against, 2 * args.repeat + 1).items():
            print(f"| {name} | {that:.1f} | {this:.1f} | {this / that:.2f} |")
        if args.only == []:
            return 0
    runs = contenders(store, issue33=args.classes is not None)
    names = args.only or list(runs)
    for name in names:  # warm-up: imports, numba's cache, the page cache
        runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}  # the process's CPU: less moved by other jobs' load
    for _ in range(args.repeat):
        for name in names:
            t, c = time.perf_counter(), time.process_time()
            runs[name]()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    tasks = {name: _tasks_of(runs[name]) for name in names}  # what each contender runs, whatever the load
    floor = min(times["read"]) if "read" in times else None
    floor_med = statistics.median(times["read"]) if "read" in times else None
    print(f"{args.rows:,} x {args.features}, chunks of {args.chunk_rows:,} rows, threaded scheduler "
          f"({args.threads} threads), best of {args.repeat}, load average {os.getloadavg()[0]:.1f}")
    cpu_floor = min(cpu["read"]) if "read" in cpu else None
    print("| contender | best s | median s | x read (best) | x read (medians) | CPU s (least) | x read's CPU | tasks |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, ts in times.items():
        best, med, least = min(ts), statistics.median(ts), min(cpu[name])
        ratio = f"{best / floor:.2f}" if floor else "-"
        ratio_med = f"{med / floor_med:.2f}" if floor_med else "-"
        ratio_cpu = f"{least / cpu_floor:.2f}" if cpu_floor else "-"
        print(f"| {name} | {best:.3f} | {med:.3f} | {ratio} | {ratio_med} | {least:.3f} | {ratio_cpu} | {tasks[name]} |")
    if args.blocks:
        steps = blocks(store, args.chunk_rows)
        print("\n| step (one chunk, one thread, best of 5) | wall ms | CPU ms |\n|---|---:|---:|")
        for name, (wall, cpu) in steps.items():
            print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
        least = least_cpu(steps, args.rows, args.chunk_rows)
        print(f"\nLeast CPU of the full summary (the steps above over {args.rows / args.chunk_rows:,.1f} chunks, "
              f"no overhead): {least:.2f} s, at least {least / args.threads:.2f} s on {args.threads} threads")
        if floor is not None:
            print(f"2.5x the read floor: {2.5 * floor:.2f} s wall, {2.5 * floor * args.threads:.2f} CPU-seconds "
                  f"on {args.threads} threads ({least / (2.5 * floor * args.threads):.0%} of them taken by the steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
