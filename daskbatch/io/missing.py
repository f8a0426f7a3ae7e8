"""What to do about chunks that are absent from a store: refuse, skip their rows, or read fill values.

Zarr reads the fill value for an absent chunk, so without a policy a summary
silently counts invented rows.  :func:`find_missing` lists the absent chunks of
the samples array and of its label (from the store's own listing), and
:func:`row_blocks` turns them into the dask block boundaries that let
``open_dataset(..., missing="skip")`` keep only the rows whose chunks are all
present.  Missing chunks of either array drop whole rows: a row without its
label, or with some of its features invented, is not a sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import zarr

from daskbatch.errors import DataError
from daskbatch.io.integrity import array_label, chunk_key, missing_chunks, storage_chunks

__all__ = ["MISSING_POLICIES", "Missing", "MissingPolicy", "find_missing", "row_blocks"]

MissingPolicy = Literal["raise", "skip", "fill"]
#: ``raise``: refuse; ``skip``: compute on the rows whose chunks are present;
#: ``fill``: zarr's semantics (absent chunks read as the fill value).
MISSING_POLICIES: tuple[str, ...] = ("raise", "skip", "fill")

#: Keys named in a message before "... (N in all)".
SHOWN_KEYS = 5


@dataclass(frozen=True)
class Missing:
    """Absent chunks of the samples array and of its label.

    Attributes
    ----------
    x_chunks, label_chunks : list of tuple of int
        Grid positions (shard positions when sharded).
    x_keys, label_keys : list of str
        Their store keys, relative to the store root.
    row_ranges : list of (int, int)
        Sorted, disjoint ``[start, stop)`` row ranges the absent chunks cover.
    """

    x_chunks: list[tuple[int, ...]] = field(default_factory=list)
    x_keys: list[str] = field(default_factory=list)
    label_chunks: list[tuple[int, ...]] = field(default_factory=list)
    label_keys: list[str] = field(default_factory=list)
    row_ranges: list[tuple[int, int]] = field(default_factory=list)

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
    rows, per = int(arr.shape[0]), storage_chunks(arr)[0]
    return [(c[0] * per, min((c[0] + 1) * per, rows)) for c in chunks]


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def find_missing(x: zarr.Array, label: zarr.Array | None = None) -> Missing:
    """List the absent chunks of ``x`` and ``label`` (one store listing each).

    Parameters
    ----------
    x : zarr.Array
        The samples x features array.
    label : zarr.Array, optional
        Its 1-D label, row-aligned with ``x``.

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
        x_keys=[chunk_key(x, c) for c in xc],
        label_chunks=lc,
        label_keys=[chunk_key(label, c) for c in lc] if label is not None else [],
        row_ranges=_merge(ranges),
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
