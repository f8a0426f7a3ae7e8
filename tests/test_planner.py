"""The pure planner: table cases, error texts and hypothesis invariants."""

from __future__ import annotations

import ast
import json
import math
import pathlib

import dask
import dask.array as da
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daskbatch.engine.planner import plan
from daskbatch.errors import PlanError
from daskbatch.planning.plan import (
    STATISTICS,
    Plan,
    Resources,
    merge_task_bytes,
    projected_task_bytes,
    state_bytes,
)
from daskbatch.planning.search import plan_chunks
from daskbatch.stats.declaration import Footprint

GiB, MiB = 2**30, 2**20


def test_budget_formula_and_fields():
    r = Resources(16 * GiB, threads_per_worker=4, n_workers=2)
    p = plan_chunks((1_000_000, 512), 4, (10_000, 512), r, n_classes=10, dtype="float32")
    assert p.budget_bytes == 16 * GiB // 2 // 4 - 256 * MiB
    assert p.chunk_rows % 10_000 == 0
    assert p.chunks == (p.chunk_rows, 512)
    assert p.n_chunks == math.ceil(1_000_000 / p.chunk_rows)
    assert p.n_chunks >= 2 * r.total_threads
    assert p.task_bytes <= p.budget_bytes
    assert p.feature_tile is None and p.split_every == 8
    assert p.chunk_task_bytes == projected_task_bytes(
        p.chunk_rows, 512, 4, p.stats, bins=64, n_classes=10
    )
    assert p.merge_task_bytes == merge_task_bytes(p.stats, 512, 8, bins=64, n_classes=10)


def test_gpu_budget_uses_device_memory():
    r = Resources(64 * GiB, device_memory_bytes=8 * GiB, device="gpu")
    p = plan_chunks((100_000, 64), 4, (1000, 64), r, stats=("moments",))
    assert p.budget_bytes == 4 * GiB - 256 * MiB
    assert p.kernel_path == "gpu-compiled"  # the numba-cuda kernels, in device memory
    assert "GPU" in p.explain()


@given(
    threads=st.integers(1, 8),
    device_gib=st.integers(8, 141),
    features=st.integers(1, 512),
)
def test_rmm_pool_holds_every_threads_largest_task_within_the_device(threads, device_gib, features):
    r = Resources(8 * 2**30, threads, 1, device_memory_bytes=device_gib * 2**30, device="gpu")
    p = plan_chunks((4_000_000, features), 4, (4096, features), r, stats=("moments", "cov", "hist"),
                    compiled_kernels=False)
    step = 256 * 2**20
    need = threads * (p.task_bytes + p.reserved_bytes)
    assert p.rmm_pool_bytes % step == 0
    assert need <= p.rmm_pool_bytes < need + step
    assert p.rmm_pool_bytes <= device_gib * 2**30  # the budget keeps the pool inside the device
    assert "RMM pool per GPU worker" in p.explain()
    assert p.to_dict()["rmm_pool_bytes"] == p.rmm_pool_bytes


def test_compiled_kernels_plan_larger_chunks():
    r = Resources(GiB)
    kw = {"stats": ("moments", "hist"), "target_chunk_bytes": GiB}
    fast = plan_chunks((10**7, 256), 4, (1000, 256), r, **kw)
    ref = plan_chunks((10**7, 256), 4, (1000, 256), r, compiled_kernels=False, **kw)
    assert (fast.kernel_path, ref.kernel_path) == ("compiled", "array-api")
    assert fast.chunk_rows > ref.chunk_rows


@pytest.mark.parametrize(
    ("shape", "storage", "threads", "expected_rows", "limited_by"),
    [
        ((100, 3), (1000, 3), 1, 100, "data"),  # one storage chunk longer than the array
        ((10_000, 16), (1000, 16), 2, 2000, "parallelism"),  # 5 chunks >= 2 x 2 threads
        ((10_000, 16), (1000, 16), 8, 1000, "parallelism"),  # too few storage chunks: one each
        ((1_000_000, 1024), (1000, 1024), 1, 16_000, "target chunk size"),  # 64 MiB of float32
    ],
)
def test_table(shape, storage, threads, expected_rows, limited_by):
    r = Resources(64 * GiB, threads_per_worker=threads)
    p = plan_chunks(shape, 4, storage, r, stats=("moments", "hist"))
    assert (p.chunk_rows, p.limited_by) == (expected_rows, limited_by)


def test_memory_limits_chunk_rows():
    # 1 GiB worker, 1 thread: budget 256 MiB; each 1000-row storage chunk of 1024 float64 ~ 70 MiB
    r = Resources(GiB)
    p = plan_chunks((1_000_000, 1024), 8, (1000, 1024), r, stats=("moments",), target_chunk_bytes=GiB)
    assert p.limited_by == "memory budget"
    assert p.chunk_task_bytes <= p.budget_bytes
    assert projected_task_bytes(p.chunk_rows + 1000, 1024, 8, ("moments",)) > p.budget_bytes


def test_storage_chunk_too_large_names_numbers():
    r = Resources(16 * GiB, threads_per_worker=4)
    with pytest.raises(PlanError) as info:
        plan_chunks((1_000_000, 4096), 8, (65_536, 4096), r, stats=("moments", "cov"))
    msg = str(info.value)
    assert "65,536-row chunk" in msg
    assert "budget 1.75 GiB (16.00 GiB x 0.5 / 4 threads - 256.00 MiB)" in msg
    assert "--memory" in msg and "rechunk" in msg


def test_empty_budget():
    with pytest.raises(PlanError, match=r"no per-task budget is left: 512.00 MiB x 0.5 / 2 threads = 128.00 MiB"):
        plan_chunks((10, 2), 8, (10, 2), Resources(512 * MiB, 2), stats=("moments",))


def test_search_asks_each_footprint_once_per_tile():
    # The search sizes many candidate chunks and fan-ins; a statistic's state size depends on none of them, so its
    # footprint is asked once per plan (per feature tile when tiling), not once per candidate.
    asked: list[tuple[int, int | None]] = []

    def state(n_features: int, bins: int, n_classes: int | None, feature_tile: int | None) -> int:
        asked.append((n_features, feature_tile))
        return 8 * n_features

    counted = Footprint(name="counted", state=state)
    p = plan_chunks((1_000_000, 1024), 8, (1000, 1024), Resources(GiB), stats=("moments", counted), split_every=64)
    assert p.chunk_rows > 0 and p.explain()
    assert asked == [(1024, None)]


def test_split_every_lowered_before_tiling():
    d = 2048  # cov state 32 MiB; budget 256 MiB fits ~5 merge states, not 8 + 1 + temporaries
    p = plan_chunks((100_000, d), 4, (100, d), Resources(GiB), stats=("cov",), split_every=8)
    assert p.feature_tile is None
    assert 2 <= p.split_every < 8
    assert any("split_every lowered from 8" in n for n in p.notes)
    assert p.merge_task_bytes <= p.budget_bytes


def test_tiling_when_comoments_do_not_fit():
    d = 100_000
    r = Resources(64 * GiB)
    p = plan_chunks((10_000_000, d), 4, (1000, 1000), r, stats=("moments", "cov", "hist"))
    assert p.feature_tile is not None and 1 <= p.feature_tile < d
    assert state_bytes("cov", d) > p.budget_bytes
    assert state_bytes("cov", d, feature_tile=p.feature_tile) * (p.split_every + 1) <= p.budget_bytes
    n_tiles = math.ceil(d / p.feature_tile)
    assert p.n_tile_pairs == n_tiles * (n_tiles + 1) // 2
    assert f"feature tiles of {p.feature_tile:,}" in p.explain()


def test_states_that_cannot_tile_name_the_largest_and_only_a_knob_that_keeps_the_answer():
    with pytest.raises(PlanError, match=r"largest: 'mi'.*; raise --memory$") as refused:
        plan_chunks((1000, 10_000), 4, (100, 10_000), Resources(GiB), stats=("mi",), bins=256,
                    n_classes=100)
    assert "--bins" not in str(refused.value) and "--classes" not in str(refused.value)


def test_a_storage_chunk_too_big_for_any_tile_is_named_not_the_merges():
    # co-moments tile (the merges fit in tiles), but one 1,000,000-row storage chunk fits no task
    with pytest.raises(PlanError, match=r"a 1,000,000-row chunk \(one storage chunk.*rechunk the store"):
        plan_chunks((10_000_000, 100_000), 4, (1_000_000, 100_000), Resources(64 * GiB), stats=("moments", "cov"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": (10,)}, "2-D"),
        ({"storage_chunks": (0, 4)}, "storage chunks"),
        ({"stats": ("mean",)}, "unknown"),
        ({"stats": ("mi",)}, "n_classes=K; --n-classes K"),
        ({"split_every": 1}, "split_every"),
        ({"bins": 0}, "bins"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"shape": (10, 4), "itemsize": 8, "storage_chunks": (5, 4), "resources": Resources(GiB),
            "stats": ("moments",)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        plan_chunks(**args)


def test_resources_validation():
    with pytest.raises(ValueError, match="threads_per_worker"):
        Resources(GiB, threads_per_worker=0)
    with pytest.raises(ValueError, match="device"):
        Resources(GiB, device="tpu")


def test_explain_to_dict_html():
    p = plan_chunks((10_000, 8), 2, (1000, 8), Resources(4 * GiB, 2), stats=("moments", "cov"),
                    dtype="int16")
    text = p.explain()
    for needle in ("10,000 x 8 int16", "budget per task: 4.00 GiB x 0.5 / 2 threads - 256.00 MiB",
                   "chunk task:", "merge task", "<= budget"):
        assert needle in text
    d = json.loads(json.dumps(p.to_dict()))
    assert d["chunks"] == [p.chunk_rows, 8] and d["task_bytes"] == p.task_bytes
    assert d["resources"]["memory_bytes"] == 4 * GiB
    html = p._repr_html_()
    assert "daskbatch.Plan: 10,000 × 8 int16" in html and "budget per task" in html
    assert "<td class='txt db-ok'>" in html  # the largest task fits its budget


def test_plan_wrapper_reads_dask_array():
    da = pytest.importorskip("dask.array")
    x = da.zeros((20_000, 10), chunks=(500, 10), dtype="float32")
    p = plan(x, stats=("moments",), resources=Resources(2 * GiB, 1, 2))
    assert p.storage_chunks == (500, 10) and p.chunk_rows % 500 == 0
    assert p.dtype == "float32" and p.split_every == 8


def test_planner_imports_stdlib_only():
    pkg = pathlib.Path(__file__).parents[1] / "daskbatch" / "planning"
    for name in sorted(p.name for p in pkg.glob("*.py")):
        tree = ast.parse((pkg / name).read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        mods = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        mods += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        heavy = [m for m in mods if m.split(".")[0] in {"dask", "distributed", "zarr", "cupy", "numpy"}]
        assert not heavy, f"{name} imports {heavy} at module level"


# ---------------------------------------------------------------- invariants

stats_sets = st.sets(st.sampled_from(STATISTICS), min_size=1).map(
    lambda s: tuple(x for x in STATISTICS if x in s)
)


@given(
    rows=st.integers(0, 10**9),
    d=st.integers(1, 200_000),
    itemsize=st.sampled_from([1, 2, 4, 8]),
    storage_rows=st.integers(1, 10**6),
    memory=st.integers(256 * MiB, 2**40),
    threads=st.integers(1, 64),
    workers=st.integers(1, 16),
    stats=stats_sets,
    bins=st.integers(1, 256),
    classes=st.integers(2, 20),
    split_every=st.integers(2, 32),
)
def test_invariants(rows, d, itemsize, storage_rows, memory, threads, workers, stats, bins,
                    classes, split_every):
    r = Resources(memory, threads, workers)
    try:
        p = plan_chunks((rows, d), itemsize, (storage_rows, d), r, stats=stats, bins=bins,
                        n_classes=classes, split_every=split_every)
    except PlanError as exc:
        assert any(ch.isdigit() for ch in str(exc)) and "--" in str(exc)
        return
    assert isinstance(p, Plan)
    assert p.chunk_task_bytes <= p.budget_bytes and p.merge_task_bytes <= p.budget_bytes
    assert p.chunk_rows == rows or p.chunk_rows % min(storage_rows, rows) == 0
    assert 0 <= p.chunk_rows <= rows
    assert 2 <= p.split_every <= split_every
    if rows:
        assert p.n_chunks == math.ceil(rows / p.chunk_rows)
        storage_chunks = math.ceil(rows / storage_rows)
        if storage_chunks >= 2 * r.total_threads and p.limited_by != "memory budget":
            assert p.n_chunks >= 2 * r.total_threads
    if "cov" in stats and state_bytes("cov", d) > p.budget_bytes:
        assert p.feature_tile is not None
    if p.feature_tile is not None:
        assert "cov" in stats and 1 <= p.feature_tile < d


@given(
    rows=st.integers(1, 10**7),
    d=st.integers(1, 5000),
    itemsize=st.sampled_from([1, 2, 4, 8]),
    stats=stats_sets,
    path=st.sampled_from(["compiled", "array-api"]),
)
def test_model_is_monotone_in_rows(rows, d, itemsize, stats, path):
    a = projected_task_bytes(rows, d, itemsize, stats, n_classes=3, path=path)
    b = projected_task_bytes(rows + 1, d, itemsize, stats, n_classes=3, path=path)
    floor = rows * d * (itemsize + (8 if path == "array-api" else 0))  # raw (+ float64 copy)
    assert floor < a < b


@pytest.mark.parametrize(
    ("setting", "value", "check"),
    [
        ("split-every", 3, lambda p: p.split_every == 3),
        ("memory-fraction", 0.25, lambda p: p.budget_bytes == 16 * GiB * 0.25 // 4 - 256 * MiB),
        ("reserved-memory", "1GiB", lambda p: p.budget_bytes == 16 * GiB * 0.5 // 4 - GiB),
        ("target-chunk-bytes", "1MiB",
         lambda p: p.limited_by == "target chunk size" and p.chunk_rows == 1000 * (MiB // (1000 * 64 * 4))),
        ("kernels", False, lambda p: p.kernel_path == "array-api"),
    ],
)
def test_dask_config_settings_steer_the_planner(setting, value, check):
    """A setting overridden through dask.config changes the plan, of plan_chunks and of db.plan alike."""
    r = Resources(16 * GiB, threads_per_worker=4)
    x = da.zeros((1_000_000, 64), dtype="float32", chunks=(1000, 64))
    kw = {"stats": ("moments", "hist")}
    before = plan_chunks(x.shape, 4, (1000, 64), r, **kw)
    assert not check(before)  # the packaged default plans otherwise
    with dask.config.set({f"daskbatch.{setting}": value}):
        pure = plan_chunks(x.shape, 4, (1000, 64), r, **kw)
        live = plan(x, resources=r, **kw)
    assert check(pure), pure
    assert check(live), live
    assert plan_chunks(x.shape, 4, (1000, 64), r, **kw) == before  # the override ends with its context


def test_an_argument_wins_over_the_setting():
    r = Resources(16 * GiB, threads_per_worker=4)
    with dask.config.set({"daskbatch.split-every": 3, "daskbatch.memory-fraction": 0.25}):
        p = plan_chunks((1_000_000, 64), 4, (1000, 64), r, stats=("moments",), split_every=5, memory_fraction=0.5)
    assert p.split_every == 5 and p.budget_bytes == 16 * GiB // 2 // 4 - 256 * MiB


def test_a_malformed_setting_is_named():
    with dask.config.set({"daskbatch.reserved-memory": "lots"}), pytest.raises(ValueError, match="reserved-memory"):
        plan_chunks((1000, 4), 4, (100, 4), Resources(GiB), stats=("moments",))
