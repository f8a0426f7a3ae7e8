"""Benchmark ``daskbatch.describe`` of a Parquet dataset against Polars' ``describe`` and DuckDB's ``SUMMARIZE``.

Writes a dataset of ``--files`` Parquet files (float64 features, an int label,
row groups of ``--row-group`` rows) once, then times, in one run and each in a
fresh subprocess, twice in it: the first call (cold: daskbatch loads its compiled
kernels then) and a second (warm); imports excluded, the page cache warm:

* ``daskbatch describe, moments+sketch``: count, nulls, mean, std, min, max and
  quantiles (one pass), the statistics the peers report;
* ``daskbatch describe, default``: also cov, histograms and MI with the label (two passes);
* ``polars describe``: ``pl.scan_parquet(...).describe()`` (count, nulls, mean, std, min, quartiles, max);
* ``duckdb SUMMARIZE``: ``SUMMARIZE SELECT * FROM read_parquet(...)`` (min, max, approx. distinct,
  mean, std, quartiles, count, null %).

Polars and DuckDB run in their own virtual environment (``--peers-python``,
default /work/venv-tables35/bin/python: ``python -m venv ...; pip install polars duckdb``),
and are skipped when it is absent.

Usage::

    python benchmarks/bench_tables.py --rows 1000000 --features 64 --files 8 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What each contender runs on the dataset folder (``path``); it prints its seconds.
CONTENDERS = {
    "daskbatch describe, moments+sketch": ("self", """
        import daskbatch as db
        db.describe(path, label="y", stats=("moments", "sketch"))
    """),
    "daskbatch describe, default": ("self", """
        import daskbatch as db
        db.describe(path, label="y")
    """),
    "polars describe": ("peers", """
        import polars as pl
        pl.scan_parquet(path + "/*.parquet").describe()
    """),
    "duckdb SUMMARIZE": ("peers", """
        import duckdb
        duckdb.sql(f"SUMMARIZE SELECT * FROM read_parquet('{path}/*.parquet')").fetchall()
    """),
}

TIMED = """
import sys, time, warnings
warnings.simplefilter("ignore")
path = sys.argv[1]
{imports}
seconds = []
for _ in range(2):  # the first call in a process (cold: imports, kernel caches), then again (warm)
    start = time.perf_counter()
{body}
    seconds.append(time.perf_counter() - start)
print(*seconds)
"""


def write_dataset(folder: Path, rows: int, features: int, files: int, row_group: int) -> None:
    """``files`` Parquet files of float64 features f0.. (1 % nulls in f0) and an int64 label y."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    per_file = -(-rows // files)
    for k in range(files):
        n = min(per_file, rows - k * per_file)
        with pq.ParquetWriter(folder / f"part-{k:03d}.parquet", _schema(features)) as writer:
            for start in range(0, n, row_group):
                m = min(row_group, n - start)
                x = rng.normal(size=(m, features)) * (1 + np.arange(features))
                x[rng.random(m) < 0.01, 0] = np.nan
                columns = [pa.array(x[:, j], from_pandas=True) for j in range(features)]
                columns.append(pa.array(rng.integers(0, 4, m)))
                writer.write_table(pa.Table.from_arrays(columns, schema=_schema(features)))


def _schema(features: int):  # noqa: ANN202 - pyarrow is imported late
    """The dataset's Arrow schema."""
    import pyarrow as pa

    return pa.schema([*(pa.field(f"f{j}", pa.float64()) for j in range(features)), pa.field("y", pa.int64())])


def run(python: str, code: str, path: Path) -> tuple[float, float]:
    """Seconds ``code`` took in a fresh ``python`` process: its first call, and a second one."""
    lines = textwrap.dedent(code).strip().splitlines()
    imports = "\n".join(line for line in lines if line.startswith("import"))
    body = "\n".join("    " + line for line in lines if not line.startswith("import"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-c", TIMED.format(imports=imports, body=body), str(path)],
                          capture_output=True, text=True, env=env, check=True)
    cold, warm = map(float, done.stdout.strip().splitlines()[-1].split())
    return cold, warm


def main() -> None:
    """Write the dataset, time every contender, print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peers-python", default="/work/venv-tables35/bin/python")
    parser.add_argument("--dir", default=None, help="where to write the dataset (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.dir or tmp) / "tables"
        folder.mkdir(parents=True, exist_ok=True)
        write_dataset(folder, args.rows, args.features, args.files, args.row_group)
        pythons = {"self": sys.executable, "peers": args.peers_python if os.path.exists(args.peers_python) else None}
        times: dict[str, tuple[float, float]] = {}
        for name, (where, code) in CONTENDERS.items():
            python = pythons[where]
            if python is None:
                print(f"skipping {name}: no {args.peers_python}", file=sys.stderr)
                continue
            run(python, code, folder)  # warm-up: the page cache, numba's cache
            runs = [run(python, code, folder) for _ in range(args.repeat)]
            times[name] = (statistics.median(w for _, w in runs), statistics.median(c for c, _ in runs))
    ref = times["daskbatch describe, moments+sketch"][0]
    print(f"{args.rows:,} x {args.features} float64 in {args.files} Parquet files, row groups of {args.row_group:,} "
          f"rows; median of {args.repeat}, {os.cpu_count()} CPUs\n")
    print("| contender | seconds (warm) | vs daskbatch moments+sketch | first call in a process |\n|---|---:|---:|---:|")
    for name, (warm, cold) in times.items():
        print(f"| {name} | {warm:.2f} | {warm / ref:.2f}x | {cold:.2f} |")
    print(json.dumps(times), file=sys.stderr)


if __name__ == "__main__":
    main()
