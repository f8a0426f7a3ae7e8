"""Unusual label values: memory stays bounded by the number of distinct values, bad values get one-line errors."""

from __future__ import annotations

import gc
import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from sklearn.metrics import mutual_info_score

import daskbatch as db
from daskbatch.cli import main

ROWS, FEATURES, CHUNK_ROWS, BINS = 5_000, 4, 1_000, 16
STRAY_ROW = 2_345  # in the store chunk of rows 2,000..2,999


def labelled_store(path: str, y: np.ndarray, *, seed: int = 0, attrs: dict | None = None) -> str:
    """A Zarr v3 group: X (ROWS x FEATURES float32, chunks of CHUNK_ROWS rows) and the label y."""
    x = np.random.default_rng(seed).normal(size=(ROWS, FEATURES)).astype(np.float32)
    root = zarr.open_group(path, mode="w", zarr_format=3, attributes=attrs or {})
    root.create_array("X", data=x, chunks=(CHUNK_ROWS, FEATURES))
    root.create_array("y", data=y, chunks=(CHUNK_ROWS,))
    return path


def three_classes(dtype: type = np.int64) -> np.ndarray:
    return (np.arange(ROWS) % 3).astype(dtype)


def with_stray(value: int, dtype: type = np.int64) -> np.ndarray:
    y = three_classes(dtype)
    y[STRAY_ROW] = value
    return y


def traced_peak(func) -> tuple[object, int]:
    """``func()`` and the peak bytes traced by tracemalloc while it ran (NumPy reports its buffers)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = func()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def sklearn_mi(summary, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = []
    for d, e in enumerate(summary.arrays.hist_edges):
        col = x[:, d]
        inside = (col >= e[0]) & (col <= e[-1])  # MI scores the in-range bins; the rest is reported apart
        slot = np.clip(np.searchsorted(e, col[inside], side="right") - 1, 0, len(e) - 2)
        out.append(mutual_info_score(slot, y[inside]))
    return np.asarray(out)


def test_a_stray_label_is_one_more_class_and_memory_stays_small(tmp_path) -> None:
    clean = labelled_store(str(tmp_path / "clean.zarr"), three_classes())
    stray = labelled_store(str(tmp_path / "stray.zarr"), with_stray(200_000))
    run = {"label": "y", "bins": BINS, "run": db.RunOptions(plan=db.Resources(memory_bytes=2**30, threads_per_worker=1))}
    with dask.config.set(scheduler="synchronous"):
        db.describe(clean, **run)  # warm-up: imports and compiled kernels are not what is measured
        base, base_peak = traced_peak(lambda: db.describe(clean, **run))
        s, peak = traced_peak(lambda: db.describe(stray, **run))
    # A table sized by the largest label would be FEATURES x 19 slots x 200,001 classes x 8 B = 116 MiB.
    assert peak < base_peak + 4 * 2**20, (peak, base_peak)
    assert peak < 32 * 2**20, peak
    assert s.provenance["plan"]["n_classes"] == 4  # the plan knew the classes before counting
    np.testing.assert_array_equal(s.classes, [0, 1, 2, 200_000])
    assert s.joint_counts.shape == (FEATURES, BINS + 2, 4)
    assert int(s.arrays.joint_counts[:, :, 3].sum()) == FEATURES  # one row, every feature
    np.testing.assert_array_equal(base.classes, [0, 1, 2])


@pytest.mark.parametrize("value", [10**9, 2**40, 2**62], ids=["1e9", "2^40", "2^62"])
@pytest.mark.parametrize("range_", [None, (-6.0, 6.0)], ids=["two-pass", "one-pass"])
def test_huge_label_values_are_mapped(tmp_path, value: int, range_) -> None:
    y = with_stray(value)
    store = labelled_store(str(tmp_path / "huge.zarr"), y)
    s = db.describe(store, label="y", bins=BINS, range=range_, stats=("moments", "mi"))
    np.testing.assert_array_equal(s.classes, [0, 1, 2, value])
    assert s.to_xarray()["class"].values.tolist() == [0, 1, 2, value]
    x = zarr.open_group(store, mode="r")["X"][:].astype(np.float64)
    np.testing.assert_allclose(s.mi, sklearn_mi(s, x, y), rtol=1e-12, atol=1e-15)


def test_more_distinct_values_than_the_limit_is_an_error_naming_count_and_limit(tmp_path) -> None:
    ids = labelled_store(str(tmp_path / "ids.zarr"), np.arange(ROWS, dtype=np.int64))
    with pytest.raises(ValueError, match=r"at least [\d,]+ distinct values, more than daskbatch.max-classes \(1,000\)"):
        db.describe(ids, label="y", stats=("moments", "mi"))
    eleven = labelled_store(str(tmp_path / "eleven.zarr"), (np.arange(ROWS) % 11).astype(np.int32))
    with dask.config.set({"daskbatch.max-classes": 10}):
        with pytest.raises(ValueError, match=r"at least 11 distinct values, more than daskbatch.max-classes \(10\)"):
            db.describe(eleven, label="y", stats=("moments", "mi"))
    assert db.describe(eleven, label="y", stats=("moments", "mi")).classes.tolist() == list(range(11))


def block_rows(x, row: int) -> str:
    """``"a..b"``: the rows of the block of ``x`` that holds ``row``."""
    stops = np.cumsum(x.chunks[0])
    i = int(np.searchsorted(stops, row, side="right"))
    return f"{int(stops[i] - x.chunks[0][i]):,}..{int(stops[i]) - 1:,}"


def test_a_label_outside_declared_classes_names_value_and_rows(tmp_path) -> None:
    store = labelled_store(str(tmp_path / "s.zarr"), with_stray(5))
    x = da.from_zarr(store, component="X")  # in the store's chunks: read in the store path's blocks
    y = da.from_zarr(store, component="y")
    for data, label in ((x, y), (store, "y")):
        for range_ in (None, (-6.0, 6.0)):
            with pytest.raises(ValueError) as err:
                db.describe(data, label, classes=[0, 1, 2], range=range_, run=db.RunOptions(plan=None))
            msg = str(err.value)
            assert "\n" not in msg
            assert msg.startswith("label value 5 at row 2,345 is not one of the 3 classes [0, 1, 2]"), msg
            rows = block_rows(db.open_dataset(store).x, STRAY_ROW)
            assert msg.endswith(f"(1 such label in rows {rows})"), msg


def test_recorded_classes_are_used_and_checked(tmp_path) -> None:
    synth = {"synth": {"classes": 3}}
    good = labelled_store(str(tmp_path / "good.zarr"), three_classes(np.int32), attrs=synth)
    s = db.describe(good, label="y", stats=("moments", "mi"))
    assert s.provenance["classes_from"] == "store" and s.classes.tolist() == [0, 1, 2]
    liar = labelled_store(str(tmp_path / "liar.zarr"), with_stray(3, np.int32), attrs=synth)
    with pytest.raises(ValueError, match=r"label value 3 at row 2,345 is not one of the 3 classes .*in rows [\d,]+\.\.[\d,]+\)$"):
        db.describe(liar, label="y", stats=("moments", "mi"), run=db.RunOptions(plan=None))


def test_negative_and_float_labels_are_refused_unless_declared(tmp_path) -> None:
    """Negative labels (often "unlabeled") need declared classes; float labels (NaN, 0.5) are refused by dtype."""
    store = labelled_store(str(tmp_path / "neg.zarr"), with_stray(-1))
    with pytest.raises(ValueError, match=r"^label value -1 at row 2,345 is negative \(1 such label in rows [\d,]+\.\.[\d,]+\)"):
        db.describe(store, label="y", stats=("moments", "mi"), run=db.RunOptions(plan=None))
    s = db.describe(store, label="y", stats=("moments", "mi"), classes=[-1, 0, 1, 2])
    assert s.classes.tolist() == [-1, 0, 1, 2]
    y = three_classes(np.float64)
    y[STRAY_ROW] = np.nan
    floats = labelled_store(str(tmp_path / "f.zarr"), y)
    with pytest.raises(TypeError, match="^label has dtype float64; mutual information needs integer class labels"):
        db.describe(floats, label="y", stats=("moments", "mi"))


def test_uint64_labels_beyond_int64_are_refused(tmp_path) -> None:
    store = labelled_store(str(tmp_path / "u64.zarr"), with_stray(2**64 - 1, np.uint64))
    with pytest.raises(ValueError, match=f"label value {2**64 - 1} does not fit in int64"):
        db.describe(store, label="y", stats=("moments", "mi"))


def test_cli_reports_bad_labels_in_one_line(tmp_path) -> None:
    store = labelled_store(str(tmp_path / "s.zarr"), with_stray(2**40))
    args = ["describe", store, "--label", "y", "--stats", "moments,mi", "--no-progress", "--cluster", "threads"]
    ok = CliRunner().invoke(main, args)
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(main, [*args, "--classes", "0,1,2"])
    assert bad.exit_code == 2
    line = next(ln for ln in bad.output.splitlines() if ln.startswith("error:"))
    assert f"label value {2**40} at row 2,345" in line and " in rows " in line
