"""The HTML profile report: ``daskbatch report`` against ydata-profiling's minimal mode, then daskbatch alone at 10x.

One labelled float32 dataset of ``--rows`` x ``--features`` is written as a Zarr store
(for daskbatch) and as ``.npy`` files (for ydata-profiling, which wants a pandas
DataFrame in memory). Each contender runs in its own subprocess, ``--repeat`` times
after a warm-up on a small store (imports, numba's cache): daskbatch describes the
store with the defaults and writes the report (``describe`` + ``Summary.to_html``,
what ``daskbatch report STORE -o`` does); ydata-profiling loads the arrays into a
DataFrame and writes ``ProfileReport(df, minimal=True)``. Peak memory is the
subprocess's largest resident set (``ru_maxrss``, its children included). Then
daskbatch alone on 10x the rows. ydata-profiling is not a dependency: give the
Python of an environment that has it (``--ydata-python``); without it that row is
skipped with the reason. Usage::

    python -m venv /tmp/venv-ydata && /tmp/venv-ydata/bin/pip install ydata-profiling
    python benchmarks/bench_report.py --rows 100000 --features 50 --ydata-python /tmp/venv-ydata/bin/python
    python benchmarks/bench_report.py --rows 5000 --features 10 --repeat 1     # smoke run, daskbatch only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):  # run from a source tree without installing
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench_describe import write_section  # noqa: E402  (one writer of results sections)

#: The largest resident set of this process and of its waited-for children, in MiB (Linux: KiB units).
PEAK = (
    "def peak():\n"
    "    import resource\n"
    "    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    return (own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024\n"
)
DASKBATCH = (
    PEAK
    + """
import json, os, sys, time, warnings
import daskbatch as db
store, out = sys.argv[1:3]
started = time.perf_counter()
summary = db.describe(store)
described = time.perf_counter()
summary.to_html(out)
done = time.perf_counter()
print(json.dumps({"seconds": done - started, "describe": described - started, "html": done - described,
                  "peak_mib": peak(), "bytes": os.path.getsize(out)}))
"""
)
YDATA = (
    PEAK
    + """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, pandas as pd
from ydata_profiling import ProfileReport
x_path, y_path, out = sys.argv[1:4]
started = time.perf_counter()
x = np.load(x_path)
frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
frame["label"] = np.load(y_path)
loaded = time.perf_counter()
ProfileReport(frame, minimal=True, progress_bar=False).to_file(out)
done = time.perf_counter()
print(json.dumps({"seconds": done - started, "load": loaded - started, "html": done - loaded,
                  "peak_mib": peak(), "bytes": os.path.getsize(out)}))
"""
)


def run(python: str, code: str, *args: str) -> dict[str, float]:
    """Run ``code`` in a fresh ``python`` and read the JSON line it prints last."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_run(python: str, code: str, repeat: int, *args: str) -> dict[str, float]:
    """The run of median time among ``repeat`` runs, with every time listed."""
    runs = sorted((run(python, code, *args) for _ in range(repeat)), key=lambda r: r["seconds"])
    chosen = dict(runs[len(runs) // 2])
    chosen["runs"] = [round(r["seconds"], 2) for r in runs]  # type: ignore[assignment]
    chosen["median"] = statistics.median(r["seconds"] for r in runs)
    return chosen


def make_data(where: Path, rows: int, features: int, npy: bool) -> tuple[str, str, str]:
    """A labelled store (and the same arrays as .npy files for ydata-profiling): the paths."""
    import zarr

    from daskbatch.io.synth import synth

    store = where / f"data-{rows}x{features}.zarr"
    if not store.exists():
        synth(
            rows,
            features,
            classes=3,
            correlated=min(8, features // 2),
            path=store,
            chunk_rows=65536,
        )
    x_path, y_path = where / f"x-{rows}x{features}.npy", where / f"y-{rows}x{features}.npy"
    if npy and not x_path.exists():
        group = zarr.open_group(str(store), mode="r")
        np.save(x_path, np.asarray(group["X"][:]))
        np.save(y_path, np.asarray(group["y"][:]))
    return str(store), str(x_path), str(y_path)


def has_ydata(python: str | None) -> str | None:
    """Why the ydata-profiling row is skipped, or None when ``python`` imports it."""
    if python is None:
        return "no --ydata-python given"
    if not Path(python).exists():
        return f"{python} does not exist"
    check = subprocess.run(
        [python, "-W", "ignore", "-c", "import ydata_profiling"], capture_output=True, check=False
    )
    return None if check.returncode == 0 else f"{python} does not import ydata_profiling"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--ydata-python", default=None, help="a Python that imports ydata_profiling"
    )
    parser.add_argument("--data-dir", default=str(ROOT / "benchmarks" / "_data"))
    parser.add_argument(
        "--out", default=None, help="write the '## report' section of this Markdown file"
    )
    args = parser.parse_args()

    import daskbatch as db

    where = Path(args.data_dir)
    where.mkdir(parents=True, exist_ok=True)
    skip = has_ydata(args.ydata_python)
    small = make_data(where, args.rows, args.features, npy=skip is None)
    big = make_data(where, 10 * args.rows, args.features, npy=False)
    warm = make_data(where, 2000, args.features, npy=skip is None)
    rows: list[tuple[str, int, dict[str, float] | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "report.html")
        run(sys.executable, DASKBATCH, warm[0], page)  # imports and numba's cache
        rows.append(
            (
                "daskbatch: describe + `to_html`",
                args.rows,
                median_run(sys.executable, DASKBATCH, args.repeat, small[0], page),
            )
        )
        if skip is None:
            assert args.ydata_python is not None
            ydata_page = os.path.join(tmp, "ydata.html")
            run(args.ydata_python, YDATA, warm[1], warm[2], ydata_page)
            rows.append(
                (
                    "ydata-profiling `minimal=True` (data in pandas)",
                    args.rows,
                    median_run(
                        args.ydata_python, YDATA, args.repeat, small[1], small[2], ydata_page
                    ),
                )
            )
        else:
            rows.append((f"ydata-profiling: skipped ({skip})", args.rows, None))
        rows.append(
            (
                "daskbatch: describe + `to_html`",
                10 * args.rows,
                median_run(sys.executable, DASKBATCH, args.repeat, big[0], page),
            )
        )
    base = rows[0][2]
    assert base is not None
    lines = [
        f"{args.features} float32 features and an integer label (3 classes); median of {args.repeat} runs, each in its "
        f"own process after a warm-up; peak = largest resident set; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}, daskbatch {db.__version__}.",
        "",
        "| contender | rows | seconds (runs) | of which the report step | peak MiB | HTML kB | time vs daskbatch |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, n, r in rows:
        if r is None:
            lines.append(f"| {name} | {n:,} | | | | | |")
            continue
        lines.append(
            f"| {name} | {n:,} | {r['median']:.1f} ({', '.join(map(str, r['runs']))}) | {r['html']:.2f} | "
            f"{r['peak_mib']:,.0f} | {r['bytes'] / 1000:,.0f} | {r['median'] / base['median']:.1f}x |"
        )
    lines += [
        "",
        "The report step: `Summary.to_html` for daskbatch (after `describe`); `ProfileReport(...).to_file` for "
        "ydata-profiling (its whole profile, after loading the arrays into pandas).",
        "",
        f"`python benchmarks/bench_report.py --rows {args.rows} --features {args.features} "
        f"--repeat {args.repeat} --ydata-python PYTHON_WITH_YDATA`",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_section(Path(args.out), "## report\n\n" + text + "\n", "## report")


if __name__ == "__main__":
    main()
