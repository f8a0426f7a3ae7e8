"""Where the chunks of a Zarr array are: their grid, their store keys, which ones the store holds.

The bottom of :mod:`daskbatch.io`: arithmetic on an array's metadata, one listing
of the keys under its prefix, and the index of each stored shard.  Inside a
shard the unit is the inner chunk (what zarr fills when it is absent), so
:func:`absent_positions` and :func:`absent_name` work in the grid of
``arr.chunks``.  What an absent chunk means (lost, or the fill value) is
:mod:`daskbatch.io.integrity`'s call.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import zarr

__all__ = [
    "absent_name",
    "absent_positions",
    "array_label",
    "chunk_count",
    "chunk_grid",
    "chunk_key",
    "shard_maps",
    "storage_chunks",
    "stored_keys",
]


def storage_chunks(arr: zarr.Array) -> tuple[int, ...]:
    """Give the shape of one stored object of ``arr``: the shard if sharded, else the chunk.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    tuple of int
        The shape.
    """
    return tuple(arr.shards or arr.chunks)


def chunk_grid(arr: zarr.Array) -> tuple[int, ...]:
    """Count the stored objects (chunks, or shards when sharded) of ``arr`` along each axis.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    tuple of int
        The grid's shape.
    """
    return tuple(
        math.ceil(s / c) if s else 0 for s, c in zip(arr.shape, storage_chunks(arr), strict=True)
    )


def chunk_count(arr: zarr.Array) -> int:
    """Count the stored objects (chunks, or shards when sharded) ``arr``'s metadata describes.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    int
        The number of stored objects.
    """
    return math.prod(chunk_grid(arr))


def chunk_key(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """Give the store key of the chunk at grid position ``coords``, relative to the store root.

    Parameters
    ----------
    arr : zarr.Array
        The array.
    coords : tuple of int
        The chunk's position in the chunk grid.

    Returns
    -------
    str
        The key.
    """
    key = arr.metadata.encode_chunk_key(tuple(int(c) for c in coords))
    prefix = arr.path.strip("/")
    return f"{prefix}/{key}" if prefix else key


def _store_label(arr: zarr.Array) -> str:
    """A short readable name for the store holding ``arr`` (path or URL)."""
    store = arr.store
    root = getattr(store, "root", None) or getattr(store, "path", None)
    return str(root) if root is not None else repr(store)


def array_label(arr: zarr.Array) -> str:
    """Name ``arr`` for messages.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    str
        ``array '<path>' in '<store>'``.
    """
    return f"array {arr.path or '/'!r} in {_store_label(arr)!r}"


def stored_keys(arr: zarr.Array) -> set[str]:
    """List the keys stored under ``arr``'s prefix (one store listing).

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    set of str
        The keys, relative to the array.
    """
    # zarr 3 stores only list asynchronously; zarr's own ``sync`` runs the coroutine
    # on zarr's event loop, which async fsspec file systems are bound to.
    from zarr.core.sync import sync  # lazy: zarr

    prefix = arr.store_path.path.strip("/")

    async def _collect() -> set[str]:
        keys = set()
        async for key in arr.store_path.store.list_prefix(prefix + "/" if prefix else ""):
            keys.add(key[len(prefix) + 1 :] if prefix else key)
        return keys

    return sync(_collect())


def absent_positions(arr: zarr.Array, present: set[str]) -> list[tuple[int, ...]]:
    """Grid positions of the chunks of ``arr`` absent from ``present`` (a listing).

    Parameters
    ----------
    arr : zarr.Array
        The array, its chunk count already checked.
    present : set of str
        The keys stored under the array, relative to it.

    Returns
    -------
    list of tuple of int
        Sorted positions in the grid of ``arr.chunks``: for a sharded array,
        inner chunks absent from a stored shard's index and every inner chunk
        of an absent shard.
    """
    grid = chunk_grid(arr)
    absent: list[tuple[int, ...]] = []
    stored: list[tuple[int, ...]] = []
    for coords in itertools.product(*(range(g) for g in grid)):
        pos = tuple(int(c) for c in coords)
        (stored if arr.metadata.encode_chunk_key(pos) in present else absent).append(pos)
    if not arr.shards:
        return absent
    per = _chunks_per_shard(arr)
    inner = [tuple(s * p + i for s, p, i in zip(shard, per, local, strict=True))
             for shard in absent for local in itertools.product(*(range(p) for p in per))]
    for shard, full in zip(stored, shard_maps(arr, stored), strict=True):
        inner.extend(
            tuple(int(s * p + i) for s, p, i in zip(shard, per, local, strict=True))
            for local in zip(*np.nonzero(~full), strict=True)
        )
    bounds = _inner_grid(arr)
    return sorted(c for c in inner if all(i < b for i, b in zip(c, bounds, strict=True)))


def _chunks_per_shard(arr: zarr.Array) -> tuple[int, ...]:
    """Inner chunks along each axis of one shard."""
    return tuple(s // c for s, c in zip(storage_chunks(arr), arr.chunks, strict=True))


def _inner_grid(arr: zarr.Array) -> tuple[int, ...]:
    """The grid of ``arr.chunks`` (inner chunks when sharded)."""
    return tuple(math.ceil(s / c) if s else 0 for s, c in zip(arr.shape, arr.chunks, strict=True))


def shard_maps(arr: zarr.Array, shards: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Read the index of each stored shard: which inner chunks it holds.

    Parameters
    ----------
    arr : zarr.Array
        A sharded array.
    shards : list of tuple of int
        Positions of shards present in the store.

    Returns
    -------
    list of numpy.ndarray
        One boolean array of shape chunks-per-shard each: True where the
        index gives the inner chunk an offset (absent chunks have 2**64-1).
    """
    import asyncio

    from zarr.codecs import ShardingCodec  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    codec = next(c for c in arr.metadata.codecs if isinstance(c, ShardingCodec))  # type: ignore[union-attr]
    per = _chunks_per_shard(arr)

    async def _one(shard: tuple[int, ...]) -> np.ndarray:
        # zarr exposes no public reader of a shard's index; this is the one its
        # own partial reads use (it decodes the index with the index codecs).
        index = await codec._load_shard_index_maybe(
            arr.store_path / arr.metadata.encode_chunk_key(shard), per
        )
        if index is None:  # vanished since the listing: nothing in it is stored
            return np.zeros(per, dtype=bool)
        return np.asarray(index.get_full_chunk_map(), dtype=bool)

    async def _all() -> list[np.ndarray]:
        return list(await asyncio.gather(*(_one(s) for s in shards)))

    return sync(_all()) if shards else []


def absent_name(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """Name an absent chunk at ``coords`` of the grid of ``arr.chunks``: its key, or its shard's key and place.

    Parameters
    ----------
    arr : zarr.Array
        The array.
    coords : tuple of int
        A position as :func:`absent_positions` gives it.

    Returns
    -------
    str
        ``X/c/3/0``, or ``inner chunk (1, 0) of shard X/c/1/0`` when sharded.
    """
    if not arr.shards:
        return chunk_key(arr, coords)
    per = _chunks_per_shard(arr)
    shard = tuple(c // p for c, p in zip(coords, per, strict=True))
    local = tuple(c % p for c, p in zip(coords, per, strict=True))
    return f"inner chunk {local} of shard {chunk_key(arr, shard)}"
