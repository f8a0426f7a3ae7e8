"""Is the planner's block size a good one? describe timed at its choice and at forced block sizes.

On a ``db.synth`` store (default 2,000,000 x 256 float32, 65,536-row storage
chunks, 4 classes) with each feature's histogram range given (one pass), under the
threaded scheduler with ``--threads`` threads (default 2), it times:

* ``planner``: the block rows :func:`daskbatch.engine.planner.plan_describe` picks for this
  machine's memory and ``--threads`` threads (the store opened with those
  rows per block, describe given the plan);
* ``forced N``: blocks of N rows for every N of ``--sizes`` (default 65,536,
  131,072, 262,144 and 524,288: 1 to 8 storage chunks);
* ``describe defaults``: ``describe(path)`` as a user calls it (the store's
  automatic blocks, plan "auto"), for reference.

Each is the best of ``--repeat`` runs (after one warm-up on two storage
chunks), and the report puts the planner's choice beside the best measured
size with the ratio of their times. Usage::

    python benchmarks/bench_plan_sweep.py --out benchmarks/RESULTS.md
    python benchmarks/bench_plan_sweep.py --rows 200000 --features 32 --chunk-rows 8192 \\
        --sizes 8192 16384 32768 65536        # smoke run
    python benchmarks/bench_plan_sweep.py --device gpu      # on a CUDA machine (skips elsewhere)
"""

from __future__ import annotations

import argparse
import os
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

from bench_describe import write_section  # noqa: E402

SECTION = "## plan sweep"


def best_of(func: Any, repeat: int) -> tuple[float, list[float]]:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        runs.append(time.perf_counter() - t)
    return min(runs), runs


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--chunk-rows", type=int, default=65_536, help="storage chunk rows of the store")
    p.add_argument("--sizes", type=int, nargs="+", default=[65_536, 131_072, 262_144, 524_288],
                   help="forced block rows (whole multiples of --chunk-rows)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    p.add_argument("--out", default=None, help=f"write the '{SECTION}' section of this Markdown file")
    args = p.parse_args(argv)
    bad = [n for n in args.sizes if n % args.chunk_rows]
    if bad:
        p.error(f"--sizes {bad} are not whole multiples of --chunk-rows {args.chunk_rows}")
    if args.device == "gpu":
        from bench_gpu import gpu_or_none

        why = gpu_or_none()
        if why:
            print(f"bench_plan_sweep --device gpu skipped: {why}")
            return 0

    import dask

    import daskbatch as db
    from daskbatch.engine.planner import plan_describe
    from daskbatch.runtime.capacity import resources_from_machine

    store = Path(args.data_dir) / f"sweep_{args.rows}x{args.features}_c{args.chunk_rows}.zarr"
    if not (store / "zarr.json").exists():
        print(f"building {store} ...", flush=True)
        db.synth(store, rows=args.rows, features=args.features, classes=4, chunk_rows=args.chunk_rows,
                 overwrite=True)
    dask.config.set(scheduler="threads", num_workers=args.threads)
    resources = resources_from_machine(threads_per_worker=args.threads, device=args.device)
    # The range "given": each feature's min and max from an untimed moments pass.
    m = db.describe(str(store), stats=("moments",))
    ranges = np.stack([m.min, m.max], axis=1)
    plan = plan_describe(db.open_dataset(store), range=ranges, resources=resources)

    def run(rows: int | str, chosen: Any = None) -> Any:
        ds = db.open_dataset(store, chunks=rows)
        return lambda: db.describe(ds, range=ranges, run=db.RunOptions(plan=chosen if chosen is not None else None, device=args.device))

    # Warm-up (imports, numba compiles, the page cache of the first chunks) outside the timings.
    warm = db.open_dataset(store, chunks="storage")
    n = min(2 * args.chunk_rows, args.rows)
    db.describe(warm.x[:n], warm.label[:n], range=ranges, run=db.RunOptions(plan=None, device=args.device))

    results: dict[str, dict[str, Any]] = {}
    configs = [("planner", plan.chunk_rows, plan)] + [(f"forced {s:,}", s, None) for s in args.sizes]
    for name, rows, chosen in configs:
        print(f"{name} ({rows:,} rows) ...", end=" ", flush=True)
        best, runs = best_of(run(rows, chosen), args.repeat)
        results[name] = {"rows": rows, "best": best, "runs": runs}
        print(f"best {best:.3f} s  {[round(t, 3) for t in runs]}", flush=True)
    print("describe defaults ...", end=" ", flush=True)
    last: list[Any] = []
    best, runs = best_of(lambda: last.append(db.describe(str(store), range=ranges, run=db.RunOptions(device=args.device))), args.repeat)
    defaults_rows = int(last[-1].provenance["chunk_rows"])  # the blocks describe ran on
    print(f"best {best:.3f} s", flush=True)

    forced = {k: v for k, v in results.items() if k != "planner"}
    best_name = min(forced, key=lambda k: forced[k]["best"])
    planner = results["planner"]
    ratio = planner["best"] / forced[best_name]["best"]
    load = os.getloadavg()[0]
    command = (f"python benchmarks/bench_plan_sweep.py --rows {args.rows} --features {args.features} "
               f"--chunk-rows {args.chunk_rows} --sizes {' '.join(map(str, args.sizes))} --threads {args.threads} "
               f"--repeat {args.repeat} --device {args.device}")
    lines = [
        SECTION, "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores; load average {load:.1f} when written"
        + (" (a loaded machine: the times are noisy)" if load > 0.5 * (os.cpu_count() or 1) else "")
        + f"; device {args.device}. Threaded scheduler, {args.threads} threads.", "",
        f"Reproduce: `{command} --out benchmarks/RESULTS.md`", "",
        f"Data: `db.synth` store, {args.rows:,} x {args.features:,} float32, {args.chunk_rows:,}-row storage chunks, "
        "4 classes; moments, cov, hist, mi with each feature's range given (its min and max, from an untimed "
        f"moments pass), so one pass. Best of {args.repeat} runs.", "",
        f"The plan: {plan.chunk_rows:,} rows per block, limited by {plan.limited_by} "
        f"(budget {plan.budget_bytes / 2**20:,.0f} MiB per task, {plan.resources.describe()}).", "",
        "| blocks | rows per block | best s | runs s | samples/s |", "|---|---:|---:|---|---:|",
    ]
    for name, r in results.items():
        mark = " (best measured)" if name == best_name else ""
        lines.append(f"| {name}{mark} | {r['rows']:,} | {r['best']:.3f} | {', '.join(f'{t:.3f}' for t in r['runs'])} | "
                     f"{args.rows / r['best']:,.0f} |")
    lines.append(f"| describe defaults (automatic blocks, plan 'auto') | {defaults_rows:,} | {best:.3f} | "
                 f"{', '.join(f'{t:.3f}' for t in runs)} | {args.rows / best:,.0f} |")
    lines += ["", f"Planner's choice {plan.chunk_rows:,} rows: {planner['best']:.3f} s; best measured "
                  f"{forced[best_name]['rows']:,} rows: {forced[best_name]['best']:.3f} s; ratio {ratio:.2f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_section(Path(args.out), text, SECTION)
        print(f"wrote the '{SECTION}' section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
