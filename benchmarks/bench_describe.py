"""Benchmark ``daskbatch.describe`` against Dask's built-ins, a hand-written graph, NumPy and peers.

Builds a Zarr store (float32, chunked by rows, zstd) once, then times, in one
run and each in a fresh subprocess (so peak memory is its own):

* ``read``: read and decode every chunk, nothing else (the floor);
* ``describe``: moments + cov + hist + mi, ranges unknown, so two passes;
* ``describe moments``: moments only (one pass);
* ``describe, cache=True``: decoded chunks kept in memory between the two passes;
* ``describe, kernels off``: the array-API path (``daskbatch.kernels: false``);
* ``dask built-ins``: mean/var/min/max, dask.array.stats skew/kurtosis, da.cov
  in one ``dask.compute``, then per-column ``da.histogram``/``histogram2d`` in a
  second (their ranges come from the first, as describe's do);
* ``hand-written graph``: ``map_blocks`` of raw power sums + XᵀX, then of ``bincount``;
* ``numpy in memory``: the same statistics on the array already in RAM;
* ``sklearn partial_fit``: ``StandardScaler.partial_fit`` (mean/var) over the chunks;
* ``boost-histogram``: per-column 1-D histograms filled chunk by chunk (ranges given),
  next to ``daskbatch hist`` (the Histogram statistic alone, ranges given).

Usage::

    python benchmarks/bench_describe.py --rows 1000000 --features 64 --repeat 3 \\
        [--scheduler threads|distributed] [--device cpu|gpu] [--out benchmarks/RESULTS.md]

Times are medians of ``--repeat`` runs after one warm-up on two chunks (imports,
numba's cache, the page cache). Peak memory is the largest sum of the RSS of
the contender's process and its children, sampled every 10 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))

from daskbatch.engine.run_options import RunOptions  # noqa: E402  # after the source-tree path

N_CLASSES = 4
CPU_CONTENDERS = [
    "read", "describe", "describe moments", "describe, plan=None", "describe, cache=True", "describe, kernels off",
    "dask built-ins",
    "hand-written graph", "numpy in memory", "sklearn partial_fit", "daskbatch hist", "boost-histogram",
]
#: On the GPU: the floor, describe, and the peers that run on CuPy blocks (so the ratios exist).
GPU_CONTENDERS = ["read", "describe", "describe moments", "dask built-ins", "hand-written graph"]
#: Contenders whose peak memory is also measured on a quarter of the rows.
SCALING = ("describe", "describe, plan=None")


# --- data ---------------------------------------------------------------------------------------


def default_chunk_rows(features: int) -> int:
    """Rows of a ~16 MiB float32 chunk, a power of two."""
    return 2 ** max(10, round(math.log2(16 * 2**20 / (4 * features))))


def build_store(path: Path, rows: int, features: int, chunk_rows: int) -> None:
    """Write X (rows, features) float32 and y (rows,) int32 with zstd, chunk by chunk."""
    import zarr
    from zarr.codecs import ZstdCodec

    rng = np.random.default_rng(0)
    group = zarr.open_group(str(path), mode="w")
    x = group.create_array("X", shape=(rows, features), chunks=(chunk_rows, features), dtype="float32",
                           compressors=[ZstdCodec(level=1)])
    y = group.create_array("y", shape=(rows,), chunks=(chunk_rows,), dtype="int32",
                           compressors=[ZstdCodec(level=1)])
    mix = rng.standard_normal((features, features)).astype(np.float32) / np.sqrt(features)
    for start in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - start)
        z = rng.standard_normal((n, features), dtype=np.float32)
        block = z + 0.5 * (z @ mix)  # correlated features
        block[:, 1::3] = np.exp(block[:, 1::3] / 2)  # some skewed ones
        block += np.arange(features, dtype=np.float32)
        x[start:start + n] = block
        cls = (block[:, 0] > 0).astype(np.int32) + 2 * (block[:, 2] > 2.0)
        y[start:start + n] = cls
    group.attrs["bench"] = {"rows": rows, "features": features, "chunk_rows": chunk_rows}


def ensure_store(args: argparse.Namespace) -> Path:
    path = Path(args.data_dir) / f"bench_{args.rows}x{args.features}_c{args.chunk_rows}.zarr"
    if not (path / "X" / "zarr.json").exists():
        print(f"building {path} ...", flush=True)
        t = time.perf_counter()
        build_store(path, args.rows, args.features, args.chunk_rows)
        print(f"  {time.perf_counter() - t:.1f} s", flush=True)
    return path


# --- peak memory ---------------------------------------------------------------------------------


class PeakRSS:
    """Largest RSS of this process plus its children, sampled in a thread."""

    def __init__(self, interval: float = 0.01) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.peak = self.now()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        import psutil

        total = self._proc.memory_info().rss
        for child in self._proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


# --- contenders ----------------------------------------------------------------------------------
# Each builder gets (x, y, ctx) and returns a zero-argument callable that runs the
# whole computation once and returns something small.


def _read(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    import dask

    tiny = x.map_blocks(lambda b: b[:1, :1], chunks=(1, 1))
    return lambda: dask.compute(tiny.sum())


def _describe(stats: tuple[str, ...], **options: Any) -> Any:
    def build(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
        from daskbatch.describing import describe

        return lambda: describe(x, y if "mi" in stats else None, stats=stats, bins=ctx["bins"], **options)

    return build


def _dask_builtins(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    import dask
    import dask.array as da
    from dask.array import stats as dstats

    bins, k = ctx["bins"], ctx["classes"]

    def run() -> Any:
        first = dask.compute(
            x.mean(axis=0), x.var(axis=0, ddof=1), x.min(axis=0), x.max(axis=0),
            dstats.skew(x, axis=0), dstats.kurtosis(x, axis=0), da.cov(x, rowvar=False),
        )
        lo, hi = (ctx["to_host"](v).astype(float) for v in first[2:4])
        hists = []
        on_device = ctx["xp"] is not np
        # da.histogram2d's block function returns a tuple that dask turns into an array
        # with NumPy, which CuPy refuses ("Implicit conversion to a NumPy array is not
        # allowed"): on CuPy blocks the joint counts are one weighted da.histogram per
        # class instead (np.histogram dispatches to cupy.histogram, weights included).
        weights = [(y == c).astype(x.dtype).rechunk((x.chunks[0],)) for c in range(k)] if on_device else []
        for j in range(x.shape[1]):
            rng = (lo[j], hi[j])
            hists.append(da.histogram(x[:, j], bins=bins, range=rng)[0])
            if on_device:
                hists.extend(da.histogram(x[:, j], bins=bins, range=rng, weights=w)[0] for w in weights)
            else:
                hists.append(da.histogram2d(x[:, j], y, bins=[bins, k], range=[list(rng), [-0.5, k - 0.5]])[0])
        return first, dask.compute(*hists)

    return run


def _handwritten(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    """What one writes by hand: raw power sums and XᵀX per block, then bincount per block."""
    import dask.array as da

    bins, k = ctx["bins"], ctx["classes"]
    d = x.shape[1]
    xp = ctx["xp"]
    width = 7 * d + d * d

    def sums(b: Any) -> Any:
        b = b.astype(xp.float64)
        b2 = b * b
        out = xp.concatenate([
            xp.full(d, b.shape[0], dtype=xp.float64), b.sum(0), b2.sum(0), (b2 * b).sum(0), (b2 * b2).sum(0),
            b.min(0), b.max(0), (b.T @ b).ravel(),
        ])
        return out[None, :]

    def counts(b: Any, lab: Any, lo: Any, hi: Any) -> Any:
        b = b.astype(xp.float64)
        idx = xp.clip(((b - lo) * (bins / (hi - lo))).astype(xp.int64), 0, bins - 1)
        flat = (idx + xp.arange(d) * bins) * k + lab  # lab is (rows, 1)
        return xp.bincount(flat.ravel(), minlength=d * bins * k)[None, :]

    def run() -> Any:
        s = x.map_blocks(sums, chunks=((1,) * x.numblocks[0], (width,)), dtype=np.float64).sum(0).compute()
        s = ctx["to_host"](s)
        n, s1, s2, s3, s4 = (s[i * d:(i + 1) * d] for i in range(5))
        lo, hi = s[5 * d:6 * d], s[6 * d:7 * d]
        mean = s1 / n
        var = (s2 - n * mean**2) / (n - 1)
        cov = (s[7 * d:].reshape(d, d) - n * np.outer(mean, mean)) / (n - 1)
        yb = y.rechunk((x.chunks[0],))
        lo_d, hi_d = xp.asarray(lo), xp.asarray(hi)
        c = da.map_blocks(counts, x, yb[:, None], lo_d, hi_d,
                          chunks=((1,) * x.numblocks[0], (d * bins * k,)), dtype=np.int64).sum(0).compute()
        return mean, var, s3, s4, cov, c

    return run


def _numpy_in_memory(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    import scipy.stats

    bins, k = ctx["bins"], ctx["classes"]
    t = time.perf_counter()
    a = x.compute()
    lab = y.compute()
    ctx["note"] = f"load into memory {time.perf_counter() - t:.2f} s, not timed"

    def run() -> Any:
        out = [a.mean(0, dtype=np.float64), a.var(0, ddof=1, dtype=np.float64), a.min(0), a.max(0),
               scipy.stats.skew(a, axis=0), scipy.stats.kurtosis(a, axis=0), np.cov(a, rowvar=False)]
        lo, hi = out[2].astype(float), out[3].astype(float)
        for j in range(a.shape[1]):
            out.append(np.histogram(a[:, j], bins=bins, range=(lo[j], hi[j]))[0])
            out.append(np.histogram2d(a[:, j], lab, bins=[bins, k], range=[[lo[j], hi[j]], [-0.5, k - 0.5]])[0])
        return out

    return run


def _sklearn(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    import zarr
    from sklearn.preprocessing import StandardScaler

    z = zarr.open_array(str(ctx["store"] / "X"), mode="r")
    rows, step = z.shape[0], ctx["chunk_rows"]

    def run() -> Any:
        scaler = StandardScaler()
        for start in range(0, min(rows, x.shape[0]), step):
            scaler.partial_fit(z[start:min(start + step, x.shape[0])])
        return scaler.mean_, scaler.var_

    return run


def _ranges(x: Any, ctx: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    import dask

    lo, hi = dask.compute(x.min(axis=0), x.max(axis=0))
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


def _daskbatch_hist(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    from daskbatch.engine.passes import tree_reduce
    from daskbatch.stats import Histogram

    lo, hi = _ranges(x, ctx)
    graph = tree_reduce(Histogram(ctx["bins"], tuple(lo), tuple(hi)), x)
    return lambda: graph.compute()


def _boost_histogram(x: Any, y: Any, ctx: dict[str, Any]) -> Any:
    import boost_histogram as bh
    import dask

    lo, hi = _ranges(x, ctx)
    bins = ctx["bins"]

    def fill(block: np.ndarray) -> list[Any]:
        hs = []
        for j in range(block.shape[1]):
            h = bh.Histogram(bh.axis.Regular(bins, lo[j], hi[j]))
            h.fill(block[:, j])
            hs.append(h)
        return hs

    def total(parts: list[list[Any]]) -> list[Any]:
        return [sum(col[1:], col[0]) for col in zip(*parts, strict=True)]

    blocks = [dask.delayed(fill)(b) for b in x.to_delayed().ravel()]
    graph = dask.delayed(total)(blocks)
    return lambda: graph.compute()


BUILDERS = {
    "read": _read,
    "describe": _describe(("moments", "cov", "hist", "mi")),
    "describe moments": _describe(("moments",)),
    "describe, plan=None": _describe(("moments", "cov", "hist", "mi"), run=RunOptions(plan=None)),
    "describe, cache=True": _describe(("moments", "cov", "hist", "mi"), run=RunOptions(cache=True)),
    "describe, kernels off": _describe(("moments", "cov", "hist", "mi")),
    "dask built-ins": _dask_builtins,
    "hand-written graph": _handwritten,
    "numpy in memory": _numpy_in_memory,
    "sklearn partial_fit": _sklearn,
    "daskbatch hist": _daskbatch_hist,
    "boost-histogram": _boost_histogram,
}
WHAT = {
    "read": "read + decode every chunk",
    "describe": "moments+cov+hist+mi, 2 passes",
    "describe moments": "moments only, 1 pass",
    "describe, plan=None": "as describe, on the store's chunks (no planner rechunk)",
    "describe, cache=True": "as describe, decoded chunks kept in memory between the passes",
    "describe, kernels off": "as describe, array-API path",
    "dask built-ins": "mean/var/min/max/skew/kurt/cov, then 2 histograms per column "
                      "(on CuPy: 1 + one weighted per class)",
    "hand-written graph": "map_blocks power sums + XᵀX, then bincount",
    "numpy in memory": "as dask built-ins on an in-RAM array (load not timed)",
    "sklearn partial_fit": "StandardScaler.partial_fit over chunks (mean/var), 1 thread",
    "daskbatch hist": "Histogram statistic alone, ranges given",
    "boost-histogram": "per-column bh.Histogram fill per chunk, ranges given",
}


# --- one contender in this process ---------------------------------------------------------------


def _open(store: Path, device: str, rows: int | None) -> tuple[Any, Any, dict[str, Any]]:
    import dask.array as da

    x = da.from_zarr(str(store), component="X")
    y = da.from_zarr(str(store), component="y")
    if rows is not None:
        x, y = x[:rows], y[:rows]
    ctx: dict[str, Any] = {"xp": np, "to_host": np.asarray, "sync": lambda: None}
    if device == "gpu":
        import cupy

        x = x.map_blocks(cupy.asarray, meta=cupy.empty((0, 0), dtype=x.dtype))
        y = y.map_blocks(cupy.asarray, meta=cupy.empty((0,), dtype=y.dtype))
        ctx.update(xp=cupy, to_host=cupy.asnumpy, sync=cupy.cuda.Device().synchronize)
    return x, y, ctx


def run_contender(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Time ``name`` in this process: warm-up on two chunks, then ``repeat`` full runs."""
    import dask

    store = Path(args.store)
    client = None
    if name == "describe, kernels off":
        # Through the environment, so that worker processes see it too.
        os.environ["DASK_DASKBATCH__KERNELS"] = "false"
        dask.config.refresh()
    if args.scheduler == "distributed":
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        dask.config.set(scheduler="threads", num_workers=args.threads)
    import daskbatch  # noqa: F401  (loads daskbatch's dask.config defaults)

    x, y, ctx = _open(store, args.device, args.subset_rows)
    ctx.update(bins=args.bins, classes=N_CLASSES, chunk_rows=args.chunk_rows, store=store)
    warm_rows = 2 * args.chunk_rows
    BUILDERS[name](x[:warm_rows], y[:warm_rows], dict(ctx))()
    ctx["sync"]()

    run = BUILDERS[name](x, y, ctx)
    times = []
    with PeakRSS() as mem:
        baseline = mem.now()
        for _ in range(args.repeat):
            t = time.perf_counter()
            run()
            ctx["sync"]()  # GPU work is asynchronous
            times.append(time.perf_counter() - t)
            if sum(times) > args.budget:  # slow contenders: fewer repeats, listed in the table
                break
    out = {
        "name": name, "times": times, "median": statistics.median(times), "peak": mem.peak,
        "baseline": baseline, "rows": int(x.shape[0]), "note": ctx.get("note", ""),
    }
    if name == "describe" and args.scheduler == "threads" and args.device == "cpu" and args.profile:
        out["profile"] = profile_describe(x, y, ctx, args)
    if client is not None:
        client.close()
        cluster.close()
    return out


def profile_describe(x: Any, y: Any, ctx: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Where describe's time goes: task time per task group (dask's Profiler) and per-chunk costs."""
    import dask
    from dask.diagnostics import Profiler
    from dask.utils import key_split

    from daskbatch.describing import describe
    from daskbatch.stats import CoMoments, Histogram, Moments

    with Profiler() as prof:
        t = time.perf_counter()
        describe(x, y, bins=args.bins)
        wall = time.perf_counter() - t
    groups: dict[str, float] = {}
    for r in prof.results:
        g = key_split(r.key)
        groups[g] = groups.get(g, 0.0) + (r.end_time - r.start_time)

    # One chunk in this thread, wall time (zarr decodes in its own threads): read+decode,
    # then each statistic's chunk().
    block = dask.compute(x.blocks[0])[0]
    lab = np.asarray(y.blocks[0])
    lo, hi = block.min(0).astype(float), block.max(0).astype(float)
    hist = Histogram(args.bins, tuple(lo), tuple(hi), by_label=True)

    def cpu(f: Any, n: int = 5) -> float:
        f()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    import zarr

    z = zarr.open_array(str(ctx["store"] / "X"), mode="r")
    per_chunk = {
        "read + decode (zarr)": cpu(lambda: z[: args.chunk_rows]),
        "Moments.chunk": cpu(lambda: Moments().chunk(block)),
        "CoMoments.chunk": cpu(lambda: CoMoments().chunk(block)),
        "  of which XᵀX (BLAS)": cpu(lambda: _gemm_only(block)),
        "Histogram.chunk (by label)": cpu(lambda: hist.chunk(block, lab)),
    }
    with dask.config.set({"daskbatch.kernels": False}):
        per_chunk["Moments.chunk, kernels off"] = cpu(lambda: Moments().chunk(block), 2)
        per_chunk["CoMoments.chunk, kernels off"] = cpu(lambda: CoMoments().chunk(block), 2)
        per_chunk["Histogram.chunk, kernels off"] = cpu(lambda: hist.chunk(block, lab), 2)
    return {"wall": wall, "groups": groups, "per_chunk": per_chunk, "n_chunks": int(x.numblocks[0])}


def _gemm_only(block: np.ndarray) -> Any:
    dev = block.astype(np.float64)
    return dev.T @ dev


# --- driver --------------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    """CPU model, cores, memory and library versions, for the record."""
    import dask
    import numba
    import zarr

    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor() or "?"
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        mem = "?"
    return {
        "cpu": model, "cores": str(os.cpu_count()), "memory": mem, "python": platform.python_version(),
        "numpy": np.__version__, "dask": dask.__version__, "zarr": zarr.__version__, "numba": numba.__version__,
        "os": platform.platform(), "gpu": gpu_name(),
    }


def gpu_name() -> str:
    """The first CUDA device with its memory, CuPy and CUDA versions; "" without CuPy or a device."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        return (f"{name} ({props['totalGlobalMem'] / 2**30:.0f} GiB), CuPy {cupy.__version__}, "
                f"CUDA runtime {runtime // 1000}.{runtime % 1000 // 10}")
    except Exception:  # no cupy, no driver, no device: a CPU-only record
        return ""


def section_title(device: str) -> str:
    """The RESULTS.md section a run writes: CPU and GPU runs keep separate sections."""
    # "## describe — GPU" is bench_gpu.py's (the device-resident, host and store runs).
    return "## describe" if device == "cpu" else "## describe — GPU, Zarr store contenders"


def spawn(name: str, args: argparse.Namespace, store: Path, subset_rows: int | None = None) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--_worker", name, "--store", str(store), "--rows", str(args.rows),
        "--features", str(args.features), "--chunk-rows", str(args.chunk_rows), "--repeat", str(args.repeat),
        "--scheduler", args.scheduler, "--device", args.device, "--bins", str(args.bins),
        "--threads", str(args.threads), "--budget", str(args.budget),
    ]
    if subset_rows is not None:
        cmd += ["--subset-rows", str(subset_rows)]
    if not args.profile:
        cmd.append("--no-profile")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"name": name, "error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=None, help="rows per Zarr chunk (default: ~16 MiB)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--scheduler", choices=("threads", "distributed"), default="threads")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads of the threaded scheduler")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--bins", type=int, default=64)
    p.add_argument("--only", nargs="*", help="run only these contenders")
    p.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    p.add_argument("--out", default=None,
                   help="write this run's section of a Markdown file ('## describe', or '## describe — GPU')")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per contender")
    p.add_argument("--budget", type=float, default=30.0,
                   help="stop repeating a contender once its timed runs exceed this many seconds")
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--subset-rows", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.chunk_rows is None:
        args.chunk_rows = default_chunk_rows(args.features)

    if args._worker:
        print(json.dumps(run_contender(args._worker, args)))
        return 0

    if args.device == "gpu":
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # no cupy, no driver, no device
            print(f"--device gpu skipped: CuPy or a CUDA device is not available ({type(exc).__name__}: {exc})")
            return 0
    store = ensure_store(args)
    names = args.only or (GPU_CONTENDERS if args.device == "gpu" else CPU_CONTENDERS)
    results = {}
    for name in names:
        print(f"{name} ...", end=" ", flush=True)
        r = spawn(name, args, store)
        results[name] = r
        print(r.get("error") or f"median {r['median']:.3f} s  {[round(t, 3) for t in r['times']]}", flush=True)
    scaling = {}
    for name in SCALING:
        if name in names:
            r = spawn(name, argparse.Namespace(**{**vars(args), "profile": False}), store, args.rows // 4)
            scaling[name] = r
    command = "python benchmarks/bench_describe.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in
        [("rows", args.rows), ("features", args.features), ("chunk_rows", args.chunk_rows),
         ("repeat", args.repeat), ("scheduler", args.scheduler), ("device", args.device)]
    )
    text = report(results, scaling, args, command, machine())
    print(text)
    if args.out:
        title = section_title(args.device)
        write_section(Path(args.out), text, title)
        print(f"wrote the '{title}' section of {args.out}")
    return 0


# --- report --------------------------------------------------------------------------------------


def report(results: dict[str, Any], scaling: dict[str, Any], args: argparse.Namespace, command: str,
           mach: dict[str, str]) -> str:
    mb = args.rows * args.features * 4 / 1e6
    ok = {k: v for k, v in results.items() if "error" not in v}
    ref = ok.get("describe", {}).get("median")
    lines = [
        section_title(args.device),
        "",
        f"Data: {args.rows:,} x {args.features} float32 Zarr store ({mb:,.0f} MB raw), chunks of "
        f"{args.chunk_rows:,} rows, zstd level 1, page cache warm; label with {N_CLASSES} classes, {args.bins} bins. "
        f"Scheduler: {args.scheduler}" + (f" ({args.threads} threads)" if args.scheduler == "threads" else " (LocalCluster 2 workers x 1 thread)")
        + f"; device: {args.device}.",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory']}; Python {mach['python']}, NumPy {mach['numpy']}, "
        f"Dask {mach['dask']}, Zarr {mach['zarr']}, numba {mach['numba']}; {mach['os']}."
        + (f" GPU: {mach['gpu']}." if args.device == "gpu" and mach.get("gpu") else ""),
        "",
        f"Reproduce: `{command} --out benchmarks/RESULTS.md`",
        "",
        f"Times are medians of {args.repeat} runs (fewer where the runs passed {args.budget:.0f} s; each "
        "contender in its own process, after a warm-up on two chunks); load average "
        f"{os.getloadavg()[0]:.1f} when the report was written. Peak = largest RSS of the process "
        "and its children during the timed runs; 'above start' subtracts the RSS before them "
        "(interpreter, imports, in-memory data).",
        "",
        "| contender | what | median s | runs s | x describe | rows/s | MB/s | peak MiB | above start MiB |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | {WHAT[name]} | failed: {r['error'][:120]} | | | | | | |")
            continue
        med = r["median"]
        ratio = f"{med / ref:.2f}" if ref else "-"
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(
            f"| {name} | {WHAT[name]}{note} | {med:.3f} | {', '.join(f'{t:.2f}' for t in r['times'])} | {ratio} | "
            f"{r['rows'] / med:,.0f} | {mb / med:,.0f} | {r['peak'] / 2**20:,.0f} | {(r['peak'] - r['baseline']) / 2**20:,.0f} |"
        )
    lines += ["", "Targets (from issue 2):", ""]
    lines += targets(ok, scaling)
    prof = ok.get("describe", {}).get("profile")
    if prof:
        lines += ["", "Where describe's time goes (threaded scheduler, one profiled run, "
                  f"wall {prof['wall']:.2f} s): task time summed over threads, by task group (dask Profiler).", "",
                  "| task group | task s |", "|---|---:|"]
        for g, s in sorted(prof["groups"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {g} | {s:.3f} |")
        n = prof["n_chunks"]
        lines += ["", f"Per chunk ({args.chunk_rows:,} rows, one thread, wall time, median of 5) and for all {n} chunks:", "",
                  "| step | ms per chunk | s for all chunks |", "|---|---:|---:|"]
        for k, s in prof["per_chunk"].items():
            lines.append(f"| {k} | {s * 1e3:.1f} | {s * n:.2f} |")
    return "\n".join(lines) + "\n"


def targets(ok: dict[str, Any], scaling: dict[str, Any]) -> list[str]:
    def med(name: str) -> float | None:
        return ok[name]["median"] if name in ok else None

    out = []
    full, mom, read = med("describe"), med("describe moments"), med("read")
    checks = [
        ("describe >= 5x faster than the Dask built-ins", med("dask built-ins"), full, 5.0, "speedup"),
        ("describe >= 1.5x faster than the hand-written graph", med("hand-written graph"), full, 1.5, "speedup"),
        ("describe within 3x of the read floor", full, read, 3.0, "within"),
        ("describe, cache=True within 3x of the read floor", med("describe, cache=True"), read, 3.0, "within"),
        ("moments within 1.3x of the read floor", mom, read, 1.3, "within"),
    ]
    for label, a, b, bound, kind in checks:
        if a is None or b is None:
            out.append(f"- {label}: not measured")
            continue
        ratio = a / b
        met = ratio >= bound if kind == "speedup" else ratio <= bound
        out.append(f"- {label}: {ratio:.2f}x -> {'met' if met else 'MISSED'}")
    for name, small in scaling.items():
        if name not in ok or "error" in small:
            continue
        big = ok[name]
        a, b = (small["peak"] - small["baseline"]) / 2**20, (big["peak"] - big["baseline"]) / 2**20
        out.append(f"- peak memory independent of rows ({name}): above start {a:,.0f} MiB at {small['rows']:,} rows, "
                   f"{b:,.0f} MiB at {big['rows']:,} rows")
    return out


def write_section(path: Path, text: str, title: str = "## describe") -> None:
    """Replace (or append) the ``title`` section of ``path``; other sections are left alone."""
    old = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if not text.startswith(title + "\n"):  # the section keeps its title, whoever wrote the text
        text = f"{title}\n\n{text}"
    lines = old.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.strip() == title), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + text + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    path.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
