"""Class labels are values, not column numbers: {0, 1, 7} is three classes, and the summary says which."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import mutual_info_score

import daskbatch as db
from daskbatch.cli import main
from daskbatch.stats import Histogram

ROWS, FEATURES, CHUNK_ROWS, BINS = 3_000, 3, 700, 12
VALUES = (0, 1, 7)


def make_data(values: tuple[int, ...] = VALUES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features of which the first depends on the class; labels drawn from ``values``."""
    rng = np.random.default_rng(seed)
    y = rng.choice(np.asarray(values, dtype=np.int64), size=ROWS)
    x = rng.normal(size=(ROWS, FEATURES))
    x[:, 0] += np.searchsorted(values, y)  # informative
    return x, y


def write_store(path: str, x: np.ndarray, y: np.ndarray) -> str:
    """A Zarr v3 group with X (chunked by rows) and the label y."""
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("X", data=x.astype(np.float32), chunks=(CHUNK_ROWS, x.shape[1]))
    root.create_array("y", data=y, chunks=(CHUNK_ROWS,))
    return path


def sklearn_mi(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """sklearn's mutual_info_score of each feature's in-range values binned on ``edges`` (as numpy.histogram bins)."""
    out = []
    for d in range(x.shape[1]):
        e = edges[d]
        col = x[:, d]
        inside = (col >= e[0]) & (col <= e[-1])  # MI scores the in-range bins; the rest is reported apart
        slot = np.clip(np.searchsorted(e, col[inside], side="right") - 1, 0, len(e) - 2)
        out.append(mutual_info_score(slot, y[inside]))
    return np.asarray(out)


@pytest.mark.parametrize("range_", [None, (-4.0, 12.0)], ids=["two-pass", "one-pass"])
def test_noncontiguous_labels_are_three_classes_with_their_values(tmp_path, range_) -> None:
    x, y = make_data()
    store = write_store(str(tmp_path / "s.zarr"), x, y)
    s = db.describe(store, label="y", bins=BINS, range=range_)
    assert s.joint_counts.shape == (FEATURES, BINS + 2, 3)
    np.testing.assert_array_equal(s.classes, VALUES)
    ds = s.to_xarray()
    np.testing.assert_array_equal(ds["class"].values, VALUES)
    assert ds["joint_counts"].dims == ("feature", "slot", "class")
    # Each class column holds the rows of that label value.
    for k, v in enumerate(VALUES):
        assert int(s.arrays.joint_counts[0, :, k].sum()) == int((y == v).sum())
    # Counted in float32 (the store's dtype) as describe reads it.
    want = sklearn_mi(x.astype(np.float32).astype(np.float64), y, s.arrays.hist_edges)
    np.testing.assert_allclose(s.mi, want, rtol=1e-12, atol=1e-15)
    assert s.arrays.mi[0] > 0.1  # the informative feature
    assert s.provenance["classes_from"] == "label scan" and s.provenance["n_classes"] == 3


def test_class_coordinate_survives_save_load_and_json(tmp_path) -> None:
    x, y = make_data()
    s = db.describe(x, y, bins=BINS, stats=("moments", "mi"))
    back = db.load_summary(s.save(tmp_path / "summary.zarr"))
    np.testing.assert_array_equal(back.classes, VALUES)
    np.testing.assert_array_equal(back.to_xarray()["class"].values, VALUES)
    assert json.loads(json.dumps(s.to_json()))["classes"] == list(VALUES)


def test_declared_classes_keep_an_absent_class_as_a_zero_column() -> None:
    x, y = make_data()
    s = db.describe(x, y, bins=BINS, range=(-4.0, 12.0), classes=[7, 3, 1, 0])
    np.testing.assert_array_equal(s.classes, [0, 1, 3, 7])
    assert s.joint_counts.shape[2] == 4 and not s.arrays.joint_counts[:, :, 2].any()
    np.testing.assert_allclose(s.mi, sklearn_mi(x, y, s.arrays.hist_edges), rtol=1e-12, atol=1e-15)
    assert s.provenance["classes_from"] == "given"


def test_contiguous_labels_keep_their_numbers_as_coordinate() -> None:
    x, y = make_data(values=(0, 1, 2, 3))
    s = db.describe(x, y, bins=BINS)
    np.testing.assert_array_equal(s.classes, [0, 1, 2, 3])
    np.testing.assert_allclose(s.mi, sklearn_mi(x, y, s.arrays.hist_edges), rtol=1e-12, atol=1e-15)


def test_accumulator_maps_declared_classes() -> None:
    x, y = make_data()
    acc = db.Accumulator(stats=("moments", "mi"), bins=BINS, range=(-4.0, 12.0), classes=VALUES)
    for part in np.array_split(np.arange(ROWS), 4):
        acc.update(x[part], y[part])
    s = acc.summary()
    np.testing.assert_array_equal(s.classes, VALUES)
    whole = db.describe(x, y, bins=BINS, range=(-4.0, 12.0), stats=("moments", "mi"))
    np.testing.assert_array_equal(s.joint_counts, whole.joint_counts)


def test_cli_classes_option(tmp_path) -> None:
    x, y = make_data()
    store = write_store(str(tmp_path / "s.zarr"), x, y)
    js = tmp_path / "s.json"
    args = ["describe", store, "--label", "y", "--stats", "moments,mi", "--bins", str(BINS),
            "--no-progress", "--cluster", "threads", "--json", str(js)]
    r = CliRunner().invoke(main, [*args, "--classes", "0,1,7,9"])
    assert r.exit_code == 0, r.output
    assert "mutual information with the label (nats; 4 classes [0, 1, 7, 9])" in r.output
    assert json.loads(js.read_text())["classes"] == [0, 1, 7, 9]
    r = CliRunner().invoke(main, [*args, "--classes", "0,1"])
    assert r.exit_code == 2
    assert "label value 7" in r.output and "not one of the 2 classes [0, 1]" in r.output
    r = CliRunner().invoke(main, [*args, "--classes", "a,b"])
    assert r.exit_code == 2 and "comma-separated integers" in r.output


# --------------------------------------------------------------- the statistics


@given(
    codes=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    cut=st.integers(0, 60),
)
def test_histogram_by_value_equals_dense_histogram_of_codes(codes: list[int], cut: int) -> None:
    values = (-5, 2, 2**40, 2**62)
    y = np.asarray(values, dtype=np.int64)[codes]
    x = np.linspace(-1.0, 1.0, len(codes) * 2).reshape(-1, 2)
    by_value = Histogram(bins=5, lo=(-1.0, -1.0), hi=(1.0, 1.0), by_label=True, classes=values)
    dense = Histogram(bins=5, lo=(-1.0, -1.0), hi=(1.0, 1.0), by_label=True)
    cut = min(cut, len(codes))
    merged = by_value.merge(by_value.chunk(x[:cut], y[:cut]), by_value.chunk(x[cut:], y[cut:]))
    # The dense table of the codes 0..3, padded to all four columns by merging with an empty one.
    want = dense.merge(dense.empty(np, n_classes=4), dense.chunk(x, np.asarray(codes, dtype=np.int64))).counts
    np.testing.assert_array_equal(merged.counts, want)
    np.testing.assert_array_equal(by_value.finalize(merged).classes, values)


def test_label_codes_on_every_backend(xp) -> None:
    from daskbatch.stats.classes import label_codes

    y = xp.asarray([7, 0, 1, 7, 1], dtype=xp.int32)
    np.testing.assert_array_equal(np.asarray(label_codes(xp, y, (0, 1, 7))), [2, 0, 1, 2, 1])
    np.testing.assert_array_equal(np.asarray(label_codes(xp, y, (0, 1, 2, 3, 4, 5, 6, 7))), [7, 0, 1, 7, 1])
    with pytest.raises(ValueError, match=r"label value 7 at row 0 of its block is not one of the 2 classes \[0, 1\]"):
        label_codes(xp, y, (0, 1))


def test_class_values_merge_by_union_and_cap(xp) -> None:
    from daskbatch.stats.classes import ClassValues

    stat = ClassValues(max_classes=4)
    a = stat.chunk(xp.asarray([[7], [0], [7]], dtype=xp.int64))
    b = stat.chunk(xp.zeros((2, 1), dtype=xp.int64), xp.asarray([2**40, 0], dtype=xp.int64))  # fused: reads y
    empty = stat.chunk(xp.zeros((0, 1), dtype=xp.int64))
    np.testing.assert_array_equal(np.asarray(stat.finalize(stat.merge(a, b))), [0, 7, 2**40])
    np.testing.assert_array_equal(np.asarray(stat.finalize(stat.merge(empty, a))), [0, 7])
    np.testing.assert_array_equal(np.asarray(stat.finalize(stat.merge(b, empty))), [0, 2**40])
    c = stat.chunk(xp.asarray([[1], [2], [3]], dtype=xp.int64))
    with pytest.raises(ValueError, match=r"at least 5 distinct values, more than daskbatch.max-classes \(4\)"):
        stat.merge(a, c)
    with pytest.raises(ValueError, match="at least 5 distinct values"):
        stat.chunk(xp.asarray([[1], [2], [3], [4], [5]], dtype=xp.int64))


def test_validate_classes_one_line_errors() -> None:
    from daskbatch.stats.classes import validate_classes

    assert validate_classes([7, 0, 1]) == (0, 1, 7)
    assert validate_classes(np.array([3, 1], dtype=np.uint8)) == (1, 3)
    for bad, msg in [([0, 1.5], "classes must be integers; got 1.5"), ([], "classes is empty"),
                     ([1, 1], "lists the value 1 more than once"), (list(range(5)), "5 values, more than")]:
        with pytest.raises(ValueError, match=msg):
            validate_classes(bad, max_classes=4)


def test_declared_classes_over_the_limit_are_refused_before_reading() -> None:
    x, y = make_data()
    with dask.config.set({"daskbatch.max-classes": 2}), pytest.raises(ValueError, match="more than daskbatch.max-classes"):
        db.describe(x, y, classes=VALUES)


def test_histogram_by_value_on_every_backend(xp) -> None:
    x, y = make_data()
    hist = Histogram(bins=BINS, lo=(-4.0,) * FEATURES, hi=(12.0,) * FEATURES, by_label=True, classes=VALUES)
    with dask.config.set({"daskbatch.kernels": False}):  # the array-API path, as on a GPU
        got = hist.chunk(xp.asarray(x), xp.asarray(y))
    want = hist.chunk(x, y)  # numpy (compiled kernels)
    np.testing.assert_array_equal(np.asarray(got.counts), want.counts)


@pytest.mark.gpu
def test_gpu_describe_maps_class_values() -> None:
    x, y = make_data()
    cpu = db.describe(x, y, bins=BINS, stats=("moments", "mi"))
    gpu = db.describe(x, y, bins=BINS, stats=("moments", "mi"), run=db.RunOptions(device="gpu"))
    np.testing.assert_array_equal(gpu.classes, VALUES)
    np.testing.assert_array_equal(gpu.joint_counts, cpu.joint_counts)
    np.testing.assert_allclose(gpu.mi, cpu.mi, rtol=1e-12)


# --- the GPU's label check moves to where the labels are read ---------------------------------


@dataclass(frozen=True)
class _SeenState(db.State):
    checked: np.ndarray  # 1 per chunk task that ran inside labels_checked, else 0
    tasks: np.ndarray


@dataclass(frozen=True)
class _SeesTheCheck:
    """Counts the chunk tasks that run inside ``labels_checked`` (a user statistic that reads the label)."""

    name = "sees_check"
    needs_label = True

    def chunk(self, x, label=None):  # noqa: ANN001, ANN201
        from daskbatch.stats import classes

        return _SeenState(np.asarray([int(classes._CHECKED.get())]), np.asarray([1]))

    def merge(self, a, b):  # noqa: ANN001, ANN201
        return _SeenState(a.checked + b.checked, a.tasks + b.tasks)

    def finalize(self, s):  # noqa: ANN001, ANN201
        return np.concatenate([s.checked, s.tasks])


@pytest.mark.parametrize("classes", [VALUES, None])  # declared (checked on the host) / found by a label scan
def test_describe_runs_its_chunk_tasks_with_the_labels_checked(classes: tuple[int, ...] | None, tmp_path) -> None:  # noqa: ANN001
    """Labels describe checked on the host (or whose classes it found in them) are not checked again per chunk.

    Per chunk, the check is a host synchronisation on the GPU; the chunk
    tasks run inside ``labels_checked`` instead, and the mutual information
    stays that of scikit-learn.
    """
    x, y = make_data()
    dx, dy = da.from_array(x, chunks=(CHUNK_ROWS, -1)), da.from_array(y, chunks=CHUNK_ROWS)
    with dask.config.set(scheduler="threads"):
        s = db.describe(dx, dy, stats=["mi", _SeesTheCheck()], classes=classes, range=(-5.0, 7.0), bins=BINS,
                        run=db.RunOptions(plan=None))
    blocks = -(-ROWS // CHUNK_ROWS)
    np.testing.assert_array_equal(s.extra["sees_check"], [blocks, blocks])
    edges = np.linspace(-5.0, 7.0, BINS + 1)
    expected = mutual_info_score(np.digitize(x[:, 0], edges[1:-1]), y)
    np.testing.assert_allclose(s.arrays.mi[0], expected, rtol=1e-10)
    if classes is not None:  # a checkpointed pass builds its own graph: it passes the trust on too
        with dask.config.set(scheduler="threads"):
            saved = db.describe(dx, dy, stats=["mi", _SeesTheCheck()], classes=classes, range=(-5.0, 7.0), bins=BINS, run=db.RunOptions(plan=None, checkpoint=str(tmp_path / "ckpt")))
        np.testing.assert_array_equal(saved.extra["sees_check"], [blocks, blocks])
    with dask.config.set(scheduler="threads"):  # no class values to check the label against: no trust
        alone = db.describe(dx, dy, stats=[_SeesTheCheck()], run=db.RunOptions(plan=None))
    np.testing.assert_array_equal(alone.extra["sees_check"], [0, blocks])


def test_host_labels_are_checked_even_inside_labels_checked() -> None:
    """Only CuPy labels are trusted: on the host the check is a scan, no synchronisation, and it stays."""
    from daskbatch.stats.classes import UnknownClassError, label_codes, labels_checked

    labels = np.asarray([0, 7, 3, 1])
    with labels_checked(), pytest.raises(UnknownClassError, match="label value 3 at row 2"):
        label_codes(np, labels, VALUES)
    with labels_checked(), pytest.raises(UnknownClassError, match="label value 2 at row 0"):
        label_codes(np, np.asarray([2, 0]), (0, 1))  # contiguous classes: the offset path
    np.testing.assert_array_equal(label_codes(np, np.asarray([7, 0, 1]), VALUES), [2, 0, 1])


class _CountingStore(zarr.storage.LocalStore):
    """A local store that counts the reads of each chunk file."""

    def __init__(self, root: str) -> None:
        super().__init__(root, read_only=True)
        self.gets: dict[str, int] = {}

    async def get(self, key, prototype, byte_range=None):  # noqa: ANN001, ANN201 - zarr's signature
        if "/c/" in key:
            self.gets[key] = self.gets.get(key, 0) + 1
        return await super().get(key, prototype, byte_range)


def test_the_first_pass_finds_the_classes_that_only_the_second_pass_needs(tmp_path) -> None:  # noqa: ANN001
    """mi's classes ride in the first pass: two computes, each label chunk read once, the summary the declared one's."""
    from dask.callbacks import Callback

    x, y = make_data()
    counting = _CountingStore(write_store(str(tmp_path / "s.zarr"), x, y))
    root = zarr.open_group(counting, mode="r")

    def described(**options: object) -> tuple[db.Summary, int]:
        """The summary of the store path and the number of dask computes it ran."""
        computes = [0]
        counting.gets.clear()
        with Callback(start=lambda dsk: computes.__setitem__(0, computes[0] + 1)):
            s = db.describe(db.open_dataset(root, label="y"), bins=BINS, **options)
        return s, computes[0]

    found, computes = described(stats=("moments", "hist", "mi"))
    assert computes == 2 and found.provenance["passes"] == 2 and found.provenance["cached"]
    label_chunks = {k: n for k, n in counting.gets.items() if k.startswith("y/")}
    assert label_chunks == {f"y/c/{i}": 1 for i in range(-(-ROWS // CHUNK_ROWS))}, label_chunks
    assert found.provenance["classes_from"] == "label scan" and found.provenance["plan"]["n_classes"] == 3
    np.testing.assert_array_equal(found.classes, VALUES)
    given, computes = described(stats=("moments", "hist", "mi"), classes=VALUES)
    assert computes == 2
    for name, value in given.to_xarray().data_vars.items():  # bitwise the run whose classes were declared
        np.testing.assert_array_equal(found.to_xarray()[name].values, value.values, err_msg=name)
    # The class moments count by class in the first pass: their classes are found before it, in a compute of its own.
    _, computes = described()
    assert computes == 3


@pytest.mark.parametrize("bad", ["negative", "too many"])
def test_classes_found_in_the_first_pass_refuse_what_the_scan_refused(bad: str, tmp_path) -> None:  # noqa: ANN001
    x, y = make_data()
    if bad == "negative":
        y[2_100] = -1
    store = write_store(str(tmp_path / "s.zarr"), x, y)
    want = "label value -1 at row 2,100 is negative" if bad == "negative" else "more than daskbatch.max-classes"
    with dask.config.set({"daskbatch.max-classes": 2 if bad == "too many" else 1000}), pytest.raises(ValueError, match=want):
        db.describe(store, label="y", stats=("moments", "hist", "mi"))


def test_the_plan_line_says_the_classes_found_in_the_first_pass_are_up_to_the_most(tmp_path, caplog) -> None:  # noqa: ANN001
    """Planned before the classes are known, the logged plan names the most it was planned for, not a count."""
    x, y = make_data()
    store = write_store(str(tmp_path / "s.zarr"), x, y)
    with caplog.at_level(logging.INFO, logger="daskbatch"):
        db.describe(store, label="y", stats=("moments", "hist", "mi"))
        db.describe(store, label="y", stats=("moments", "hist", "mi"), classes=VALUES)
    titles = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Plan for")]
    most = dask.config.get("daskbatch.max-classes")
    assert titles[0].endswith(f" bins, up to {most} classes)") and titles[1].endswith(f" bins, {len(VALUES)} classes)")
