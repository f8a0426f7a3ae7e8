"""What to do about chunks that are absent from a store: read fill values, refuse, or skip their rows.

Zarr reads the fill value for an absent chunk.  That is what zarr, xarray and
dask mean by it (they do not write a chunk that holds only the fill value), so
the default policy ``"auto"`` reads them so; but in a store whose writer
recorded that it stores every chunk (daskbatch's own,
:func:`~daskbatch.io.integrity.writes_every_chunk`) an absent chunk was lost,
and ``"auto"`` refuses.  :func:`find_missing` lists the absent chunks of the
samples array and of its label (from the store's own listing, and each
shard's index), and :func:`row_blocks` turns them into the dask block
boundaries that let ``open_dataset(..., missing="skip")`` keep only the rows
whose chunks are all present.  Missing chunks of either array drop whole rows:
a row without its label, or with some of its features invented, is not a sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import zarr

from daskbatch.errors import DataError
from daskbatch.io.chunk_grid import absent_name, array_label
from daskbatch.io.integrity import missing_chunks, writes_every_chunk

__all__ = ["MISSING_POLICIES", "Missing", "MissingPolicy", "find_missing", "row_blocks"]

MissingPolicy = Literal["auto", "raise", "skip", "fill"]
#: ``auto``: ``fill`` where the writer leaves out chunks of fill values, ``raise``
#: where it records storing every chunk (daskbatch); ``raise``: refuse;
#: ``skip``: compute on the rows whose chunks are present; ``fill``: zarr's
#: semantics (absent chunks read as the fill value).
MISSING_POLICIES: tuple[str, ...] = ("auto", "raise", "skip", "fill")

#: Keys named in a message before "... (N in all)".
SHOWN_KEYS = 5


@dataclass(frozen=True)
class Missing:
    """Absent chunks of the samples array and of its label.

    Attributes
    ----------
    x_chunks, label_chunks : list of tuple of int
        Grid positions (of inner chunks when sharded).
    x_keys, label_keys : list of str
        Their store keys, relative to the store root (with the inner chunk when sharded).
    row_ranges : list of (int, int)
        Sorted, disjoint ``[start, stop)`` row ranges the absent chunks cover.
    x_lost, label_lost : bool
        Whether the array's writer stored every chunk, so that its absent chunks were lost.
    """

    x_chunks: list[tuple[int, ...]] = field(default_factory=list)
    x_keys: list[str] = field(default_factory=list)
    label_chunks: list[tuple[int, ...]] = field(default_factory=list)
    label_keys: list[str] = field(default_factory=list)
    row_ranges: list[tuple[int, int]] = field(default_factory=list)
    x_lost: bool = False
    label_lost: bool = False

    @property
    def count(self) -> int:
        """Count the absent chunks of both arrays.

        Returns
        -------
        int
            The number of chunks.
        """
        return len(self.x_chunks) + len(self.label_chunks)

    @property
    def lost(self) -> int:
        """Count the absent chunks that were lost (in arrays whose writer stored every chunk).

        Returns
        -------
        int
            The number of chunks.
        """
        return len(self.x_chunks) * self.x_lost + len(self.label_chunks) * self.label_lost

    def __bool__(self) -> bool:
        return bool(self.x_chunks or self.label_chunks)

    @property
    def rows(self) -> int:
        """Count the rows covered by at least one absent chunk.

        Returns
        -------
        int
            The number of rows.
        """
        return sum(b - a for a, b in self.row_ranges)

    def message(self, x: zarr.Array, label: zarr.Array | None) -> str:
        """Name the first few absent keys of each array and their count, in one line.

        Parameters
        ----------
        x : zarr.Array
            The samples x features array.
        label : zarr.Array or None
            Its label array.

        Returns
        -------
        str
            The message.
        """
        parts = []
        if self.x_keys:
            parts.append(f"{len(self.x_keys):,} chunk(s) of {array_label(x)} are missing: {_first(self.x_keys)}")
        if self.label_keys and label is not None:
            parts.append(
                f"{len(self.label_keys):,} chunk(s) of label {label.path!r} are missing: "
                f"{_first(self.label_keys)}"
            )
        return "; ".join(parts) + f" ({self.rows:,} rows)"


def _first(keys: list[str], n: int = SHOWN_KEYS) -> str:
    return ", ".join(keys[:n]) + (f", ... ({len(keys):,} in all)" if len(keys) > n else "")


def _ranges(arr: zarr.Array, chunks: list[tuple[int, ...]]) -> list[tuple[int, int]]:
    """Rows covered by the chunks at ``chunks`` (positions in the grid of ``arr.chunks``)."""
    rows, per = int(arr.shape[0]), int(arr.chunks[0])
    return [(c[0] * per, min((c[0] + 1) * per, rows)) for c in chunks]


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def find_missing(
    x: zarr.Array, label: zarr.Array | None = None, group_attrs: dict[str, Any] | None = None
) -> Missing:
    """List the absent chunks of ``x`` and ``label`` (one store listing each, and each shard's index).

    Parameters
    ----------
    x : zarr.Array
        The samples x features array.
    label : zarr.Array, optional
        Its 1-D label, row-aligned with ``x``.
    group_attrs : dict, optional
        The root group's attributes (older daskbatch stores are marked there).

    Returns
    -------
    Missing
        The absent chunks of each array and the rows they cover.
    """
    xc = missing_chunks(x)
    lc = missing_chunks(label) if label is not None else []
    ranges = _ranges(x, xc) + (_ranges(label, lc) if label is not None else [])
    return Missing(
        x_chunks=xc,
        x_keys=[absent_name(x, c) for c in xc],
        label_chunks=lc,
        label_keys=[absent_name(label, c) for c in lc] if label is not None else [],
        row_ranges=_merge(ranges),
        x_lost=writes_every_chunk(x, group_attrs),
        label_lost=label is not None and writes_every_chunk(label, group_attrs),
    )


def row_blocks(
    n_rows: int, rows_per_block: int, skipped: list[tuple[int, int]]
) -> tuple[tuple[int, ...], list[int]]:
    """Dask block sizes along the rows that break at every skipped range, and the blocks to keep.

    Blocks hold ``rows_per_block`` rows (a multiple of the storage chunk rows)
    counted from 0, cut where a skipped range starts or stops; skipped ranges
    start and stop on storage chunk boundaries, so every block still covers
    whole storage chunks and no chunk is decoded twice.

    Parameters
    ----------
    n_rows : int
        Rows of the stored array.
    rows_per_block : int
        Rows per dask block.
    skipped : list of (int, int)
        Sorted, disjoint row ranges to leave out.

    Returns
    -------
    chunks : tuple of int
        Block sizes covering all ``n_rows`` rows.
    keep : list of int
        Indices of the blocks outside every skipped range.

    Raises
    ------
    DataError
        No row is left.
    """
    cuts = set(range(0, n_rows, rows_per_block)) | {n_rows}
    for a, b in skipped:
        cuts.update((a, b))
    edges = sorted(c for c in cuts if 0 <= c <= n_rows)
    chunks = tuple(b - a for a, b in zip(edges[:-1], edges[1:], strict=True))
    keep = []
    j = 0
    for i, (a, _) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        while j < len(skipped) and skipped[j][1] <= a:
            j += 1
        if not (j < len(skipped) and skipped[j][0] <= a < skipped[j][1]):
            keep.append(i)
    if not keep:
        raise DataError("every row has a missing chunk: nothing is left to compute on")
    return chunks, keep
