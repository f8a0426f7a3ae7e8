"""Parquet and Arrow IPC tables as inputs: the same statistics as Zarr, constant memory, checkpoints, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
import zarr  # noqa: E402

import daskbatch as db  # noqa: E402
from daskbatch.engine.checkpoint import read_runs  # noqa: E402
from daskbatch.errors import CheckpointMismatchError  # noqa: E402

FILES, ROWS, GROUP, D = 4, 1000, 250, 5
STATS = ("moments", "hist", "mi", "sketch", "class_moments")


def values(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features with 3 % nulls in one column (NaN), and a 3-class label."""
    rng = np.random.default_rng(seed)
    x = rng.normal(2.0, 3.0, (FILES * ROWS, D)) * np.arange(1, D + 1)
    y = (x[:, 0] > 2.0).astype(np.int64) + (x[:, 1] > 4.0)
    x[rng.random(len(x)) < 0.03, 2] = np.nan
    return x, y


def write_parquet(folder: Path, x: np.ndarray, y: np.ndarray, *, text: bool = True) -> Path:
    """FILES Parquet files of ROWS rows each, in row groups of GROUP, with a string column (skipped)."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(FILES):
        rows = slice(k * ROWS, (k + 1) * ROWS)
        columns = {f"f{j}": pa.array(x[rows, j], from_pandas=True) for j in range(D)}  # NaN -> null
        if text:
            columns["name"] = pa.array([f"r{i}" for i in range(ROWS)])
        columns["y"] = pa.array(y[rows])
        pq.write_table(pa.table(columns), folder / f"part-{k}.parquet", row_group_size=GROUP)
    return folder


def write_zarr(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    """The same values as a Zarr group (X, y) in chunks of GROUP rows."""
    group = zarr.open_group(path, mode="w")
    group.create_array("X", data=x, chunks=(GROUP, D))
    group.create_array("y", data=y, chunks=(GROUP,))
    return path


def assert_same_summary(a: db.Summary, b: db.Summary) -> None:
    """Counts bitwise, every other number within 1e-12 (relative)."""
    assert a.variables.keys() == b.variables.keys()
    checked = 0
    for name in a.variables:
        va, vb = getattr(a.arrays, name), getattr(b.arrays, name)
        if not isinstance(va, np.ndarray):
            continue
        if va.dtype.kind in "biu" or "count" in name:
            np.testing.assert_array_equal(va, vb, err_msg=name)
        else:
            np.testing.assert_allclose(va, vb, rtol=1e-12, atol=1e-300, equal_nan=True, err_msg=name)
        checked += 1
    assert checked >= 15 and a.mi is not None and a.hist_counts is not None and a.sketch_counts is not None
    q = [0.01, 0.25, 0.5, 0.75, 0.99]
    np.testing.assert_allclose(a.quantile(q), b.quantile(q), rtol=1e-12)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tables")
    x, y = values()
    return {"parquet": write_parquet(root / "ds", x, y), "zarr": write_zarr(root / "same.zarr", x, y)}


def test_parquet_dataset_equals_zarr(tables: dict[str, Path]) -> None:
    from_table = db.describe(str(tables["parquet"]), label="y", stats=STATS)  # "name" profiled, not skipped
    from_zarr = db.describe(str(tables["zarr"]), label="y", stats=STATS)
    assert list(from_table.feature_names) == [f"f{j}" for j in range(D)]
    assert from_table.arrays.count[2] < FILES * ROWS == from_table.arrays.count[0]  # nulls are missing values
    assert_same_summary(from_table, from_zarr)
    assert from_table.provenance["files"] == FILES and from_table.provenance["row_groups"] == FILES * ROWS // GROUP


def test_arrow_ipc_reads_the_same_values_and_columns_select_by_pattern(tables: dict[str, Path], tmp_path: Path) -> None:
    x, y = values()
    table = pa.table({**{f"f{j}": pa.array(x[:, j], from_pandas=True) for j in range(D)}, "y": pa.array(y)})
    import pyarrow.feather as feather

    feather.write_feather(table, tmp_path / "all.feather", chunksize=600)
    ipc = db.open_table(tmp_path / "all.feather", columns=["f1", "f3*"], label="y")
    parquet = db.open_table(tables["parquet"], columns="f[13]", label="y")
    assert ipc.feature_names == parquet.feature_names == ["f1", "f3"]
    np.testing.assert_array_equal(ipc.x.compute(), parquet.x.compute())
    np.testing.assert_array_equal(ipc.label.compute(), y)
    assert ipc.x.chunks[0][:2] == (600, 600) and parquet.x.chunks[0][:2] == (GROUP, GROUP)


def test_large_row_groups_are_read_in_slices(tables: dict[str, Path]) -> None:
    import dask

    with dask.config.set({"daskbatch.target-chunk-bytes": 100 * 8 * D}):
        table = db.open_table(tables["parquet"], "f*", label="y")
    assert max(table.x.chunks[0]) == 84  # 250 rows in three slices
    np.testing.assert_array_equal(table.x.compute(), db.open_table(tables["parquet"], "f*", label="y").x.compute())


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys, tracemalloc
    import dask, dask.array as da, numpy as np, pyarrow as pa, pyarrow.parquet as pq
    import daskbatch as db
    folder, files = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    for k in range(files):
        x = rng.normal(size=(50_000, 16))
        pq.write_table(pa.table({f"f{j}": x[:, j] for j in range(16)}), f"{folder}/p{k}.parquet", row_group_size=5_000)
    del x
    table = db.open_table(folder)
    pool = pa.default_memory_pool()
    before = pool.max_memory()
    tracemalloc.start()
    with dask.config.set(scheduler="sync"):
        da.nansum(table.x, axis=0).compute()  # every block read once, as a pass reads them
    peak = tracemalloc.get_traced_memory()[1] + pool.max_memory() - before
    print(json.dumps({"peak": peak, "bytes": files * 50_000 * 16 * 8, "block": 5_000 * 16 * 8}))
    """
)


def test_peak_memory_of_reading_does_not_grow_with_the_rows(tmp_path: Path) -> None:
    peaks = {}
    for files in (2, 8):
        folder = tmp_path / f"f{files}"
        folder.mkdir()
        done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(folder), str(files)],
                              capture_output=True, text=True, timeout=280, check=True)
        peaks[files] = json.loads(done.stdout.strip().splitlines()[-1])
    small, large = peaks[2], peaks[8]
    assert large["peak"] < small["peak"] + large["block"], peaks  # four times the rows, the same memory
    assert large["peak"] < large["bytes"] / 3, peaks  # never the whole table


def test_an_interrupted_checkpointed_run_resumes(tables: dict[str, Path], tmp_path: Path) -> None:
    cancel = threading.Event()

    def stop_after_three(done: int, total: int | None, phase: str) -> None:
        if done >= 3:
            cancel.set()

    path, ck = str(tables["parquet"]), tmp_path / "ck"
    run = {"stats": ("moments", "cov"), "range": (-50.0, 50.0)}
    with pytest.raises(db.Cancelled):
        db.describe(path, **run, run=db.RunOptions(plan=None, checkpoint=ck, cancel=cancel, progress=stop_after_three))
    resumed = db.describe(path, **run, run=db.RunOptions(plan=None, checkpoint=ck))
    whole = db.describe(path, **run, run=db.RunOptions(plan=None))
    (log,) = [r for r in (ck.glob("pass-*")) if r.is_dir() and r.name != "pass-categorical"]  # "name": its own
    last = read_runs(ck, log.name.removeprefix("pass-"))[-1]
    assert 0 < last["reused_blocks"] and last["computed_blocks"] < last["blocks"] == FILES * ROWS // GROUP
    np.testing.assert_array_equal(resumed.mean, whole.mean)
    np.testing.assert_array_equal(resumed.cov, whole.cov)


def test_a_rewritten_row_group_invalidates_the_checkpoint(tmp_path: Path) -> None:
    x, y = values(1)
    folder = write_parquet(tmp_path / "ds", x, y, text=False)
    ck = tmp_path / "ck"
    db.describe(str(folder), label="y", stats=("moments",), run=db.RunOptions(plan=None, checkpoint=ck))
    # The same file again (another mtime, same bytes): the checkpoint still holds.
    write_parquet(folder, x, y, text=False)
    db.describe(str(folder), label="y", stats=("moments",), run=db.RunOptions(plan=None, checkpoint=ck))
    # One value of the second file's third row group, a new maximum: its footer statistics change. (A value
    # changed within the row group's min and max, at the same compressed size, leaves the footer as it was.)
    x[1700, 3] = 1e6
    write_parquet(folder, x, y, text=False)
    with pytest.raises(CheckpointMismatchError, match="x content"):
        db.describe(str(folder), label="y", stats=("moments",), run=db.RunOptions(plan=None, checkpoint=ck))


def test_ingest_reads_the_tables_into_zarr(tables: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    with pytest.warns(UserWarning, match="non-numeric"):
        report = db.ingest(str(tables["parquet"] / "part-*.parquet"), out, label_key="y", chunk_rows=300)
    assert (report.rows, report.features) == (FILES * ROWS, D)
    ingested, stored = db.open_dataset(out), db.open_dataset(tables["zarr"], label="y")
    np.testing.assert_array_equal(ingested.x.compute(), stored.x.compute())
    np.testing.assert_array_equal(ingested.label.compute(), stored.label.compute())


def test_bad_inputs_are_named(tables: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or directory: '.*nope.zarr'") as missing:
        db.describe(str(tmp_path / "nope.zarr"))
    assert missing.value.__cause__ is None
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        db.open_table(tmp_path / "nope.parquet")
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"is a text table.*convert it to Parquet"):
        db.describe(str(csv))
    pq.write_table(pa.table({"l": pa.array([[1], [2]]), "m": pa.array([{"a": 1}, {"a": 2}])}), tmp_path / "odd.parquet")
    with pytest.raises(TypeError, match=r"no column to describe: numbers, .* \(found: l \(other type\), m \(other"):
        db.describe(str(tmp_path / "odd.parquet"))
    pq.write_table(pa.table({"s": ["a", "b"]}), tmp_path / "text.parquet")
    with pytest.raises(db.DataError, match=r"text.parquet has no numeric columns to ingest"):
        db.ingest(str(tmp_path / "text.parquet"), tmp_path / "text.zarr")
    named = db.open_table(tables["parquet"], columns=["f0", "name"])  # a text column named: profiled
    assert named.feature_names == ["f0"] and len(named.frames) == FILES * ROWS // GROUP
    with pytest.raises(KeyError, match="label 'z' is not a column"):
        db.open_table(tables["parquet"], label="z")
    with pytest.raises(KeyError, match="no column matches 'g\\*'"):
        db.open_table(tables["parquet"], columns="g*")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "_SUCCESS").write_text("")
    with pytest.raises(FileNotFoundError, match="holds no table files"):
        db.open_table(empty)


def test_cli_describes_a_table_and_refuses_a_csv_in_one_line(tables: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a\n1\n")
    for target, code in ((tables["parquet"], 0), (tmp_path / "data.csv", 2)):
        done = subprocess.run([sys.executable, "-m", "daskbatch", "describe", str(target), "--label", "y",
                               "--stats", "moments"], capture_output=True, text=True, timeout=250)
        assert done.returncode == code, done.stderr
    assert "f4" in subprocess.run([sys.executable, "-m", "daskbatch", "describe", str(tables["parquet"]), "--stats",
                                   "moments"], capture_output=True, text=True, timeout=250).stdout
    assert done.stderr.strip().count("\n") == 0 and "text table" in done.stderr


def test_pyarrow_is_not_imported_by_daskbatch() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, daskbatch; print('pyarrow' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"


def test_an_fsspec_url_of_a_dataset_is_described() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for k in range(2):
        with fs.open(f"/tables35/ds/part-{k}.parquet", "wb") as f:
            pq.write_table(pa.table({"a": np.arange(100.0) + k, "y": np.arange(100) % 2}), f, row_group_size=30)
    summary = db.describe("memory://tables35/ds/", label="y", stats=("moments",))
    np.testing.assert_array_equal(summary.count, [200])
    assert summary.arrays.mean[0] == 50.0
    assert db.open_table("memory://tables35/ds", storage_options={}).row_groups == 8
    fs.rm("/tables35", recursive=True)


PROFILE_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import dask
    import daskbatch as db
    from daskbatch.io import tables

    read = tables._read_group

    def slow(files, columns, *piece):  # the text columns read slowly: the kill lands inside their pass
        time.sleep(float(sys.argv[3]) if "word" in columns else 0.0)
        return read(files, columns, *piece)

    tables._read_group = slow  # what the blocks call when they run (their names, made of their reads, stay)
    with dask.config.set(num_workers=2):
        db.describe(sys.argv[1], label="y", stats=("moments", "mi"),
                    run=db.RunOptions(plan=None, split_every=2, checkpoint=sys.argv[2]))
    print("finished")
    """
)


def test_a_killed_run_resumes_the_profile_of_the_text_columns(tmp_path: Path) -> None:
    import os
    import signal
    import time

    rng = np.random.default_rng(5)
    folder, blocks = tmp_path / "ds", 0
    folder.mkdir()
    for k in range(4):  # 4 files of 4 row groups: 16 blocks, units of 2
        n = 800
        words = [None if rng.random() < 0.1 else f"w{int(v)}" for v in rng.integers(0, 40, n)]
        pq.write_table(pa.table({
            "f": rng.normal(size=n), "word": pa.array(words, pa.string()),
            "ids": pa.array([f"id{k}-{i}" for i in range(n)]),  # pruned: the counters' merge tree matters
            "at": pa.array(rng.integers(0, 10**12, n), pa.timestamp("ms")), "y": rng.integers(0, 3, n),
        }), folder / f"part-{k}.parquet", row_group_size=200)
        blocks += 4
    script, ck = tmp_path / "run.py", tmp_path / "ck"
    script.write_text(PROFILE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, str(script), str(folder), str(ck), "0.3"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 200
    while len(list((ck / "pass-categorical").glob("L*.ckpt"))) < 2:  # two units (four blocks) kept
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint of the profile appeared"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert "finished" not in proc.communicate()[0]
    options = {"label": "y", "stats": ("moments", "mi")}
    resumed = db.describe(str(folder), **options, run=db.RunOptions(plan=None, split_every=2, checkpoint=ck))
    whole = db.describe(str(folder), **options, run=db.RunOptions(plan=None, split_every=2))
    last = read_runs(ck, "categorical")[-1]
    assert 0 < last["reused_blocks"] < last["blocks"] == blocks and last["computed_blocks"] < blocks
    a, b = resumed.categorical_state.state, whole.categorical_state.state
    for name in ("word", "ids", "at"):  # counts, nulls, extremes, registers and counters: the same state
        assert (a[name].count, a[name].null_count, a[name].low, a[name].high, a[name].counters, a[name].joint) == (
            b[name].count, b[name].null_count, b[name].low, b[name].high, b[name].counters, b[name].joint)
        np.testing.assert_array_equal(a[name].registers, b[name].registers)
    import pandas as pd

    pd.testing.assert_frame_equal(resumed.categorical, whole.categorical)
    assert b["ids"].pruned and b["word"].joint is not None  # both kinds of column were checked


def test_a_table_of_text_categories_and_times_only_is_described(tmp_path: Path) -> None:
    import pandas as pd

    rng = np.random.default_rng(9)
    folder = tmp_path / "text"
    folder.mkdir()
    for k in range(2):
        n = 600
        pq.write_table(pa.table({
            "word": pa.array([None if rng.random() < 0.1 else f"w{int(v)}" for v in rng.integers(0, 9, n)]),
            "kind": pa.array(rng.choice(["a", "b", "c"], n)).dictionary_encode(),
            "at": pa.array(rng.integers(0, 10**12, n), pa.timestamp("ms")), "y": rng.integers(0, 2, n),
        }), folder / f"part-{k}.parquet", row_group_size=250)
    values = pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))], ignore_index=True)
    s = db.describe(str(folder), label="y")
    assert s.feature_names == () and s.n_features == 0 and list(s.categorical.index) == ["word", "kind", "at"]
    for name in ("word", "kind"):
        counts = values[name].value_counts()
        assert s.categorical.loc[name, "null_count"] == values[name].isna().sum()
        assert dict(s.categorical.loc[name, "top_k"]) == counts.to_dict()
    assert s.categorical.loc["at", "min"] == values["at"].min().isoformat()
    rows = values["word"].notna()
    mi = s.categorical.loc["word", "mi"]  # by the label's classes, as with numbers beside
    from sklearn.metrics import mutual_info_score

    assert mi == pytest.approx(mutual_info_score(values.loc[rows, "word"], values.loc[rows, "y"]), rel=1e-12)
    assert "word" in str(s) and "word" in s._repr_html_()
    s.to_html(tmp_path / "report.html")
    s.save(tmp_path / "s.zarr")
    pd.testing.assert_frame_equal(db.load_summary(tmp_path / "s.zarr").categorical, s.categorical)
    halves = [db.describe(str(p), label="y") for p in sorted(folder.glob("*.parquet"))]
    merged = db.merge(*halves).categorical  # "at" has 1,200 distinct values: its pruned counters are the tree's own
    pd.testing.assert_frame_equal(merged.loc[["word", "kind"]], s.categorical.loc[["word", "kind"]])
    picked = ["count", "null_count", "distinct", "min", "max"]
    assert merged.loc["at", picked].tolist() == s.categorical.loc["at", picked].tolist()
    second = sorted(folder.glob("*.parquet"))[1]
    updated = db.update(halves[0], str(second), label="y").categorical  # the same settings: the profile alone
    pd.testing.assert_frame_equal(updated, merged)
    done = subprocess.run([sys.executable, "-m", "daskbatch", "describe", str(folder), "--label", "y", "--json", "-"],
                          capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written["feature_names"] == [] and written["provenance"]["categorical"]["kind"]["distinct"] == 3


@pytest.mark.parametrize("role", ["weights", "target", "groups"])
def test_weights_target_and_groups_by_column_name_equal_the_arrays(tmp_path: Path, role: str) -> None:
    rng = np.random.default_rng(11)
    n, path = 1500, tmp_path / "t.parquet"
    columns = {
        "a": rng.normal(size=n), "b": rng.exponential(size=n), "y": rng.integers(0, 3, n),
        "w": rng.random(n), "t": rng.normal(size=n), "g": rng.integers(0, 4, n), "s": rng.choice(["p", "q"], n),
    }
    pq.write_table(pa.table(columns), path, row_group_size=400)
    column = {"weights": "w", "target": "t", "groups": "g"}[role]
    label = {"label": "y"} if role == "weights" else {}
    stats = ("moments", "hist", "mi") if role != "groups" else ("moments", "hist")
    by_name = db.describe(str(path), **label, **{role: column}, stats=stats, range=(-5.0, 5.0))
    features = [c for c in ("a", "b", "y", "w", "t", "g") if c not in (column, *label.values())]
    table = db.open_table(path, [*features, "s"], **label)
    by_array = db.describe(table, **{role: columns[column]}, stats=stats, range=(-5.0, 5.0))
    assert by_name.feature_names == by_array.feature_names == tuple(features)
    assert by_name.variables.keys() == by_array.variables.keys()
    for name, value in by_array.variables.items():
        np.testing.assert_array_equal(by_name.variables[name], value, err_msg=name)
    if role != "target":  # a target's provenance is its dtype and bins
        assert by_name.provenance[role] == f"{role} column {column!r} of {path}"
    import pandas as pd

    pd.testing.assert_frame_equal(by_name.categorical, by_array.categorical)
    # A Table opened before (its label and that column among its features) is opened again without them.
    reopened = db.describe(db.open_table(path), **label, **{role: column}, stats=stats, range=(-5.0, 5.0))
    assert reopened.feature_names == by_name.feature_names
    pd.testing.assert_frame_equal(reopened.categorical, by_name.categorical)
    with pytest.raises(TypeError, match=r"column 's' of .* is string: a label, weights, target or group keys"):
        db.describe(str(path), **{role: "s"}, stats=("moments",))


def test_an_s3_url_without_s3fs_names_the_extra_to_install(tmp_path: Path) -> None:
    # s3fs made unimportable in a fresh interpreter: what a base install without daskbatch[s3] sees.
    lines = ["import sys", "sys.modules['s3fs'] = None", "import daskbatch as db"]
    # The last: a chain's inner link (main checked the first only, and fsspec's "Install s3fs" came through).
    for url in ("s3://bucket/data.zarr", "s3://bucket/prefix/", "s3://bucket/t.parquet", "zip://d.zarr::s3://b/a.zip"):
        code = "\n".join([*lines, f"db.describe({url!r})"])
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and f"ImportError: reading {url!r} needs the s3:// filesystem" in done.stderr
        assert "pip install 'daskbatch[s3]'" in done.stderr and "Install s3fs" not in done.stderr, done.stderr
    cli = "\n".join([*lines[:2], "from daskbatch.cli import main", "main(prog_name='daskbatch')"])
    done = subprocess.run([sys.executable, "-c", cli, "describe", "s3://bucket/data.zarr"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "pip install 'daskbatch[s3]'" in done.stderr
