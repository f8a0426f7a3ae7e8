"""Turn what users pass (paths, Datasets, NumPy or Dask arrays) into validated Dask arrays."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np

#: dtype kinds a statistic accepts: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = frozenset("biuf")
LABEL_KINDS = frozenset("biu")


@dataclass
class FeatureMatrix:
    """A validated (samples × features) Dask array, its optional label and where they came from."""

    x: da.Array
    label: da.Array | None
    feature_names: tuple[str, ...]
    provenance: dict[str, Any] = field(default_factory=dict)
    #: The Dataset the arrays came from, if any (the planner reads its storage chunks).
    source: Any = None
    #: Set by ``to_device(..., transfer="staged")``: the blocks stay on the host and each chunk
    #: task stages parts of this many rows to the GPU itself (:mod:`daskbatch.engine.staged`).
    stage_rows: int | None = None


def dtype_kind(dtype: Any) -> str:
    """NumPy's kind letter of ``dtype``; for another array-API library's dtype (``array_api_strict.float64``), of its namesake."""
    try:
        return np.dtype(dtype).kind
    except TypeError:
        try:
            return np.dtype(str(dtype).rsplit(".", 1)[-1]).kind
        except TypeError:
            return "?"


def check_numeric(dtype: Any, what: str) -> None:
    """Raise TypeError unless ``dtype`` is bool, integer or real floating point."""
    if dtype_kind(dtype) not in NUMERIC_KINDS:
        try:
            dtype = np.dtype(dtype)  # NumPy's name for it ("complex128", not "<class 'complex'>")
        except TypeError:
            pass
        raise TypeError(
            f"{what} has dtype {dtype}; daskbatch computes statistics of real numbers "
            "(float16/32/64, integers or bool)"
        )


def check_label(y: Any, rows: int, what: str = "x") -> None:
    """Raise unless ``y`` is a 1-D integer (or bool) label with one value per row."""
    if y.ndim != 1:
        raise ValueError(f"label has shape {tuple(y.shape)}; expected 1-D with one class per sample")
    if dtype_kind(y.dtype) not in LABEL_KINDS:
        raise TypeError(
            f"label has dtype {y.dtype}; mutual information needs integer class labels 0..K-1 "
            "(cast with y.astype(int) if the values are whole numbers)"
        )
    if y.shape[0] != rows:
        raise ValueError(f"label has {y.shape[0]:,} values but {what} has {rows:,} rows")


def _as_dask(a: Any, rows_per_chunk: int | None = None) -> da.Array:
    if isinstance(a, da.Array):
        return a
    arr = np.asarray(a) if not hasattr(a, "__array_namespace__") or isinstance(a, np.ndarray) else a
    if arr.ndim == 2:
        return da.from_array(arr, chunks=(rows_per_chunk or "auto", -1))
    return da.from_array(arr, chunks="auto")


def as_feature_matrix(
    x: Any, label: Any = None, *, feature_names: Any = None, what: str | None = None, missing: str = "raise"
) -> FeatureMatrix:
    """Coerce and validate the inputs of :func:`daskbatch.describe`.

    Parameters
    ----------
    x : path, URL, Dataset, xarray.DataArray, dask or NumPy array
        The (samples × features) data; a DataArray's second dimension
        coordinate gives the feature names.
    label : array, name of an array in the same store, or None
        One integer class per sample.
    feature_names : sequence of str, optional
        Overrides names found in the store.
    what : str, optional
        How to call ``x`` in messages (defaults to its path or "x").
    missing : {"raise", "skip", "fill"}, default "raise"
        Absent chunks of a store given by path (see :func:`daskbatch.open_dataset`).
    """
    provenance: dict[str, Any] = {}
    names: tuple[str, ...] | None = None
    source = None
    if isinstance(x, (str, os.PathLike)):
        from daskbatch.io.dataset import open_dataset

        label_name = label if isinstance(label, str) else None
        x = open_dataset(os.fspath(x), label=label_name, missing=missing)  # type: ignore[arg-type]
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
    if hasattr(x, "dims") and hasattr(x, "coords") and hasattr(x, "variable"):  # an xarray.DataArray
        if names is None and x.ndim == 2 and x.dims[1] in x.coords:
            names = tuple(str(n) for n in x.coords[x.dims[1]].values)
        if what is None and x.name is not None:
            what = f"DataArray {x.name!r}"
        x = x.data
    what = what or "x"
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        x = np.asarray(x)
    check_numeric(x.dtype, what)
    if x.ndim != 2:
        hint = " (for one feature use x[:, None])" if x.ndim == 1 else ""
        raise ValueError(f"{what} has shape {tuple(x.shape)}; expected 2-D (samples, features){hint}")
    rows, n_features = x.shape
    if rows == 0 or n_features == 0:
        raise ValueError(f"{what} has shape {tuple(x.shape)}: no values to describe")
    x = _as_dask(x)
    if x.numblocks[1] != 1:
        # Every statistic sees whole rows; co-moments need all features together.
        x = x.rechunk({1: -1})

    y = None
    if label is not None:
        y = _as_dask(label)
        check_label(y, rows, what)

    if feature_names is not None:
        names = tuple(str(n) for n in feature_names)
    if names is None:
        names = tuple(f"f{i}" for i in range(n_features))
    if len(names) != n_features:
        raise ValueError(f"{len(names)} feature names for {n_features} features")
    provenance.setdefault("source", what)
    provenance.update(rows=int(rows), features=int(n_features), dtype=str(x.dtype))
    return FeatureMatrix(x=x, label=y, feature_names=names, provenance=provenance, source=source)


def to_device(data: FeatureMatrix, device: str, transfer: str | None = None) -> FeatureMatrix:
    """Move the blocks to the GPU when ``device="gpu"``, as ``transfer`` says.

    ``transfer="block"`` adds one ``cupy.asarray`` task per block; ``"staged"``
    leaves the blocks on the host and sets :attr:`FeatureMatrix.stage_rows`, so
    that each chunk task copies its block in parts through pinned buffers while
    it reduces the previous part (:mod:`daskbatch.engine.staged`). The default
    is ``daskbatch.gpu-transfer`` (parts of ``daskbatch.gpu-staging-bytes``).
    Statistics then run and merge on the device; only final results come back.
    """
    if device == "cpu":
        return data
    if device != "gpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    from daskbatch import config
    from daskbatch.engine.staged import TRANSFERS, part_rows_for

    transfer = str(config.get("gpu-transfer")) if transfer is None else transfer
    if transfer not in TRANSFERS:
        raise ValueError(f"gpu transfer must be one of {', '.join(TRANSFERS)}, got {transfer!r}")
    try:
        import cupy
    except ImportError as exc:
        raise ImportError("device='gpu' needs CuPy: pip install 'daskbatch[gpu]'") from exc

    provenance = {**data.provenance, "device": "gpu", "gpu_transfer": transfer}
    if transfer == "staged":
        from dask.utils import parse_bytes

        rows = part_rows_for(data.x.shape[1], data.x.dtype.itemsize, parse_bytes(config.get("gpu-staging-bytes")))
        return dataclasses.replace(data, provenance=provenance, stage_rows=rows)

    def move(a: da.Array) -> da.Array:
        # The function, not the method: typeshed's functools.wraps does not bind self.
        return da.map_blocks(cupy.asarray, a, meta=cupy.empty((0,) * a.ndim, dtype=a.dtype))

    label = None if data.label is None else move(data.label)
    return FeatureMatrix(
        x=move(data.x), label=label, feature_names=data.feature_names, provenance=provenance, source=data.source
    )
