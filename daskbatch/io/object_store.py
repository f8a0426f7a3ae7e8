"""Which client reads an S3 store's chunks: obstore's where it changes nothing but the CPU, else s3fs.

s3fs costs about 0.5 ms of CPU per MB more than obstore (``benchmarks/bench_object_store.py``). obstore is used
only when installed (the ``[s3]`` extra), the user's options and credentials mean the same to it, and every chunk
carries a CRC-32C that zarr checks (obstore does not check S3's checksums); otherwise, or when its first read
fails, the reads stay on s3fs.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import math
import os
import threading
import weakref
from typing import Any

import numpy as np
import zarr

from daskbatch.runtime.capacity import distributed_worker

__all__ = ["READ_AHEAD_BLOCKS", "ReadAhead", "fetched_trailers", "follow_task_order", "object_store_twin",
           "read_ahead_pool", "read_stamp", "row_range", "verifies_chunks"]

#: s3fs options obstore takes as they are (s3fs name -> obstore name); any other keeps s3fs.
_OBSTORE_OPTIONS = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "anon": "skip_signature",
    "endpoint_url": "endpoint",
}


#: Blocks an object store's reader fetches ahead of the tasks at most (each the size of a task's block).
READ_AHEAD_BLOCKS = 2


def read_ahead_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that fetch blocks ahead (they wait on the network, not on the CPU), this process's own."""
    return _pool_of_process(os.getpid())  # a forked child does not inherit the parent's threads


@functools.cache
def _pool_of_process(pid: int) -> concurrent.futures.ThreadPoolExecutor:
    """A pool of read-ahead threads for the process ``pid``."""
    return concurrent.futures.ThreadPoolExecutor(READ_AHEAD_BLOCKS, thread_name_prefix="daskbatch-read-ahead")


#: The readers whose blocks' task order a local dask scheduler reports, by the name of their dask array.
_ORDERED: dict[str, weakref.ref[ReadAhead]] = {}


def follow_task_order(name: str, reader: ReadAhead) -> None:
    """Have ``reader`` fetch ahead in the order in which a local dask scheduler's tasks read the array ``name``."""
    for known, ref in list(_ORDERED.items()):  # a copy, and pop: another thread may open an array meanwhile
        if ref() is None:
            _ORDERED.pop(known, None)
    _ORDERED[name] = weakref.ref(reader)
    _listen_to_task_order()


@functools.cache
def _listen_to_task_order() -> None:
    """Register, once, the dask callback that hands each compute's read order to the readers."""
    from dask.callbacks import Callback  # lazy: dask

    class _TaskOrder(Callback):
        """At the start of a local scheduler's compute, the blocks of each registered reader in the tasks' order."""

        def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
            """Pass each reader its blocks in the order of the ready tasks (the scheduler pops the list's end)."""
            if not _ORDERED:
                return
            found: dict[str, list[int]] = {}
            for key in reversed(state["ready"]):  # a pass's read tasks have no inputs: all ready at once
                if isinstance(key, tuple) and len(key) > 1 and key[0] in _ORDERED:
                    found.setdefault(key[0], []).append(key[1])
            for name, blocks in found.items():
                reader = _ORDERED[name]() if name in _ORDERED else None
                if reader is not None:
                    reader.read_in_order(blocks)

    _TaskOrder().register()


def row_range(selection: Any, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The (start, stop) rows of ``selection`` when it takes them whole (every column: a task's block), else None."""
    sel = selection if isinstance(selection, tuple) else (selection,)
    if len(sel) > len(shape) or not all(isinstance(s, slice) for s in sel):
        return None
    ranges = [s.indices(n) for s, n in zip(sel, shape, strict=False)]
    if ranges[0][2] != 1 or any(r != (0, n, 1) for r, n in zip(ranges[1:], shape[1:], strict=False)):
        return None
    return ranges[0][0], ranges[0][1]


class ReadAhead:
    """What a block reader does to overlap an object store's round trips (a mixin of ``BlockReader``).

    While a thread computes one block, the next blocks no task has read yet are fetched (at most
    :data:`READ_AHEAD_BLOCKS` waiting): in the order a local dask scheduler reported for its tasks
    (:func:`follow_task_order`), else the next in the direction the tasks go; a 1-D array's (a label's) small
    blocks are read several at once.
    The reader holds ``_read``, ``shape``, ``ndim``, ``dtype``, ``span_bytes`` and the bookkeeping below.
    """

    _ahead: dict[tuple[int, int], concurrent.futures.Future[np.ndarray]]
    _busy: set[tuple[int, int]]  # row ranges a task or a read-ahead is reading
    _done: set[tuple[int, int]]  # row ranges read in this pass (one read again starts the next)
    _blocks: list[tuple[int, int]]  # the row ranges of the dask array's blocks
    _block_at: dict[tuple[int, int], int]  # where each of them is in _blocks
    _last_start: int | None  # the first row of the block read last: the tasks' direction
    _task_order: dict[tuple[int, int], tuple[int, int] | None]  # each block's successor in dask's task order
    _lock: threading.Lock
    shape: tuple[int, ...]
    ndim: int
    dtype: np.dtype
    span_bytes: int

    def _read(self, selection: Any) -> np.ndarray:
        """The block at ``selection``, decoded (the reader's own)."""
        raise NotImplementedError

    def _read_with_span(self, rows: tuple[int, int], selection: Any) -> np.ndarray:
        """The block at ``rows``, read together with the unread blocks beside it up to ``span_bytes`` (then held ahead)."""
        span, waiting = self._span(rows)
        if not waiting:
            return self._read(selection)
        start = span[0][0]
        try:
            together = self._read((slice(start, span[-1][1]),) + (slice(None),) * (self.ndim - 1))
        except BaseException as exc:
            for future in waiting.values():
                future.set_exception(exc)
            raise
        for (a, b), future in waiting.items():
            future.set_result(together[a - start : b - start])
        return together[rows[0] - start : rows[1] - start]

    def _span(self, rows: tuple[int, int]) -> tuple[list[tuple[int, int]], dict[tuple[int, int], Any]]:
        """``rows`` and the unread blocks beside it within span_bytes, sorted, and the others' futures (in _ahead)."""
        at = self._block_at.get(rows)
        row_bytes = self.dtype.itemsize * math.prod(self.shape[1:])
        if at is None or self.span_bytes < 2 * (rows[1] - rows[0]) * row_bytes or distributed_worker() is not None:
            return [rows], {}  # a worker's task holds its own copy of the reader: nothing to share
        span, left = [rows], self.span_bytes - (rows[1] - rows[0]) * row_bytes
        with self._lock:
            backward = self._last_start is not None and rows[0] < self._last_start
            for step in (-1, 1) if backward else (1, -1):
                near = at + step
                while 0 <= near < len(self._blocks):
                    part = self._blocks[near]
                    size = (part[1] - part[0]) * row_bytes
                    if size > left or part in self._busy or part in self._done or part in self._ahead:
                        break
                    span.append(part)
                    self._busy.add(part)
                    left -= size
                    near += step
            # Registered under the lock: a task wanting one of them waits for this read, never reads it again.
            waiting = {part: concurrent.futures.Future[np.ndarray]() for part in span[1:]}
            self._ahead.update(waiting)
        return sorted(span), waiting

    def read_in_order(self, blocks: list[int]) -> None:
        """Fetch ahead in the order of ``blocks`` (positions in the dask array's blocks: the tasks' order to come)."""
        order = [self._blocks[at] for at in blocks if 0 <= at < len(self._blocks)]
        with self._lock:
            self._task_order = dict(zip(order, [*order[1:], None], strict=True))

    def _fetch_in_order(self, rows: tuple[int, int]) -> bool:
        """Start reading the blocks the tasks read after ``rows`` (up to READ_AHEAD_BLOCKS waiting); False: no order."""
        if rows not in self._task_order:
            return False
        following = self._task_order[rows]
        while following is not None and len(self._ahead) < READ_AHEAD_BLOCKS:
            if following not in self._busy and following not in self._done and following not in self._ahead:
                self._start_read(following)
            following = self._task_order.get(following)
        return True

    def _start_read(self, rows: tuple[int, int]) -> None:
        """Read the block of ``rows`` on the read-ahead pool, marked busy (under the lock)."""
        self._busy.add(rows)
        self._ahead[rows] = read_ahead_pool().submit(self._read, (slice(*rows),) + (slice(None),) * (self.ndim - 1))

    def _fetch_next(self, rows: tuple[int, int]) -> None:
        """Start reading the next block, in dask's task order or the direction the tasks go, that no task has read."""
        start, stop = rows
        size, total = stop - start, self.shape[0]
        with self._lock:
            if self._fetch_in_order(rows):
                return
            # dask may run a pass's chunk tasks last block first (a tree reduction's order): follow it.
            backward, self._last_start = self._last_start is not None and start < self._last_start, start
            if len(self._ahead) >= READ_AHEAD_BLOCKS:
                return
            at = self._block_at.get(rows)
            if at is not None:  # the dask array's own blocks, in its order
                step = -1 if backward else 1
                following: tuple[int, int] | None = None
                while following is None and 0 <= at + step < len(self._blocks):
                    at += step
                    candidate = self._blocks[at]
                    following = None if candidate in self._busy or candidate in self._done else candidate
                if following is None:
                    return
            else:
                following = (stop, min(stop + size, total))
                while following[0] < total and (following in self._busy or following in self._done):
                    following = (following[1], min(following[1] + size, total))
                if following[0] >= total:
                    return
            self._start_read(following)


def verifies_chunks(arr: zarr.Array) -> bool:
    """Whether every chunk of ``arr`` (also inside shards) ends with a CRC-32C that zarr checks on each read."""
    from zarr.codecs import Crc32cCodec, ShardingCodec  # lazy: zarr

    for codec in getattr(arr.metadata, "codecs", None) or ():
        if isinstance(codec, Crc32cCodec):
            return True
        if isinstance(codec, ShardingCodec):
            return any(isinstance(c, Crc32cCodec) for c in codec.codecs)
    return False


#: Stamps of an obstore twin's whole-object reads, in the order they are made.
_READS = itertools.count(1)


def read_stamp() -> int:
    """A stamp smaller than that of every whole-object read an obstore twin makes from now on."""
    return next(_READS)


class _TrailerKeepingStore(zarr.storage.ObjectStore):  # type: ignore[type-arg]
    """zarr's ``ObjectStore`` that keeps the last 4 bytes (a chunk's CRC-32C) of each object it reads whole.

    The rows' token hashes those trailers: taken from the chunks the pass has fetched anyway, they cost no
    request of their own (from S3 a range GET per chunk, and the server's time for it).
    """

    def __init__(self, store: Any, *, read_only: bool = False) -> None:
        super().__init__(store, read_only=read_only)
        self.trailers: dict[str, tuple[int, bytes]] = {}  # key -> (stamp of the read, its last 4 bytes)

    def __getstate__(self) -> dict[str, Any]:
        # Stamps count this process's reads: a copy in another process starts with none kept.
        return {**super().__getstate__(), "trailers": {}}

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        """The object ``key`` (or ``byte_range`` of it); a whole one's trailer kept with the read's stamp."""
        found = await super().get(key, prototype, byte_range)
        if byte_range is None:
            if found is None or len(found) < 4:
                self.trailers.pop(key, None)  # gone: a trailer kept before is no longer the object's
            else:  # as_numpy_array is a view: no copy of the chunk
                self.trailers[key] = (next(_READS), found.as_numpy_array()[-4:].tobytes())
        return found


def fetched_trailers(store: Any, keys: list[str], since: int) -> dict[str, bytes]:
    """The last 4 bytes of those of ``keys`` that ``store`` read whole after :func:`read_stamp` gave ``since``."""
    kept: dict[str, tuple[int, bytes]] = getattr(store, "trailers", {})
    # One look-up a key: zarr's event loop may drop a trailer meanwhile.
    return {key: record[1] for key in keys if (record := kept.get(key)) is not None and record[0] > since}


def object_store_twin(arr: zarr.Array) -> zarr.Array | None:
    """``arr``'s metadata on zarr's ``ObjectStore`` over obstore at the same keys; None where reads stay on s3fs."""
    fs: Any = getattr(arr.store, "fs", None)
    protocol = getattr(fs, "protocol", "")
    if "s3" not in (protocol if isinstance(protocol, tuple) else (protocol,)):
        return None
    if not verifies_chunks(arr):
        return None
    # zarr adds "asynchronous"; the user's own options are all the others.
    options = {k: v for k, v in fs.storage_options.items() if k != "asynchronous"}
    client = options.pop("client_kwargs", None) or {}
    if set(options) - set(_OBSTORE_OPTIONS) or set(client) - {"region_name", "endpoint_url"}:
        return None
    config = {_OBSTORE_OPTIONS[k]: v for k, v in options.items() if v is not None}
    env = os.environ.get  # where botocore looks when the options do not say
    config["endpoint"] = (
        client.get("endpoint_url")
        or config.get("endpoint")
        or env("AWS_ENDPOINT_URL_S3")
        or env("AWS_ENDPOINT_URL")
    )
    config["region"] = client.get("region_name") or env("AWS_REGION") or env("AWS_DEFAULT_REGION")
    keyed = "access_key_id" in config or config.get("skip_signature") or env("AWS_ACCESS_KEY_ID")
    # botocore finds a profile's credentials and the bucket's region itself; obstore does not.
    if not keyed or env("AWS_PROFILE") or not config["region"]:
        return None
    bucket, _, prefix = str(getattr(arr.store, "path", "")).strip("/").partition("/")
    probe = f"{arr.store_path.path}/zarr.json".lstrip("/")
    store = _obstore_of(
        bucket, prefix, probe, tuple(sorted((k, v) for k, v in config.items() if v))
    )
    if store is None:
        return None
    from zarr.core.array import AsyncArray  # lazy: the same metadata on another store
    from zarr.storage import StorePath  # lazy: zarr

    path = StorePath(store, arr.store_path.path)
    return zarr.Array(AsyncArray(arr.metadata, path, config=arr._async_array.config))


@functools.cache
def _obstore_of(bucket: str, prefix: str, probe: str, config: tuple[tuple[str, Any], ...]) -> Any:
    """A read-only zarr store over obstore for ``bucket``/``prefix`` once it has read ``probe``; else None."""
    try:
        from obstore.store import S3Store  # lazy and optional: the [s3] extra
    except ImportError:
        return None
    from zarr.core.buffer import default_buffer_prototype  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    options = dict(config)
    allow_http = str(options.get("endpoint", "")).startswith("http://")
    try:
        s3 = S3Store(
            bucket, prefix=prefix or None, client_options={"allow_http": allow_http}, **options
        )
        store = _TrailerKeepingStore(s3, read_only=True)
        # A key s3fs has just read: where obstore cannot (credentials it looks for elsewhere), s3fs reads.
        if sync(store.get(probe, default_buffer_prototype())) is None:
            return None
    except Exception:  # noqa: BLE001 - any failure of the optional client leaves the reads to s3fs
        return None
    return store
