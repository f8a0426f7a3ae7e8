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
    root.create_array("X", data=x, chunks=(500, 6), dimension_names=("row", "feature"))  # xarray opens it too
    root.create_array("y", data=y, chunks=(500,), dimension_names=("row",))
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


class _CountingStore(zarr.storage.LocalStore):
    """A local store that counts each key it is asked for (zarr reads every chunk through ``get``)."""

    def __init__(self, root: str) -> None:
        super().__init__(root, read_only=True)
        self.gets: Counter[str] = Counter()

    async def get(self, key, prototype, byte_range=None):  # noqa: ANN001, ANN201 - zarr's signature
        self.gets[key] += 1
        return await super().get(key, prototype, byte_range)


def _chunk_reads(store: _CountingStore) -> Counter[str]:
    """The reads of ``X``'s and ``y``'s chunk files (metadata left out)."""
    return Counter({k: n for k, n in store.gets.items() if "/c/" in k})


def test_a_dask_array_over_zarr_is_read_once_like_the_store_path(store: str) -> None:
    import dask.array as da
    import xarray as xr

    counting = _CountingStore(store)
    root = zarr.open_group(counting, mode="r")
    counting.gets.clear()
    # The store path on the counting store: dask arrays in the storage chunks (their default) are read as it is.
    want = _arrays(db.describe(db.open_dataset(root), label=da.from_zarr(root["y"])))
    store_reads = _chunk_reads(counting)
    assert [store_reads[f"X/c/{i}/0"] for i in range(8)] == [1] * 8, store_reads  # both passes, one read each
    arrays = {
        "da.from_zarr": da.from_zarr(root["X"]),
        "da.from_zarr, inline_array": da.from_zarr(root["X"], inline_array=True),
        "da.from_array": da.from_array(root["X"], chunks=(500, 3)),  # the features in two blocks
        "xarray's open_zarr": xr.open_zarr(counting, consolidated=False)["X"].data,
    }
    for what, x in arrays.items():
        counting.gets.clear()
        got = db.describe(x, label=da.from_zarr(root["y"]))  # the defaults: cache="auto", the plan's chunks
        assert got.provenance["passes"] == 2 and got.provenance["cached"], what
        assert _chunk_reads(counting) == store_reads, (what, _chunk_reads(counting))
        assert _arrays(got).keys() == want.keys()
        for name, value in want.items():  # bitwise the store path's
            np.testing.assert_array_equal(_arrays(got)[name], value, err_msg=f"{what}: {name}")


def test_a_label_from_zarr_is_read_as_the_store_path_reads_its_label(store: str) -> None:
    import dask.array as da

    counting = _CountingStore(store)
    root = zarr.open_group(counting, mode="r")

    def described(x: object, label: object = None) -> tuple[db.Summary, Counter[str], Counter[str]]:
        """The summary, the tasks run by prefix, and the chunk reads."""
        tasks: Counter[str] = Counter()
        counting.gets.clear()
        with Callback(pretask=lambda key, dsk, state: tasks.update([key_split(key)])):
            s = db.describe(x, label=label, stats=("moments", "hist", "mi"))
        return s, tasks, _chunk_reads(counting)

    want, store_tasks, store_reads = described(db.open_dataset(root, label="y"))
    assert want.provenance["classes_from"] == "label scan" and want.provenance["cached"]
    # The label's blocks are x's, read by the store's block reader: no tasks of its own storage chunks
    # (8 here, twice: the label scan and the first pass), no rechunk to x's blocks.
    got, tasks, reads = described(da.from_zarr(root["X"]), da.from_zarr(root["y"]))
    assert tasks == store_tasks, (tasks, store_tasks)
    assert reads == store_reads
    assert got.provenance["label"] == want.provenance["label"] == "y"
    for name, value in _arrays(want).items():  # bitwise the store path's
        np.testing.assert_array_equal(_arrays(got)[name], value, err_msg=name)
    # A label of another store keeps its own reads (the store path's token would name x's store).
    other = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    other.create_array("y", data=np.asarray(root["y"][:]), chunks=(500,))
    apart, tasks, _ = described(da.from_zarr(root["X"]), da.from_zarr(other["y"]))
    assert tasks != store_tasks and apart.provenance["label"] is None
    for name, value in _arrays(want).items():
        np.testing.assert_array_equal(_arrays(apart)[name], value, err_msg=name)


def test_dask_arrays_that_change_zarr_values_keep_their_own_path(store: str, tmp_path) -> None:  # noqa: ANN001
    import dask.array as da
    import xarray as xr

    packed = zarr.open_group(tmp_path / "packed.zarr", mode="w").create_array(
        "X", data=np.arange(12, dtype=np.int16).reshape(6, 2), chunks=(3, 2), dimension_names=("row", "feature"))
    packed.attrs.update(scale_factor=0.5, _FillValue=3)  # xarray decodes: 3 is missing, the others halved
    x = da.from_zarr(store, component="X")
    decoded = xr.open_zarr(tmp_path / "packed.zarr", consolidated=False)["X"].data
    raw = xr.open_zarr(tmp_path / "packed.zarr", consolidated=False, mask_and_scale=False)["X"].data  # undecoded
    for changed in (x + 1, x[:, :3], x.astype(np.float64) * 2, decoded, raw):
        s = db.describe(changed, stats=("moments",))
        want = da.nanmean(changed, axis=0, dtype=np.float64).compute()  # the values the array holds
        np.testing.assert_allclose(s.variables["mean"], want, rtol=1e-12)
