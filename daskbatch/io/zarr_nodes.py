"""Reading Zarr nodes for :func:`daskbatch.open_dataset`: groups and arrays, chunking, names and attributes."""

from __future__ import annotations

import binascii
import math
import os
import struct
from collections.abc import Collection, Mapping
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np
import zarr
from dask.utils import parse_bytes

from daskbatch import config
from daskbatch.errors import DataError
from daskbatch.io.chunk_grid import array_label, storage_chunks
from daskbatch.io.integrity import WRITES_EVERY_CHUNK, BlockReader
from daskbatch.io.locations import zarr_target

__all__ = [
    "CF_ATTRS", "INGEST_ATTR", "LAYOUT_ATTR", "Chunks", "array_names", "block_reader", "cf_attributes", "clean_attrs",
    "dimension_names", "group_arrays",
    "feature_names_of", "get_array", "json_object", "open_node", "rows_per_block", "zarr_as_dask",
]

#: Group attribute written by daskbatch (synth, ingest) naming the arrays.
LAYOUT_ATTR = "daskbatch"
#: Group attribute holding the ingest manifest summary (``complete`` flag).
INGEST_ATTR = "daskbatch_ingest"

Chunks = Literal["auto", "storage"] | int

#: CF attributes of packed values (xarray writes and decodes them): the stored
#: integers are ``raw * scale_factor + add_offset``, ``_FillValue`` /
#: ``missing_value`` mark values that are not there, and ``_Unsigned`` says that
#: signed integers hold unsigned ones (netCDF-3's bytes).
CF_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")


def open_node(
    path_or_url: Any, storage_options: Mapping[str, Any] | None
) -> tuple[zarr.Group | zarr.Array, str]:
    """Open a store read-only; return the root node and a printable location.

    Parameters
    ----------
    path_or_url : str, os.PathLike, zarr.Group or zarr.Array
        The store: a directory, a ``.zip`` file, or an fsspec URL (a node is
        returned as it is).
    storage_options : mapping, optional
        Passed to fsspec for URLs.

    Returns
    -------
    (zarr.Group or zarr.Array, str)
        The root node and where it is, for messages.
    """
    if isinstance(path_or_url, zarr.Group | zarr.Array):
        return path_or_url, str(getattr(path_or_url.store, "root", path_or_url.store))
    where = os.fspath(path_or_url) if isinstance(path_or_url, os.PathLike) else path_or_url
    if not isinstance(where, str):
        raise TypeError(f"expected a path, URL or zarr group/array, got {type(where).__name__}")
    kwargs: dict[str, Any] = {"mode": "r"}
    if storage_options:
        kwargs["storage_options"] = dict(storage_options)
    target: Any = zarr_target(where, read_only=True)  # a local "a::b.zarr" is that path, not a chained URL
    if where.endswith(".zip") and os.path.isfile(where):
        # zarr.open takes a path for a directory store only; a zip file needs its store.
        target = zarr.storage.ZipStore(where, mode="r")
    try:
        return zarr.open(target, **kwargs), where
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as exc:
        raise DataError(f"no Zarr store at {where!r}") from exc


def array_names(group: zarr.Group) -> list[str]:
    """List the arrays of ``group``, sorted.

    Parameters
    ----------
    group : zarr.Group
        The group.

    Returns
    -------
    list of str
        Their names.
    """
    return sorted(name for name, _ in group_arrays(group, max_depth=0))


#: What zarr warns about each object in a group that is no Zarr node (ingest's manifest and done log).
_FOREIGN_OBJECT = r"Object at .* is not recognized as a component of a Zarr hierarchy"


def group_arrays(group: zarr.Group, *, max_depth: int | None = None) -> list[tuple[str, zarr.Array]]:
    """List the arrays under ``group`` with their paths, passing over files that are no Zarr node.

    Parameters
    ----------
    group : zarr.Group
        The group.
    max_depth : int or None, default None
        How deep to look (0: the group's own arrays; None: every level).

    Returns
    -------
    list of (str, zarr.Array)
        Path relative to ``group`` and array, in zarr's order.
    """
    import warnings

    # Files next to the Zarr nodes (ingest's manifest) are the writer's own, not damage.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_FOREIGN_OBJECT)
        members = list(group.members(max_depth=max_depth))
    return [(name, node) for name, node in members if isinstance(node, zarr.Array)]


def get_array(
    root: zarr.Group | zarr.Array, name: str | None, where: str, what: str
) -> zarr.Array:
    """Return the array ``name`` of ``root``; a one-line DataError names what is there instead.

    Parameters
    ----------
    root : zarr.Group or zarr.Array
        The store's root (a bare array stands for the x array).
    name : str or None
        The array's name in the group.
    where : str
        The store, for messages.
    what : str
        ``"x"`` or ``"label"``, for messages.

    Returns
    -------
    zarr.Array
        The array.
    """
    if isinstance(root, zarr.Array):
        if what != "x":
            raise DataError(
                f"{where!r} is a single array, not a group with a {what} array {name!r}"
            )
        return root  # a bare array: the x name only matters inside a group
    if name is None:
        raise DataError(f"{where!r} is a group; name the {what} array (have: {array_names(root)})")
    try:
        node = root[name]
    except KeyError as exc:
        raise DataError(
            f"{what} array {name!r} not found in {where!r}; arrays there: {array_names(root)}"
        ) from exc
    if not isinstance(node, zarr.Array):
        raise DataError(f"{name!r} in {where!r} is a group, not a {what} array")
    return node


def rows_per_block(arr: zarr.Array, chunks: Chunks) -> int:
    """Choose the rows per dask block: whole storage chunks unless the caller gives an int.

    Parameters
    ----------
    arr : zarr.Array
        The x array.
    chunks : "auto", "storage" or int
        ``"storage"``: one storage chunk; ``"auto"``: as many whole storage
        chunks as fit ``daskbatch.target-chunk-bytes``; an int: that many rows.

    Returns
    -------
    int
        Rows per block (at least 1).
    """
    rows = int(arr.shape[0])
    store_rows = storage_chunks(arr)[0]
    if isinstance(chunks, bool) or not isinstance(chunks, int | str):
        raise TypeError(f"chunks must be 'auto', 'storage' or an int, got {chunks!r}")
    if isinstance(chunks, int):
        if chunks <= 0:
            raise ValueError(f"chunks must be a positive number of rows, got {chunks}")
        per = chunks
    elif chunks == "storage":
        per = store_rows
    elif chunks == "auto":
        target = parse_bytes(config.get("target-chunk-bytes"))
        row_bytes = max(1, math.prod(arr.shape[1:]) * np.dtype(arr.dtype).itemsize)
        per = store_rows * max(1, target // (store_rows * row_bytes))
    else:
        raise ValueError(f"chunks must be 'auto', 'storage' or an int, got {chunks!r}")
    return max(1, min(per, rows)) if rows else 1


def cf_attributes(arr: zarr.Array) -> dict[str, Any]:
    """Return the CF attributes xarray decodes ``arr`` with, ``_FillValue`` as a number.

    xarray reads a Zarr v2 array's ``_FillValue`` from its metadata
    ``fill_value`` (where xarray writes it), and a Zarr v3 array's from the
    attribute, base64-encoded for floats.  A v2 array counts as xarray's when it
    has xarray's ``_ARRAY_DIMENSIONS`` or any CF attribute: zarr's own default
    fill value (0 for numbers) must not turn zeros of other writers' stores into NaN.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    dict
        ``scale_factor``, ``add_offset``, ``_FillValue`` and ``missing_value``
        where present; empty for an array xarray would read as stored.

    Raises
    ------
    DataError
        The ``_FillValue`` attribute is no value of the array's dtype.
    """
    cf = {k: arr.attrs[k] for k in CF_ATTRS if k in arr.attrs}
    if arr.metadata.zarr_format == 2:
        xarray_array = cf or "_ARRAY_DIMENSIONS" in arr.attrs
        if xarray_array and arr.fill_value is not None:
            # xarray's v2 reader: the metadata fill value is the _FillValue.
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


def _cf_decoder(arr: zarr.Array) -> tuple[Any, np.dtype, dict[str, Any]] | None:
    """Decode CF-packed values as xarray does: ``(decode(block), dtype, attrs)``, or None for an array read as stored."""
    import xarray as xr  # lazy: xarray

    cf = cf_attributes(arr)
    if not cf:
        return None
    dims = tuple(f"dim_{i}" for i in range(arr.ndim))

    def _decode(block: np.ndarray) -> np.ndarray:
        """One block, decoded by xarray."""
        variable = xr.Variable(dims, block, attrs=dict(cf))
        return np.asarray(xr.conventions.decode_cf_variable(arr.path or "x", variable).values)

    try:
        decoded = _decode(np.empty((0,) * arr.ndim, dtype=arr.dtype))
    except (TypeError, ValueError) as exc:  # attributes of the wrong type: a scale_factor string
        raise DataError(f"{array_label(arr)} has CF attributes {cf} that xarray cannot decode: {exc}") from exc
    return _decode, decoded.dtype, cf


def block_reader(arr: zarr.Array, cf: tuple[Any, np.dtype, dict[str, Any]] | None = None) -> BlockReader:
    """Read ``arr`` as :func:`zarr_as_dask` reads it: block by block, CF-decoded as xarray decodes it.

    Parameters
    ----------
    arr : zarr.Array
        The array.
    cf : tuple, optional
        Its CF decoder, when already made.

    Returns
    -------
    BlockReader
        ``reader[selection]`` gives the decoded values.
    """
    cf = cf if cf is not None else _cf_decoder(arr)
    return BlockReader(arr) if cf is None else BlockReader(arr, decode=cf[0], dtype=cf[1])


def zarr_as_dask(arr: zarr.Array, row_chunks: int | tuple[int, ...], where: str) -> da.Array:
    """Wrap ``arr`` as a lazy Dask array read block by block through :class:`BlockReader` (errors name the chunk).

    Values packed with CF ``scale_factor``/``add_offset``/``_FillValue`` are
    decoded as xarray decodes them.

    Parameters
    ----------
    arr : zarr.Array
        The array.
    row_chunks : int or tuple of int
        Rows per block.
    where : str
        The store, part of the graph's token.

    Returns
    -------
    dask.array.Array
        The array, chunked along rows only.
    """
    cf = _cf_decoder(arr)
    reader = block_reader(arr, cf)
    chunks = (row_chunks,) + tuple(arr.shape[1:])
    # The decoding is part of what the blocks hold: a store rewritten with another fill value is other data.
    token = dask.base.tokenize(where, arr.path, arr.shape, str(arr.dtype), chunks, cf and repr(sorted(cf[2].items())))
    return da.from_array(
        reader,
        chunks=chunks,
        name=f"daskbatch-read-{token}",
        asarray=False,
        fancy=False,
        inline_array=True,
        meta=np.empty((0,) * arr.ndim, dtype=reader.dtype),
    )


def json_object(value: object) -> dict[str, Any]:
    """Return an attribute value as a dict when it is a JSON object.

    Zarr types attribute values as any JSON; daskbatch's own attributes
    (:data:`LAYOUT_ATTR`, :data:`INGEST_ATTR`) are objects when present.

    Parameters
    ----------
    value : object
        An attribute value, or ``None`` for an absent attribute.

    Returns
    -------
    dict
        ``value`` itself if it is a dict, else an empty dict.
    """
    return value if isinstance(value, dict) else {}


def dimension_names(arr: zarr.Array) -> tuple[str | None, ...]:
    """Read the dimension names: v3 ``dimension_names``, else xarray's v2 ``_ARRAY_DIMENSIONS``, else ``()``.

    Parameters
    ----------
    arr : zarr.Array
        The array.

    Returns
    -------
    tuple of str or None
        One name per dimension, or empty.
    """
    dims = getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS")
    # The attribute is untyped JSON: use it only if it is a list of names.
    if isinstance(dims, list | tuple) and all(d is None or isinstance(d, str) for d in dims):
        return tuple(dims)
    return ()


def feature_names_of(root: zarr.Group | zarr.Array, arr: zarr.Array, n: int) -> list[str]:
    """Find the feature names: from attrs, else an xarray dimension coordinate, else f0, f1, ...

    Parameters
    ----------
    root : zarr.Group or zarr.Array
        The store's root (its attrs and coordinate arrays).
    arr : zarr.Array
        The x array.
    n : int
        The number of features.

    Returns
    -------
    list of str
        ``n`` names.
    """
    for attrs in (arr.attrs, root.attrs if isinstance(root, zarr.Group) else {}):
        names = attrs.get("feature_names")
        # Untyped JSON: a list of n values; a string is one name, not n of them.
        if isinstance(names, Collection) and not isinstance(names, str) and len(names) == n:
            return [str(v) for v in names]
    dims = dimension_names(arr)
    if len(dims) == 2 and dims[1] and isinstance(root, zarr.Group):
        coord = root.get(dims[1])
        if isinstance(coord, zarr.Array) and coord.ndim == 1 and coord.shape[0] == n:
            values = np.asarray(coord[:])
            return [v.decode() if isinstance(v, bytes) else str(v) for v in values.tolist()]
    return [f"f{i}" for i in range(n)]


def clean_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Drop bookkeeping: xarray's (``_ARRAY_DIMENSIONS``, ``_FillValue``, CF packing) and daskbatch's own marks.

    Parameters
    ----------
    attrs : mapping
        Attributes of a node.

    Returns
    -------
    dict
        The others.
    """
    # The values are read decoded, so the packing attributes no longer describe them.
    drop = {WRITES_EVERY_CHUNK, *CF_ATTRS}
    return {k: v for k, v in dict(attrs).items() if not k.startswith("_") and k not in drop}
