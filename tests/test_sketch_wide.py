"""Wide data keep the quantile sketch: int32 counts, narrower windows chosen by the planner, bounded GPU blocks.

At 5,000 features the sketch of every bucket (221 kB a feature) does not fit a
2 GiB worker with 2 threads; the planner takes the widest of ``WINDOWS`` that
does (1,024 buckets per sign of twice the default width in int32, 8 kB a
feature, quantiles within 1 %, 10**8.9 per sign before a collapse), so
``describe`` keeps robust ranges and quantiles instead of falling back to min and max.
"""

from __future__ import annotations

import dataclasses
import math

import dask
import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.engine.planner import plan_describe
from daskbatch.errors import PlanError
from daskbatch.planning.search import plan_chunks, sketch_in_plan
from daskbatch.stats import Sketch
from daskbatch.stats import sketch as sketch_module
from daskbatch.stats.sketch import SketchState
from daskbatch.stats.sketch_windows import (
    PAIRED_ALPHA,
    WINDOWED_FOOTPRINTS,
    WINDOWS,
    state_bytes_per_feature,
)
from daskbatch.testing import assert_states_equal

GiB = 2**30
WIDE = 5_000


def _signed_lognormal(rows: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 3.0, (rows, d)) * rng.choice([-1.0, 1.0], (rows, d))
    x[::17, 0], x[-1, 1], x[rows // 2, 2 % d] = 0.0, np.nan, np.inf
    return x


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("window", [None, 64])
def test_int32_counts_equal_int64_counts(kernels: bool, window: int | None) -> None:
    x = _signed_lognormal(600, 5)
    wide, small = Sketch(window=window), Sketch(window=window, count_dtype="int32")
    with dask.config.set({"daskbatch.kernels": kernels}):
        ref = wide.chunk(x)
        got = small.merge(small.chunk(x[:250]), small.chunk(x[250:]))
    assert got.counts.dtype == np.int32 and small.empty(np, 5).counts.dtype == np.int32
    np.testing.assert_array_equal(got.counts, ref.counts)
    np.testing.assert_array_equal(got.offset, ref.offset)
    np.testing.assert_array_equal(small.finalize(got).quantile([0.1, 0.5, 0.9]), wide.finalize(ref).quantile([0.1, 0.5, 0.9]))


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("window", [None, 8])
def test_a_merge_that_could_overflow_int32_promotes_to_int64(kernels: bool, window: int | None) -> None:
    """Two states of 1.6e9 rows each: their int32 counts would wrap; the merge gives int64, exactly."""
    x = _signed_lognormal(3, 4, seed=1)
    sk, ref_sk = Sketch(window=window, count_dtype="int32"), Sketch(window=window)
    scale = 2**29  # 3 rows x 2**29 = 1.6e9 <= 2**31 - 1 in each state, 3.2e9 in their merge

    def scaled(s: SketchState, dtype: type) -> SketchState:
        return dataclasses.replace(s, counts=(s.counts.astype(np.int64) * scale).astype(dtype))

    with dask.config.set({"daskbatch.kernels": kernels}):
        a, b = sk.chunk(x), sk.chunk(x[::-1])
        merged = sk.merge(scaled(a, np.int32), scaled(b, np.int32))
        ref = ref_sk.merge(scaled(a, np.int64), scaled(b, np.int64))
        small = sk.merge(a, b)
    assert merged.counts.dtype == np.int64 and small.counts.dtype == np.int32
    assert int(merged.counts[0].sum()) == 6 * scale > 2**31
    np.testing.assert_array_equal(merged.counts, ref.counts)
    np.testing.assert_array_equal(merged.offset, ref.offset)


@pytest.mark.parametrize("window", [None, 8])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_array_api_chunk_keys_blocks_of_rows_with_the_same_state(monkeypatch, window: int | None,
                                                                    weighted: bool) -> None:
    """The array-API path (CuPy chunks) keys BLOCK_VALUES values at a time: the same state as in one go."""
    x = _signed_lognormal(500, 6, seed=2)
    w = np.random.default_rng(3).integers(0, 3, 500).astype(np.float64) if weighted else None
    sk = Sketch(window=window, count_dtype="int32")
    with dask.config.set({"daskbatch.kernels": False}):
        whole = sk.chunk(x, weights=w)
        monkeypatch.setattr(sketch_module, "BLOCK_VALUES", 6 * 37)  # 37 rows a block, the last one short
        blocks = sk.chunk(x, weights=w)
    assert_states_equal(blocks, whole)
    assert blocks.counts.dtype == (np.float64 if weighted else np.int32)


def test_count_dtype_is_checked() -> None:
    with pytest.raises(ValueError, match="count_dtype must be 'int64' or 'int32'"):
        Sketch(count_dtype="int16")


# ------------------------------------------------------------------ the planner at 5,000 features
def test_the_windows_get_narrower_and_their_sizes_are_the_states() -> None:
    # Buckets merged in pairs: gamma squared, so a window of 1,024 spans what 2,048 default buckets span.
    assert math.isclose(Sketch(alpha=PAIRED_ALPHA).ln_gamma, 2 * Sketch().ln_gamma, rel_tol=1e-12)
    assert [w * Sketch(alpha=a).ln_gamma / math.log(10) > 8.8 for w, _, a in WINDOWS] == [True, True, True, False]
    sizes = [state_bytes_per_feature(w, c) for w, c, _ in WINDOWS]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < 5_000  # 33 kB down to 4 kB a feature
    for (w, c, _), f in zip(WINDOWS, WINDOWED_FOOTPRINTS, strict=True):
        state = Sketch(window=w, count_dtype=c).empty(np, 3)
        held = state.nbytes  # every field: counts, offsets, extrema and the distinct values
        assert f.state(3, 64, None, None) == held == 3 * state_bytes_per_feature(w, c)


@pytest.mark.parametrize("label", [False, True])
def test_5000_features_keep_the_sketch_on_a_2_gib_worker_with_2_threads(label: bool) -> None:
    """The headline width on a 2 GiB, 2-thread CPU worker: a 1,024-bucket int32 window fits, wider ones do not."""
    x = da.zeros((1_000_000, WIDE), chunks=(2_000, WIDE), dtype="float32")
    y = da.zeros(1_000_000, chunks=2_000, dtype="int64") if label else None
    worker = db.Resources(2 * GiB, threads_per_worker=2)
    p = plan_describe(x, y, resources=worker, classes=(0, 1) if label else None)
    print(p.explain())  # the projected peak of every task, for the log
    names, window = sketch_in_plan(p.stats)
    assert "sketch" in names and window == (1024, "int32", PAIRED_ALPHA)
    assert p.task_bytes <= p.budget_bytes and p.merge_task_bytes >= 4 * WIDE * state_bytes_per_feature(*window[:2])
    wider = WINDOWED_FOOTPRINTS[WINDOWS.index(window) - 1]
    with pytest.raises(PlanError):  # the next wider window does not fit: the planner took the widest that does
        plan_chunks((1_000_000, WIDE), 4, (2_000, WIDE), worker, stats=(*p.stats[:-1], wider),
                    n_classes=p.n_classes)


def test_5000_features_keep_the_sketch_on_a_16_gb_gpu() -> None:
    """The seed's 100,000 x 5,000 float32 batch on a 16 GB card keeps a sketch of 2,048 int64 buckets a sign.

    The sketch of every bucket planned 5.6 MB under this budget; with the smallest and largest
    values kept (2 kB a feature, exact tail quantiles after merge and update) it does not fit, and
    the 2,048-bucket window, which spans 10**8.9 in magnitude per sign, is planned instead.
    """
    from daskbatch.runtime.capacity import cuda_device_count
    from daskbatch.stats import kernels

    if cuda_device_count() > 0 and not kernels.gpu_available():
        pytest.skip("a GPU without daskbatch's kernels: the array-API path is planned, rightly")
    x = da.zeros((100_000, WIDE), dtype="float32", chunks=(25_000, WIDE))
    y = da.zeros(100_000, dtype="int32", chunks=25_000)
    card = db.Resources(64 * GiB, 1, 1, device_memory_bytes=16 * 10**9, device="gpu")
    p = plan_describe(x, y, resources=card, classes=(0, 1))
    print(p.explain())
    names, window = sketch_in_plan(p.stats)
    assert "sketch" in names and window == WINDOWS[0] and p.kernel_path == "gpu-compiled"
    assert p.task_bytes <= p.budget_bytes
    # The sketch's keying temporaries are those of one block of 2**24 values, not of the 25,000-row chunk.
    from daskbatch.planning.plan import footprint

    def gpu_kernel_bytes(stat: str, rows: int, d: int) -> int:
        buffers = footprint(stat).device_buffers
        return 0 if buffers is None else int(buffers(rows, d, None))

    assert gpu_kernel_bytes("sketch", 25_000, WIDE) < 25_000 * WIDE * 8


def test_the_min_max_fallback_says_it_is_the_last_resort() -> None:
    """Where not even the narrowest window fits, describe warns that min and max are the last resort, and why."""
    x = np.random.default_rng(0).standard_normal((1000, 2000)).astype("float32")
    tiny = db.Resources(576 * 2**20)
    with pytest.warns(db.RangeWarning, match=r"the last resort \(one outlier stretches a range\).* 512 buckets"):
        s = db.describe(x, stats=("moments", "hist"), run=db.RunOptions(plan=tiny))
    assert s.provenance["range"] == "minmax"


# ------------------------------------------------------------------ a real 2 GiB, 2-thread worker
def _block(block_id: tuple[int, int]) -> np.ndarray:
    """250 rows of 5,000 features: even ones near zero (magnitudes span more than a window), odd ones near 290."""
    x = np.random.default_rng(block_id[0]).standard_normal((250, WIDE))
    x[:, 1::2] += 290.0
    if block_id[0] == 0:
        x[5, 3] = 1e9  # a stray value: the range stays robust
    return x


@pytest.mark.slow
def test_a_2_gib_two_thread_local_cluster_keeps_the_sketch_at_5000_features() -> None:
    """describe on a real LocalCluster worker of 2 GiB and 2 threads, 5,000 features (few rows, so CI is quick)."""
    distributed = pytest.importorskip("distributed")
    rows = 1_000
    x_lazy = da.map_blocks(_block, dtype=np.float64, chunks=((250,) * (rows // 250), (WIDE,)))  # made on the worker
    x = x_lazy.compute(scheduler="sync")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, memory_limit=2 * GiB, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        s = db.describe(x_lazy, stats=("moments", "hist"))
    assert s.provenance["range"] != "minmax" and s.provenance["sketch"]["window"] == 1024
    sk = Sketch(alpha=PAIRED_ALPHA, window=1024)
    assert s.provenance["sketch"]["alpha"] == PAIRED_ALPHA < 0.01
    qs = [0.001, 0.01, 0.25, 0.5, 0.75, 0.99, 0.999]
    for d in (0, 1, 2, 3, 4998, 4999):
        exact = np.quantile(x[:, d], qs, method="inverted_cdf")
        got = np.array([s.quantile(q, method="sketch").iloc[d] for q in qs])
        # alpha relative; below the window's first bucket (a collapse) absolutely, by that bucket's upper edge
        floor = np.max(np.abs(x[:, d])) * math.exp(-(sk.window - 2) * sk.ln_gamma)
        assert np.all(np.abs(got - exact) <= sk.alpha * np.abs(exact) * (1 + 1e-9) + floor), (d, got, exact)
    assert s.arrays.overflow[3] == 1 and np.count_nonzero(s.arrays.hist_counts[3]) >= 30  # the stray value is detached
