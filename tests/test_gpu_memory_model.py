"""The planner's device-memory model of the GPU kernels (path "gpu-compiled").

On any machine: the model's constants are the kernels' own, its bound on the
launch's partials holds and is tight where it should be, the projection grows
with rows and features (the planner's searches rely on it) and has the
expected terms; a GPU plan picks the path. On a CUDA machine: one real chunk
task (the block and labels moved to the device, the fused ``Bundle.chunk``)
peaks, by CuPy's own pool counted after every allocation, at no more than the
projection and at no less than half of it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daskbatch.planning import plan as memory
from daskbatch.planning.plan import (
    Resources,
    chunk_task_terms,
    footprint,
    projected_task_bytes,
    state_bytes,
)
from daskbatch.planning.search import plan_chunks
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments
from daskbatch.stats.kernels import _gpu

DEFAULT = ("moments", "cov", "hist", "mi")
BINS, CLASS_VALUES = 16, (0, 1, 7, 9)
GiB = 2**30


@given(rows=st.integers(1, 10**8), d=st.integers(1, 10**6))
def test_partials_bound_holds_and_is_tight_for_small_chunks(rows: int, d: int) -> None:
    _, groups = _gpu.row_groups(rows, d)
    bound = _gpu.group_features_bound(rows, d)
    assert groups * d <= bound
    if rows <= _gpu.MIN_GROUP_ROWS * min(max(1, _gpu.TARGET_THREADS // d), _gpu.MAX_GRID_Y):
        assert bound == groups * d  # the launch gives every group 32 rows: no slack


@given(
    rows=st.integers(1, 10**7),
    d=st.integers(1, 6000),
    itemsize=st.sampled_from([1, 2, 4, 8]),
    stats=st.sampled_from([("moments",), ("cov",), ("mi",), DEFAULT, ("moments", "sketch"), ("class_moments",)]),
)
def test_projection_grows_with_rows_and_features(rows: int, d: int, itemsize: int, stats: tuple[str, ...]) -> None:
    def f(r: int, c: int) -> int:
        return projected_task_bytes(r, c, itemsize, stats, n_classes=3, path="gpu-compiled")

    assert rows * d * itemsize < f(rows, d) < f(rows + 1, d)
    assert f(rows, d) < f(rows, d + 1)


def test_projection_has_the_expected_terms() -> None:
    rows, d = 100_000, 64
    terms = chunk_task_terms(rows, d, 4, DEFAULT, bins=BINS, n_classes=4, path="gpu-compiled")
    groups = math.ceil(rows / 32)  # 32 rows a group: 3,125 groups
    moments = 7 * 8 * groups * d  # 4 float64 + 3 int64 partials per group and feature
    cov = 8 * groups * d + 8 * groups + rows * d * 8 + rows  # partials, row counts, centring buffer, row flags
    assert gpu_kernel_bytes("moments", rows, d) == moments
    assert gpu_kernel_bytes("cov", rows, d) == cov - rows
    assert gpu_kernel_bytes("hist", rows, d) == gpu_kernel_bytes("mi", rows, d) == 0
    assert terms == {
        "raw": rows * d * 4,
        "read buffers": 0,  # decoded on the host
        "float64 copy": 0,  # the kernels read float32
        "labels": rows * 8,
        "temporaries": max(moments, cov, 40 * rows),
        "states": sum(state_bytes(s, d, bins=BINS, n_classes=4) for s in DEFAULT),
        "overhead": memory.TASK_OVERHEAD_BYTES,
    }
    wide = chunk_task_terms(30_000, 5_000, 4, ("cov",), path="gpu-compiled", device_bytes=16 * 10**9)
    partials = 8 * 2**19 + 8 * 938
    # A 16 GB card's share holds 25,000 of the 30,000 rows; an 80 GB card's the whole chunk (one SYRK).
    assert gpu_kernel_bytes("cov", 30_000, 5_000, 16 * 10**9) - partials == 25_000 * 5_000 * 8
    assert gpu_kernel_bytes("cov", 30_000, 5_000, 80 * GiB) - partials == 30_000 * 5_000 * 8
    assert gpu_kernel_bytes("cov", 30_000, 5_000) - partials == 30_000 * 5_000 * 8  # card unknown: the most
    assert wide["temporaries"] == gpu_kernel_bytes("cov", 30_000, 5_000, 16 * 10**9) + 30_000
    assert wide["float64 copy"] == 0
    sketch = chunk_task_terms(rows, d, 4, ("moments", "sketch"), path="gpu-compiled")
    # No GPU sketch kernel: CuPy runs the array-API code, keying the chunk a block of values at a time,
    # so its float64 copy is a block's and is counted with that block's temporaries.
    assert sketch["float64 copy"] == 0
    assert sketch["temporaries"] >= rows * d * 8


def test_gpu_plan_uses_the_gpu_model() -> None:
    r = Resources(64 * GiB, 1, 1, device_memory_bytes=80 * GiB, device="gpu")
    p = plan_chunks((1_000_000, 5_000), 4, (25_000, 5_000), r, n_classes=4)
    assert p.kernel_path == "gpu-compiled"
    assert p.chunk_task_bytes == projected_task_bytes(p.chunk_rows, 5_000, 4, p.stats, n_classes=4, path="gpu-compiled")
    assert "compiled GPU (numba-cuda)" in p.explain()
    ref = plan_chunks((1_000_000, 5_000), 4, (25_000, 5_000), r, n_classes=4, compiled_kernels=False)
    assert ref.kernel_path == "array-api" and ref.chunk_task_bytes > p.chunk_task_bytes


def test_the_seed_batch_fits_a_16_gb_gpu() -> None:
    """100,000 x 5,000 float32 in one 100,000-row chunk on a 16 GB card (issue 18, 6): the original program budgets 3.8 GB."""
    from daskbatch.planning.search import plan_dropping_sketch

    r = Resources(64 * GiB, 1, 1, device_memory_bytes=16 * 10**9, device="gpu")

    def make(stats: tuple[str, ...]):  # noqa: ANN202
        return plan_chunks((100_000, 5_000), 4, (100_000, 5_000), r, stats=stats, n_classes=2)

    p = make(DEFAULT)
    assert (p.kernel_path, p.chunk_rows) == ("gpu-compiled", 100_000)
    assert 100_000 * 5_000 * 4 < p.chunk_task_bytes <= 3.8e9
    assert p.task_bytes <= p.budget_bytes
    assert f"{p.chunk_task_bytes / GiB:.2f} GiB" in p.explain()  # the projected peak is printed
    # A sketch fits too (CuPy keys 2**24 values at a time), so describe keeps robust ranges on this card.
    # Since the sketch also keeps each feature's distinct values (16 kB a feature), every bucket is
    # 160 MB past this card's budget for the one 100,000-row chunk: the widest window that fits is kept.
    chosen, planned = plan_dropping_sketch(make, (*DEFAULT, "sketch"), optional=True)
    assert planned[: len(DEFAULT)] == DEFAULT and len(planned) == len(DEFAULT) + 1
    assert getattr(planned[-1], "name", planned[-1]) == "sketch" and chosen.task_bytes <= chosen.budget_bytes


def test_plan_describe_admits_the_seed_batch_on_a_16_gb_gpu() -> None:
    """plan_describe (what ``daskbatch plan --device gpu --memory 16GB`` runs), also where no GPU is visible."""
    import dask.array as da

    from daskbatch.engine.planner import plan_describe
    from daskbatch.runtime.capacity import cuda_device_count
    from daskbatch.stats import kernels

    if cuda_device_count() > 0 and not kernels.gpu_available():
        pytest.skip("a GPU without daskbatch's kernels: the array-API path is planned, rightly")
    x = da.zeros((100_000, 5_000), dtype="float32", chunks=(25_000, 5_000))
    y = da.zeros(100_000, dtype="int32", chunks=25_000)
    r = Resources(64 * GiB, 1, 1, device_memory_bytes=16 * 10**9, device="gpu")
    # the seed's statistics with its ranges given (the default describe adds class_moments with a label)
    p = plan_describe(x, y, stats=DEFAULT, resources=r, classes=(0, 1), range=(0.0, 1.0))
    assert p.kernel_path == "gpu-compiled" and "compiled GPU (numba-cuda)" in p.explain()
    assert p.stats == DEFAULT
    found = plan_describe(x, y, stats=DEFAULT, resources=r, classes=(0, 1))  # ranges found: the sketch fits too
    assert found.stats == (*DEFAULT, "sketch") and found.task_bytes <= found.budget_bytes
    assert p.task_bytes <= p.budget_bytes and p.chunk_task_bytes <= 3.8e9
    assert "largest task:" in p.explain()


# --- on a CUDA device ----------------------------------------------------------------------------


def _bundle(stats: tuple[str, ...], d: int) -> Bundle:
    make = {
        "moments": Moments, "cov": CoMoments,
        "hist": lambda: Histogram(BINS, (0.0,) * d, (1.0,) * d),
        "mi": lambda: Histogram(BINS, (0.0,) * d, (1.0,) * d, by_label=True, classes=CLASS_VALUES),
    }
    return Bundle(tuple(make[s]() for s in stats))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("rows", "d", "stats"),
    [(100_000, 64, DEFAULT), (20_000, 500, DEFAULT), (200_000, 8, ("moments", "cov")), (4_096, 2_000, ("moments", "cov")),
     (50_000, 100, ("moments",)), (50_000, 100, ("mi",))],
)
def test_gpu_chunk_task_model_is_honest(rows: int, d: int, stats: tuple[str, ...]) -> None:
    peak, projected = _measured_and_projected(rows, d, stats)
    assert peak <= projected <= 2 * peak, (peak, projected)


@pytest.mark.gpu
def test_gpu_model_of_the_seed_batch_is_within_half_of_measured() -> None:
    """The 100,000 x 5,000 float32 batch the planner admits on a 16 GB card: measured <= projected <= 1.5x measured."""
    peak, projected = _measured_and_projected(100_000, 5_000, DEFAULT)
    assert peak <= projected <= 1.5 * peak, (peak, projected)


def _measured_and_projected(rows: int, d: int, stats: tuple[str, ...]) -> tuple[int, int]:
    """Peak device bytes of one fused chunk task, by CuPy's pool after every allocation, and the model's projection."""
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats import kernels

    rng = np.random.default_rng(0)
    x = (rng.random((rows, d)) * 1.2 - 0.1).astype(np.float32)
    y = np.asarray(CLASS_VALUES, dtype=np.int64)[np.arange(rows) % len(CLASS_VALUES)]
    bundle = _bundle(stats, d)
    use_y = "mi" in stats
    assert kernels.kernel_path(cupy.asarray(x[:2])).kind == "numba-cuda"
    bundle.chunk(cupy.asarray(x[:1000]), cupy.asarray(y[:1000]) if use_y else None)  # compile outside
    cupy.cuda.Device().synchronize()

    pool = cupy.cuda.MemoryPool()
    peak = 0

    def malloc(size: int):  # noqa: ANN202
        nonlocal peak
        mem = pool.malloc(size)
        peak = max(peak, pool.used_bytes())  # a peak is reached right after an allocation
        return mem

    cupy.cuda.set_allocator(malloc)
    try:
        xd = cupy.asarray(x)  # the block (and labels) the chunk task gets on the device
        yd = cupy.asarray(y) if use_y else None
        state = bundle.chunk(xd, yd)
        cupy.cuda.Device().synchronize()
        del state, xd, yd
    finally:
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
        pool.free_all_blocks()
    card = int(cupy.cuda.Device().mem_info[1])  # the centring buffer is sized from it, in the kernel and the model
    projected = projected_task_bytes(rows, d, 4, stats, bins=BINS, n_classes=len(CLASS_VALUES), path="gpu-compiled",
                                     device_bytes=card)
    return peak, projected


def gpu_kernel_bytes(stat: str, rows: int, n_features: int, device_bytes: int | None = None) -> int:
    """The device buffers a statistic's GPU kernel declares (``Footprint.device_buffers``), 0 without any."""
    buffers = footprint(stat).device_buffers
    return 0 if buffers is None else int(buffers(rows, n_features, device_bytes))
