"""Where the chunks of a Zarr array are, how many its metadata may claim, and what marks them."""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import zarr
from dask.utils import parse_bytes
from zarr.storage import WrapperStore

from daskbatch import config
from daskbatch.errors import DataError
from daskbatch.io.object_store import fetched_trailers, object_store_twin

#: Rows per dask block: whole storage chunks within ``daskbatch.target-chunk-bytes``, one, or a number.
Chunks = Literal["auto", "storage"] | int
#: Array attribute set by every daskbatch writer: each chunk is stored, so an absent one was lost.
WRITES_EVERY_CHUNK = "daskbatch:writes_every_chunk"
#: Group attributes of daskbatch stores written before :data:`WRITES_EVERY_CHUNK` (synth's and
#: ingest's layout; not ``daskbatch_output``: a saved summary leaves out chunks of fill values).
_OWN_GROUP_ATTRS = ("daskbatch", "daskbatch_ingest")


def storage_chunks(arr: zarr.Array) -> tuple[int, ...]:
    """The shape of one stored object of ``arr``: the shard if sharded, else the chunk."""
    return tuple(arr.shards or arr.chunks)


def chunk_grid(arr: zarr.Array, inner: bool = False) -> tuple[int, ...]:
    """Stored objects (or, with ``inner``, chunks inside shards) of ``arr`` along each axis."""
    per = arr.chunks if inner else storage_chunks(arr)
    return tuple(math.ceil(s / c) if s else 0 for s, c in zip(arr.shape, per, strict=True))


def chunk_count(arr: zarr.Array) -> int:
    """Stored objects (chunks, or shards when sharded) ``arr``'s metadata describes."""
    return math.prod(chunk_grid(arr))


def chunk_key(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """The store key of the chunk at grid position ``coords``, relative to the store root."""
    key = arr.metadata.encode_chunk_key(tuple(int(c) for c in coords))
    prefix = arr.path.strip("/")
    return f"{prefix}/{key}" if prefix else key


def is_local_fs(fs: Any) -> bool:
    """Whether an fsspec file system (or fsspec's async wrapper of one) is this machine's."""
    inner = getattr(fs, "sync_fs", None)
    protocol = getattr(inner or fs, "protocol", "")
    return bool({"file", "local"} & set((protocol,) if isinstance(protocol, str) else protocol))


def store_location(store: Any) -> str:
    """Where a zarr store is: a local path (``LocalStore``, or fsspec's local file system), else its URL."""
    fs, path = getattr(store, "fs", None), getattr(store, "path", None)
    if getattr(store, "root", None) is not None:
        return str(store.root)
    if fs is not None and path is not None:
        return str(path) if is_local_fs(fs) else str(fs.unstrip_protocol(path))
    return str(path) if path is not None else repr(store)


def array_label(arr: zarr.Array) -> str:
    """``array '<path>' in '<store>'``, for messages."""
    return f"array {arr.path or '/'!r} in {store_location(arr.store)!r}"


def stored_keys(arr: zarr.Array) -> set[str]:
    """The keys stored under ``arr``'s prefix, relative to it (one store listing, on zarr's event loop)."""
    from zarr.core.sync import sync  # lazy: zarr

    prefix = arr.store_path.path.strip("/")

    async def _collect() -> set[str]:
        """Every key under the prefix."""
        return {key[len(prefix) + 1 :] if prefix else key
                async for key in arr.store_path.store.list_prefix(prefix + "/" if prefix else "")}

    return sync(_collect())


def _keep_for(registry: dict[int, tuple[weakref.ref[zarr.Array], Any]], arr: zarr.Array, value: Any) -> None:
    """Keep ``value`` in ``registry`` for as long as this very array object lives (by its id)."""
    # Arrays gone since are dropped here (a weakref callback would run at garbage collection). A copy of the
    # items, and pop: another thread may open an array meanwhile.
    for at, (ref, _) in list(registry.items()):
        if ref() is None:
            registry.pop(at, None)
    registry[id(arr)] = (weakref.ref(arr), value)


def _kept_for(registry: dict[int, tuple[weakref.ref[zarr.Array], Any]], arr: zarr.Array) -> Any:
    """What :func:`_keep_for` keeps for this very array object, else None."""
    kept = registry.get(id(arr))
    return kept[1] if kept is not None and kept[0]() is arr else None


#: Keys of arrays whose open found every chunk stored, by id: the rows' token reads the same objects without
#: listing them again (from an object store one request per 1,000 keys, a round trip each).
_LISTED: dict[int, tuple[weakref.ref[zarr.Array], frozenset[str]]] = {}


def listed_keys(arr: zarr.Array) -> set[str]:
    """``arr``'s stored keys: those its open listed, where it found every chunk there, else a new listing."""
    kept = _kept_for(_LISTED, arr)
    # An array found with absent chunks lists again: a chunk written since then is part of the rows read.
    return set(kept) if kept is not None else stored_keys(arr)


class AbsentChunkError(LookupError):
    """A chunk key a read asked for is not stored (raised by :func:`every_chunk_reader`'s store)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _EveryChunkStore(WrapperStore[Any]):
    """A store whose writer stored every chunk: its own "not found" answer is the loss (no extra request)."""

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        """The stored value, or AbsentChunkError where zarr would read fill values."""
        found = await self._store.get(key, prototype, byte_range)
        if found is None:
            raise AbsentChunkError(key)
        return found


def every_chunk_reader(arr: zarr.Array) -> zarr.Array:
    """``arr`` read through its store wrapped so that an absent chunk raises :class:`AbsentChunkError`."""
    from zarr.core.array import AsyncArray  # lazy: the same metadata on the wrapped store
    from zarr.storage import StorePath  # lazy: zarr

    path = StorePath(_EveryChunkStore(arr.store_path.store), arr.store_path.path)
    return zarr.Array(AsyncArray(arr.metadata, path, config=arr._async_array.config))


def _chunks_per_shard(arr: zarr.Array) -> tuple[int, ...]:
    """Inner chunks along each axis of one shard."""
    return tuple(s // c for s, c in zip(storage_chunks(arr), arr.chunks, strict=True))


def shard_maps(arr: zarr.Array, shards: list[tuple[int, ...]]) -> list[np.ndarray]:
    """For each stored shard, which inner chunks its index holds (boolean, chunks-per-shard shaped)."""
    from zarr.codecs import ShardingCodec  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    codec = next(c for c in arr.metadata.codecs if isinstance(c, ShardingCodec))  # type: ignore[union-attr]
    per = _chunks_per_shard(arr)

    async def _one(shard: tuple[int, ...]) -> np.ndarray:
        """One shard's map."""
        # zarr has no public reader of a shard's index; its own partial reads use this one.
        index = await codec._load_shard_index_maybe(arr.store_path / arr.metadata.encode_chunk_key(shard), per)
        return np.zeros(per, dtype=bool) if index is None else np.asarray(index.get_full_chunk_map(), dtype=bool)

    async def _all() -> list[np.ndarray]:
        """Every shard's map, read concurrently."""
        return list(await asyncio.gather(*(_one(s) for s in shards)))

    return sync(_all()) if shards else []


def chunk_positions(arr: zarr.Array, present: set[str]) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The stored objects' grid positions in ``present`` (a listing), and the sorted absent chunks' (inner if sharded)."""
    absent: list[tuple[int, ...]] = []
    stored: list[tuple[int, ...]] = []
    for coords in itertools.product(*(range(g) for g in chunk_grid(arr))):
        pos = tuple(int(c) for c in coords)
        (stored if arr.metadata.encode_chunk_key(pos) in present else absent).append(pos)
    if not arr.shards:
        return stored, absent
    per = _chunks_per_shard(arr)
    inner = [tuple(s * p + i for s, p, i in zip(shard, per, local, strict=True))
             for shard in absent for local in itertools.product(*(range(p) for p in per))]
    for shard, full in zip(stored, shard_maps(arr, stored), strict=True):
        inner.extend(tuple(int(s * p + i) for s, p, i in zip(shard, per, local, strict=True))
                     for local in zip(*np.nonzero(~full), strict=True))
    bounds = chunk_grid(arr, inner=True)
    return stored, sorted(c for c in inner if all(i < b for i, b in zip(c, bounds, strict=True)))


def absent_name(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """An absent chunk's key, or ``inner chunk (1, 0) of shard X/c/1/0`` when sharded."""
    if not arr.shards:
        return chunk_key(arr, coords)
    per = _chunks_per_shard(arr)
    shard = tuple(c // p for c, p in zip(coords, per, strict=True))
    return f"inner chunk {tuple(c % p for c, p in zip(coords, per, strict=True))} of shard {chunk_key(arr, shard)}"


def _positive_setting(key: str) -> int:
    """Read ``daskbatch.<key>`` as a whole number of at least 1."""
    value = config.get(key)
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"daskbatch.{key} must be a whole number, got {value!r}") from None
    if limit < 1:
        raise ValueError(f"daskbatch.{key} must be at least 1, got {limit}")
    return limit


def max_chunks() -> int:
    """The configured ``daskbatch.max-chunks``: the most chunks one array may have."""
    return _positive_setting("max-chunks")


def check_chunk_count(arr: zarr.Array, blocks: int | None = None) -> int:
    """Refuse ``arr`` when its chunk grid (or ``blocks`` dask blocks) exceeds ``daskbatch.max-chunks``; its count."""
    limit = max_chunks()
    n = chunk_count(arr)
    if n > limit:
        shape = " x ".join(f"{s:,}" for s in arr.shape)
        raise DataError(
            f"{array_label(arr)} has {n:,} chunks (shape {shape}, chunks {storage_chunks(arr)}) > "
            f"daskbatch.max-chunks {limit:,}; rechunk the store (or raise daskbatch.max-chunks)"
        )
    if blocks is not None and blocks > limit:
        raise DataError(
            f"reading {array_label(arr)} in {blocks:,} dask blocks > daskbatch.max-chunks {limit:,}; "
            "ask for more rows per block (chunks=...)"
        )
    return n


def check_feature_count(arr: zarr.Array) -> None:
    """Refuse ``arr`` when its metadata claims more features than ``daskbatch.max-features``."""
    limit = _positive_setting("max-features")
    n = int(arr.shape[1]) if arr.ndim == 2 else 0
    if n > limit:
        raise DataError(
            f"{array_label(arr)} claims {n:,} features > daskbatch.max-features {limit:,}; "
            "if the store really has that many, raise daskbatch.max-features"
        )


def writes_every_chunk(arr: zarr.Array, group_attrs: Mapping[str, Any] | None = None) -> bool:
    """Whether ``arr``'s writer (daskbatch) stored every chunk, so that an absent chunk is a loss."""
    return arr.attrs.get(WRITES_EVERY_CHUNK) is True or any(k in (group_attrs or {}) for k in _OWN_GROUP_ATTRS)


@dataclass(frozen=True)
class Missing:
    """Absent chunks of the samples array and of its label, their keys and the rows they cover."""

    x_chunks: list[tuple[int, ...]] = field(default_factory=list)
    x_keys: list[str] = field(default_factory=list)
    label_chunks: list[tuple[int, ...]] = field(default_factory=list)
    label_keys: list[str] = field(default_factory=list)
    row_ranges: list[tuple[int, int]] = field(default_factory=list)
    #: Absent chunks of both arrays, and of them those lost (of arrays whose writer stored every chunk).
    count: int = 0
    lost: int = 0
    #: Whether the writer of ``x`` and of ``label`` stored every chunk (an absent one, then or later, was lost).
    every_chunk: tuple[bool, bool] = (False, False)

    def message(self, x: zarr.Array, label: zarr.Array | None) -> str:
        """The first few absent keys of each array and their count, in one line."""
        parts = []
        if self.x_keys:
            parts.append(f"{len(self.x_keys):,} chunk(s) of {array_label(x)} are missing: {_first(self.x_keys)}")
        if self.label_keys and label is not None:
            parts.append(f"{len(self.label_keys):,} chunk(s) of label {label.path!r} are missing: "
                         f"{_first(self.label_keys)}")
        return "; ".join(parts) + f" ({sum(b - a for a, b in self.row_ranges):,} rows)"

    def refusal(self, x: zarr.Array, label: zarr.Array | None, where: str, *, lost: bool = False,
                remedy: str = "") -> str:
        """The one-line refusal of these absent chunks of the store ``where``: why they matter, what restores them."""
        if remedy:  # the caller's own (an unfinished writer's)
            return f"{self.message(x, label)}; zarr would read fill values in their place; {remedy}"
        if lost:  # never "skip": it would compute on a store that lost rows as if it were whole
            remedy = ("daskbatch wrote every chunk of this store, so they were lost: restore them from a copy "
                      f"or write the store again (daskbatch verify {where} lists every damaged chunk)")
        else:
            remedy = ("their writer leaves out chunks that hold only the fill value, so they are that value: "
                      "the default missing='auto' (--missing auto) reads them so")
        return f"{self.message(x, label)}; zarr would read fill values in their place; {remedy}"


def _first(keys: list[str], n: int = 5) -> str:
    """The first ``n`` keys, and how many in all."""
    return ", ".join(keys[:n]) + (f", ... ({len(keys):,} in all)" if len(keys) > n else "")


def find_missing(x: zarr.Array, label: zarr.Array | None = None,
                 group_attrs: Mapping[str, Any] | None = None) -> Missing:
    """The absent chunks of ``x`` and ``label`` and the merged row ranges they cover."""
    found = {}
    ranges = []
    for role, arr in (("x", x), ("label", label)):
        # sorted grid positions of the absent chunks (inner ones when sharded); an empty grid lists nothing
        chunks: list[tuple[int, ...]] = []
        if arr is not None and check_chunk_count(arr):
            keys = stored_keys(arr)
            chunks = chunk_positions(arr, keys)[1]
            if not chunks:
                _keep_for(_LISTED, arr, frozenset(keys))
        found[role] = chunks
        per = int(arr.chunks[0]) if arr is not None else 0
        ranges += [(c[0] * per, min((c[0] + 1) * per, int(arr.shape[0]))) for c in chunks]  # type: ignore[union-attr]
    merged: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    every_chunk = (writes_every_chunk(x, group_attrs), label is not None and writes_every_chunk(label, group_attrs))
    return Missing(
        x_chunks=found["x"], x_keys=[absent_name(x, c) for c in found["x"]],
        label_chunks=found["label"],
        label_keys=[absent_name(label, c) for c in found["label"]] if label is not None else [],
        row_ranges=merged, count=len(found["x"]) + len(found["label"]),
        lost=len(found["x"]) * every_chunk[0] + len(found["label"]) * every_chunk[1], every_chunk=every_chunk,
    )


def row_blocks(n_rows: int, rows_per_block: int,
               skipped: list[tuple[int, int]]) -> tuple[tuple[int, ...], list[int]]:
    """Dask block sizes cut at every skipped row range (whole storage chunks each), and the blocks to keep."""
    cuts = set(range(0, n_rows, rows_per_block)) | {n_rows}
    for a, b in skipped:
        cuts.update((a, b))
    edges = sorted(c for c in cuts if 0 <= c <= n_rows)
    keep = [i for i, a in enumerate(edges[:-1]) if not any(s <= a < t for s, t in skipped)]
    if not keep:
        raise DataError("every row has a missing chunk: nothing is left to compute on")
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:], strict=True)), keep


def rows_per_block(arr: zarr.Array, chunks: Chunks) -> int:
    """Rows per dask block: whole storage chunks within ``daskbatch.target-chunk-bytes``, one, or as given."""
    rows, store_rows = int(arr.shape[0]), storage_chunks(arr)[0]
    if isinstance(chunks, bool) or not isinstance(chunks, int | str):
        raise TypeError(f"chunks must be 'auto', 'storage' or an int, got {chunks!r}")
    if isinstance(chunks, int):
        if chunks <= 0:
            raise ValueError(f"chunks must be a positive number of rows, got {chunks}")
        per = chunks
    elif chunks == "storage":
        per = store_rows
    elif chunks == "auto":
        row_bytes = max(1, math.prod(arr.shape[1:]) * np.dtype(arr.dtype).itemsize)
        per = store_rows * max(1, parse_bytes(config.get("target-chunk-bytes")) // (store_rows * row_bytes))
    else:
        raise ValueError(f"chunks must be 'auto', 'storage' or an int, got {chunks!r}")
    return max(1, min(per, rows)) if rows else 1


def open_facts(x: zarr.Array, label: zarr.Array | None, chunks: Any,
               group_attrs: Mapping[str, Any]) -> tuple[int, tuple[int, ...], Missing, BlockReadEvent | None]:
    """Rows per dask block, ``x``'s storage chunk shape, the absent chunks of ``x`` and ``label``, bounds first, and
    the event of the next block read (:func:`armed_block_read`)."""
    row_chunks = rows_per_block(x, chunks)
    # Before any listing or graph: a shape the metadata claims may have nothing behind it.
    check_chunk_count(x, blocks=math.ceil(int(x.shape[0]) / row_chunks))
    check_feature_count(x)
    if label is not None:
        check_chunk_count(label)
    return row_chunks, storage_chunks(x), find_missing(x, label, group_attrs), armed_block_read(x)


def has_chunk_checksums(arr: zarr.Array) -> bool:
    """Whether each stored chunk of ``arr`` ends with the CRC-32C :func:`chunk_checksums` reads (metadata only)."""
    from zarr.codecs import Crc32cCodec  # lazy: zarr

    codecs: Any = getattr(arr.metadata, "codecs", ())
    # Not another writer's codecs, nor shards, which end with their index's.
    return arr.shards is None and bool(codecs) and isinstance(codecs[-1], Crc32cCodec)


class BlockReadEvent(threading.Event):
    """Set once a task has read a block of an array; abandoned once its pass failed (its rows' token is not wanted)."""

    abandoned = False
    #: Whether a reader of the Dataset it was armed for has taken it (:func:`armed_block_read`).
    taken = False
    #: Whether :func:`block_read` sets it: a task of this process reads the array from an object store.
    waits_for_read = False

    def abandon(self) -> None:
        """Release what waits on this event with nothing to do: :meth:`wait` says False, :func:`chunk_checksums` stops."""
        self.abandoned = True
        self.set()
        for at, (_, event) in list(_TOKEN_READ.items()):  # a later read of the array's checksums is another's
            if event is self:
                _TOKEN_READ.pop(at, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the event was set, and not abandoned, within ``timeout``."""
        return super().wait(timeout) and not self.abandoned


#: The latest such event of each array, by its id: what a block read sets, and, abandoned, what stops the reading
#: of its chunk checksums.
_TOKEN_READ: dict[int, tuple[weakref.ref[zarr.Array], BlockReadEvent]] = {}


def next_block_read(arr: zarr.Array, in_process: bool = True) -> BlockReadEvent:
    """An event set once a task of this process has next read a block of ``arr`` from an object store (else set now).

    ``in_process``: whether the tasks run in this process (not a distributed client's workers).

    The rows' token reads a trailer per chunk: sent beside the pass's first block, those requests reach the server
    with its chunks' and delay them; sent once that block is read, they overlap its computing. Where obstore reads
    the chunks (which keeps their trailers), nothing sets the event: the caller does once the pass has read them all.
    A failed pass abandons the event: the trailers not yet read are not (the process's exit waits for the thread
    reading them).
    """
    event = BlockReadEvent()
    _keep_for(_TOKEN_READ, arr, event)
    fs = getattr(arr.store, "fs", None)  # fsspec stores have one; local and in-memory stores need no waiting
    if in_process and fs is not None and not is_local_fs(fs):
        event.waits_for_read = object_store_twin(arr) is None
    else:
        event.set()
    return event


def armed_block_read(arr: zarr.Array, armed: BlockReadEvent | None = None) -> BlockReadEvent | None:
    """:func:`next_block_read` of ``arr`` when its chunks carry checksums (the rows' token reads them), else None.

    ``armed``: the event armed as ``arr`` opened, taken by the first reader of its Dataset unless another was armed
    since; a later reader arms its own.
    """
    from daskbatch.runtime.capacity import active_client  # lazy: distributed

    if armed is not None and not armed.taken and _kept_for(_TOKEN_READ, arr) is armed:
        armed.taken = True
        return armed
    # Armed as the store opens, so that describe's pass only waits on it and sets it (a distributed pass reads in
    # its workers, where no event of this process is set).
    return next_block_read(arr, in_process=active_client() is None) if has_chunk_checksums(arr) else None


def block_read(arr: zarr.Array) -> None:
    """Set the event that waits for the next read of a block of ``arr``, if any."""
    waiting = _kept_for(_TOKEN_READ, arr)
    if waiting is not None and waiting.waits_for_read:
        waiting.set()


def chunk_checksums(arr: zarr.Array, fetched_since: int | None = None) -> list[tuple[str, bytes]] | None:
    """The CRC-32C ending each stored chunk of ``arr`` by key (one listing, 4 bytes a chunk); None without one.

    ``fetched_since``: a :func:`~daskbatch.io.object_store.read_stamp`; the chunks obstore has read whole since then
    give their trailers without a request.
    """
    from zarr.core.sync import sync  # lazy: zarr

    if not has_chunk_checksums(arr):
        return None
    check_chunk_count(arr)
    keys = sorted(listed_keys(arr) - {"zarr.json"})
    prefix = arr.store_path.path.strip("/")
    paths = [f"{prefix}/{key}" if prefix else key for key in keys]
    store = (object_store_twin(arr) or arr).store_path.store  # obstore's client where it changes nothing else
    event = _kept_for(_TOKEN_READ, arr)
    fetched = {} if fetched_since is None else fetched_trailers(store, paths, fetched_since)
    unread = [path for path in paths if path not in fetched]
    fetched.update(zip(unread, sync(_last_bytes(store, unread, 4, event)) if unread else (), strict=True))
    return [(key, fetched[path]) for key, path in zip(keys, paths, strict=True)]


async def _last_bytes(store: Any, keys: list[str], n: int, event: BlockReadEvent | None = None) -> list[bytes]:
    """The last ``n`` bytes of each key of ``store`` (b"" for a key gone since the listing), 64 reads at a time.

    Once ``event`` is abandoned, the reads not yet sent raise instead (the result is not wanted).
    """
    from zarr.abc.store import SuffixByteRequest  # lazy: zarr
    from zarr.core.buffer import default_buffer_prototype  # lazy: zarr

    at_once = asyncio.Semaphore(64)  # a store of 10**5 chunks: not 10**5 open files or requests at once

    async def tail(key: str) -> bytes:
        """One key's last bytes."""
        async with at_once:
            if event is not None and event.abandoned:
                raise RuntimeError("the pass failed: its rows' token is not read")
            found = await store.get(key, default_buffer_prototype(), byte_range=SuffixByteRequest(n))
        return b"" if found is None else found.to_bytes()

    return list(await asyncio.gather(*(tail(k) for k in keys)))

