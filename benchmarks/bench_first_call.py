"""What a user waits for before the first result: whole fresh processes, split into phases.

Each row is a fresh ``python`` subprocess timed from its start to its result
(best of ``--repeat``) on a ``--rows`` × 64 float32 store with a 3-class label
and ``describe``'s defaults:

- cold: numba's cache is an empty temporary directory (a new install);
- warm: the cache that the cold runs filled (every later process);
- second call: the same ``describe`` again in the warm process;
- CLI: ``python -m daskbatch describe STORE --label y`` with the warm cache.

Then the whole processes side by side, warm, interleaved (best of ``--repeat``):
the API (``describe(STORE, label="y")``), the CLI (in-process by default, and
``--cluster local``), and, with ``--peers-venv DIR``, Polars' streaming
``describe`` and DuckDB's ``SUMMARIZE`` on the same data written as Parquet,
each run by the Python of DIR (a venv created there with polars, duckdb and
pyarrow if absent: they are not daskbatch's dependencies).

Inside the process the time is split into start-up and imports (``import
daskbatch`` and what ``describe`` imports), kernels (numba compiling or loading
from its cache: every top-level ``Dispatcher.compile``), planning
(``plan_statistics``) and the rest of ``describe`` (reading and computing).
The kernels phase is also given by numba function (a top-level compile with its
callees; a thread that waits on another's compile of it counts its wait).

Usage::

    python benchmarks/bench_first_call.py [--rows 200000] [--repeat 3] [--tree /tmp/before] [--peers-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The child: prints one JSON line of phase times (seconds since its own start where noted).
CHILD = r"""
import json, sys, threading, time
t_start = time.perf_counter()
import daskbatch as db
import daskbatch.describing
t_import = time.perf_counter()
from numba.core.dispatcher import Dispatcher
from daskbatch.engine import pipeline, planner

spent = {"kernels": 0.0, "planning": 0.0}
local = threading.local()
lock = threading.Lock()
active = {"kernels": 0, "planning": 0}
since = {}

def timed(fn, key):
    # Wall time while any thread is inside fn (threads waiting on numba's compiler lock count once).
    def wrapper(*args, **kwargs):
        if getattr(local, key, False):  # nested: counted by the outer call
            return fn(*args, **kwargs)
        setattr(local, key, True)
        with lock:
            active[key] += 1
            if active[key] == 1:
                since[key] = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            with lock:
                active[key] -= 1
                if active[key] == 0:
                    spent[key] += time.perf_counter() - since[key]
            setattr(local, key, False)
    return wrapper

per_kernel = {}  # top-level compiles or cache loads: seconds by numba function (its callees included)

def by_kernel(compile):
    def wrapper(self, sig):
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        t = time.perf_counter()
        try:
            return compile(self, sig)
        finally:
            local.depth = depth
            if depth == 0:  # callees count with their caller
                name = self.py_func.__module__.rsplit(".", 1)[-1] + "." + self.py_func.__qualname__
                per_kernel[name] = per_kernel.get(name, 0.0) + time.perf_counter() - t
    return wrapper

Dispatcher.compile = timed(by_kernel(Dispatcher.compile), "kernels")
planning = timed(planner.plan_statistics, "planning")
for module in (planner, pipeline):  # pipeline holds its own name for it
    if hasattr(module, "plan_statistics"):
        module.plan_statistics = planning
calls = []
for _ in range(2):
    before = dict(spent)
    t = time.perf_counter()
    db.describe(sys.argv[1], label="y")
    calls.append({"describe": time.perf_counter() - t, **{k: spent[k] - before[k] for k in spent}})
from daskbatch.stats.kernels import ahead
print(json.dumps({"import": t_import - t_start, "calls": calls, "per_kernel": per_kernel,
                  "helper": ahead.child_pid() is not None}))
"""


def run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one fresh ``python *args`` and its stdout."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out


def api_row(store: str, env: dict[str, str]) -> dict[str, float]:
    """One fresh process: its total, start-up + imports, and the first and second describe's phases."""
    wall, out = run(["-c", CHILD, store], env)
    child = json.loads(out.strip().splitlines()[-1])
    first, second = child["calls"]
    # The process's start-up and interpreter exit count with the imports; the second call is not part of it.
    total = wall - second["describe"]
    return {"total": total, "imports": total - first["describe"], **_split(first), "second": second,
            "per_kernel": child["per_kernel"], "helper": child["helper"]}


def _split(call: dict[str, float]) -> dict[str, float]:
    """A describe call's time as kernels, planning and the rest (reading and computing)."""
    rest = call["describe"] - call["kernels"] - call["planning"]
    return {"kernels": call["kernels"], "planning": call["planning"], "read+compute": rest}


#: Whole fresh processes on the same data, warm: the command line of each (``{python}`` the peers' Python).
WHOLE_PROCESS = {
    "daskbatch API `describe`": ["{daskbatch}", "-c", "import daskbatch as db; db.describe({store!r}, label='y')"],
    "daskbatch CLI `describe` (in-process)": ["{daskbatch}", "-m", "daskbatch", "describe", "{store}", "--label", "y"],
    "daskbatch CLI `describe --cluster local`": [
        "{daskbatch}", "-m", "daskbatch", "describe", "{store}", "--label", "y", "--cluster", "local"],
    "Polars streaming `describe` (Parquet)": [
        "{python}", "-c", "import polars as pl; pl.Config.set_engine_affinity('streaming'); "
                   "print(pl.scan_parquet({parquet!r}).describe())"],
    "DuckDB `SUMMARIZE` (Parquet)": [
        "{python}", "-c", "import duckdb; print(duckdb.sql(\"SUMMARIZE SELECT * FROM read_parquet('{parquet}')\").fetchall())"],
}


def peers_python(venv: str) -> str:
    """The Python of ``venv``, with polars, duckdb and pyarrow installed there first if they are not."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([python, "-c", "import polars, duckdb, pyarrow"], capture_output=True).returncode:
        subprocess.run([python, "-m", "pip", "install", "-q", "polars", "duckdb", "pyarrow"], check=True)
    return python


def write_parquet(store: str, path: str, env: dict[str, str]) -> None:
    """The store's X (columns f0..) and y as one Parquet file of 65,536-row zstd row groups (pyarrow, an extra)."""
    run(["-c", (
        "import daskbatch as db, pyarrow as pa, pyarrow.parquet as pq\n"
        f"d = db.open_dataset({store!r}); x = d.x.compute()\n"
        "cols = {f'f{i}': x[:, i] for i in range(x.shape[1])}; cols['y'] = d.label.compute()\n"
        f"pq.write_table(pa.table(cols), {path!r}, row_group_size=65536, compression='zstd')"
    )], env)


def whole_process_rows(store: str, parquet: str | None, python: str | None, env: dict[str, str],
                       repeat: int) -> dict[str, float]:
    """Best wall seconds of each whole process in :data:`WHOLE_PROCESS`, run in turn ``repeat`` times."""
    times: dict[str, list[float]] = {}
    names = [n for n, argv in WHOLE_PROCESS.items() if parquet is not None or "{python}" not in argv]
    for _ in range(repeat):
        for name in names:
            argv = [a.format(daskbatch=sys.executable, python=python, store=store, parquet=parquet)
                    for a in WHOLE_PROCESS[name]]
            start = time.perf_counter()
            subprocess.run(argv, env=env, capture_output=True, check=True)
            times.setdefault(name, []).append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def best(rows: list[dict]) -> dict:
    """The row of the fastest run (its phases stay consistent with its total)."""
    return min(rows, key=lambda r: r["total"])


def split_rows(store: str, env: dict[str, str], work: str, repeat: int, rows: int) -> dict[str, str]:
    """Time and print the cold, warm and second-call rows split into phases; the warm processes' environment."""
    caches = []
    cold = []
    for _ in range(repeat):
        caches.append(tempfile.mkdtemp(dir=work))
        cold.append(api_row(store, dict(env, NUMBA_CACHE_DIR=caches[-1])))
    warm_env = dict(env, NUMBA_CACHE_DIR=caches[-1])
    warm = [api_row(store, warm_env) for _ in range(repeat)]

    cold_row, warm_row = best(cold), best(warm)
    second = min((r["second"] for r in warm), key=lambda c: c["describe"])
    print(f"{rows:,} x 64 float32, 3-class label, describe defaults; best of {repeat}; "
          f"{os.cpu_count()} CPUs\n")
    print("| whole process | total s | start + imports s | kernels s | planning s | read + compute s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in (("cold numba cache", cold_row), ("warm numba cache", warm_row)):
        print(f"| {name} | {r['total']:.2f} | {r['imports']:.2f} | {r['kernels']:.2f} | {r['planning']:.2f} "
              f"| {r['read+compute']:.2f} |")
    s = _split(second)
    print(f"| second call, same process | {second['describe']:.2f} | - | {s['kernels']:.2f} | {s['planning']:.2f} "
          f"| {s['read+compute']:.2f} |")
    print(f"\ncold / warm: {cold_row['total'] / warm_row['total']:.1f}x")
    # The helper runs only while a core is idle (the last minute's load below the cores): back-to-back runs
    # can leave a cold row without it, which a new user's first call on an idle machine would have.
    helped = sum(r["helper"] for r in cold)
    print(f"cold rows with the compile helper: {helped} of {len(cold)} (the best: {'yes' if cold_row['helper'] else 'no'}; "
          "DASKBATCH_COMPILE_AHEAD=1 starts it whatever the load)")
    for name, r in (("cold", cold_row), ("warm", warm_row)):  # where the kernels phase went, by numba function
        kernels = sorted(r["per_kernel"].items(), key=lambda kv: -kv[1])
        print(f"{name} kernels ({len(kernels)} top-level compiles or loads): "
              + ", ".join(f"{k} {v:.2f}" for k, v in kernels))
    return warm_env


def main() -> None:
    """Time the four rows and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", help="a directory holding another daskbatch package to time instead")
    parser.add_argument("--whole-only", action="store_true",
                        help="only the warm whole-process rows (API, CLI, peers), not the cold/warm phase split")
    parser.add_argument("--peers-venv", help="a venv for Polars and DuckDB (created with them if absent)")
    opts = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-first-call-")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # Timed as installed: pip writes the bytecode at install, so a user's process loads .pyc files. With
    # PYTHONDONTWRITEBYTECODE set, every process compiled daskbatch's changed modules from source (~0.2 s).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if opts.tree:
        env["PYTHONPATH"] = opts.tree
    os.chdir(work)  # not the checkout: the installed (or --tree) package is timed
    store = os.path.join(work, "data.zarr")
    run(["-c", f"import daskbatch as db; db.synth({opts.rows}, 64, classes=3, path={store!r})"], env)

    if opts.whole_only:  # one untimed process fills the cache the whole-process rows load from
        warm_env = dict(env, NUMBA_CACHE_DIR=tempfile.mkdtemp(dir=work))
        run(["-c", f"import daskbatch as db; db.describe({store!r}, label='y')"], warm_env)
    else:
        warm_env = split_rows(store, env, work, opts.repeat, opts.rows)
    python = peers_python(opts.peers_venv) if opts.peers_venv else None
    parquet = None
    if python is not None:
        parquet = os.path.join(work, "data.parquet")
        write_parquet(store, parquet, env)
    whole = whole_process_rows(store, parquet, python, warm_env, opts.repeat)
    print(f"\n| whole process, warm, {opts.rows:,} x 64 (best of {opts.repeat}, interleaved) | s |\n|---|---:|")
    for name, seconds in whole.items():
        print(f"| {name} | {seconds:.2f} |")
    api = whole["daskbatch API `describe`"]
    print(f"\nCLI / API: {whole['daskbatch CLI `describe` (in-process)'] / api:.2f}x")
    if python is None:
        print("Polars and DuckDB: skipped (give --peers-venv DIR)")
    else:
        print(f"API / Polars: {api / whole['Polars streaming `describe` (Parquet)']:.2f}x")
    print(f"\nReproduce: python benchmarks/bench_first_call.py --rows {opts.rows} --repeat {opts.repeat}"
          + (f" --tree {opts.tree}" if opts.tree else "") + (f" --peers-venv {opts.peers_venv}" if python else "") + (" --whole-only" if opts.whole_only else ""))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
