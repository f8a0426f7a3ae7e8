"""Whether a Zarr array's chunks can be trusted: who wrote it, how many chunks it claims, which are missing, and reads that name the chunk that fails.

Zarr returns the fill value for a chunk that is absent from the store, so a
summary of a store with lost chunks would silently include invented rows.
:func:`missing_chunks` lists the absent chunks (from one store listing and
each stored shard's index, :mod:`daskbatch.io.chunk_grid`).  :class:`BlockReader`
reads blocks for dask and turns a decode failure into a
:class:`~daskbatch.errors.DataError` that names the array, the chunk key and
its grid position, chained to the codec error.

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
:func:`daskbatch.io.verify.verify_store` decodes every chunk of a store and
reports what is wrong.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from daskbatch import config
from daskbatch.errors import DataError
from daskbatch.io.chunk_grid import (
    absent_name,
    absent_positions,
    array_label,
    chunk_count,
    chunk_key,
    shard_maps,
    storage_chunks,
    stored_keys,
)

# absent_name, absent_positions, chunk_key, shard_maps and storage_chunks live in
# daskbatch.io.chunk_grid; they stay importable from here, as before the split.
__all__ = [
    "WRITES_EVERY_CHUNK",
    "BlockReader",
    "absent_name",
    "absent_positions",
    "check_chunk_count",
    "check_feature_count",
    "checksummed",
    "chunk_checksums",
    "chunk_key",
    "max_chunks",
    "max_features",
    "missing_chunks",
    "readable_bytes",
    "shard_maps",
    "storage_chunks",
    "writes_every_chunk",
]

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
    from zarr.codecs import Crc32cCodec  # lazy: zarr

    return (Crc32cCodec(),) if compressor is None else (compressor, Crc32cCodec())


def chunk_checksums(arr: zarr.Array) -> list[tuple[str, bytes]] | None:
    """The CRC-32C checksum stored at the end of every stored chunk of ``arr``, by key.

    Stores that daskbatch writes end each chunk with the checksum of its
    encoded bytes (:func:`checksummed`): these 4 bytes per chunk identify the
    content without reading it (one listing, then one 4-byte read per chunk).

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    list of (str, bytes) or None
        ``(key relative to the array, checksum)`` sorted by key; None when the
        array's chunks do not end with a CRC-32C (another writer's codecs, or
        a sharded array, whose shards end with their index's).
    """
    from zarr.codecs import Crc32cCodec  # lazy: zarr
    from zarr.core.sync import sync  # lazy: zarr

    codecs = getattr(arr.metadata, "codecs", ())
    if arr.shards is not None or not codecs or not isinstance(codecs[-1], Crc32cCodec):
        return None
    check_chunk_count(arr)
    keys = sorted(stored_keys(arr) - {"zarr.json"})
    prefix = arr.store_path.path.strip("/")
    paths = [f"{prefix}/{key}" if prefix else key for key in keys]
    return list(zip(keys, sync(_last_bytes(arr.store_path.store, paths, 4)), strict=True))


async def _last_bytes(store: Any, keys: list[str], n: int) -> list[bytes]:
    """The last ``n`` bytes of each key of ``store`` (b"" for a key gone since the listing), 64 reads at a time."""
    from zarr.abc.store import SuffixByteRequest  # lazy: zarr
    from zarr.core.buffer import default_buffer_prototype  # lazy: zarr

    at_once = asyncio.Semaphore(64)  # a store of 10**5 chunks: not 10**5 open files or requests at once

    async def tail(key: str) -> bytes:
        async with at_once:
            found = await store.get(key, default_buffer_prototype(), byte_range=SuffixByteRequest(n))
        return b"" if found is None else found.to_bytes()

    return list(await asyncio.gather(*(tail(k) for k in keys)))


def max_chunks() -> int:
    """Read the configured ``daskbatch.max-chunks``: the most chunks one array may have.

    Returns
    -------
    int
        The limit.
    """
    return _positive_setting("max-chunks")


def _positive_setting(key: str) -> int:
    """Read ``daskbatch.<key>`` as a whole number of at least 1 (its default is in ``daskbatch.yaml``)."""
    value = config.get(key)
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"daskbatch.{key} must be a whole number, got {value!r}") from None
    if limit < 1:
        raise ValueError(f"daskbatch.{key} must be at least 1, got {limit}")
    return limit


def check_chunk_count(arr: zarr.Array, blocks: int | None = None) -> int:
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

    Returns
    -------
    int
        The array's chunk count, within the limit.

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
    return n


def readable_bytes() -> int:
    """Give the most bytes one read of metadata-described arrays may claim: half this process's memory.

    This process's memory is Dask's figure (the machine's, or less under a
    cgroup or ``RLIMIT_RSS``), or less under ``RLIMIT_AS``; half of it leaves
    room for the copies a read makes.

    Returns
    -------
    int
        Bytes.
    """
    from daskbatch.runtime.capacity import machine_memory_bytes  # lazy: distributed

    memory = machine_memory_bytes()
    try:
        import resource
    except ImportError:  # Windows
        return memory // 2
    address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if address_space != resource.RLIM_INFINITY:
        memory = min(memory, address_space)
    return memory // 2


def max_features() -> int:
    """Read the configured ``daskbatch.max-features``: the most features (columns) one array may claim.

    Returns
    -------
    int
        The limit.
    """
    return _positive_setting("max-features")


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
    if check_chunk_count(arr) == 0:
        return []
    return absent_positions(arr, stored_keys(arr))


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

