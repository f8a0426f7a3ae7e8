"""Turn what users pass (paths, Datasets, NumPy or Dask arrays) into validated Dask arrays."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from daskbatch import config
from daskbatch._arguments import gpu_module
from daskbatch.engine.reduce import TRANSFERS, part_rows_for

if TYPE_CHECKING:
    from daskbatch.io.dataset import Dataset

#: dtype kinds a statistic accepts: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = frozenset("biuf")
LABEL_KINDS = frozenset("biu")


@dataclass(frozen=True)
class FeatureMatrix:
    """A validated (samples × features) Dask array, its optional label and where they came from.

    Immutable: each step of a pipeline (rechunk, move to the GPU) makes a new
    one with :func:`dataclasses.replace`.
    """

    x: da.Array
    label: da.Array | None
    feature_names: tuple[str, ...]
    provenance: dict[str, Any] = field(default_factory=dict)
    #: The Dataset the arrays came from, if any (the planner reads its storage chunks).
    source: Dataset | None = None
    #: Set by ``to_device(..., transfer="staged")``: the blocks stay on the host and each chunk
    #: task stages parts of this many rows to the GPU itself (:class:`daskbatch.engine.reduce.Staged`).
    stage_rows: int | None = None
    #: Every label is one of the class values the statistics are given: checked on the host
    #: where it was read, or those values were found by a scan of this very label. Chunk tasks
    #: then skip the check (a host synchronisation on the GPU, see
    #: :func:`daskbatch.stats.classes.labels_checked`).
    label_checked: bool = False
    #: Non-negative sample weights aligned with the rows (checked block by block when read), or None.
    weights: da.Array | None = None
    #: The row index of a pandas DataFrame ``x`` (a Series given beside it must match it), else None.
    row_index: Any = None


def dtype_kind(dtype: Any) -> str:
    """Find NumPy's kind letter of ``dtype``.

    For another array-API library's dtype (``array_api_strict.float64``), that
    of its NumPy namesake.

    Parameters
    ----------
    dtype : dtype
        A NumPy or array-API dtype.

    Returns
    -------
    str
        The kind letter (``"b"``, ``"i"``, ``"u"``, ``"f"``, ...).
    """
    try:
        return np.dtype(dtype).kind
    except TypeError:
        try:
            return np.dtype(str(dtype).rsplit(".", 1)[-1]).kind
        except TypeError:
            return "?"


def check_numeric(dtype: Any, what: str) -> None:
    """Raise TypeError unless ``dtype`` is bool, integer or real floating point.

    Parameters
    ----------
    dtype : dtype
        The dtype to check.
    what : str
        How to call the array in the message.
    """
    if dtype_kind(dtype) not in NUMERIC_KINDS:
        try:
            dtype = np.dtype(dtype)  # NumPy's name for it ("complex128", not "<class 'complex'>")
        except TypeError:
            pass
        raise TypeError(
            f"{what} has dtype {dtype}; daskbatch computes statistics of real numbers "
            "(float16/32/64, integers or bool)"
        )


def check_label(label: Any, rows: int, what: str = "x") -> None:
    """Raise unless ``label`` is a 1-D integer (or bool) label with one value per row.

    Parameters
    ----------
    label : array
        The label.
    rows : int
        Rows of the data.
    what : str, default "x"
        How to call the data in the message.
    """
    if label.ndim != 1:
        raise ValueError(f"label has shape {tuple(label.shape)}; expected 1-D with one class per sample")
    if dtype_kind(label.dtype) not in LABEL_KINDS:
        raise TypeError(
            f"label has dtype {label.dtype}; mutual information needs integer class labels 0..K-1 "
            "(cast with label.astype(int) if the values are whole numbers; a continuous target goes in target=)"
        )
    if label.shape[0] != rows:
        raise ValueError(f"label has {label.shape[0]:,} values but {what} has {rows:,} rows")


def _check_known_chunks(a: Any, what: str) -> None:
    """Refuse a dask array whose chunk sizes are unknown (NaN), as boolean indexing leaves them."""
    if any(math.isnan(n) for n in a.shape):
        raise ValueError(
            f"{what} has unknown chunk sizes (shape {tuple(a.shape)}), e.g. after boolean indexing; "
            f"call {'x' if what == 'x' else 'it'}.compute_chunk_sizes() first"
        )


def _in_memory_as_dask(a: Any, rows_per_chunk: int | None = None) -> da.Array:
    """An in-memory (NumPy or array-API) array wrapped as a Dask array; a Dask array as it is."""
    if isinstance(a, da.Array):
        return a
    arr = np.asarray(a) if not hasattr(a, "__array_namespace__") or isinstance(a, np.ndarray) else a
    if arr.ndim == 2:
        return da.from_array(arr, chunks=(rows_per_chunk or "auto", -1))
    return da.from_array(arr, chunks="auto")


def as_feature_matrix(
    x: Any, label: Any = None, *, feature_names: Any = None, what: str | None = None, missing: str = "auto"
) -> FeatureMatrix:
    """Coerce and validate the inputs of :func:`daskbatch.describe`.

    Parameters
    ----------
    x : path, URL, Dataset, xarray.DataArray, pandas or dask DataFrame, dask or NumPy array
        The (samples × features) data; a DataArray's second dimension
        coordinate or a DataFrame's columns give the feature names.
    label : array, pandas or dask Series, name of an array in the same store or of a column, or None
        One integer class per sample. With a DataFrame, a column name takes
        that column as the label (and leaves it out of the features).
    feature_names : sequence of str, optional
        Overrides names found in the store.
    what : str, optional
        How to call ``x`` in messages (defaults to its path or "x").
    missing : {"auto", "raise", "skip", "fill"}, default "auto"
        Absent chunks of a store given by path (see :func:`daskbatch.open_dataset`).

    Returns
    -------
    FeatureMatrix
        The data as a dask array, its label, feature names and source.
    """
    provenance: dict[str, Any] = {}
    names: tuple[str, ...] | None = None
    source = None
    row_index = getattr(x, "index", None) if _is_instance(x, "pandas", "DataFrame") else None
    # An opened zarr group or array is read as its path is: CF decoding, absent chunks, names.
    zarr_node = _is_instance(x, "zarr", "Group") or _is_instance(x, "zarr", "Array")
    if isinstance(x, (str, os.PathLike)) or zarr_node:
        from daskbatch.io.dataset import open_dataset  # lazy: zarr

        label_name = label if isinstance(label, str) else None
        x = open_dataset(x if zarr_node else os.fspath(x), label=label_name, missing=missing)  # type: ignore[arg-type]
        if label_name is not None:
            label = None
    if hasattr(x, "x") and hasattr(x, "feature_names"):  # a daskbatch Dataset
        dataset = source = x
        x = dataset.x
        if label is None:
            label = dataset.label
        names = tuple(str(n) for n in dataset.feature_names)
        provenance.update(dataset.provenance())
        what = what or f"array {getattr(dataset, 'array_name', 'X')!r} of {getattr(dataset, 'path', '?')}"
    frame = _from_dataframe(x, label, what)
    if frame is not None:  # pandas or dask DataFrame: its columns are the features
        x, label, names, what = frame
    label = _from_series(label)
    if hasattr(x, "dims") and hasattr(x, "coords") and hasattr(x, "variable"):  # an xarray.DataArray
        if names is None and x.ndim == 2 and x.dims[1] in x.coords:
            names = tuple(str(n) for n in x.coords[x.dims[1]].values)
        if what is None and x.name is not None:
            what = f"DataArray {x.name!r}"
        x = x.data
    what = what or "x"
    x = unmasked(x, what)
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        x = np.asarray(x)
    check_numeric(x.dtype, what)
    if x.ndim != 2:
        hint = " (for one feature use x[:, None])" if x.ndim == 1 else ""
        raise ValueError(f"{what} has shape {tuple(x.shape)}; expected 2-D (samples, features){hint}")
    _check_known_chunks(x, what)
    rows, n_features = x.shape
    if rows == 0 or n_features == 0:
        raise ValueError(f"{what} has shape {tuple(x.shape)}: no values to describe")
    x = as_float64_if_wider(_in_memory_as_dask(x), what)
    if x.numblocks[1] != 1:
        # Every statistic sees whole rows; co-moments need all features together.
        x = x.rechunk({1: -1})

    if isinstance(label, str):
        raise TypeError(
            f"label {label!r} is a name, and a label name needs x to be a store path or a Dataset "
            f"(open_dataset(path, label={label!r})); with arrays pass the label array itself"
        )
    if label is not None:
        label = _in_memory_as_dask(unmasked(label, "label", fill=None))
        _check_known_chunks(label, "label")
        check_label(label, rows, what)

    if feature_names is not None:
        names = tuple(str(n) for n in feature_names)
    if names is None:
        names = tuple(f"f{i}" for i in range(n_features))
    if len(names) != n_features:
        raise ValueError(f"{len(names)} feature names for {n_features} features")
    provenance.setdefault("source", what)
    provenance.update(rows=int(rows), features=int(n_features), dtype=str(x.dtype))
    return FeatureMatrix(
        x=x, label=label, feature_names=names, provenance=provenance, source=source, row_index=row_index
    )


def unmasked(a: Any, what: str, fill: float | None = np.nan) -> Any:
    """Give a NumPy or dask masked array as a plain one: masked values become ``fill`` (missing), as in numpy.ma.

    Other inputs come back as they are.

    Parameters
    ----------
    a : array
        The input.
    what : str
        How to call it in messages.
    fill : float or None, default NaN
        The value of a masked element (NaN: a missing value; 0: a weight of a row as if absent);
        None refuses masked elements (a label or group key every row needs).

    Returns
    -------
    array
        ``a`` without a mask: an integer or bool array with masked values as float64.
    """
    if isinstance(a, da.Array):
        if not isinstance(a._meta, np.ma.MaskedArray):
            return a
        if fill is None:
            raise TypeError(f"{what} is a masked dask array; every row needs a value: pass it unmasked")
        values = a if a.dtype.kind == "f" else a.astype(np.float64)
        return da.ma.filled(values, fill)
    if not isinstance(a, np.ma.MaskedArray):
        return a
    masked = np.ma.getmaskarray(a)
    if not masked.any():
        return np.ma.getdata(a)
    if fill is None:
        raise ValueError(f"{what} has {int(masked.sum()):,} masked values; every row needs one")
    data = np.ma.getdata(a)
    if data.dtype.kind != "f":  # masked integers become float64 with NaN, like the DataFrame's <NA>
        converted = data.astype(np.float64)
        with np.errstate(invalid="ignore"):  # past int64's top the way back is undefined: the range test tells
            back = converted.astype(data.dtype)
        top = 2.0 ** (8 * data.dtype.itemsize - (data.dtype.kind == "i"))
        changed = ((back != data) | (converted >= top)) & ~masked
        if changed.any():
            at = np.unravel_index(int(changed.argmax()), changed.shape)
            raise ValueError(
                f"{what} is a masked {data.dtype} array and its value {data[at].item()} at {tuple(map(int, at))} "
                "has no exact float64 (what holds the masked values as missing): fill the masked values yourself"
            )
        data = converted
    return np.where(masked, fill, data)


def as_float64_if_wider(a: da.Array, what: str) -> da.Array:
    """Convert a float dtype wider than float64 (``longdouble``) to float64, warning of the precision lost.

    The statistics run in float64; a value beyond its range stops the read of
    its block with a one-line error.

    Parameters
    ----------
    a : dask.array.Array
        The input.
    what : str
        How to call it in messages.

    Returns
    -------
    dask.array.Array
        ``a`` itself unless its dtype is a float wider than 8 bytes.
    """
    if dtype_kind(a.dtype) != "f" or np.dtype(a.dtype).itemsize <= 8:
        return a
    from daskbatch._warnings import warn  # lazy: only longdouble input warns

    bits = np.finfo(a.dtype).nmant + 1
    warn(
        f"{what} has dtype {np.dtype(a.dtype)} ({bits} significant bits); daskbatch computes in float64, "
        "which keeps 53 of them",
        RuntimeWarning,
    )
    return da.map_blocks(_float64_block, a, what=what, dtype=np.float64)


def _float64_block(block: np.ndarray, *, what: str, block_info: dict[Any, Any] | None = None) -> np.ndarray:
    """One block as float64, refusing a finite value float64 cannot hold."""
    with np.errstate(over="ignore"):
        out = block.astype(np.float64)
    overflow = np.isfinite(block) & ~np.isfinite(out)
    if overflow.any():
        at = np.unravel_index(int(overflow.argmax()), overflow.shape)
        start = block_info[0]["array-location"][0][0] if block_info else 0
        raise ValueError(
            f"{what} has the value {str(block[at])} at row {start + int(at[0]):,}, beyond float64's range "
            "(±1.8e308) that daskbatch computes in"
        )
    return out


def _is_instance(obj: Any, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module`` (not imported: obj cannot be one)."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


def _from_dataframe(x: Any, label: Any, what: str | None) -> tuple[Any, Any, tuple[str, ...], str] | None:
    """Array, label, column names and name in messages of a pandas or dask DataFrame (None for anything else)."""
    is_pandas = _is_instance(x, "pandas", "DataFrame")
    if not (is_pandas or _is_instance(x, "dask.dataframe", "DataFrame")):
        return None
    what = what or "DataFrame"
    if isinstance(label, str):
        if label not in x.columns:
            raise KeyError(f"label {label!r} is not a column of the {what} (columns: {list(x.columns)[:10]})")
        label, x = x[label], x.drop(columns=[label])
    import pandas as pd  # lazy: pandas

    bad = [str(c) for c, t in x.dtypes.items() if not (pd.api.types.is_numeric_dtype(t) or pd.api.types.is_bool_dtype(t))]
    if bad:
        raise TypeError(
            f"{what} has non-numeric column(s) {', '.join(bad[:10])}; daskbatch computes statistics of real "
            "numbers: drop them or encode them first"
        )
    names = tuple(str(c) for c in x.columns)
    if is_pandas:
        if isinstance(label, pd.Series):
            check_series_index(label, x.index, "label", what)
        plain = all(isinstance(t, np.dtype) for t in x.dtypes)
        # Nullable extension columns (Int64, boolean, Float64) become float64 with NaN for <NA>.
        array = x.to_numpy() if plain else x.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        array = x.to_dask_array(lengths=True)
    return array, label, names, what


def check_series_index(series: Any, index: Any, role: str, what: str = "DataFrame") -> None:
    """Refuse a pandas Series whose index is not the DataFrame's row index: it would be used by position.

    Parameters
    ----------
    series : pandas.Series
        A label, target, group keys or weights given beside a DataFrame.
    index : pandas.Index or None
        The DataFrame's row index (None: the data have none, the Series is used by position).
    role : str
        What the Series is ("label", "weights", ...).
    what : str, default "DataFrame"
        How to call the DataFrame.
    """
    if index is None or series.index.equals(index):
        return
    raise ValueError(f"{role}: the Series' index does not match the rows of the {what}; use {role}.reindex(df.index)")


def _from_series(label: Any) -> Any:
    """A pandas or dask Series label as a NumPy or dask array (others as they are)."""
    if _is_instance(label, "pandas", "Series"):
        if label.isna().any():
            raise ValueError(f"label has {int(label.isna().sum()):,} missing values; every sample needs a class")
        return label.to_numpy(dtype=label.dtype.numpy_dtype) if hasattr(label.dtype, "numpy_dtype") else label.to_numpy()
    if _is_instance(label, "dask.dataframe", "Series"):
        return label.to_dask_array(lengths=True)
    return label


def device_module(device: str) -> Any:
    """Import the array module of ``device``: a one-line error for anything else or a missing CuPy.

    Checked first by :func:`daskbatch.describe`, before planning for the device.

    Parameters
    ----------
    device : {"cpu", "gpu"}
        Where the statistics run.

    Returns
    -------
    module or None
        CuPy for ``"gpu"``, None for ``"cpu"``.
    """
    if device == "cpu":
        return None
    if device != "gpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    return gpu_module("describe")


def to_device(data: FeatureMatrix, device: str, transfer: str | None = None) -> FeatureMatrix:
    """Move the blocks to the GPU when ``device="gpu"``, as ``transfer`` says.

    ``transfer="block"`` adds one ``cupy.asarray`` task per block; ``"staged"``
    leaves the blocks on the host and sets :attr:`FeatureMatrix.stage_rows`, so
    that each chunk task copies its block in parts through pinned buffers while
    it reduces the previous part (:class:`daskbatch.engine.reduce.Staged`). The default
    is ``daskbatch.gpu-transfer`` (parts of ``daskbatch.gpu-staging-bytes``).
    Statistics then run and merge on the device; only final results come back.

    Parameters
    ----------
    data : FeatureMatrix
        The inputs.
    device : {"cpu", "gpu"}
        Where the statistics run; ``"cpu"`` leaves ``data`` as it is.
    transfer : {"block", "staged"}, optional
        How blocks reach the GPU.

    Returns
    -------
    FeatureMatrix
        The inputs, moved or marked for staging.
    """
    if device == "cpu":
        return data
    transfer = str(config.get("gpu-transfer")) if transfer is None else transfer
    if transfer not in TRANSFERS:  # checked before CuPy is needed: a setting's typo is named first
        raise ValueError(f"gpu transfer must be one of {', '.join(TRANSFERS)}, got {transfer!r}")
    cupy = device_module(device)
    provenance = {**data.provenance, "device": "gpu", "gpu_transfer": transfer}
    if transfer == "staged":
        from dask.utils import parse_bytes  # lazy: dask

        rows = part_rows_for(data.x.shape[1], data.x.dtype.itemsize, parse_bytes(config.get("gpu-staging-bytes")))
        return dataclasses.replace(data, provenance=provenance, stage_rows=rows)

    def move(a: da.Array) -> da.Array:
        """Copy each block of ``a`` to the GPU.

        Parameters
        ----------
        a : dask.array.Array
            Host blocks.

        Returns
        -------
        dask.array.Array
            CuPy blocks.
        """
        # The function, not the method: typeshed's functools.wraps does not bind self.
        return da.map_blocks(cupy.asarray, a, meta=cupy.empty((0,) * a.ndim, dtype=a.dtype))

    label = None if data.label is None else move(data.label)
    weights = None if data.weights is None else move(data.weights)
    return dataclasses.replace(data, x=move(data.x), label=label, weights=weights, provenance=provenance)
