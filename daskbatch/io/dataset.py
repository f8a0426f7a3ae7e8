"""Open a (samples x features) Zarr array, with its labels and feature names, as dask arrays.

:func:`open_dataset` is the one entry point for data that already sits in a Zarr
store (v2 or v3, local path or fsspec URL, a group of named arrays, a bare
array, or an xarray-written store).  It returns a small :class:`Dataset`:
dask arrays whose blocks are whole storage chunks along the sample axis (so no
storage chunk is decoded twice) and span all features, plus the facts a summary
needs to say where its numbers came from (:meth:`Dataset.provenance`).
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

from daskbatch import _html
from daskbatch._warnings import warn
from daskbatch.errors import DataError
from daskbatch.io.chunk_grid import array_label, storage_chunks
from daskbatch.io.integrity import check_chunk_count, check_feature_count
from daskbatch.io.missing import MISSING_POLICIES, Missing, MissingPolicy, find_missing, row_blocks
from daskbatch.io.zarr_nodes import (
    INGEST_ATTR,
    LAYOUT_ATTR,
    Chunks,
    block_reader,
    clean_attrs,
    feature_names_of,
    get_array,
    json_object,
    open_node,
    rows_per_block,
    zarr_as_dask,
)

__all__ = [
    "Dataset",
    "IncompleteStoreWarning",
    "MissingChunksWarning",
    "open_dataset",
    "open_zarr",
]



class MissingChunksWarning(UserWarning):
    """Chunks are absent from the store and ``open_dataset(missing=...)`` skipped their rows or filled them."""


class IncompleteStoreWarning(UserWarning):
    """The store was written by an ingest that has not finished."""


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
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
        False when the store was written by an ingest that did not finish.
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
    zarr_label: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        """Give the shape of the samples x features array.

        Returns
        -------
        tuple of int
            ``(samples, features)``.
        """
        return (int(self.x.shape[0]), int(self.x.shape[1]))

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
            (False when an ingest did not finish, a chunk was lost, or rows were skipped).
        """
        absent = len(self.missing_chunks) + len(self.label_missing_chunks)
        return {
            "path": self.path,
            "array": self.array_name,
            "label": self.label_name,
            "shape": list(self.shape),
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
                f"storage {self.store_chunks}, dask {self.x.numblocks[0]} blocks of "
                f"{self.x.chunks[0][0] if self.x.chunks[0] else 0:,} rows",
            ),
            ("label", label),
            *self._beside_rows(),
            ("features", shown),
            ("missing chunks", missing),
        ]
        if not self.complete:
            out.append(("complete", "NO: ingest did not finish; re-run it"))
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
    strict: bool = False,
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
        a chunk was lost or rows were skipped.
    strict : bool, default False
        Kept for callers of earlier versions: ``True`` insists on ``missing="raise"``
        (the default ``"auto"`` counts as ``"raise"`` then).

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
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}")
    if strict and missing not in ("raise", "auto"):
        raise ValueError(f"strict=True refuses missing chunks; it contradicts missing={missing!r}")
    if strict:
        missing = "raise"
    root, where = open_node(path_or_url, storage_options)
    group_attrs = dict(root.attrs) if isinstance(root, zarr.Group) else {}
    layout = json_object(group_attrs.get(LAYOUT_ATTR))
    arr = get_array(root, x, where, "x")
    if arr.ndim != 2:
        raise DataError(
            f"{array_label(arr)} has shape {arr.shape}; daskbatch needs a 2-D (samples x features) array"
        )
    row_chunks = rows_per_block(arr, chunks)
    # Before any listing or graph: a shape the metadata claims may have nothing behind it.
    check_chunk_count(arr, blocks=math.ceil(int(arr.shape[0]) / row_chunks))
    check_feature_count(arr)

    label_name = label if label is not None else layout.get("label")
    if label_name is not None and not isinstance(label_name, str):
        raise DataError(
            f"{where!r} records label {label_name!r} in its {LAYOUT_ATTR!r} attribute; "
            "expected an array name"
        )
    label_arr = None
    if label_name is not None:
        label_arr = get_array(root, label_name, where, "label")
        if label_arr.ndim != 1 or label_arr.shape[0] != arr.shape[0]:
            raise DataError(
                f"label {array_label(label_arr)} has shape {label_arr.shape}; expected "
                f"({arr.shape[0]},) to match the rows of {arr.path!r}"
            )
        check_chunk_count(label_arr)

    ingest = group_attrs.get(INGEST_ATTR)
    complete = not (isinstance(ingest, dict) and not ingest.get("complete", True))
    if not complete:
        warn(
            f"{where!r} was written by an ingest that did not finish; its data is incomplete. "
            "Re-run the same ingest command to finish it.",
            IncompleteStoreWarning,
        )

    absent = find_missing(arr, label_arr, group_attrs)
    policy = missing
    if missing == "auto":
        # The Zarr contract: an absent chunk is the fill value, unless its writer
        # recorded that it stores every chunk (daskbatch), where absent means lost.
        policy = "raise" if absent.lost else "fill"
    if absent and policy == "raise":
        raise DataError(_refusal(absent, arr, label_arr, where, complete))
    xd, yd = _readers(arr, label_arr, row_chunks, where, absent if policy == "skip" else Missing())
    if absent and (policy == "skip" or missing == "fill" and absent.lost):
        what = "left out" if policy == "skip" else "read as fill values"
        warn(f"{absent.message(arr, label_arr)}: {what}", MissingChunksWarning)

    attrs = {**group_attrs, **clean_attrs(arr.attrs)}
    return Dataset(
        x=xd,
        label=yd,
        feature_names=feature_names_of(root, arr, int(arr.shape[1])),
        store_chunks=storage_chunks(arr),
        path=where,
        array_name=arr.path,
        attrs=attrs,
        missing_chunks=absent.x_chunks,
        label_name=label_arr.path if label_arr is not None else None,
        zarr_format=int(arr.metadata.zarr_format),
        missing_chunk_keys=absent.x_keys,
        complete=complete,
        label_missing_chunks=absent.label_chunks,
        label_missing_chunk_keys=absent.label_keys,
        missing_policy=missing,
        skipped_rows=absent.row_ranges if policy == "skip" else [],
        absent_lost=absent.lost,
        absent_read_as="" if policy == "skip" else _absent_read_as(arr, label_arr, absent),
        zarr_x=arr,
        zarr_label=label_arr,
    )


def _absent_read_as(arr: zarr.Array, label: zarr.Array | None, absent: Missing) -> str:
    """What each array's first absent chunk reads as, decoded (``"X: 0.0; y: 0"``): one element of it, read."""
    parts = []
    for node, positions in ((arr, absent.x_chunks), (label, absent.label_chunks)):
        if node is None or not positions:
            continue
        # zarr fills an absent chunk with its fill value; reading one element says which, decoded.
        corner = tuple(slice(p * c, p * c + 1) for p, c in zip(positions[0], node.chunks, strict=True))
        value = np.asarray(block_reader(node)[corner]).reshape(-1)[0].item()
        parts.append(f"{node.path or 'x'}: {value!r}")
    return "; ".join(parts)


def _refusal(absent: Missing, arr: zarr.Array, label: zarr.Array | None, where: str, complete: bool) -> str:
    """The one-line refusal for absent chunks: why they matter and what restores them."""
    if not complete:
        remedy = "the ingest that wrote them did not finish: re-run the same ingest command"
    elif absent.lost:
        # Never "skip": it would compute on a store that lost rows as if it were whole.
        remedy = (
            "daskbatch wrote every chunk of this store, so they were lost: restore them from a copy "
            f"or write the store again (daskbatch verify {where} lists every damaged chunk)"
        )
    else:
        remedy = (
            "their writer leaves out chunks that hold only the fill value, so they are that value: "
            "the default missing='auto' (--missing auto) reads them so"
        )
    return f"{absent.message(arr, label)}; zarr would read fill values in their place; {remedy}"


def _readers(
    arr: zarr.Array, label: zarr.Array | None, row_chunks: int, where: str, skip: Missing
) -> tuple[da.Array, da.Array | None]:
    """Dask arrays over ``arr`` and ``label`` without the rows of ``skip``'s chunks."""
    if not skip.row_ranges:
        yd = zarr_as_dask(label, row_chunks, where) if label is not None else None
        return zarr_as_dask(arr, row_chunks, where), yd
    # Blocks break where a skipped range starts or stops; keep the others, in order.
    sizes, keep = row_blocks(int(arr.shape[0]), row_chunks, skip.row_ranges)
    xd = zarr_as_dask(arr, sizes, where)
    x = da.concatenate([xd.blocks[i] for i in keep], axis=0)
    y = None
    if label is not None:
        yd = zarr_as_dask(label, sizes, where)
        y = da.concatenate([yd.blocks[i] for i in keep], axis=0)
    return x, y


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
