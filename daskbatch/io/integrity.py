"""Find missing and corrupt chunks of a Zarr array, and name them in errors.

Zarr returns the fill value for a chunk that is absent from the store, so a
summary of a store with lost chunks would silently include invented rows.
:func:`missing_chunks` lists the absent chunks by comparing the keys the
array should have with the keys the store holds.  :class:`BlockReader` reads
blocks for dask and turns a decode failure into a :class:`~daskbatch.errors.DataError`
that names the array, the chunk key and its grid position, chained to the codec
error.

For a sharded array a whole shard (one object in the store) or an inner chunk
inside it can be absent: :func:`missing_chunks` reads the index of every
stored shard (zarr's own decoding of it) and lists absent chunks in the grid
of inner chunks, which is the unit zarr fills.

Whether an absent chunk is data lost or the fill value is the writer's call.
Zarr, xarray and dask leave out every chunk that holds only the fill value
(zarr's ``write_empty_chunks=False`` default), so there an absent chunk *is*
the fill value.  daskbatch writes every chunk and records it in the array
attribute :data:`WRITES_EVERY_CHUNK` (:func:`writes_every_chunk`), so in its
own stores an absent chunk is a loss.

Metadata alone can claim any shape: :func:`check_chunk_count` refuses an array
with more chunks than ``daskbatch.max-chunks`` before anything enumerates its
grid or builds a graph over it, so a store that claims 10^15 rows with no data
behind them fails at once instead of exhausting memory.  Stores that daskbatch
writes carry a CRC-32C checksum on every chunk (:func:`checksummed`), so a
flipped byte fails the read instead of changing the numbers;
:func:`verify_store` decodes every chunk of a store and reports what is wrong.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dask.config
import numpy as np
import zarr

from daskbatch.errors import DataError

if TYPE_CHECKING:
    from daskbatch.io.verify import VerifyReport

__all__ = [
    "WRITES_EVERY_CHUNK",
    "BlockReader",
    "absent_name",
    "absent_positions",
    "check_chunk_count",
    "check_feature_count",
    "checksummed",
    "chunk_key",
    "max_chunks",
    "max_features",
    "missing_chunks",
    "shard_maps",
    "storage_chunks",
    "verify_store",
    "writes_every_chunk",
]

#: ``daskbatch.max-chunks`` when the dask config does not set it.
DEFAULT_MAX_CHUNKS = 200_000

#: Array attribute set by every daskbatch writer: each chunk is stored, even one
#: of fill values, so a chunk absent from the store was lost.
WRITES_EVERY_CHUNK = "daskbatch:writes_every_chunk"
#: Group attributes of stores that daskbatch wrote before :data:`WRITES_EVERY_CHUNK`
#: existed (the layout of synth, ingest, transform and map_batches outputs, and
#: ingest's manifest); those writers already stored every chunk.  Not
#: ``daskbatch_output``: a saved summary has it, and leaves out chunks of fill values.
_OWN_GROUP_ATTRS = ("daskbatch", "daskbatch_ingest")


def writes_every_chunk(arr: zarr.Array, group_attrs: Mapping[str, Any] | None = None) -> bool:
    """Tell whether ``arr``'s writer stored every chunk, so that an absent chunk is a loss.

    Parameters
    ----------
    arr : zarr.Array
        The array.
    group_attrs : mapping, optional
        Attributes of the store's root group (marks of earlier daskbatch versions).

    Returns
    -------
    bool
        True for arrays daskbatch wrote; False for any other writer, whose
        absent chunks are the fill value (the Zarr contract).
    """
    if arr.attrs.get(WRITES_EVERY_CHUNK) is True:
        return True
    return any(key in (group_attrs or {}) for key in _OWN_GROUP_ATTRS)


def checksummed(compressor: Any | None) -> tuple[Any, ...]:
    """The ``compressors`` of an array daskbatch writes: ``compressor`` then a CRC-32C checksum.

    The checksum is computed over the compressed bytes and checked by zarr on
    every read, so any changed or missing byte of a stored chunk raises instead
    of decoding to different numbers (zstd's own frame checksum is off in zarr).

    Parameters
    ----------
    compressor : zarr BytesBytesCodec or None
        The compressor (``None``: store the raw bytes, still checksummed).

    Returns
    -------
    tuple
        Codecs for ``zarr.create_array(..., compressors=...)``.
    """
    from zarr.codecs import Crc32cCodec

    return (Crc32cCodec(),) if compressor is None else (compressor, Crc32cCodec())


#: Default of ``daskbatch.max-features`` (names alone are about 60 bytes a feature).
DEFAULT_MAX_FEATURES = 2_000_000


def max_chunks() -> int:
    """Read the configured ``daskbatch.max-chunks``: the most chunks one array may have.

    Returns
    -------
    int
        The limit.
    """
    value = dask.config.get("daskbatch.max-chunks", DEFAULT_MAX_CHUNKS)
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"daskbatch.max-chunks must be a whole number, got {value!r}") from None
    if limit < 1:
        raise ValueError(f"daskbatch.max-chunks must be at least 1, got {limit}")
    return limit


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
    return math.prod(_grid(arr))


def check_chunk_count(arr: zarr.Array, blocks: int | None = None) -> None:
    """Refuse ``arr`` when its chunk grid (or ``blocks`` dask blocks) exceeds ``daskbatch.max-chunks``.

    Only arithmetic on the metadata: runs before anything lists, enumerates or
    builds a task graph, so a store whose metadata claims an absurd shape fails
    in microseconds.

    Parameters
    ----------
    arr : zarr.Array
        The array to check.
    blocks : int, optional
        Dask blocks a reader would build over it (checked against the same limit).

    Raises
    ------
    DataError
        One line naming the array, its shape, its chunk count and the limit.
    """
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


def max_features() -> int:
    """Read the configured ``daskbatch.max-features``: the most features (columns) one array may claim.

    Returns
    -------
    int
        The limit.
    """
    value = dask.config.get("daskbatch.max-features", DEFAULT_MAX_FEATURES)
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"daskbatch.max-features must be a whole number, got {value!r}") from None
    if limit < 1:
        raise ValueError(f"daskbatch.max-features must be at least 1, got {limit}")
    return limit


def check_feature_count(arr: zarr.Array) -> None:
    """Refuse ``arr`` when its metadata claims more features than ``daskbatch.max-features``.

    Names, per-feature states and tables all grow with the features: a shape of
    10**8 columns in a 1 kB metadata file would otherwise cost gigabytes before
    anything is read.

    Parameters
    ----------
    arr : zarr.Array
        The (samples x features) array to check.

    Raises
    ------
    DataError
        One line naming the array, its feature count and the limit.
    """
    limit = max_features()
    n = int(arr.shape[1]) if arr.ndim == 2 else 0
    if n > limit:
        raise DataError(
            f"{array_label(arr)} claims {n:,} features > daskbatch.max-features {limit:,}; "
            "if the store really has that many, raise daskbatch.max-features"
        )


def verify_store(path_or_url: Any, **kwargs: Any) -> VerifyReport:
    """Decode and check every chunk of every array in a store; see :func:`daskbatch.io.verify.verify_store`.

    Parameters
    ----------
    path_or_url : str, os.PathLike or zarr.Group
        The store.
    **kwargs
        Passed to :func:`daskbatch.io.verify.verify_store`.

    Returns
    -------
    VerifyReport
        Every problem found.
    """
    from daskbatch.io.verify import verify_store as _verify

    return _verify(path_or_url, **kwargs)


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


def _grid(arr: zarr.Array) -> tuple[int, ...]:
    return tuple(
        math.ceil(s / c) if s else 0 for s, c in zip(arr.shape, storage_chunks(arr), strict=True)
    )


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


def missing_chunks(arr: zarr.Array) -> list[tuple[int, ...]]:
    """Grid positions of chunks of ``arr`` that are absent from its store.

    Parameters
    ----------
    arr : zarr.Array
        The array to check.

    Returns
    -------
    list of tuple of int
        Sorted positions in the grid of ``arr.chunks``: for a sharded array,
        inner chunks absent from a stored shard's index and every inner chunk
        of an absent shard.

    Raises
    ------
    DataError
        The array has more chunks than ``daskbatch.max-chunks`` (checked first).

    Notes
    -----
    One listing of the keys under the array's prefix tells what is stored (zarr's
    own ``nchunks_initialized`` would do the same listing); the expected keys are
    compared with it only after :func:`check_chunk_count` has bounded the grid.
    A sharded array also costs one read of each stored shard's index.
    """
    check_chunk_count(arr)
    if math.prod(_grid(arr)) == 0:
        return []
    return absent_positions(arr, _stored_keys(arr))


def absent_positions(arr: zarr.Array, present: set[str]) -> list[tuple[int, ...]]:
    """Grid positions of the chunks of ``arr`` absent from ``present`` (a listing), as :func:`missing_chunks`.

    Parameters
    ----------
    arr : zarr.Array
        The array, its chunk count already checked.
    present : set of str
        The keys stored under the array, relative to it.

    Returns
    -------
    list of tuple of int
        Sorted positions in the grid of ``arr.chunks``.
    """
    grid = _grid(arr)
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

    from zarr.codecs import ShardingCodec
    from zarr.core.sync import sync

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
        A position as :func:`missing_chunks` gives it.

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


def _stored_keys(arr: zarr.Array) -> set[str]:
    """Keys under ``arr``'s prefix, relative to it (one store listing)."""
    # zarr 3 stores only list asynchronously; zarr's own ``sync`` runs the coroutine
    # on zarr's event loop, which async fsspec file systems are bound to.
    from zarr.core.sync import sync

    prefix = arr.store_path.path.strip("/")

    async def _collect() -> set[str]:
        keys = set()
        async for key in arr.store_path.store.list_prefix(prefix + "/" if prefix else ""):
            keys.add(key[len(prefix) + 1 :] if prefix else key)
        return keys

    return sync(_collect())


class BlockReader:
    """Array-like wrapper over a zarr array for ``dask.array.from_array``.

    ``reader[selection]`` reads like the zarr array, but a chunk that cannot be
    read or decoded raises :class:`DataError` naming the array, the chunk key and
    its grid position, chained (``raise ... from``) to the codec error.

    Parameters
    ----------
    arr : zarr.Array
        The array to read.
    decode : callable, optional
        Applied to every block read (CF decoding of packed values).
    dtype : numpy.dtype, optional
        The dtype ``decode`` returns (default: the array's).
    """

    def __init__(self, arr: zarr.Array, decode: Any = None, dtype: Any = None) -> None:
        self.arr = arr
        self.shape = tuple(arr.shape)
        self.dtype = np.dtype(arr.dtype if dtype is None else dtype)
        self.ndim = len(self.shape)
        self.decode = decode

    def __repr__(self) -> str:
        return f"BlockReader({array_label(self.arr)})"

    def __getitem__(self, selection: Any) -> np.ndarray:
        try:
            block = np.asarray(self.arr[selection])
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001 - any codec/store error; re-raised below
            self._raise_for_chunk(selection, exc)
            raise  # unreachable: _raise_for_chunk always raises
        return block if self.decode is None else np.asarray(self.decode(block), dtype=self.dtype)

    def _raise_for_chunk(self, selection: Any, exc: Exception) -> None:
        """Find the chunk inside ``selection`` that fails, and raise a DataError for it."""
        chunks = storage_chunks(self.arr)
        sel = selection if isinstance(selection, tuple) else (selection,)
        sel = sel + (slice(None),) * (self.ndim - len(sel))
        ranges = []
        for s, n, c in zip(sel, self.shape, chunks, strict=True):
            start, stop, _ = s.indices(n) if isinstance(s, slice) else (int(s), int(s) + 1, 1)
            ranges.append(range(start // c, max(start // c + 1, math.ceil(stop / c))))
        for coords in itertools.product(*ranges):
            region = tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(coords, chunks, self.shape, strict=True)
            )
            try:
                self.arr[region]
            except Exception as inner:  # noqa: BLE001 - the chunk we are looking for
                raise DataError(
                    f"cannot read chunk {chunk_key(self.arr, coords)!r} (grid position "
                    f"{coords}) of {array_label(self.arr)}: {type(inner).__name__}: {inner}"
                ) from inner
        # The failure did not reproduce chunk by chunk: report the selection.
        raise DataError(
            f"cannot read rows {sel[0]} of {array_label(self.arr)}: {type(exc).__name__}: {exc}"
        ) from exc
