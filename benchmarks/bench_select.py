"""Benchmark describe + select + transform (``daskbatch run``) out of core against scikit-learn in memory.

One run, each contender in its own subprocess (so ``ru_maxrss`` is its own):

* ``daskbatch run``: a job on the whole store, which is larger than the memory
  budget it is given: describe (moments and per-class moments: one pass),
  select (VarianceThreshold(0) then the ``k`` best by ANOVA F), then a
  transform pass writing ``select -> standardize -> project`` (``components``
  principal components) to a Zarr store. Threaded scheduler, the budget as the
  job's ``memory``.
* ``sklearn in memory``: ``VarianceThreshold -> SelectKBest(f_classif) ->
  StandardScaler -> PCA`` (``fit_transform``) on the largest leading rows of
  the same store that fit the budget: ``budget / (bytes per row x --copies)``,
  where ``--copies`` (default 3) counts the copies the pipeline holds at its
  peak (X, VarianceThreshold's copy, f_classif's per-class copies). Loading
  those rows is timed apart and included in its total.

Each contender first runs once on a tiny store (imports, numba's compilation),
then takes its baseline (``ru_maxrss`` so far), then runs timed. Reported: wall
seconds, microseconds per row, the phases, peak RSS and peak above the baseline.

Usage::

    python benchmarks/bench_select.py --rows 4000000 --features 64 --budget 256MiB --out benchmarks/RESULTS.md
    python benchmarks/bench_select.py --rows 50000 --features 16 --budget 16MiB    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, str(ROOT))

TITLE = "## select + transform"
N_CLASSES = 4


def peak_rss() -> int:
    """This process's peak RSS in bytes."""
    from daskbatch.runtime.capacity import process_peak_bytes

    return process_peak_bytes() or 0


def ensure_store(path: Path, rows: int, features: int, chunk_rows: int, seed: int = 0) -> Path:
    """A synthetic float32 store with a 4-class label (reused when its shape matches)."""
    import daskbatch as db

    if path.exists():
        try:
            ds = db.open_dataset(path)
            if ds.x.shape == (rows, features) and ds.store_chunks[0] == chunk_rows:
                return path
        except Exception:  # half-written or foreign: write it again
            pass
    t = time.perf_counter()
    db.synth(path, rows=rows, features=features, classes=N_CLASSES, chunk_rows=chunk_rows, seed=seed,
             overwrite=True)
    print(f"wrote {path} ({rows:,} x {features}) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return path


# --- contenders (each runs in its own subprocess) -------------------------------------------------


def job_mapping(args: argparse.Namespace, store: Path, out: Path) -> dict[str, Any]:
    return {
        "input": {"store": str(store)},
        "selection": {"score": "f", "mode": "k", "param": args.k, "min_variance": 0.0},
        "transform": {"steps": ["select", "standardize", "project"], "k": args.components},
        "cluster": {"kind": "threads", "threads": args.threads},
        "memory": args.budget,
        "outputs": {"dir": str(out)},
        "dask": {"daskbatch": {"reserved-memory": args.reserved, "memory-fraction": args.memory_fraction}},
    }


def run_daskbatch(args: argparse.Namespace) -> dict[str, Any]:
    from daskbatch.jobs.run import run_job

    with tempfile.TemporaryDirectory(prefix="bench-select-") as tmp:
        warm = ensure_store(Path(tmp) / "warm.zarr", 4096, args.features, 1024)
        run_job(job_mapping(args, warm, Path(tmp) / "warm-out"))
        baseline = peak_rss()
        t = time.perf_counter()
        report = run_job(job_mapping(args, Path(args.store), Path(tmp) / "out"))
        wall = time.perf_counter() - t
    tm = report.timings
    return {
        "rows": report.rows, "wall": wall, "baseline": baseline, "peak": peak_rss(),
        "phases": {"describe": tm.get("describe"), "select": tm.get("select"), "transform": tm.get("transform")},
        "selected": report.selected, "chunk_rows": report.plan.chunk_rows, "budget_bytes": report.plan.budget_bytes,
    }


def sklearn_pipeline(k: int, components: int) -> Any:
    from sklearn.decomposition import PCA
    from sklearn.feature_selection import SelectKBest, VarianceThreshold, f_classif
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(VarianceThreshold(), SelectKBest(f_classif, k=k), StandardScaler(),
                         PCA(n_components=components, svd_solver="full"))


def run_sklearn(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import zarr

    rng = np.random.default_rng(0)
    warm_x = rng.normal(size=(4096, args.features)).astype(np.float32)
    sklearn_pipeline(args.k, args.components).fit_transform(warm_x, rng.integers(0, N_CLASSES, 4096))
    del warm_x
    baseline = peak_rss()
    group = zarr.open_group(args.store, mode="r")
    t = time.perf_counter()
    x = group["X"][: args.subset_rows]
    y = group["y"][: args.subset_rows]
    load = time.perf_counter() - t
    t = time.perf_counter()
    z = sklearn_pipeline(args.k, args.components).fit_transform(x, y)
    fit = time.perf_counter() - t
    assert z.shape == (args.subset_rows, args.components)
    return {
        "rows": int(args.subset_rows), "wall": load + fit, "baseline": baseline, "peak": peak_rss(),
        "phases": {"load": load, "fit_transform": fit}, "selected": args.k,
    }


# --- driver -----------------------------------------------------------------------------------------


def spawn(name: str, args: argparse.Namespace, subset_rows: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--_worker", name, "--store", str(args.store), "--rows", str(args.rows),
           "--features", str(args.features), "--budget", args.budget, "--threads", str(args.threads),
           "--k", str(args.k), "--components", str(args.components), "--reserved", args.reserved,
           "--memory-fraction", str(args.memory_fraction), "--subset-rows", str(subset_rows)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def section(results: dict[str, dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    from dask.utils import format_bytes, parse_bytes

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_describe import machine

    mach = machine()
    budget = parse_bytes(args.budget)
    data = args.rows * (args.features * 4 + 4)
    lines = [
        TITLE, "",
        f"Data: {args.rows:,} x {args.features} float32 Zarr store plus an int32 label with {N_CLASSES} classes "
        f"({format_bytes(data)}), chunks of {args.chunk_rows:,} rows, zstd; page cache warm. Memory budget "
        f"{format_bytes(budget)} (the data are {data / budget:.1f}x the budget). Pipeline: VarianceThreshold(0), "
        f"the {args.k} best by ANOVA F, standardize, {args.components} principal components.",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory']}; Python {mach['python']}, "
        f"NumPy {mach['numpy']}, Dask {mach['dask']}, Zarr {mach['zarr']}, numba {mach['numba']}; "
        f"load average {os.getloadavg()[0]:.1f} when written.",
        "",
        f"Reproduce: `{command}`",
        "",
        "- `daskbatch run`: the whole store, threaded scheduler "
        f"({args.threads} threads), job memory {args.budget}, daskbatch.reserved-memory {args.reserved}, "
        f"memory-fraction {args.memory_fraction}; describe is one pass (moments and per-class moments), the "
        "transform a second, written to Zarr (float64).",
        f"- `sklearn in memory`: the leading rows whose pipeline fits the budget (budget / ({args.features * 4 + 4} "
        f"bytes per row x {args.copies} copies)); the result stays in memory (not written). Its time includes "
        "reading those rows from the store.",
        "- Each in its own process, after a warm-up on a tiny store; baseline = peak RSS after the warm-up "
        "(interpreter, imports, compiled kernels).",
        "",
        "| contender | rows | wall s | us per row | phases s | baseline RSS | peak RSS | peak - baseline |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:200]} | | | | | | |")
            continue
        phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items() if v is not None)
        lines.append(
            f"| {name} | {r['rows']:,} | {r['wall']:.2f} | {r['wall'] / r['rows'] * 1e6:.2f} | {phases} | "
            f"{format_bytes(r['baseline'])} | {format_bytes(r['peak'])} | {format_bytes(r['peak'] - r['baseline'])} |"
        )
    ok = {k: v for k, v in results.items() if "error" not in v}
    if len(ok) == 2:
        d, s = ok["daskbatch run"], ok["sklearn in memory"]
        lines += [
            "",
            f"daskbatch processed {d['rows'] / s['rows']:.1f}x the rows scikit-learn could hold in the budget, at "
            f"{(d['wall'] / d['rows']) / (s['wall'] / s['rows']):.2f}x its time per row, with "
            f"{format_bytes(d['peak'] - d['baseline'])} above its baseline against "
            f"{format_bytes(s['peak'] - s['baseline'])} (plan: chunks of {d['chunk_rows']:,} rows, "
            f"{format_bytes(d['budget_bytes'])} per task).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=None, help="rows per Zarr chunk (default: ~2 MiB chunks)")
    p.add_argument("--budget", default="256MiB", help="memory budget (the job's memory; sizes sklearn's subset)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--k", type=int, default=10, help="features to select")
    p.add_argument("--components", type=int, default=5, help="principal components")
    p.add_argument("--reserved", default="16MiB", help="daskbatch.reserved-memory for the job")
    p.add_argument("--memory-fraction", type=float, default=0.5, help="daskbatch.memory-fraction for the job")
    p.add_argument("--copies", type=float, default=3.0, help="copies of X sklearn's pipeline holds at its peak")
    p.add_argument("--store", type=Path, default=None, help="default: benchmarks/_data/select-ROWSxFEATURES.zarr")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--out", type=Path, default=None, help=f"write the '{TITLE}' section of this Markdown file")
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--subset-rows", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._worker:
        result = run_daskbatch(args) if args._worker == "daskbatch run" else run_sklearn(args)
        print(json.dumps(result))
        return 0

    from dask.utils import parse_bytes

    args.chunk_rows = args.chunk_rows or max(1024, (2 * 2**20) // (4 * args.features))
    if args.store is None:
        args.store = ROOT / "benchmarks" / "_data" / f"select-{args.rows}x{args.features}-{args.chunk_rows}.zarr"
    ensure_store(args.store, args.rows, args.features, args.chunk_rows)
    subset = min(args.rows, int(parse_bytes(args.budget) / ((args.features * 4 + 4) * args.copies)))
    results = {name: spawn(name, args, subset) for name in ("daskbatch run", "sklearn in memory")}
    given = argv if argv is not None else sys.argv[1:]
    shown = [a for i, a in enumerate(given) if a != "--out" and (i == 0 or given[i - 1] != "--out")]
    command = " ".join(["python benchmarks/bench_select.py", *map(shlex.quote, shown)])
    text = section(results, args, command)
    print(text)
    if args.out is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_describe import write_section

        write_section(args.out, text, title=TITLE)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
