"""The tree reduction: split_every sweep, reproducibility across schedulers, graph shape, no eager compute."""

from __future__ import annotations

import math
from collections import Counter

import dask
import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from hypothesis import given
from hypothesis import strategies as st

import daskbatch as db
from daskbatch.engine.passes import tree_reduce
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments
from daskbatch.stats._base import merge_all
from daskbatch.testing import assert_results_close, assert_states_equal, chunk_sizes, sample_arrays

ROWS, FEATURES, CHUNK = 1000, 3, 77  # 13 row blocks, the last one ragged


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(99)
    x = rng.normal(1e4, 3.0, (ROWS, FEATURES))
    x[::41, 1] = np.nan
    y = rng.integers(0, 3, ROWS)
    return x, y


def bundle() -> Bundle:
    hist = Histogram(bins=10, lo=(1e4 - 6,) * FEATURES, hi=(1e4 + 6,) * FEATURES, by_label=True)
    return Bundle((Moments(), CoMoments(), hist))


def graph(x: np.ndarray, y: np.ndarray, split_every: int | None = None, **kwargs):
    return tree_reduce(
        bundle(), da.from_array(x, chunks=(CHUNK, -1)), da.from_array(y, chunks=100),
        split_every=split_every, **kwargs,
    )


def assert_bundles_equal(a: tuple, b: tuple) -> None:
    for ra, rb in zip(a, b, strict=True):
        assert_states_equal(ra, rb)


class _ComputeCalled(RuntimeError):
    pass


def _forbid(*args: object, **kwargs: object) -> None:
    raise _ComputeCalled("the graph computed while it was being built")


def single_chunk(x: np.ndarray, y: np.ndarray) -> tuple:
    b = bundle()
    return b.finalize(b.chunk(x, y))


@pytest.mark.parametrize("split_every", [2, 3, 8, 100])  # 100 > 13 blocks: one merge of all
def test_split_every_sweep(data, split_every: int) -> None:
    x, y = data
    got = graph(x, y, split_every).compute(scheduler="sync")
    want = single_chunk(x, y)
    moments, comoments, hist = got
    assert_results_close(moments, want[0], rtol=1e-12, atol=1e-12)
    assert_results_close(comoments, want[1], rtol=1e-12, atol=1e-12)
    assert_states_equal(hist, want[2])  # integer counts: bitwise whatever the tree
    np.testing.assert_allclose(moments.mean, np.nanmean(x, axis=0), rtol=1e-14)
    np.testing.assert_allclose(moments.var, np.nanvar(x, axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("split_every", [2, 3, 8, 100])
def test_graph_keys_and_tree_shape(data, split_every: int) -> None:
    x, y = data
    g = graph(x, y, split_every)
    keys = [k for k in dict(g.__dask_graph__()) if str(k[0] if isinstance(k, tuple) else k).startswith("db-")]
    names = Counter(key_split(k) for k in keys)  # what the dashboard groups tasks by
    blocks = math.ceil(ROWS / CHUNK)
    merges, level = 0, blocks
    while level > 1:
        level = math.ceil(level / split_every)
        merges += level
    # Each block's co-moments and its other statistics are two tasks; the chunk task joins their states.
    assert names == {"db-part": 2 * blocks, "db-chunk": blocks, "db-merge": merges, "db-result": 1}
    assert g.key.startswith("db-result-")


def test_block_parts_give_the_bundles_state_bit_for_bit(data) -> None:
    """Two tasks a block (co-moments apart, in this process): the state of one bundle chunk a block, merged in order."""
    x, y = data
    stat = Bundle((Moments(), Histogram(bins=10, lo=(1e4 - 6,) * FEATURES, hi=(1e4 + 6,) * FEATURES), CoMoments()))
    xd, yd = da.from_array(x, chunks=(CHUNK, -1)), da.from_array(y, chunks=(CHUNK,))
    g = tree_reduce(stat, xd, yd, split_every=4, finalize=False)
    assert Counter(key_split(k) for k in dict(g.__dask_graph__()))["db-part"] == 2 * xd.numblocks[0]
    got = g.compute(scheduler="threads")
    merged = [stat.chunk(x[i : i + CHUNK], y[i : i + CHUNK]) for i in range(0, ROWS, CHUNK)]  # one task a block
    while len(merged) > 1:  # the tree's levels, four states a merge
        merged = [merge_all(stat, merged[i : i + 4]) for i in range(0, len(merged), 4)]
    assert_bundles_equal(got, merged[0])


def test_graph_building_does_not_compute(data) -> None:
    x, y = data
    with dask.config.set(scheduler=_forbid):
        g = graph(x, y, 3)
        state_graph = graph(x, y, 3, finalize=False)
        with pytest.raises(_ComputeCalled):  # the guard works
            g.compute()
    result = g.compute(scheduler="sync")
    state = state_graph.compute(scheduler="sync")
    assert_bundles_equal(bundle().finalize(state), result)


def test_bitwise_reproducible_across_runs_and_schedulers(data) -> None:
    x, y = data
    first = graph(x, y, 3).compute(scheduler="threads")
    again = graph(x, y, 3).compute(scheduler="threads")
    sync = graph(x, y, 3).compute(scheduler="sync")
    assert_bundles_equal(first, again)
    assert_bundles_equal(first, sync)


def test_local_cluster_gives_bitwise_identical_results(data) -> None:
    distributed = pytest.importorskip("distributed")
    x, y = data
    threaded = graph(x, y, 3).compute(scheduler="threads")
    summary_threads = db.describe(da.from_array(x, chunks=(CHUNK, -1)), y, bins=16, run=db.RunOptions(split_every=3))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        on_cluster = client.compute(graph(x, y, 3)).result()
        summary_cluster = db.describe(da.from_array(x, chunks=(CHUNK, -1)), y, bins=16, run=db.RunOptions(split_every=3))
        assert len(client.scheduler_info()["workers"]) == 2
    assert_bundles_equal(on_cluster, threaded)
    for name in ("count", "mean", "var", "skew", "kurtosis", "min", "max", "cov", "corr",
                 "hist_counts", "hist_edges", "joint_counts", "mi"):
        np.testing.assert_array_equal(getattr(summary_cluster, name), getattr(summary_threads, name), err_msg=name)


@given(data=st.data())
def test_any_dask_chunking_and_fan_in(data) -> None:
    """Random chunkings (empty, 1-row and ragged chunks) and fan-ins agree; counts bitwise."""
    x = data.draw(sample_arrays(min_rows=1, max_rows=30, nonfinite=True), label="x")
    rows, features = x.shape
    sizes = data.draw(chunk_sizes(rows, max_chunks=8), label="chunks")
    fan_in = data.draw(st.integers(2, 5), label="split_every")
    y = np.arange(rows) % 3
    hist = Histogram(bins=5, lo=(-100.0,) * features, hi=(100.0,) * features, by_label=True)
    stat = Bundle((Moments(), CoMoments(), hist))
    dx = da.from_array(x, chunks=(sizes, (features,)))
    got = tree_reduce(stat, dx, da.from_array(y, chunks=rows), split_every=fan_in).compute(scheduler="sync")
    want = stat.finalize(stat.chunk(x, y))
    assert_results_close(got[0], want[0], rtol=1e-10, atol=1e-9)
    assert_results_close(got[1], want[1], rtol=1e-10, atol=1e-9)
    assert_states_equal(got[2], want[2])


def test_label_is_rechunked_to_the_row_blocks(data) -> None:
    x, y = data
    a = graph(x, y, 4).compute(scheduler="sync")
    b = tree_reduce(bundle(), da.from_array(x, chunks=(CHUNK, -1)), da.from_array(y, chunks=CHUNK), split_every=4)
    assert_bundles_equal(a, b.compute(scheduler="sync"))


def test_tree_reduce_input_errors() -> None:
    with pytest.raises(ValueError, match="numblocks"):
        tree_reduce(Moments(), da.ones((10, 4), chunks=(5, 2)))
    with pytest.raises(ValueError, match="2-D"):
        tree_reduce(Moments(), da.ones(10, chunks=5))
    with pytest.raises(ValueError, match="split_every must be at least 2"):
        tree_reduce(Moments(), da.ones((10, 4), chunks=(5, 4)), split_every=1)


def test_split_every_from_config(data) -> None:
    x, _ = data
    dx = da.from_array(x, chunks=(CHUNK, -1))
    with dask.config.set({"daskbatch.split-every": 2}):
        g = tree_reduce(Moments(), dx)
    merges = {k[1] for k in dict(g.__dask_graph__()) if isinstance(k, tuple) and k[0].startswith("db-merge")}
    assert len(merges) == math.ceil(math.log2(math.ceil(ROWS / CHUNK)))  # a binary tree's depth


def test_one_distributed_span_per_describe_call() -> None:
    """The dashboard groups a describe call's tasks under one span ("daskbatch-describe")."""
    from distributed import Client, LocalCluster

    import daskbatch as db

    x = da.from_array(np.random.default_rng(0).standard_normal((2000, 3)), chunks=(500, -1))
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        db.describe(x, stats="moments", run=db.RunOptions(plan=None))
        db.describe(x + 1.0, stats="moments", run=db.RunOptions(plan=None))  # other keys: tasks that are new to the scheduler
        spans = client.cluster.scheduler.extensions["spans"].spans.values()
        names = [s.name for s in spans]
    assert names.count(("daskbatch-describe",)) == 2, names
    # inside it, one span per pass, named after the pass and its statistics
    assert names.count(("daskbatch-describe", "pass-1-moments")) == 2, names


def test_the_dashboard_tells_the_two_passes_apart() -> None:
    from distributed import Client, LocalCluster

    import daskbatch as db

    x = da.from_array(np.random.default_rng(0).standard_normal((2000, 3)), chunks=(500, -1))
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        db.describe(x, stats="moments,hist", run=db.RunOptions(plan=None))
        spans = {s.name: s for s in client.cluster.scheduler.extensions["spans"].spans.values()}
    first, second = spans[("daskbatch-describe", "pass-1-moments-sketch")], spans[("daskbatch-describe", "pass-2-hist-qhist")]
    # each pass's span holds its own tasks: the dashboard shows their time apart
    assert first.states and second.states and not set(first.groups) & set(second.groups)
    # and the task names say which pass they belong to
    from dask.utils import key_split

    one, two = {key_split(g.name) for g in first.groups}, {key_split(g.name) for g in second.groups}
    assert {"db-chunk-moments-sketch", "db-merge-moments-sketch", "db-result-moments-sketch"} <= one, one
    assert {"db-chunk-hist-qhist", "db-merge-hist-qhist", "db-result-hist-qhist"} <= two and not any("moments" in n for n in two), two
