"""describe on 1..N GPUs (dask-cuda's LocalCUDACluster, one worker per GPU): samples/s and bitwise-identical results.

For every N from 1 to the number of visible GPUs (or ``--max-gpus``) it starts
a ``LocalCUDACluster`` on the first N devices, runs ``describe(device="gpu")``
on the same Zarr store (range given, one pass; the store's chunks, so the
merge tree is the same for every N) and reports samples/s, the speed-up over
one GPU and whether moments, covariance and histograms are bitwise identical
to the one-GPU run (the merge tree has a fixed shape and order, so they must
be). Usage::

    python benchmarks/bench_gpu_scaling.py                          # 2,000,000 x 512 float32, every GPU
    python benchmarks/bench_gpu_scaling.py --rows 200000 --features 64 --max-gpus 2 --out benchmarks/RESULTS.md

Without CuPy, dask-cuda or a CUDA device it prints one line saying so and
exits 0; it exits 1 when a result differs from the one-GPU run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):  # run from a source tree without installing
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_describe import write_section  # noqa: E402
from bench_gpu import CLASSES, RANGE, device_facts, ensure_store, gpu_or_none  # noqa: E402

SECTION = "## describe — GPU scaling"
#: Summary fields compared bit for bit with the one-GPU run.
FIELDS = ("count", "mean", "var", "skew", "kurtosis", "min", "max", "cov", "hist_counts", "joint_counts")


def visible_devices() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them (or their indices)."""
    import cupy

    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(int(cupy.cuda.runtime.getDeviceCount()))]


def bits(summary: Any) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Dtype, shape and raw bytes of every compared field (NaN payloads included)."""
    out = {}
    for name in FIELDS:
        value = getattr(summary, name, None)
        if value is not None:
            a = np.ascontiguousarray(np.asarray(value))
            out[name] = (str(a.dtype), a.shape, a.tobytes())
    return out


def run_on(devices: list[str], store: Path, repeat: int) -> tuple[float, list[float], Any]:
    """Best seconds, all runs and the last summary of describe on a LocalCUDACluster over ``devices``."""
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    import daskbatch as db

    def describe() -> Any:
        return db.describe(str(store), label="y", bins=64, range=RANGE, classes=list(CLASSES), run=db.RunOptions(plan=None, device="gpu"))

    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(devices), n_workers=len(devices), threads_per_worker=1,
                          dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(len(devices))
        summary = describe()  # warm-up: imports and numba-cuda compiles in every worker
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            summary = describe()
            runs.append(time.perf_counter() - t)
    return min(runs), runs, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--chunk-rows", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--max-gpus", type=int, default=None, help="largest N (default: every visible GPU)")
    p.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    p.add_argument("--out", default=None, help=f"write the '{SECTION}' section of this Markdown file")
    args = p.parse_args(argv)
    why = gpu_or_none()
    if why is None:
        try:
            import dask_cuda  # noqa: F401
        except ImportError as exc:
            why = f"dask-cuda is not installed ({exc})"
    if why:
        print(f"bench_gpu_scaling skipped: {why}")
        return 0

    devices = visible_devices()[: args.max_gpus or None]
    store = ensure_store(Path(args.data_dir) / f"bench_gpu_{args.rows}x{args.features}_c{args.chunk_rows}.zarr",
                         args.rows, args.features, args.chunk_rows)
    facts = device_facts()
    rows: list[dict[str, Any]] = []
    reference: dict[str, Any] | None = None
    for n in range(1, len(devices) + 1):
        print(f"{n} GPU(s) ...", end=" ", flush=True)
        best, runs, summary = run_on(devices[:n], store, args.repeat)
        got = bits(summary)
        reference = reference or got
        differ = [k for k in reference if got.get(k) != reference[k]]
        rows.append({"n": n, "best": best, "runs": runs, "differ": differ})
        print(f"best {best:.3f} s, {args.rows / best:,.0f} samples/s"
              + (f", DIFFERS from 1 GPU in {', '.join(differ)}" if differ else ", bitwise identical"), flush=True)

    command = (f"python benchmarks/bench_gpu_scaling.py --rows {args.rows} --features {args.features} "
               f"--chunk-rows {args.chunk_rows} --repeat {args.repeat} --max-gpus {len(devices)}")
    one = rows[0]["best"]
    lines = [
        SECTION, "",
        f"GPUs: {len(devices)} x {facts['name']} ({facts['memory']}), CuPy {facts['cupy']}, CUDA runtime "
        f"{facts['runtime']}, driver {facts['driver']}; {facts['kernels']}. LocalCUDACluster, one worker (one "
        f"thread) per GPU.", "",
        f"Reproduce: `{command} --out benchmarks/RESULTS.md`", "",
        f"Data: {args.rows:,} x {args.features:,} float32 Zarr store, {args.chunk_rows:,}-row zstd chunks, 4-class "
        f"label, 64 bins, range given (one pass). Best of {args.repeat} runs after a warm-up. 'Identical' compares "
        f"the bytes of {', '.join(FIELDS)} with the 1-GPU run.", "",
        "| GPUs | best s | runs s | samples/s | speed-up | efficiency | identical to 1 GPU |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        speedup = one / r["best"]
        lines.append(
            f"| {r['n']} | {r['best']:.3f} | {', '.join(f'{t:.3f}' for t in r['runs'])} | "
            f"{args.rows / r['best']:,.0f} | {speedup:.2f}x | {speedup / r['n']:.0%} | "
            + ("yes" if not r["differ"] else f"NO: {', '.join(r['differ'])}") + " |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_section(Path(args.out), text, SECTION)
        print(f"wrote the '{SECTION}' section of {args.out}")
    return 1 if any(r["differ"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
