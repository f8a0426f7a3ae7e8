"""The planner's memory model is honest: measured <= projected <= 2 x measured.

``tracemalloc`` sees NumPy's allocations, so the peak of one real chunk task
(the fused ``Bundle.chunk`` on a freshly read block) and of one real merge task
(``merge_all`` over ``split_every`` states the worker holds) is measured and
compared with :func:`projected_task_bytes` / :func:`merge_task_bytes`; the
chunk task reads its block from a real compressed Zarr store, as a worker does. Sizes are
chosen so that data, not interpreter objects, dominate (the model's fixed
``TASK_OVERHEAD_BYTES`` covers the rest). When a kernel changes, tune the tables
in ``daskbatch/planning/plan.py`` until this passes.

Both kernel paths are checked, both bounds on each. The compiled CPU kernels
take their chunk- and state-sized arrays (the complete-row mask, the centring
buffer, the histogram counts) from NumPy, so tracemalloc sees them as it sees
the array-API path's; inside numba only length-D vectors are allocated.

The model adds the read buffers to the kernels' arrays because sometimes zarr
still holds a block's read buffers while the kernels run; when it does not,
the measured peak is the larger of the two phases, which is why the lower
bound is 2x and not tighter.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import dask.config
import numpy as np
import pytest
import zarr

from daskbatch.planning.plan import merge_task_bytes, projected_task_bytes
from daskbatch.stats import Bundle, ClassMoments, CoMoments, Histogram, Moments, Sketch, merge_all

BINS, CLASSES, SPLIT_EVERY = 16, 4, 8
CLASS_VALUES = (0, 1, 7, 9)  # CLASSES values, not 0..K-1: the mapping's dearest (searchsorted) path


def _bundle(stats: tuple[str, ...], d: int) -> Bundle:
    make = {
        "moments": lambda: Moments(),
        "cov": lambda: CoMoments(),
        "hist": lambda: Histogram(BINS, (0.0,) * d, (1.0,) * d),
        # As describe counts it: labels mapped to the columns of their (non-contiguous) class values.
        "mi": lambda: Histogram(BINS, (0.0,) * d, (1.0,) * d, by_label=True, classes=CLASS_VALUES),
        "class_moments": lambda: ClassMoments(classes=CLASS_VALUES),
        "sketch": lambda: Sketch(),
    }
    return Bundle(tuple(make[s]() for s in stats))


def _data(dtype: str, rows: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = (rng.random((rows, d)) * 1.2 - 0.1) * (100 if np.dtype(dtype).kind == "i" else 1)
    return x.astype(dtype), np.asarray(CLASS_VALUES, dtype=np.int64)[np.arange(rows) % CLASSES]


def _peak(func) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _copy_state(state):
    return tuple(
        type(s)(**{f.name: np.copy(getattr(s, f.name)) for f in dataclasses.fields(s)})
        for s in state
    )


CHUNK_CASES = [
    (rows, d, stats)
    for rows, d in [(65_536, 1), (8192, 8), (4096, 64), (1024, 512)]
    for stats in [
        ("moments",), ("cov",), ("hist",), ("mi",), ("class_moments",), ("moments", "cov", "hist", "mi"),
        ("moments", "cov", "class_moments"),
    ]
] + [(rows, d, ("sketch",)) for rows, d in [(262_144, 1), (8192, 8), (4096, 64)]]  # its state is 221 kB a feature


@pytest.mark.parametrize("path", ["array-api", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
@pytest.mark.parametrize(("rows", "d", "stats"), CHUNK_CASES)
def test_chunk_task_model_is_honest(tmp_path, dtype, rows, d, stats, path):
    src, ysrc = _data(dtype, rows, d)
    store = zarr.create_array(str(tmp_path / "x.zarr"), shape=src.shape, chunks=src.shape, dtype=src.dtype)
    store[:] = src
    bundle = _bundle(stats, d)
    use_y = "mi" in stats or "class_moments" in stats
    if "class_moments" in stats:
        ysrc = np.zeros_like(ysrc)  # one class: the worst case of the per-class temporaries

    def task():
        x = store[:]  # the block read and decoded from a compressed store, inside the task
        bundle.chunk(x, ysrc.copy() if use_y else None)

    with dask.config.set({"daskbatch.kernels": path == "compiled"}):
        task()  # warm caches, imports and numba's compilation outside the measurement
        measured = _peak(task)
    projected = projected_task_bytes(
        rows, d, src.dtype.itemsize, stats, bins=BINS, n_classes=CLASSES, path=path
    )
    assert measured <= projected <= 2 * measured, (measured, projected)


@pytest.mark.parametrize("path", ["array-api", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rows", "d", "stats"), CHUNK_CASES)
def test_weighted_chunk_task_model_is_honest(tmp_path, dtype, rows, d, stats, path):
    """With sample weights read from their own store: the weight column, its copies and the rows of positive weight.

    Weights with zeros (a tenth of the rows) are the case the model is for: the
    block's rows of positive weight are copied. Without zeros there is no copy,
    and the model may then be more than twice the peak, never less than it.
    """
    src, ysrc = _data(dtype, rows, d)
    store = zarr.create_array(str(tmp_path / "x.zarr"), shape=src.shape, chunks=src.shape, dtype=src.dtype)
    store[:] = src
    w = np.random.default_rng(1).gamma(2.0, 1.5, rows)
    w[::10] = 0.0
    wstore = zarr.create_array(str(tmp_path / "w.zarr"), shape=w.shape, chunks=w.shape, dtype=w.dtype)
    bundle = _bundle(stats, d)
    use_y = "mi" in stats or "class_moments" in stats
    if "class_moments" in stats:
        ysrc = np.zeros_like(ysrc)  # one class: the worst case of the per-class temporaries

    def task():
        x, weights = store[:], wstore[:]  # both blocks read inside the task, as a worker reads them
        bundle.chunk(x, ysrc.copy() if use_y else None, weights=weights)

    projected = projected_task_bytes(
        rows, d, src.dtype.itemsize, stats, bins=BINS, n_classes=CLASSES, path=path, weighted=True
    )
    for weights in (w, np.where(w > 0, w, 1.0)):
        wstore[:] = weights
        with dask.config.set({"daskbatch.kernels": path == "compiled"}):
            task()
            measured = _peak(task)
        assert measured <= projected, (measured, projected)
        if (weights == 0).any():
            assert projected <= 2 * measured, (measured, projected)
    assert projected > projected_task_bytes(rows, d, src.dtype.itemsize, stats, bins=BINS, n_classes=CLASSES, path=path)


MERGE_CASES = [
    (512, ("cov",)),
    (512, ("mi",)),
    (512, ("moments", "cov", "hist", "mi")),
    (1500, ("moments",)),
    (1500, ("hist",)),
    (1500, ("moments", "cov", "hist", "mi")),
    (512, ("class_moments",)),
    (1500, ("moments", "class_moments")),
    (64, ("sketch",)),
]


@pytest.mark.parametrize(("d", "stats"), MERGE_CASES)
def test_merge_task_model_is_honest(d, stats):
    src, ysrc = _data("float32", 64 * SPLIT_EVERY, d)
    bundle = _bundle(stats, d)
    y = ysrc if "mi" in stats or "class_moments" in stats else None
    states = [
        bundle.chunk(src[i::SPLIT_EVERY], None if y is None else y[i::SPLIT_EVERY])
        for i in range(SPLIT_EVERY)
    ]

    def task():
        held = [_copy_state(s) for s in states]  # the inputs the worker holds for the task
        merge_all(bundle, held)

    measured = _peak(task)
    projected = merge_task_bytes(stats, d, SPLIT_EVERY, bins=BINS, n_classes=CLASSES)
    assert measured <= projected <= 2 * measured, (measured, projected)


def test_plan_describe_counts_the_weight_column():
    """plan_describe(weights=) plans smaller chunks for the same budget, and its explanation shows the terms."""
    import dask.array as da

    from daskbatch.engine.planner import plan_describe
    from daskbatch.planning.plan import Resources

    x, w = da.zeros((200_000, 4), chunks=(1000, 4)), np.ones(200_000)
    tight = Resources(memory_bytes=2 * (256 * 2**20 + 4 * 2**20))  # 4 MiB a task
    plain = plan_describe(x, stats=("moments",), range=(0.0, 1.0), resources=tight)
    weighted = plan_describe(x, stats=("moments",), range=(0.0, 1.0), resources=tight, weights=w)
    assert weighted.weighted and not plain.weighted
    assert weighted.chunk_rows < plain.chunk_rows
    assert weighted.chunk_task_bytes == projected_task_bytes(weighted.chunk_rows, 4, 8, ("moments",), weighted=True)
    assert weighted.chunk_task_bytes <= weighted.budget_bytes
    assert " weights + " in weighted.explain() and " weights + " not in plain.explain()
