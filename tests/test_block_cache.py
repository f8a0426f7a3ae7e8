"""describe's block cache: the first pass keeps the blocks it reads, the second reads them from memory.

On a local scheduler the first pass computes the blocks beside its states (one
read of each store chunk, overlapping the kernels); on ``distributed`` they are
persisted as the pass starts. Either way every result is bitwise that of
reading the store twice.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import zarr
from dask.callbacks import Callback
from dask.utils import key_split

import daskbatch as db


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(4000, 6)) * [1, 2, 3, 4, 5, 6] + 1e4).astype(np.float32)
    y = rng.integers(0, 3, size=4000).astype(np.int16)
    path = str(tmp_path_factory.mktemp("cache") / "data.zarr")
    root = zarr.open_group(path, mode="w")
    root.create_array("X", data=x, chunks=(500, 6))
    root.create_array("y", data=y, chunks=(500,))
    return path


def _arrays(s: db.Summary) -> dict[str, np.ndarray]:
    return {name: value for name, value in s.variables.items() if isinstance(value, np.ndarray)}


def _reads_of_x(run: db.RunOptions, store: str) -> tuple[db.Summary, Counter[str]]:
    """describe's summary, and how often each task prefix ran that reads the store's ``X`` chunks."""
    ran: Counter[str] = Counter()

    def posttask(key, result, dsk, state, worker_id) -> None:  # noqa: ANN001
        if getattr(result, "ndim", 0) == 2:  # blocks of X (the label's are 1-D, states are not arrays)
            ran[key_split(key)] += 1

    with Callback(posttask=posttask):
        s = db.describe(store, label="y", run=run)
    return s, ran


def test_local_scheduler_reads_each_chunk_once_and_changes_no_bit(store: str) -> None:
    cached, once = _reads_of_x(db.RunOptions(plan=None, cache=True), store)
    twice_s, twice = _reads_of_x(db.RunOptions(plan=None, cache=False), store)
    assert cached.provenance["cached"] and not twice_s.provenance["cached"]
    assert cached.provenance["passes"] == 2
    reads = [p for p in twice if "read" in p or "zarr" in p]
    assert reads, twice  # the store's read tasks are seen
    for prefix in reads:  # each block read once with the cache, twice without
        assert once[prefix] >= 1 and twice[prefix] == 2 * once[prefix], (prefix, once, twice)
    got, want = _arrays(cached), _arrays(twice_s)
    assert got.keys() == want.keys() and {"cov", "joint_counts", "quantile_counts"} <= got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert cached.provenance["input_tokens"] == twice_s.provenance["input_tokens"]


def test_distributed_cache_changes_no_bit(store: str) -> None:
    from distributed import Client, LocalCluster

    plain = db.describe(store, label="y", run=db.RunOptions(plan=None, cache=False))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        cached = db.describe(store, label="y", run=db.RunOptions(plan=None, cache=True))
    assert cached.provenance["cached"]
    for name, value in _arrays(plain).items():
        np.testing.assert_array_equal(_arrays(cached)[name], value, err_msg=name)
