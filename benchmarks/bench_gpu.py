"""describe on one GPU: device-resident, host memory (block copies vs overlapped), a Zarr store, peers and floors.

Everything runs in this one process on the same data (a seeded (rows x
features) float32 matrix and a 4-class label, generated on the device):

* ``device``: the data already in GPU memory as CuPy blocks of ``--block-rows``
  rows; ``describe(device="gpu")`` with the histogram range given, the full
  summary (moments, cov, hist, mi) and moments + cov;
* ``host``: the same data in host memory, moved with ``daskbatch.gpu-transfer``
  ``block`` (one ``cupy.asarray`` task per block) and ``staged`` (each chunk
  task copies its block in parts through pinned buffers while it reduces the
  previous part), side by side;
* ``store``: a ``--store-rows`` x features Zarr store (``--store-chunk-rows``-row
  chunks, zstd), range given (one pass) and range unknown (two passes: the
  quantile sketch, then the histograms), and the CPU describe on the same
  store with all cores;
* per-block chunk times of ``Moments``, ``CoMoments``, ``Histogram`` (by
  label) and ``Sketch`` with CUDA events;
* peers: the seed algorithm by hand in CuPy (float64 column sums and the
  XᵀX GEMM, one ``bincount`` per block) and Dask's own mean/var/min/max +
  ``da.cov`` on the CuPy blocks;
* floors, per block: read every element once, float64 GEMM XᵀX, float64
  SYRK (``cupy.cublas.syrk``).

Usage::

    python benchmarks/bench_gpu.py --out benchmarks/RESULTS.md       # 1,000,000 x 5,000, ~4 min on an H100
    python benchmarks/bench_gpu.py --rows 100000 --features 256 --block-rows 10000   # quick

Without CuPy or a CUDA device it prints one line saying so and exits 0; with
them but without daskbatch's GPU kernels (``daskbatch info --gpu`` says why) it
prints that line and exits 1 rather than time the array-API path.
Timings are the best of ``--repeat`` runs after one warm-up run; the GPU is
synchronised before each clock is read (describe returns host results).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):  # run from a source tree without installing
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_describe import write_section  # noqa: E402  (the shared RESULTS.md section writer)

SECTION = "## describe — GPU"
CLASSES = (0, 1, 2, 3)
RANGE = (-5.0, 5.0)
FULL = ("moments", "cov", "hist", "mi")
FIRST = ("moments", "cov")


def gpu_or_none() -> str | None:
    """Why this machine cannot run the benchmark, or None when it can."""
    try:
        import cupy

        if int(cupy.cuda.runtime.getDeviceCount()) < 1:
            return "no CUDA device"
    except Exception as exc:  # no cupy, no driver, no device
        return f"CuPy or a CUDA device is not available ({type(exc).__name__}: {exc})"
    return None


def device_facts() -> dict[str, str]:
    """Card, memory, CuPy, CUDA runtime and driver versions, numba-cuda kernels on or off."""
    import cupy

    from daskbatch.stats import kernels

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def version(v: int) -> str:
        return f"{v // 1000}.{v % 1000 // 10}"

    return {
        "name": name, "memory": f"{props['totalGlobalMem'] / 2**30:.0f} GiB", "cupy": cupy.__version__,
        "runtime": version(cupy.cuda.runtime.runtimeGetVersion()),
        "driver": version(cupy.cuda.runtime.driverGetVersion()),
        "kernels": "numba-cuda kernels" if kernels.gpu_available() else "array-API path (numba-cuda unavailable)",
        "cores": str(os.cpu_count()),
    }


# --- timing ---------------------------------------------------------------------------------------


def best_of(func: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    """Best wall seconds of ``repeat`` runs of ``func`` after one warm-up run (GPU synchronised)."""
    import cupy

    func()
    cupy.cuda.Device().synchronize()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        cupy.cuda.Device().synchronize()
        runs.append(time.perf_counter() - t)
    return min(runs), runs


def event_ms(func: Callable[[], Any], repeat: int = 3) -> float:
    """Median milliseconds of ``func`` on the current stream, by CUDA events, after one warm-up."""
    import cupy

    func()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        func()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


class Results:
    """Named measurements, each kept or recorded as failed (one contender's failure stops nothing)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def run(self, key: str, what: str, func: Callable[[], dict[str, Any]]) -> None:
        print(f"{key} ...", end=" ", flush=True)
        try:
            out = func()
        except Exception as exc:  # recorded in the table, the rest still runs
            out = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
        self.rows[key] = {"what": what, **out}
        print(out.get("error") or ", ".join(f"{k} {v:.4g}" for k, v in out.items() if isinstance(v, float)),
              flush=True)

    def get(self, key: str, field: str) -> float | None:
        value = self.rows.get(key, {}).get(field)
        return float(value) if isinstance(value, (int, float)) else None


# --- data -----------------------------------------------------------------------------------------


def make_data(rows: int, d: int) -> tuple[Any, Any]:
    """Seeded float32 (rows, d) and an int32 label of 4 classes, on the device."""
    import cupy

    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((rows, d), dtype=cupy.float32)
    y = ((x[:, 0] > 0).astype(cupy.int32) + 2 * (x[:, 1 % d] > 1.0).astype(cupy.int32))
    return x, y


def ensure_store(path: Path, rows: int, d: int, chunk_rows: int) -> Path:
    """A Zarr store X (rows, d) float32 + y (rows,) int32, zstd level 1, built once and reused."""
    import cupy
    import zarr
    from zarr.codecs import ZstdCodec

    if (path / "X" / "zarr.json").exists():
        return path
    print(f"building {path} ...", flush=True)
    group = zarr.open_group(str(path), mode="w")
    zx = group.create_array("X", shape=(rows, d), chunks=(chunk_rows, d), dtype="float32",
                            compressors=[ZstdCodec(level=1)])
    zy = group.create_array("y", shape=(rows,), chunks=(chunk_rows,), dtype="int32",
                            compressors=[ZstdCodec(level=1)])
    rng = cupy.random.default_rng(1)
    for start in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - start)
        block = rng.standard_normal((n, d), dtype=cupy.float32)
        zx[start:start + n] = block.get()
        zy[start:start + n] = ((block[:, 0] > 0).astype(cupy.int32)
                               + 2 * (block[:, 1 % d] > 1.0).astype(cupy.int32)).get()
    return path


def as_dask(a: Any, block_rows: int, name: str) -> Any:
    """A dask array over ``a`` (NumPy or CuPy) in row blocks, named so that dask does not hash the data."""
    import dask.array as da

    chunks = (block_rows,) + tuple(-1 for _ in a.shape[1:])
    return da.from_array(a, chunks=chunks, name=name, asarray=False)


# --- contenders -----------------------------------------------------------------------------------


def describe_run(x: Any, y: Any, stats: tuple[str, ...], *, transfer: str = "block",
                 range_: Any = RANGE, device: str = "gpu") -> Callable[[], Any]:
    import dask

    import daskbatch as db

    def run() -> Any:
        with dask.config.set({"daskbatch.gpu-transfer": transfer}):
            return db.describe(x, y if "mi" in stats else None, stats=stats, bins=64, range=range_, classes=list(CLASSES) if "mi" in stats else None, run=db.RunOptions(plan=None, device=device))

    return run


def seed_by_hand(blocks: list[Any], labels: list[Any], bins: int) -> Callable[[], Any]:
    """The seed algorithm in CuPy: float64 column sums, XᵀX by GEMM, one bincount per block (by label)."""
    import cupy

    d = blocks[0].shape[1]
    k = len(CLASSES)
    lo, scale = RANGE[0], bins / (RANGE[1] - RANGE[0])

    def run() -> Any:
        s1 = cupy.zeros(d)
        s2 = cupy.zeros(d)
        gram = cupy.zeros((d, d))
        counts = cupy.zeros(d * bins * k, dtype=cupy.int64)
        offsets = cupy.arange(d, dtype=cupy.int64) * bins
        for b, lab in zip(blocks, labels, strict=True):
            b64 = b.astype(cupy.float64)
            s1 += b64.sum(axis=0)
            s2 += (b64 * b64).sum(axis=0)
            gram += b64.T @ b64
            idx = cupy.clip(((b64 - lo) * scale).astype(cupy.int64), 0, bins - 1) + offsets
            counts += cupy.bincount((idx * k + lab[:, None]).ravel(), minlength=d * bins * k)
        cupy.cuda.Device().synchronize()
        return s1, s2, gram, counts

    return run


def dask_builtins(x: Any) -> Callable[[], Any]:
    """Dask's own mean/var/min/max and da.cov on the CuPy blocks, in one compute."""
    import dask
    import dask.array as da

    def run() -> Any:
        return dask.compute(x.mean(axis=0), x.var(axis=0, ddof=1), x.min(axis=0), x.max(axis=0),
                            da.cov(x, rowvar=False))

    return run


def chunk_times(block: Any, label: Any, repeat: int) -> dict[str, float]:
    """Milliseconds per block of each statistic's chunk step, and of the floors, by CUDA events."""
    import cupy

    from daskbatch.stats import CoMoments, Histogram, Moments, Sketch

    d = block.shape[1]
    hist = Histogram(64, (RANGE[0],) * d, (RANGE[1],) * d, by_label=True, classes=CLASSES)
    out = {
        "Moments.chunk": event_ms(lambda: Moments().chunk(block), repeat),
        "CoMoments.chunk": event_ms(lambda: CoMoments().chunk(block), repeat),
        "Histogram.chunk (by label)": event_ms(lambda: hist.chunk(block, label), repeat),
        "Sketch.chunk": event_ms(lambda: Sketch().chunk(block), repeat),
        "floor: read every element (max)": event_ms(lambda: cupy.amax(block), repeat),
    }
    b64 = block.astype(cupy.float64)
    out["floor: float64 GEMM XᵀX"] = event_ms(lambda: b64.T @ b64, repeat)
    syrk = getattr(getattr(cupy, "cublas", None), "syrk", None)
    if syrk is not None:
        c = cupy.zeros((d, d))
        out["floor: float64 SYRK XᵀX"] = event_ms(lambda: syrk("T", b64, out=c, alpha=1.0, beta=0.0, lower=False),
                                                  repeat)
    out["cast to float64"] = event_ms(lambda: block.astype(cupy.float64), repeat)
    out.update(sketch_parts(block, repeat))
    return out


def sketch_parts(block: Any, repeat: int) -> dict[str, float]:
    """Milliseconds of each part of the array-API ``Sketch.chunk`` (CuPy blocks have no sketch kernel).

    The chunk keys at most ``BLOCK_VALUES`` values at a time: the parts are timed on one such sub-block
    (float64, as the chunk casts it), and the merge on two of its states.
    """
    from daskbatch.stats import Sketch
    from daskbatch.stats.numerics import as_float64
    from daskbatch.stats.sketch_distinct import grid_chunk, xp_distinct

    sketch = Sketch()
    part = as_float64(block[: sketch._block_rows(block.shape[1])])
    rows = part.shape[0]
    counts = sketch._xp_counts(part, None, sketch._chunk_dtype(rows))
    state = sketch.chunk(part)
    return {
        f"  Sketch part: bucket counts ({rows:,} rows)": event_ms(
            lambda: sketch._xp_counts(part, None, sketch._chunk_dtype(rows)), repeat),
        f"  Sketch part: distinct values ({rows:,} rows)": event_ms(
            lambda: xp_distinct(part, sketch.values_kept, None), repeat),
        f"  Sketch part: dyadic grid ({rows:,} rows)": event_ms(
            lambda: grid_chunk(part, counts[2], counts[3], sketch.grid_bins, None, counts[0].dtype), repeat),
        f"  Sketch part: tails ({rows:,} rows)": event_ms(lambda: sketch._tails_for(part, None), repeat),
        "  Sketch.merge of two such states": event_ms(lambda: sketch.merge(state, state), repeat),
    }


# --- driver ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=5_000)
    p.add_argument("--block-rows", type=int, default=25_000)
    p.add_argument("--store-rows", type=int, default=None, help="rows of the Zarr store (default rows / 5)")
    p.add_argument("--store-chunk-rows", type=int, default=None, help="rows per store chunk (default block rows / 2.5)")
    p.add_argument("--repeat", type=int, default=2, help="timed runs after one warm-up (the best is reported)")
    p.add_argument("--threads", type=int, default=4, help="threads of the threaded scheduler for the GPU runs")
    p.add_argument("--no-cpu", dest="cpu", action="store_false", help="skip the CPU describe on the store")
    p.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    p.add_argument("--out", default=None, help=f"write the '{SECTION}' section of this Markdown file")
    args = p.parse_args(argv)
    why = gpu_or_none()
    if why:
        print(f"bench_gpu skipped: {why}")
        return 0
    from daskbatch.stats.kernels.preflight import check_gpu

    check = check_gpu()  # a GPU without the kernels would time the array-API path under the GPU's name
    if not check.ok:
        print(f"bench_gpu refused: {check.verdict()}")
        return 1
    args.store_rows = args.store_rows or max(1, args.rows // 5)
    args.store_chunk_rows = args.store_chunk_rows or max(1, args.block_rows * 2 // 5)

    import cupy
    import dask

    import daskbatch  # noqa: F401  (daskbatch's dask.config defaults)

    dask.config.set(scheduler="threads", num_workers=args.threads)
    facts = device_facts()
    res = Results()
    rows, d, br = args.rows, args.features, args.block_rows
    n_blocks = math.ceil(rows / br)
    started = time.perf_counter()

    # --- device-resident ------------------------------------------------------------------------
    x_dev, y_dev = make_data(rows, d)
    xd, yd = as_dask(x_dev, br, "bench-gpu-x-dev"), as_dask(y_dev, br, "bench-gpu-y-dev")

    def timed(func: Callable[[], Any], n: int = rows) -> Callable[[], dict[str, Any]]:
        def measure() -> dict[str, Any]:
            best, runs = best_of(func, args.repeat)
            return {"seconds": best, "samples_per_s": n / best, "runs": runs}

        return measure

    res.run("device, full summary", "describe(device='gpu'), CuPy blocks, range given",
            timed(describe_run(xd, yd, FULL)))
    res.run("device, moments+cov", "describe(stats=('moments', 'cov')), CuPy blocks",
            timed(describe_run(xd, yd, FIRST)))
    # Views of the device data, block by block (dropped with it before the host runs).
    dev = {"blocks": [x_dev[i:i + br] for i in range(0, rows, br)],
           "labels": [y_dev[i:i + br] for i in range(0, rows, br)]}
    res.run("peer: seed algorithm by hand", "CuPy: float64 sums + XᵀX GEMM + one bincount per block",
            timed(seed_by_hand(dev["blocks"], dev["labels"], 64)))
    res.run("peer: dask built-ins", "mean/var/min/max + da.cov on the CuPy blocks", timed(dask_builtins(xd)))

    def per_block() -> dict[str, Any]:
        return chunk_times(dev["blocks"][0], dev["labels"][0], 3)

    res.run("per block", f"one {min(br, rows):,} x {d:,} block, CUDA events, ms", per_block)

    def read_all() -> dict[str, Any]:
        best, runs = best_of(lambda: [cupy.amax(b) for b in dev["blocks"]], args.repeat)
        return {"seconds": best, "samples_per_s": rows / best, "runs": runs}

    res.run("floor: read every block once", "cupy.amax of every block", read_all)
    dev.clear()
    del xd, yd

    # --- host memory: block copies vs overlapped (staged) -----------------------------------------
    x_host, y_host = x_dev.get(), y_dev.get()
    del x_dev, y_dev
    cupy.get_default_memory_pool().free_all_blocks()
    xh, yh = as_dask(x_host, br, "bench-gpu-x-host"), as_dask(y_host, br, "bench-gpu-y-host")
    for stats, label in ((FULL, "full summary"), (FIRST, "moments+cov")):
        for transfer, how in (("block", "a cupy.asarray task per block"), ("staged", "overlapped, pinned double buffer")):
            res.run(f"host, {label}, {transfer}", f"NumPy blocks in host memory, {how}",
                    timed(describe_run(xh, yh, stats, transfer=transfer)))
    del xh, yh, x_host, y_host

    # --- a Zarr store -----------------------------------------------------------------------------
    store = ensure_store(Path(args.data_dir) / f"bench_gpu_{args.store_rows}x{d}_c{args.store_chunk_rows}.zarr",
                         args.store_rows, d, args.store_chunk_rows)

    def on_store(range_: Any, device: str, threads: int, repeat: int) -> Callable[[], dict[str, Any]]:
        import daskbatch as db

        def run() -> Any:
            return db.describe(str(store), label="y", bins=64, range=range_, classes=list(CLASSES), run=db.RunOptions(plan=None, device=device))

        def measure() -> dict[str, Any]:
            with dask.config.set(scheduler="threads", num_workers=threads):
                best, runs = best_of(run, repeat)
            return {"seconds": best, "samples_per_s": args.store_rows / best, "runs": runs}

        return measure

    res.run("store, range given", "describe(store, device='gpu'), one pass", on_store(RANGE, "gpu", args.threads,
                                                                                        args.repeat))
    res.run("store, range unknown", "describe(store, device='gpu'), sketch pass + histogram pass",
            on_store(None, "gpu", args.threads, args.repeat))
    if args.cpu:
        res.run("store, CPU describe", f"describe(store) on the CPU, {os.cpu_count()} threads, range given",
                on_store(RANGE, "cpu", os.cpu_count() or 1, 1))
    total = time.perf_counter() - started

    command = (f"python benchmarks/bench_gpu.py --rows {rows} --features {d} --block-rows {br} "
               f"--store-rows {args.store_rows} --store-chunk-rows {args.store_chunk_rows} "
               f"--repeat {args.repeat} --threads {args.threads}" + ("" if args.cpu else " --no-cpu"))
    text = report(res, args, facts, command, n_blocks, total)
    print(text)
    if args.out:
        write_section(Path(args.out), text, SECTION)
        print(f"wrote the '{SECTION}' section of {args.out}")
    return 0


# --- report ---------------------------------------------------------------------------------------


def report(res: Results, args: argparse.Namespace, facts: dict[str, str], command: str, n_blocks: int,
           total: float) -> str:
    rows, d, br = args.rows, args.features, args.block_rows
    lines = [
        SECTION, "",
        f"GPU: {facts['name']} ({facts['memory']}), CuPy {facts['cupy']}, CUDA runtime {facts['runtime']}, "
        f"driver {facts['driver']}; {facts['kernels']}; {facts['cores']} CPU cores. Threaded scheduler, "
        f"{args.threads} threads for the GPU runs.", "",
        f"Reproduce: `{command} --out benchmarks/RESULTS.md`", "",
        f"Data: {rows:,} x {d:,} float32 (standard normal), blocks of {br:,} rows ({n_blocks} blocks), "
        f"a label of {len(CLASSES)} classes, 64 bins, range {RANGE} given unless said; store: "
        f"{args.store_rows:,} rows in {args.store_chunk_rows:,}-row zstd chunks. Best of {args.repeat} runs after a "
        f"warm-up; the whole benchmark took {total:.0f} s.", "",
        "| run | what | best s | runs s | samples/s |", "|---|---|---:|---|---:|",
    ]
    for key, r in res.rows.items():
        if key == "per block":
            continue
        if "error" in r:
            lines.append(f"| {key} | {r['what']} | failed: {r['error']} | | |")
            continue
        lines.append(f"| {key} | {r['what']} | {r['seconds']:.3f} | {', '.join(f'{t:.3f}' for t in r['runs'])} | "
                     f"{r['samples_per_s']:,.0f} |")
    block = res.rows.get("per block", {})
    if block and "error" not in block:
        lines += ["", f"Per block ({min(br, rows):,} x {d:,}; CUDA events, median of 3):", "",
                  "| step | ms |", "|---|---:|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in block.items() if isinstance(v, float)]
        syrk = block.get("floor: float64 SYRK XᵀX")
        gemm = block.get("floor: float64 GEMM XᵀX")
        if gemm:
            lines.append(f"| (GEMM rate) | {2 * min(br, rows) * d * d / (gemm * 1e-3) / 1e12:.1f} TFLOP/s |")
        if syrk:
            lines.append(f"| (SYRK rate, counted as GEMM) | {2 * min(br, rows) * d * d / (syrk * 1e-3) / 1e12:.1f} "
                         "TFLOP/s |")
    elif block:
        lines += ["", f"Per block: failed: {block['error']}"]
    lines += ["", "Ratios (time per block of the full device-resident describe against the floors and peers; "
              "above 1 = describe is slower):", ""]
    lines += ratios(res, n_blocks)
    return "\n".join(lines) + "\n"


def ratios(res: Results, n_blocks: int) -> list[str]:
    full = res.get("device, full summary", "seconds")
    first = res.get("device, moments+cov", "seconds")
    block = res.rows.get("per block", {})
    out = []

    def line(label: str, a: float | None, b: float | None) -> None:
        out.append(f"- {label}: {a / b:.2f}x" if a and b else f"- {label}: not measured")

    per_block = full / n_blocks if full else None
    line("full summary / read floor (whole pass)", full, res.get("floor: read every block once", "seconds"))
    line("full summary per block / float64 SYRK floor",
         per_block * 1e3 if per_block else None, block.get("floor: float64 SYRK XᵀX"))
    line("full summary per block / float64 GEMM floor",
         per_block * 1e3 if per_block else None, block.get("floor: float64 GEMM XᵀX"))
    line("full summary / seed algorithm by hand", full, res.get("peer: seed algorithm by hand", "seconds"))
    line("moments+cov / dask built-ins (mean/var/min/max + da.cov)", first, res.get("peer: dask built-ins", "seconds"))
    for label in ("full summary", "moments+cov"):
        line(f"host {label}: staged / block copies", res.get(f"host, {label}, staged", "seconds"),
             res.get(f"host, {label}, block", "seconds"))
        line(f"host {label}, staged / device-resident", res.get(f"host, {label}, staged", "seconds"),
             full if label == "full summary" else first)
    line("store: range unknown / range given", res.get("store, range unknown", "seconds"),
         res.get("store, range given", "seconds"))
    line("store: CPU describe / GPU describe (range given)", res.get("store, CPU describe", "seconds"),
         res.get("store, range given", "seconds"))
    return out


if __name__ == "__main__":
    sys.exit(main())
