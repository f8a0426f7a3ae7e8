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
    """Per-thread cache of the last inflated compressed member (consecutive chunks share files)."""

    key: tuple[str, str] | None = None
    array: np.ndarray | None = None


class ChunkWriter:
    """Reads source rows and writes whole output chunks.

    Parameters
    ----------
    scan : Scan
        Validated sources.
    x, y : zarr.Array
        Output arrays (``y`` may be None).
    chunk_rows : int
        Rows per output chunk (the chunk shape of ``x`` and ``y``).
    """

    def __init__(self, scan: Scan, x: Any, y: Any | None, chunk_rows: int) -> None:
        self.scan = scan
        self.x = x
        self.y = y
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
        xbuf = np.empty((rows, self.scan.features), dtype=self.scan.dtype)
        ybuf = np.empty(rows, dtype=self.scan.label_dtype) if self.y is not None else None
        for p in ps:
            src = self.scan.sources[p.index]
            try:
                # Assignment casts into the buffer; no temporary for mapped sources.
                xbuf[p.dest : p.dest + p.stop - p.start] = self._read(src, "x", p.start, p.stop)
                if ybuf is not None:
                    ybuf[p.dest : p.dest + p.stop - p.start] = self._read(
                        src, "label", p.start, p.stop
                    )
            except (OSError, ValueError, KeyError, EOFError) as exc:
                raise DataError(
                    f"cannot read rows {p.start}:{p.stop} of {src.path} (for output chunk {chunk}): "
                    f"{type(exc).__name__}: {exc}; was the file changed after the scan?"
                ) from exc
        self.x[lo : lo + rows, :] = xbuf
        if self.y is not None:
            self.y[lo : lo + rows] = ybuf
        return rows

    def _read(self, src: Source, what: str, start: int, stop: int) -> np.ndarray:
        part: Part = src.x if what == "x" else src.label  # type: ignore[assignment]
        key = (self.scan.x_key or "X") if what == "x" else self.scan.label_key
        if key is None:  # pragma: no cover - labels are read only when the scan has a label key
            raise ValueError(f"no {what} key to read from {src.path}")
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
            if cache.key != (src.path, key):
                cache.array = None  # drop the previous batch before inflating the next
                with np.load(src.path, allow_pickle=False) as z:
                    cache.array = z[key]
                cache.key = (src.path, key)
            return cache.array[start:stop]  # type: ignore[index]
        if src.kind == "h5":
            import h5py

            with h5py.File(src.path, "r") as f:
                return f[key][start:stop]
        import zarr

        node = zarr.open(src.path, mode="r")
        arr = node[key] if isinstance(node, zarr.Group) else node
        if not isinstance(arr, zarr.Array):
            raise ValueError(f"{key!r} in {src.path} is a Zarr group, not an array")
        # zarr types reads as any array-like; with the default buffers they are numpy arrays.
        return np.asarray(arr[start:stop])
