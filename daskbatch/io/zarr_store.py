"""A Zarr store opened for reading: its arrays, their chunk grid and integrity, and dask views of them.

Blocks are read through :class:`BlockReader`, CF-decoded as xarray does; a failing chunk is named. An absent
chunk is the fill value, or lost in stores whose writer records that it writes every chunk.
"""

from __future__ import annotations

import binascii
import concurrent.futures
import functools
import itertools
import math
import os
import struct
import threading
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np
import zarr

from daskbatch._common import warn
from daskbatch.errors import DataError, IncompleteStoreWarning, MissingChunksWarning
from daskbatch.io.chunk_decode import DirectBlocks, direct_blocks
from daskbatch.io.chunk_grid import (
    WRITES_EVERY_CHUNK,
    AbsentChunkError,
    Chunks,
    Missing,
    array_label,
    block_read,
    chunk_key,
    every_chunk_reader,
    is_local_fs,
    open_facts,
    row_blocks,
    storage_chunks,
    store_location,
    writes_every_chunk,
)
from daskbatch.io.object_store import (
    READ_AHEAD_BLOCKS,
    ReadAhead,
    follow_task_order,
    object_store_twin,
    row_range,
)
from daskbatch.io.outputs import MARKER, zarr_target
from daskbatch.runtime.capacity import distributed_worker

#: Group attribute written by daskbatch (synth, ingest) naming the arrays.
LAYOUT_ATTR = "daskbatch"
#: CF attributes of packed values, as xarray writes and decodes them.
CF_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")
#: What zarr warns about each object in a group that is no Zarr node (ingest's manifest and done log).
FOREIGN_OBJECT = r"Object at .* is not recognized as a component of a Zarr hierarchy"

MissingPolicy = Literal["auto", "raise", "skip", "fill"]
#: ``auto``: ``fill`` where the writer leaves out chunks of fill values, ``raise`` where it
#: records storing every chunk; ``skip``: the rows whose chunks are present; ``fill``: zarr's reading.
MISSING_POLICIES: tuple[str, ...] = ("auto", "raise", "skip", "fill")


# --------------------------------------------------------------------------- reading blocks


def cf_attributes(arr: zarr.Array) -> dict[str, Any]:
    """The CF attributes xarray decodes ``arr`` with, ``_FillValue`` as a number (empty: read as stored)."""
    cf = {k: arr.attrs[k] for k in CF_ATTRS if k in arr.attrs}
    if arr.metadata.zarr_format == 2:
        # xarray's v2 reader takes the metadata fill value as _FillValue, for arrays it wrote
        # (zarr's own default fill value of other writers' stores must not turn zeros into NaN).
        if (cf or "_ARRAY_DIMENSIONS" in arr.attrs) and arr.fill_value is not None:
            cf["_FillValue"] = arr.fill_value.item() if hasattr(arr.fill_value, "item") else arr.fill_value
    elif cf.get("_FillValue", 0) is None:
        del cf["_FillValue"]  # null: no fill value (xarray would refuse the store)
    elif "_FillValue" in cf:
        cf["_FillValue"] = _decoded_fill_value(arr, cf["_FillValue"])
    return cf


def _decoded_fill_value(arr: zarr.Array, value: Any) -> Any:
    """A v3 ``_FillValue`` attribute as xarray decodes it (floats are base64 of a little-endian float64)."""
    from xarray.backends.zarr import FillValueCoder  # lazy: xarray

    dtype = np.dtype(arr.dtype)
    if dtype.kind in "fc" and isinstance(value, int | float) and not isinstance(value, bool):
        return value  # a plain number (other writers) means itself; xarray would refuse it
    try:
        return FillValueCoder.decode(value, dtype)
    except (TypeError, ValueError, binascii.Error, struct.error) as exc:
        raise DataError(
            f"{array_label(arr)} has _FillValue attribute {value!r}, which is no {dtype} value "
            f"({exc}); xarray cannot read it either"
        ) from exc


def _is_remote(store: Any) -> bool:
    """Whether ``store`` is an fsspec store on another machine (each read a round trip), not a local one."""
    fs = getattr(store, "fs", None)
    return fs is not None and not is_local_fs(fs)


class BlockReader(ReadAhead):
    """``reader[selection]`` reads ``arr`` CF-decoded as xarray does; a failing chunk raises a DataError naming it.

    A chunk a read finds absent (lost since the store's open listed it) is refused as the open refuses it under
    ``missing`` (:data:`MISSING_POLICIES`; ``skip`` reads no chunk absent at the open, so refuses as ``auto``),
    ``lost``: whether its writer stored every chunk (default: from ``arr``'s attributes); ``where`` names the store
    and ``role`` the array.
    """

    def __init__(self, arr: zarr.Array, span_bytes: int = 0, *, missing: MissingPolicy = "auto",
                 lost: bool | None = None, where: str | None = None,
                 role: Literal["x", "label"] = "x") -> None:
        self.arr, self.shape, self.ndim = arr, tuple(arr.shape), arr.ndim
        self.lost = writes_every_chunk(arr) if lost is None else lost
        self.refuse_absent = missing == "raise" or missing != "fill" and self.lost
        self.where, self.role = where if where is not None else store_location(arr.store), role
        # A label's blocks are small: from an object store, a task's read takes the unread blocks beside it, up to
        # span_bytes, in one zarr read (its chunks fetched concurrently), so a label scan costs a round trip or two.
        self.span_bytes = span_bytes
        self.cf = cf_attributes(arr)
        self.decode = None
        self.dtype = np.dtype(arr.dtype)
        # A label needs a class on every row: an integer one is read as stored (xarray would make floats with NaN),
        # and a row holding its fill value (xarray's missing value) is refused as it is read.
        fills = role == "label" and self.dtype.kind in "iu" and set(self.cf) <= {"_FillValue", "missing_value"}
        self.no_class, self.cf = (tuple(self.cf.values()), {}) if fills else ((), self.cf)
        if self.cf:
            import xarray as xr  # lazy: xarray

            dims = tuple(f"dim_{i}" for i in range(arr.ndim))

            def _decode(block: np.ndarray) -> np.ndarray:
                """One block, decoded by xarray."""
                variable = xr.Variable(dims, block, attrs=dict(self.cf))
                return np.asarray(xr.conventions.decode_cf_variable(arr.path or "x", variable).values)

            try:
                self.dtype = _decode(np.empty((0,) * arr.ndim, dtype=arr.dtype)).dtype
            except (TypeError, ValueError) as exc:  # attributes of the wrong type: a scale_factor string
                raise DataError(f"{array_label(arr)} has CF attributes {self.cf} that xarray cannot decode: {exc}") from exc
            self.decode = _decode

        # An object store answers a request after a round trip: while a thread computes one block, the next
        # block no task has read yet is fetched (at most READ_AHEAD_BLOCKS waiting), so the round trips overlap.
        self.read_ahead = _is_remote(arr.store)
        self.twin = object_store_twin(arr) if self.read_ahead else None  # the same chunks, less CPU per byte
        self._ahead: dict[tuple[int, int], concurrent.futures.Future[np.ndarray]] = {}
        self._busy: set[tuple[int, int]] = set()  # row ranges a task or a read-ahead is reading
        self._done: set[tuple[int, int]] = set()  # row ranges read in this pass (one read again starts the next)
        self._blocks: list[tuple[int, int]] = []  # the row ranges of the dask array's blocks (as_dask)
        self._block_at: dict[tuple[int, int], int] = {}  # where each of them is in _blocks
        self._last_start: int | None = None  # the first row of the block read last: the tasks' direction
        self._task_order: dict[tuple[int, int], tuple[int, int] | None] = {}  # set by a local scheduler's compute
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BlockReader({array_label(self.arr)})"

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process starts with nothing fetched ahead (and a lock of its own).
        kept = {k: v for k, v in self.__dict__.items()
                if k not in ("_ahead", "_busy", "_done", "_lock", "twin", "source", "direct")}
        return kept | {"_last_start": None, "_task_order": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _ahead={}, _busy=set(), _done=set(), _lock=threading.Lock())
        self.twin = object_store_twin(self.arr) if self.read_ahead else None  # this process's own client

    @functools.cached_property
    def direct(self) -> DirectBlocks | None:
        """The decoder of a local store's plain chunks straight into each block, None where zarr reads them."""
        return direct_blocks(self.arr)  # at the first read: a task's work, not the open's

    @functools.cached_property
    def source(self) -> zarr.Array:
        """The array the blocks are read from: the twin or ``arr``, its store's "not found" refused where asked."""
        # The chunks present at the open may be deleted before a read; zarr would read fill values in their place.
        # The store's own answer says so, at no extra request per chunk.
        source = self.arr if self.twin is None else self.twin
        return every_chunk_reader(source) if self.refuse_absent else source

    def __getitem__(self, selection: Any) -> np.ndarray:
        rows = row_range(selection, self.shape) if self.read_ahead else None
        if rows is None:
            return self._read(selection)
        with self._lock:
            if rows in self._done:  # a second pass over the rows
                self._done.clear()
                self._last_start = None
            fetched = self._ahead.pop(rows, None)
            self._busy.add(rows)
        try:
            block = fetched.result() if fetched is not None else self._read_with_span(rows, selection)
        finally:
            with self._lock:
                self._busy.discard(rows)
                self._done.add(rows)
            block_read(self.arr)
        if distributed_worker() is None:  # a worker's task holds its own copy of the reader: nothing to share
            self._fetch_next(rows)
        return block

    def _read(self, selection: Any) -> np.ndarray:
        """The block at ``selection``, decoded; a failing chunk named."""
        direct = self.direct
        rows = row_range(selection, self.shape) if direct is not None else None
        block = direct.read(*rows) if direct is not None and rows is not None else None
        try:
            block = np.asarray(self.source[selection]) if block is None else block
        except DataError:
            raise
        except AbsentChunkError as exc:
            raise DataError(self._absent_refusal(selection, exc.key)) from None
        except Exception as exc:  # noqa: BLE001 - any codec/store error: name the chunk
            raise self._chunk_error(selection, exc)  # noqa: B904 - chained to the chunk's own error
        if self.no_class and (hit := np.isin(block, self.no_class)).any():
            first = (selection[0] if isinstance(selection, tuple) else selection).start or 0
            raise DataError(f"{array_label(self.arr)} holds its fill value {self.no_class[0]} (xarray's missing value) "
                            f"in {int(hit.sum()):,} rows from row {first + int(np.argmax(hit)):,}: a label needs a "
                            "class on every row")
        return block if self.decode is None else np.asarray(self.decode(block), dtype=self.dtype)

    def _absent_refusal(self, selection: Any, key: str) -> str:
        """The refusal of the absent chunk at ``key`` inside ``selection``, as the open words it for a chunk absent there."""
        rows_per = storage_chunks(self.arr)[0]
        at = next((c[0] for c in self._chunks_in(selection) if chunk_key(self.arr, c) == key), 0)
        rows = [(at * rows_per, min((at + 1) * rows_per, self.shape[0]))]
        keys = [key]
        absent = Missing(x_keys=keys, row_ranges=rows) if self.role == "x" else Missing(label_keys=keys, row_ranges=rows)
        return absent.refusal(self.arr, self.arr, self.where, lost=self.lost)

    def _chunk_error(self, selection: Any, exc: Exception) -> DataError:
        """The DataError for the first chunk inside ``selection`` that fails, chained to its error."""
        chunks = storage_chunks(self.arr)
        for coords in self._chunks_in(selection):
            try:
                self.arr[tuple(slice(i * c, min((i + 1) * c, n))
                               for i, c, n in zip(coords, chunks, self.shape, strict=True))]
            except Exception as inner:  # noqa: BLE001 - the chunk we are looking for
                error = DataError(f"cannot read chunk {chunk_key(self.arr, coords)!r} (grid position "
                                  f"{coords}) of {array_label(self.arr)}: {type(inner).__name__}: {inner}")
                error.__cause__ = inner
                return error
        # The failure did not reproduce chunk by chunk: report the selection.
        sel = selection if isinstance(selection, tuple) else (selection,)
        error = DataError(f"cannot read rows {sel[0]} of {array_label(self.arr)}: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return error

    def _chunks_in(self, selection: Any) -> Iterator[tuple[int, ...]]:
        """The grid positions of the stored chunks (shards) that ``selection`` reads, in order."""
        sel = (selection if isinstance(selection, tuple) else (selection,)) + (slice(None),) * self.ndim
        ranges = []
        for s, n, c in zip(sel[: self.ndim], self.shape, storage_chunks(self.arr), strict=True):
            start, stop, _ = s.indices(n) if isinstance(s, slice) else (int(s), int(s) + 1, 1)
            ranges.append(range(start // c, max(start // c + 1, math.ceil(stop / c))))
        return itertools.product(*ranges)

    def as_dask(self, row_chunks: int | tuple[int, ...], where: str) -> da.Array:
        """A lazy dask array of these blocks, chunked along rows only."""
        chunks = (row_chunks,) + tuple(self.shape[1:])
        # The decoding is part of what the blocks hold: a store rewritten with another fill value is other data.
        token = dask.base.tokenize(where, self.arr.path, self.shape, str(self.arr.dtype), chunks,
                                   self.cf and repr(sorted(self.cf.items())))
        blocks = da.from_array(self, chunks=chunks, name=f"daskbatch-read-{token}", asarray=False, fancy=False,
                               inline_array=True, meta=np.empty((0,) * self.ndim, dtype=self.dtype))
        ends = np.cumsum((0,) + blocks.chunks[0]).tolist()
        self._blocks = list(zip(ends[:-1], ends[1:], strict=True))  # what the read-ahead steps through
        self._block_at = {rows: at for at, rows in enumerate(self._blocks)}
        if self.read_ahead:  # a local scheduler's compute says in which order its tasks read these blocks
            follow_task_order(blocks.name, self)
        return blocks


# --------------------------------------------------------------------------- the store


def group_arrays(group: zarr.Group, *, max_depth: int | None = None) -> list[tuple[str, zarr.Array]]:
    """The arrays under ``group`` with their paths, passing over files that are no Zarr node."""
    import warnings

    _drop_abandoned_member_reads()
    with warnings.catch_warnings():  # files beside the nodes (ingest's manifest) are the writer's own
        warnings.filterwarnings("ignore", message=FOREIGN_OBJECT)
        members = list(group.members(max_depth=max_depth))
    return [(name, node) for name, node in members if isinstance(node, zarr.Array)]


@functools.cache
def _drop_abandoned_member_reads() -> None:
    """On zarr's event loop, drop the "Task exception was never retrieved" tracebacks of a group's abandoned member reads."""
    # Listing a group's members, zarr reads every member at once and raises the first failure (a damaged
    # zarr.json): the other failing reads are left unawaited, and asyncio logs each with a traceback when it
    # is collected, after the one-line error daskbatch gave. Only those records are dropped.
    import asyncio

    from zarr.core.sync import sync  # lazy: zarr

    async def install() -> None:
        """Set the handler on the running loop (zarr's)."""
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            """Pass on every context but an abandoned member read's."""
            future = context.get("future")
            coro = future.get_coro() if isinstance(future, asyncio.Task) else None
            if getattr(coro, "__qualname__", "") == "_getitem_semaphore" and "exception" in context:
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)

    sync(install())


def json_object(value: object) -> dict[str, Any]:
    """An attribute value as a dict when it is a JSON object, else an empty dict."""
    return value if isinstance(value, dict) else {}


def clean_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes without xarray's and daskbatch's bookkeeping (values are read decoded)."""
    drop = {WRITES_EVERY_CHUNK, *CF_ATTRS}
    return {k: v for k, v in dict(attrs).items() if not k.startswith("_") and k not in drop}


def _open_node(target: Any, options: dict[str, Any]) -> zarr.Group | zarr.Array:
    """The group (or else the array) at ``target``, read-only, in as few round trips as zarr allows."""
    try:
        # A group first: zarr.open tries an array first, and on an object store each try costs
        # round trips (about 3 of the 8 of an open at 100 ms a request); stores are mostly groups.
        return zarr.open_group(target, mode="r", **options)
    except (zarr.errors.ContainsArrayError, zarr.errors.NodeNotFoundError):
        return zarr.open(target, mode="r", **options)


class ZarrStore:
    """A Zarr store (path, URL, ``::`` path, zip file, or an open group or array) opened read-only."""

    def __init__(self, path_or_url: Any, storage_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(path_or_url, zarr.Group | zarr.Array):
            self.root, self.where = path_or_url, store_location(path_or_url.store)
        else:
            where = os.fspath(path_or_url) if isinstance(path_or_url, os.PathLike) else path_or_url
            if not isinstance(where, str):
                raise TypeError(f"expected a path, URL or zarr group/array, got {type(where).__name__}")
            options: dict[str, Any] = {"storage_options": dict(storage_options)} if storage_options else {}
            target: Any = zarr_target(where, read_only=True)
            if where.endswith(".zip") and os.path.isfile(where):  # zarr.open takes a path for directories only
                target = zarr.storage.ZipStore(where, mode="r")
            try:
                self.root, self.where = _open_node(target, options), where
            except (FileNotFoundError, zarr.errors.NodeNotFoundError) as exc:
                raise DataError(f"no Zarr store at {where!r}") from exc
            except Exception as exc:  # noqa: BLE001 - an object store's client errors share no base class
                if "://" not in where:
                    raise
                raise DataError(f"cannot open {where!r}: {type(exc).__name__}: {exc}") from exc
        self.attrs = dict(self.root.attrs) if isinstance(self.root, zarr.Group) else {}
        self.layout = json_object(self.attrs.get(LAYOUT_ATTR))

    @classmethod
    def read_store(cls, path_or_url: Any, x: str = "X", label: str | zarr.Array | None = None, *, chunks: Chunks = "auto",
                   storage_options: Mapping[str, Any] | None = None, missing: str = "auto") -> dict[str, Any]:
        """The whole open path in one call: the store opened, ``x`` and its label read (the fields of :meth:`read`)."""
        # One entry, so that opening a store enters this module once and calls only down (outputs, chunk_grid).
        if missing not in MISSING_POLICIES:
            raise ValueError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
        return cls(path_or_url, storage_options).read(x, label, chunks=chunks, missing=missing)  # type: ignore[arg-type]

    def array_names(self) -> list[str]:
        """The arrays of the root group, sorted."""
        return sorted(name for name, _ in group_arrays(self.root, max_depth=0))  # type: ignore[arg-type]

    def array(self, name: str | None, what: str, noun: str = "array") -> zarr.Array:
        """The array ``name`` (``what`` it is and the ``noun`` for its name, for messages); a bare array is x."""
        if isinstance(self.root, zarr.Array):
            if what != "x":
                raise DataError(f"{self.where!r} is a single array, not a group with a {what} {noun} {name!r}")
            return self.root
        if name is None:
            raise DataError(f"{self.where!r} is a group; name the {what} array (have: {self.array_names()})")
        try:
            node = self.root[name]
        except KeyError:  # zarr's lookup errors (KeyError from FileNotFoundError) add nothing to the list
            raise DataError(f"{what} {noun} {name!r} not found in {self.where!r}; arrays there: "
                            f"{self.array_names()}") from None
        if not isinstance(node, zarr.Array):
            raise DataError(f"{what} {noun} {name!r} is a Zarr group, not an array (in {self.where!r})")
        return node

    def feature_names(self, arr: zarr.Array) -> list[str]:
        """Names from the attributes, else an xarray dimension coordinate, else f0, f1, ..."""
        n = int(arr.shape[1])
        for attrs in (arr.attrs, self.attrs):
            names = attrs.get("feature_names")  # untyped JSON: n values; a string is one name
            if isinstance(names, Collection) and not isinstance(names, str) and len(names) == n:
                return [str(v) for v in names]
        dims = getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS")
        if isinstance(dims, list | tuple) and len(dims) == 2 and isinstance(dims[1], str):
            coord = self.root.get(dims[1]) if isinstance(self.root, zarr.Group) else None
            if isinstance(coord, zarr.Array) and coord.ndim == 1 and coord.shape[0] == n:
                return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(coord[:]).tolist()]
        return [f"f{i}" for i in range(n)]

    def read(self, x: str = "X", label: str | zarr.Array | None = None, *, chunks: Chunks = "auto",
             missing: MissingPolicy = "auto") -> dict[str, Any]:
        """Open ``x`` and its label (a name, or an array of this store), checked, as dask arrays: a Dataset's fields."""
        arr = self.array(x, "x")
        if arr.ndim != 2:
            raise DataError(f"{array_label(arr)} has shape {arr.shape}; daskbatch needs a 2-D (samples x features) array")
        label_name = label if label is not None else self.layout.get("label")
        if label_name is not None and not isinstance(label_name, str | zarr.Array):
            raise DataError(f"{self.where!r} records label {label_name!r} in its {LAYOUT_ATTR!r} attribute; "
                            "expected an array name")
        label_arr = None
        if label_name is not None:
            label_arr = label_name if isinstance(label_name, zarr.Array) else self.array(label_name, "label")
            if label_arr.ndim != 1 or label_arr.shape[0] != arr.shape[0]:
                raise DataError(f"label {array_label(label_arr)} has shape {label_arr.shape}; expected "
                                f"({arr.shape[0]},) to match the rows of {arr.path!r}")
        row_chunks, store_chunks, absent, next_read = open_facts(arr, label_arr, chunks, self.attrs)
        writer = self.attrs.get(MARKER)  # ingest, transform, map_batches: resumable row stores
        complete = not (isinstance(writer, str) and self.attrs.get("complete") is False)
        if not complete:
            warn(f"{self.where!r} was written by a daskbatch {writer} that did not finish; its data is incomplete. "
                 f"Re-run the same {writer} command to finish it.", IncompleteStoreWarning)
        # The Zarr contract: an absent chunk is the fill value, unless its writer stores every chunk.
        policy = ("raise" if absent.lost else "fill") if missing == "auto" else missing
        if absent.count and policy == "raise":
            raise DataError(self._refusal(absent, arr, label_arr, complete))
        skip = absent.row_ranges if policy == "skip" else []
        sizes, keep = row_blocks(int(arr.shape[0]), row_chunks, skip) if skip else (row_chunks, None)
        # A chunk lost after this open is refused by the read as here (the listing above found it).
        checks: dict[str, Any] = {"missing": missing, "where": self.where}
        x_reader = BlockReader(arr, lost=absent.every_chunk[0], **checks)
        views = [x_reader.as_dask(sizes, self.where),
                 None if label_arr is None else BlockReader(label_arr, span_bytes=self._label_span_bytes(x_reader, sizes),
                                                            role="label", lost=absent.every_chunk[1],
                                                            **checks).as_dask(sizes, self.where)]
        if keep is not None:  # blocks break where a skipped range starts or stops: keep the others
            views = [None if v is None else da.concatenate([v.blocks[i] for i in keep], axis=0) for v in views]
        if absent.count and (policy == "skip" or missing == "fill" and absent.lost):
            warn(f"{absent.message(arr, label_arr)}: {'left out' if skip else 'read as fill values'}",
                 MissingChunksWarning)
        return dict(
            x=views[0], label=views[1], feature_names=self.feature_names(arr), store_chunks=store_chunks,
            path=self.where, array_name=arr.path, attrs={**self.attrs, **clean_attrs(arr.attrs)},
            missing_chunks=absent.x_chunks, label_name=label_arr.path if label_arr is not None else None,
            zarr_format=int(arr.metadata.zarr_format), missing_chunk_keys=absent.x_keys, complete=complete,
            label_missing_chunks=absent.label_chunks, label_missing_chunk_keys=absent.label_keys,
            missing_policy=missing, skipped_rows=skip, absent_lost=absent.lost,
            absent_read_as="" if skip else _absent_read_as(arr, label_arr, absent),
            zarr_x=arr, zarr_label=label_arr, block_read=next_read, read_ahead_blocks=READ_AHEAD_BLOCKS if x_reader.read_ahead else 0,
        )

    @staticmethod
    def _label_span_bytes(x_reader: BlockReader, sizes: int | tuple[int, ...]) -> int:
        """The label bytes one read may take together from an object store: one of X's blocks (the planner counts it)."""
        rows = sizes if isinstance(sizes, int) else max(sizes)
        return rows * x_reader.dtype.itemsize * math.prod(x_reader.shape[1:]) if x_reader.read_ahead else 0

    def _refusal(self, absent: Missing, arr: zarr.Array, label: zarr.Array | None, complete: bool) -> str:
        """The one-line refusal for absent chunks: why they matter and what restores them."""
        if not complete:
            writer = self.attrs.get(MARKER)
            remedy = f"the {writer} that wrote them did not finish: re-run the same {writer} command"
            return absent.refusal(arr, label, self.where, remedy=remedy)
        return absent.refusal(arr, label, self.where, lost=bool(absent.lost))


def _absent_read_as(arr: zarr.Array, label: zarr.Array | None, absent: Missing) -> str:
    """What each array's first absent chunk reads as, decoded (``"X: 0.0; y: 0"``): one element, read."""
    parts = []
    for node, positions in ((arr, absent.x_chunks), (label, absent.label_chunks)):
        if node is not None and positions:
            corner = tuple(slice(p * c, p * c + 1) for p, c in zip(positions[0], node.chunks, strict=True))
            parts.append(f"{node.path or 'x'}: {BlockReader(node, missing='fill')[corner].reshape(-1)[0].item()!r}")
    return "; ".join(parts)
