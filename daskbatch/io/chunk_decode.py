"""A local store's row blocks, each chunk decoded by its numcodecs codec straight into the block's rows.

zarr-python decodes every chunk into a buffer of its own and then copies it into the array it returns; for
a block of several 16 MiB chunks those fresh buffers cost a page fault per 4 KiB, about a third of the
block's read (``benchmarks/RESULTS.md``, session 26). For the plain layouts (zarr's local store or fsspec's
local file system; unsharded chunks that span every column, bytes stored little-endian and C-ordered, then
zstd, blosc or nothing, with or without a crc32c trailer) :class:`DirectBlocks` reads each chunk's file and
has the codec zarr itself would call decode it into the block. Any other layout, and any chunk that does not
decode here or whose decoded size is not the chunk's (an absent chunk, a damaged one), is left to zarr, so
its values and errors stay zarr's.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec
from zarr.storage import FsspecStore, LocalStore

from daskbatch.io.chunk_grid import is_local_fs

__all__ = ["ZSTD_MAGIC", "DirectBlocks", "direct_blocks", "zstd_content_size", "zstd_frame_header"]

#: The first four bytes of a zstd frame (RFC 8878, section 3.1.1).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

#: Blosc's header: bytes 4-7 the decoded size, 12-15 the stored size (c-blosc's README, "Blosc header format").
_BLOSC_HEADER = 16


def zstd_frame_header(buf: bytes) -> tuple[int, int | None] | None:
    """The length of the zstd frame header at the start of ``buf`` and the decoded size it records (None: none).

    None when ``buf`` starts with no zstd frame (RFC 8878, section 3.1.1.1).
    """
    if len(buf) < 5 or buf[:4] != ZSTD_MAGIC:
        return None
    descriptor = buf[4]
    single_segment = (descriptor >> 5) & 1
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]  # after the window and dictionary id
    width = (single_segment, 2, 4, 8)[descriptor >> 6]
    if width == 0 or len(buf) < at + width:
        return at + width, None
    # A two-byte field stores the size less 256 ("Frame_Content_Size").
    return at + width, int.from_bytes(buf[at:at + width], "little") + (256 if width == 2 else 0)


def zstd_content_size(buf: bytes) -> int | None:
    """The decoded size a zstd frame at the start of ``buf`` records in its header; None when it records none."""
    header = zstd_frame_header(buf)
    return None if header is None else header[1]


def _decoded_size(kind: str, payload: np.ndarray) -> int | None:
    """The size ``payload`` decodes to by its own header (its length when stored as is)."""
    if kind == "none":
        return len(payload)
    if kind == "zstd":
        return zstd_content_size(payload[:18].tobytes())  # a frame header is at most 18 bytes
    if len(payload) < _BLOSC_HEADER or int.from_bytes(payload[12:16].tobytes(), "little") != len(payload):
        return None
    return int.from_bytes(payload[4:8].tobytes(), "little")


@dataclass(frozen=True)
class DirectBlocks:
    """How to decode the row chunks of one local array into a block (see the module's docstring).

    Attributes
    ----------
    directory : str
        The array's folder on this machine.
    metadata : Any
        The array's zarr metadata (it names each chunk's file).
    shape, chunk_rows, dtype
        The array's shape, its rows per chunk, its dtype.
    kind : str
        ``"zstd"``, ``"blosc"`` or ``"none"``: what is applied to the bytes.
    codec : Any
        The numcodecs codec that decodes them (None for ``"none"``).
    crc32c : bool
        Whether each chunk ends with a crc32c of the rest.
    """

    directory: str
    metadata: Any
    shape: tuple[int, ...]
    chunk_rows: int
    dtype: np.dtype
    kind: str
    codec: Any
    crc32c: bool

    def read(self, start: int, stop: int) -> np.ndarray | None:
        """Rows ``start:stop`` decoded; None when a chunk among them is not this reader's to decode (zarr's then)."""
        out = np.empty((stop - start, *self.shape[1:]), dtype=self.dtype)
        whole = self.chunk_rows * math.prod(self.shape[1:]) * self.dtype.itemsize  # an edge chunk is stored whole
        for i in range(start // self.chunk_rows, -(-stop // self.chunk_rows)):
            first, last = i * self.chunk_rows, min((i + 1) * self.chunk_rows, self.shape[0])
            inside = start <= first and last - first == self.chunk_rows and last <= stop
            target = out[first - start:last - start] if inside else np.empty((self.chunk_rows, *self.shape[1:]),
                                                                              dtype=self.dtype)
            if not self._decode_into(i, target, whole):
                return None
            if not inside:
                lo, hi = max(first, start), min(last, stop)
                out[lo - start:hi - start] = target[lo - first:hi - first]
        return out

    def _decode_into(self, i: int, target: np.ndarray, whole: int) -> bool:
        """Decode row chunk ``i`` into ``target``; False where it is absent or does not decode to ``whole`` bytes."""
        key = self.metadata.encode_chunk_key((i,) + (0,) * (len(self.shape) - 1))
        try:
            with open(os.path.join(self.directory, *key.split("/")), "rb", buffering=0) as f:
                raw = f.read()
        except OSError:
            return False
        payload = np.frombuffer(raw, dtype=np.uint8)  # read-only, no copy
        if self.crc32c:
            if len(raw) < 4 or google_crc32c.value(payload[:-4]) != int.from_bytes(raw[-4:], "little"):
                return False
            payload = payload[:-4]
        if _decoded_size(self.kind, payload) != whole:
            return False
        try:
            if self.codec is None:
                target.reshape(-1).view(np.uint8)[:] = payload
            else:
                self.codec.decode(payload, out=target)
        except Exception:  # noqa: BLE001 - damaged: zarr's own read gives its error
            return False
        return True


def direct_blocks(arr: zarr.Array) -> DirectBlocks | None:
    """A :class:`DirectBlocks` for ``arr`` when its layout is one it decodes, else None (zarr reads it)."""
    folder = _local_folder(arr.store)
    if folder is None or arr.shards is not None or arr.ndim == 0 or 0 in arr.shape:
        return None
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biuf" or dtype.byteorder not in "=|" + ("<" if sys.byteorder == "little" else ">"):
        return None
    if tuple(arr.chunks[1:]) != tuple(arr.shape[1:]):  # a chunk must be whole rows of the block
        return None
    found = _v3_codecs(arr.metadata) if arr.metadata.zarr_format == 3 else _v2_codecs(arr.metadata)
    if found is None:
        return None
    kind, codec, crc32c = found
    return DirectBlocks(os.path.join(folder, *arr.path.strip("/").split("/")), arr.metadata,
                        tuple(arr.shape), int(arr.chunks[0]), dtype.newbyteorder("="), kind, codec, crc32c)


def _local_folder(store: Any) -> str | None:
    """The folder of zarr's own local store, or of its fsspec store on this machine (``da.from_zarr(path)``'s)."""
    # Exactly these types: a subclass may change what a key holds (or count its reads).
    if type(store) is LocalStore:
        return str(store.root)
    if type(store) is FsspecStore and is_local_fs(store.fs):
        return str(store.path)
    return None


def _v3_codecs(metadata: Any) -> tuple[str, Any, bool] | None:
    """``(kind, codec, crc32c)`` of a v3 array's codecs when they are bytes, then zstd, blosc or nothing, then crc32c."""
    codecs = list(metadata.codecs)
    crc32c = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
    codecs = codecs[:-1] if crc32c else codecs
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)  # None: one-byte values
    if (endian or sys.byteorder) != sys.byteorder:
        return None
    if len(codecs) == 1:
        return "none", None, crc32c
    if len(codecs) == 2 and isinstance(codecs[1], ZstdCodec):
        return "zstd", numcodecs.Zstd(), crc32c  # the frame carries whether it has a checksum
    if len(codecs) == 2 and isinstance(codecs[1], BloscCodec):
        return "blosc", numcodecs.Blosc(), crc32c  # the header carries typesize, shuffle and compressor
    return None


def _v2_codecs(metadata: Any) -> tuple[str, Any, bool] | None:
    """``(kind, codec, False)`` of a v2 array without filters, C-ordered, compressed by zstd, blosc or nothing."""
    if metadata.filters or metadata.order != "C":
        return None
    compressor = metadata.compressor
    if compressor is None:
        return "none", None, False
    kind = getattr(compressor, "codec_id", None)
    return (kind, compressor, False) if kind in ("zstd", "blosc") else None
