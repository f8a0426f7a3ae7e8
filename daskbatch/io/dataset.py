"""Open a (samples x features) Zarr array, with its labels and feature names, as dask arrays.

:func:`open_dataset` returns a :class:`Dataset`: dask arrays whose blocks are whole storage chunks along
the samples and span all features, plus where the numbers came from (:meth:`Dataset.provenance`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import zarr
from dask.utils import format_bytes

from daskbatch import _common as _html
from daskbatch._common import SamplesByFeatures, plural
from daskbatch.io.chunk_grid import Chunks, store_location
from daskbatch.io.zarr_store import (
    LAYOUT_ATTR,
    MissingPolicy,
    ZarrStore,
    cf_attributes,
    json_object,
)

__all__ = ["Dataset", "open_dataset", "open_zarr"]


@dataclass(frozen=True, eq=False, repr=False)
class Dataset(SamplesByFeatures):
    """A (samples x features) dask array with labels, names and provenance.

    Attributes
    ----------
    x : dask.array.Array
        Samples x features; one block spans all features.
    label : dask.array.Array or None
        1-D labels aligned with the rows of ``x``.
    feature_names : list of str
        One name per column of ``x``.
    store_chunks : tuple of int
        Chunk (or shard) shape of ``x`` in the store.
    path : str or None
        Store path or URL; ``None`` for data that was never written.
    array_name : str or None
        Path of ``x`` inside the store.
    attrs : dict
        Group and array attributes (synthetic ground truth lives in ``attrs["synth"]``).
    missing_chunks : list of tuple of int
        Grid positions of chunks of ``x`` absent from the store.
    label_missing_chunks : list of tuple of int
        Grid positions of chunks of the label absent from the store.
    missing_policy : {"auto", "raise", "skip", "fill"}
        What ``open_dataset`` was asked to do about them (see there).
    skipped_rows : list of (int, int)
        Row ranges of the store left out of ``x`` and ``label`` (``missing="skip"``).
    absent_lost : int
        How many of the absent chunks were lost: chunks of arrays whose writer
        (daskbatch) records that it stores every chunk.  The others are the
        fill value, as their writer meant.
    complete : bool
        False when the store was written by an ingest or transform that did not finish.
    """

    x: da.Array
    label: da.Array | None
    feature_names: list[str]
    store_chunks: tuple[int, ...]
    path: str | None = None
    array_name: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    missing_chunks: list[tuple[int, ...]] = field(default_factory=list)
    label_name: str | None = None
    zarr_format: int | None = None
    missing_chunk_keys: list[str] = field(default_factory=list)
    complete: bool = True
    label_missing_chunks: list[tuple[int, ...]] = field(default_factory=list)
    label_missing_chunk_keys: list[str] = field(default_factory=list)
    missing_policy: str = "raise"
    skipped_rows: list[tuple[int, int]] = field(default_factory=list)
    absent_lost: int = 0
    #: What the absent chunks read as, per array (``"X: 0.0; y: 0"``); empty when none is read.
    absent_read_as: str = ""
    #: The zarr arrays read (checkpoints fingerprint their metadata and listing).
    zarr_x: Any = None
    #: Set once a block of ``zarr_x`` is read, as opened (its chunks carry checksums: the rows' token reads them).
    block_read: Any = field(default=None, compare=False, repr=False)
    zarr_label: Any = None
    #: Blocks of ``x`` its reader fetches ahead of the tasks in this process (an object store's; the planner counts them).
    read_ahead_blocks: int = 0

    def provenance(self) -> dict[str, Any]:
        """JSON-able facts about where the data came from.

        Returns
        -------
        dict
            ``path``, ``array``, ``label``, ``shape``, ``dtype``, ``store_chunks``,
            ``dask_chunk_rows``, ``zarr_format``, ``missing_chunks`` (grid positions),
            ``missing_chunk_keys``, ``label_missing_chunks``, ``label_missing_chunk_keys``,
            ``missing_policy``, ``rows_skipped``, ``skipped_rows`` (row ranges),
            ``absent_chunks`` (chunks of ``x`` and the label absent from the store),
            ``absent_fill_chunks`` (those read as the fill value their writer meant: it
            leaves out chunks of fill values), ``absent_lost_chunks`` (those of arrays
            whose writer stores every chunk), ``absent_read_as`` (the value each array's
            absent chunks read as, decoded: ``"X: 0.0; y: 0"``), ``ingest_complete`` and ``complete``
            (False when its writer (ingest, transform) did not finish, a chunk was lost, or rows were skipped).
        """
        absent = len(self.missing_chunks) + len(self.label_missing_chunks)
        return {
            "path": self.path,
            "array": self.array_name,
            "label": self.label_name,
            "shape": [int(n) for n in self.x.shape],  # read off the array: the walk skips _common
            "dtype": str(self.x.dtype),
            "store_chunks": list(self.store_chunks),
            "dask_chunk_rows": int(self.x.chunks[0][0]) if self.x.chunks[0] else 0,
            "zarr_format": self.zarr_format,
            "missing_chunks": [list(c) for c in self.missing_chunks],
            "missing_chunk_keys": list(self.missing_chunk_keys),
            "label_missing_chunks": [list(c) for c in self.label_missing_chunks],
            "label_missing_chunk_keys": list(self.label_missing_chunk_keys),
            "missing_policy": self.missing_policy,
            "rows_skipped": sum(b - a for a, b in self.skipped_rows),
            "skipped_rows": [list(r) for r in self.skipped_rows],
            "absent_chunks": absent,
            "absent_fill_chunks": 0 if self.skipped_rows else absent - self.absent_lost,
            "absent_lost_chunks": self.absent_lost,
            "absent_read_as": self.absent_read_as,
            "ingest_complete": self.complete,
            "complete": self.complete and not (self.absent_lost or self.skipped_rows),
        }

    def _summary_rows(self) -> list[tuple[str, str]]:
        """The rows of the repr: store, arrays, chunks, label, features, missing chunks."""
        rows, cols = self.shape
        where = self.path or "(in memory, not written)"
        if self.zarr_format:
            where += f"  (zarr v{self.zarr_format})"
        names = self.feature_names
        shown = ", ".join(names[:6]) + (f", ... ({len(names)} total)" if len(names) > 6 else "")
        label = "none"
        if self.label is not None:
            label = f"{self.label_name or '(lazy)'!s} {self.label.dtype}"
        missing = "none"
        keys = self.missing_chunk_keys + self.label_missing_chunk_keys
        if keys:
            missing = f"{len(keys):,}: " + ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
            if self.skipped_rows:
                missing += f" ({sum(b - a for a, b in self.skipped_rows):,} rows skipped)"
            elif self.absent_lost:
                missing += f" (read as fill values; {self.absent_lost:,} lost: daskbatch wrote every chunk)"
            else:
                missing += " (absent (fill value): their writer leaves out chunks of fill values)"
        out = [
            ("store", where),
            (
                "x",
                f"{self.array_name or '(lazy)'} {self.x.dtype} ({rows:,} x {cols:,}), "
                f"{format_bytes(int(self.x.nbytes))}",
            ),
            (
                "chunks",
                f"storage {self.store_chunks}, dask {plural(self.x.numblocks[0], 'block')} of "
                f"{self.x.chunks[0][0] if self.x.chunks[0] else 0:,} rows",
            ),
            ("label", label),
            *self._beside_rows(),
            ("features", shown),
            ("missing chunks", missing),
        ]
        if not self.complete:
            out.append(("complete", "NO: its writer did not finish; re-run it"))
        return out

    def _beside_rows(self) -> list[tuple[str, str]]:
        """The labels and masks an ingest wrote beside X (pick a label with ``label=NAME``)."""
        layout = json_object(self.attrs.get(LAYOUT_ATTR))
        rows = []
        for key in ("labels", "masks"):
            names = layout.get(key)
            if isinstance(names, list) and names:
                shown = ", ".join(map(str, names[:8])) + (f", ... ({len(names)} total)" if len(names) > 8 else "")
                rows.append((key, shown + (" (label=NAME picks one)" if key == "labels" else " (stored, not applied)")))
        return rows

    def __repr__(self) -> str:
        rows = self._summary_rows()
        width = max(len(k) for k, _ in rows)
        return "<daskbatch.Dataset>\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)

    def _repr_html_(self) -> str:
        rows, cols = self.shape
        problems = {"missing chunks"} if self.absent_lost or self.skipped_rows else set()
        if not self.complete:
            problems.add("complete")
        table = _html.key_value_table(
            (k, v, "db-warn" if k in problems else "") for k, v in self._summary_rows()
        )
        head = f"daskbatch.Dataset: {rows:,} × {cols:,} {self.x.dtype}"
        if self.label is not None:
            head += f", label {self.label_name or '(lazy)'}"
        return _html.repr_block(_html.escape(head), table, subtitle=_html.escape(self.path or "in memory"))


def open_dataset(
    path_or_url: Any,
    x: str = "X",
    label: str | None = None,
    *,
    chunks: Chunks = "auto",
    storage_options: Mapping[str, Any] | None = None,
    missing: MissingPolicy = "auto",
) -> Dataset:
    """Open a (samples x features) array in a Zarr store as a :class:`Dataset`.

    Parameters
    ----------
    path_or_url : str, os.PathLike, zarr.Group or zarr.Array
        Local path or fsspec URL (``file://``, ``memory://``, ``s3://`` ...) of a
        Zarr v2 or v3 store: a group holding named arrays or a bare 2-D array.
    x : str, default "X"
        Name of the samples x features array inside a group (ignored for a bare array).
    label : str, optional
        Name of a 1-D label array.  By default the label array recorded by
        daskbatch (``synth``/``ingest`` stores) is used, if any.
    chunks : {"auto", "storage"} or int, default "auto"
        Rows per dask block.  ``"auto"``: the largest whole multiple of the storage
        chunk rows within ``daskbatch.target-chunk-bytes`` (dask config); ``"storage"``:
        one storage chunk per block; an int is used as given.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    missing : {"auto", "raise", "skip", "fill"}, default "auto"
        Chunks of ``x`` or the label absent from the store (found from one listing
        of each array's keys, and the index of each shard).  ``"auto"`` reads
        them as the writer meant: zarr, xarray and dask leave out every chunk
        that holds only the fill value, so there they are read as the fill
        value (zarr's contract); daskbatch writes every chunk (and records it
        in the array attribute ``daskbatch:writes_every_chunk``), so in its
        stores an absent chunk was lost and ``"auto"`` refuses.  ``"raise"``
        refuses any absent chunk with a :class:`~daskbatch.errors.DataError`
        naming the first keys and their count; ``"skip"`` leaves out the rows
        those chunks cover (``x`` and the label keep only rows whose chunks are
        all present); ``"fill"`` reads the fill value in their place.  The
        provenance lists and counts them, and says ``complete: False`` where
        a chunk was lost or rows were skipped.  A chunk present at the open
        but absent when read (lost since) is refused in the same words where
        an absent chunk at the open would be (not under ``"fill"``).

    Returns
    -------
    Dataset
        The lazily opened array, its label and their provenance.

    Raises
    ------
    DataError
        No store, no such array, wrong shape, label length mismatch, missing
        chunks that ``missing`` refuses, or more chunks (or dask blocks) than
        ``daskbatch.max-chunks`` (checked from the metadata before anything else).
    """
    return Dataset(**ZarrStore.read_store(path_or_url, x, label, chunks=chunks, storage_options=storage_options,
                                          missing=missing))


def open_zarr(
    path: Any,
    component: str | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    chunks: Chunks = "auto",
) -> da.Array:
    """Open one Zarr array as a dask array aligned to its storage chunks.

    Parameters
    ----------
    path : str, os.PathLike, zarr.Group or zarr.Array
        Store path or fsspec URL.
    component : str, optional
        Array name inside a group; default ``"X"`` (ignored for a bare array).
    storage_options : dict, optional
        Passed to fsspec for URLs.
    chunks : {"auto", "storage"} or int, default "auto"
        As in :func:`open_dataset`.

    Returns
    -------
    dask.array.Array
        Blocks of whole storage chunks along axis 0, one block along axis 1.
    """
    return open_dataset(path, x=component or "X", chunks=chunks, storage_options=storage_options).x


def zarr_array_of(a: da.Array, store: Any = None) -> Any:  # numpydoc ignore=PR01,RT01
    """The zarr array a dask array reads whole and unchanged, and the chunks to open it with (None for others).

    With ``store``: the array alone, if it is of ``store`` and read as stored (no CF attributes): a label x's store reads.
    """
    found = zarr_array_read_by(a)
    if store is None:
        return found
    arr = found[0] if found is not None and store_location(found[0].store) == store_location(store) else None
    return arr if arr is not None and not cf_attributes(arr) else None


def zarr_array_read_by(a: da.Array) -> tuple[zarr.Array, int | str] | None:  # numpydoc ignore=PR01,RT01
    """The zarr array ``a`` reads whole and unchanged (``da.from_zarr``, xarray) and the ``chunks`` to open it with."""
    # "auto" where a's blocks are the storage chunks: then the store path's blocks, so that the same
    # array gives the same answer bit for bit however it is passed.
    from dask._task_spec import DataNode, Task, TaskRef  # lazy: dask's task specification
    from dask.array.core import getter, getter_inline, getter_nofancy  # lazy: dask arrays only

    graph = a.__dask_graph__()
    if not set(getattr(graph, "layers", {a.name: None})) <= {a.name, f"original-{a.name}"} or any(
            math.isnan(c) for c in a.chunks[0]):
        return None
    first, arr, offsets = None, None, [np.cumsum((0, *c)) for c in a.chunks]
    for key, task in graph.items():
        if not isinstance(key, tuple) or key[0] != a.name:
            continue
        if not (isinstance(task, Task) and task.func in (getter, getter_inline, getter_nofancy)
                and len(task.args) == 2 and isinstance(task.args[1], DataNode)):
            return None
        holder = task.args[0]
        holder = graph.get(holder.key) if isinstance(holder, TaskRef) else holder
        holder = holder.value if isinstance(holder, DataNode) else holder
        if first is None:  # the first block says which array; any other array (NumPy's) ends the search
            first, arr = holder, _stored_array(holder)
            if arr is None or holder is not arr and not _reads_as_stored(arr):  # xarray's view: never decoded twice
                return None
        block: Any = key[1:]  # the block's position in the grid
        wanted = tuple(slice(int(o[i]), int(o[i + 1])) for o, i in zip(offsets, block, strict=True))
        if holder is not first or task.args[1].value != wanted:
            return None
    if arr is None or tuple(arr.shape) != tuple(a.shape) or np.dtype(arr.dtype) != a.dtype \
            or type(a._meta) is not np.ndarray or not a.chunks[0]:
        return None
    rows = int(a.chunks[0][0])
    stored = {int(arr.chunks[0]), int((getattr(arr, "shards", None) or arr.chunks)[0])}
    return arr, "auto" if rows in stored else rows


def _reads_as_stored(arr: zarr.Array) -> bool:
    """Whether :class:`~daskbatch.io.zarr_store.BlockReader` reads ``arr``'s values as stored: no CF attributes, or a NaN fill of floats."""
    cf = cf_attributes(arr)
    fills = [cf.pop(name) for name in ("_FillValue", "missing_value") if name in cf]
    nan = all(isinstance(v, float) and math.isnan(v) for v in fills)  # NaN read as NaN: nothing changes
    return not cf and (not fills or nan and np.dtype(arr.dtype).kind == "f")


def _stored_array(holder: Any) -> zarr.Array | None:
    """The zarr.Array that ``holder`` (a getter's array) reads unchanged, else None."""
    # xarray's wrappers that only pass a whole-array key through; any decoding wrapper is not one.
    while not isinstance(holder, zarr.Array):
        kind = type(holder).__name__ if type(holder).__module__.startswith("xarray.") else None
        if kind in ("ImplicitToExplicitIndexingAdapter", "CopyOnWriteArray"):
            holder = holder.array
        elif kind == "LazilyIndexedArray" and all(k == slice(None) for k in holder.key.tuple):
            holder = holder.array
        elif kind == "ZarrArrayWrapper":
            holder = holder.get_array()
        else:
            return None
    return holder
