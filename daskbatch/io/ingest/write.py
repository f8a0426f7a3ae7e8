"""Pass 2 of ingest: fill each output chunk from the source rows that overlap it.

One task per output chunk, and each task writes its whole chunk once, so no
two writers ever touch the same Zarr chunk however batch boundaries fall.  A
task holds one chunk buffer plus, at most, one source batch (only for a
compressed ``.npz`` member, which must be inflated whole); ``.npy`` files and
uncompressed ``.npz`` members are memory-mapped and only the needed rows read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.ingest.scan import Part, Scan, Source

__all__ = ["ChunkWriter", "pieces"]


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, stop)`` of source ``index`` go to output rows from ``dest``."""

    index: int
    start: int
    stop: int
    dest: int


def pieces(offsets: np.ndarray, chunk_rows: int, chunk: int) -> list[Piece]:
    """The slices of the sources that make up output chunk ``chunk``.

    Parameters
    ----------
    offsets : numpy.ndarray
        Start row of each source in the output, with the total appended.
    chunk_rows : int
        Rows per output chunk.
    chunk : int
        Output chunk index.

    Returns
    -------
    list of Piece
        In output order; ``dest`` is relative to the chunk's first row.
    """
    total = int(offsets[-1])
    lo, hi = chunk * chunk_rows, min((chunk + 1) * chunk_rows, total)
    first = int(np.searchsorted(offsets, lo, side="right")) - 1
    out = []
    i = first
    while i < len(offsets) - 1 and offsets[i] < hi:
        s0, s1 = int(offsets[i]), int(offsets[i + 1])
        a, b = max(lo, s0), min(hi, s1)
        if b > a:
            out.append(Piece(i, a - s0, b - s0, a - lo))
        i += 1
    return out


class _Inflated(threading.local):
    """Per-thread cache of the inflated compressed members of the last file (consecutive chunks share files).

    X, its labels and masks are read in turn for each piece: caching one member
    only would inflate each of them again for every piece.
    """

    path: str | None = None
    arrays: dict[str, np.ndarray] | None = None


class ChunkWriter:
    """Reads source rows and writes whole output chunks.

    Parameters
    ----------
    scan : Scan
        Validated sources.
    x : zarr.Array
        The samples x features output array.
    columns : dict of str to zarr.Array
        The 1-D output arrays by name, one per entry of ``scan.outputs()``.
    chunk_rows : int
        Rows per output chunk (the row chunk of every output array).
    """

    def __init__(self, scan: Scan, x: Any, columns: dict[str, Any], chunk_rows: int) -> None:
        self.scan = scan
        self.x = x
        self.columns = columns
        self.chunk_rows = chunk_rows
        self.offsets = scan.offsets
        self._cache = _Inflated()

    def write(self, chunk: int) -> int:
        """Assemble and write output chunk ``chunk``.

        Parameters
        ----------
        chunk : int
            The output chunk index.

        Returns
        -------
        int
            Its number of rows.
        """
        ps = pieces(self.offsets, self.chunk_rows, chunk)
        rows = sum(p.stop - p.start for p in ps)
        lo = chunk * self.chunk_rows
        outputs = self.scan.outputs()
        xbuf = np.empty((rows, self.scan.features), dtype=self.scan.dtype)
        bufs = [np.empty(rows, dtype=dtype) for _, _, dtype in outputs]
        for p in ps:
            src = self.scan.sources[p.index]
            parts = ((src.label,) if src.label is not None else ()) + src.extra
            dest = slice(p.dest, p.dest + p.stop - p.start)
            try:
                # Assignment casts into the buffer; no temporary for mapped sources.
                xbuf[dest] = self._read(src, src.x, self.scan.x_key or "X", p.start, p.stop)
                for buf, (_, key, _), part in zip(bufs, outputs, parts, strict=True):
                    buf[dest] = self._read(src, part, key, p.start, p.stop)
            except (OSError, ValueError, KeyError, EOFError) as exc:
                raise DataError(
                    f"cannot read rows {p.start}:{p.stop} of {src.path} (for output chunk {chunk}): "
                    f"{type(exc).__name__}: {exc}; was the file changed after the scan?"
                ) from exc
        # The chunk is logged as done only after every array's share of it is written.
        self.x[lo : lo + rows, :] = xbuf
        for buf, (name, _, _) in zip(bufs, outputs, strict=True):
            self.columns[name][lo : lo + rows] = buf
        return rows

    def _read(self, src: Source, part: Part, key: str, start: int, stop: int) -> np.ndarray:
        if src.kind in ("npy", "npz") and part.offset is not None:
            mm = np.memmap(
                src.path,
                dtype=np.dtype(part.dtype),
                mode="r",
                offset=part.offset,
                shape=part.shape,
                order="F" if part.fortran else "C",
            )
            return mm[start:stop]
        if src.kind == "npz":
            cache = self._cache
            if cache.path != src.path or cache.arrays is None:
                cache.arrays = None  # drop the previous batch before inflating the next
                cache.arrays, cache.path = {}, src.path
            if key not in cache.arrays:
                with np.load(src.path, allow_pickle=False) as z:
                    cache.arrays[key] = z[key]
            return cache.arrays[key][start:stop]
        if src.kind == "h5":
            import h5py

            with h5py.File(src.path, "r") as f:
                return f[key][start:stop]
        import zarr  # lazy: zarr

        node = zarr.open(src.path, mode="r")
        arr = node[key] if isinstance(node, zarr.Group) else node
        if not isinstance(arr, zarr.Array):
            raise ValueError(f"{key!r} in {src.path} is a Zarr group, not an array")
        # zarr types reads as any array-like; with the default buffers they are numpy arrays.
        return np.asarray(arr[start:stop])
