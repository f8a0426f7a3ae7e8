"""Turn what users pass (paths, Datasets, NumPy or Dask arrays) into validated Dask arrays.

The data are opened by their reader (:mod:`daskbatch.io.readers`); the per-row inputs beside
them (a continuous target, group keys, sample weights) are checked against its rows here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from daskbatch import config
from daskbatch._common import gpu_module
from daskbatch.engine.reduce import TRANSFERS, part_rows_for
from daskbatch.io.readers import check_series_index, in_memory_as_dask, open_reader, series_values
from daskbatch.runtime.capacity import rechunk_method

if TYPE_CHECKING:
    from daskbatch.io.dataset import Dataset

#: dtype kinds a statistic accepts: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = frozenset("biuf")
LABEL_KINDS = frozenset("biu")


@dataclass(frozen=True)
class FeatureMatrix:
    """A validated (samples × features) Dask array, its optional label and where they came from."""

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
    #: The non-numeric columns (text, categories, times): (rows, dask Delayed pandas DataFrame) per block.
    frames: tuple[Any, ...] = ()
    #: Set once a task reads a block of the store, as its reader opened it (chunks with checksums), else None.
    block_read: Any = None


def dtype_kind(dtype: Any) -> str:
    """Find NumPy's kind letter of ``dtype``."""
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


def check_label(label: Any, rows: int, what: str = "x") -> None:
    """Raise unless ``label`` is a 1-D integer (or bool) label with one value per row."""
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


def as_feature_matrix(
    x: Any, label: Any = None, *, feature_names: Any = None, what: str | None = None, missing: str = "auto",
    target: Any = None, groups: Any = None, weights: Any = None,
) -> FeatureMatrix:
    """Open ``x`` through its reader and check it, its label and the per-row target, group keys and weights."""
    if groups is not None:
        refuse_beside_groups(label, target)
    by_name = tuple(v for v in (weights, target, groups) if isinstance(v, str))  # a table's: not features
    reader = open_reader(x, label, what=what, missing=missing, exclude=by_name)
    x, names, what, provenance = reader.array, reader.names, reader.what, reader.provenance
    label = reader.label
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
    if rows == 0 or (n_features == 0 and not reader.frames):
        raise ValueError(f"{what} has shape {tuple(x.shape)}: no values to describe")
    # A reader of a store or of dask arrays gives a dask array already; in-memory arrays are wrapped once, here.
    x = as_float64_if_wider(x if isinstance(x, da.Array) else in_memory_as_dask(x), what)
    if x.numblocks[1] != 1:
        # Every statistic sees whole rows; co-moments need all features together.
        x = x.rechunk({1: -1}, method=rechunk_method())

    if isinstance(label, str):
        raise TypeError(
            f"label {label!r} is a name, and a label name needs x to be a store path or a Dataset "
            f"(open_dataset(path, label={label!r})); with arrays pass the label array itself"
        )
    if label is not None:
        label = unmasked(label, "label", fill=None)
        label = label if isinstance(label, da.Array) else in_memory_as_dask(label)
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
    data = FeatureMatrix(
        x=x, label=label, feature_names=names, provenance=provenance, source=reader.source, row_index=reader.row_index,
        frames=tuple(reader.frames), block_read=reader.block_read,
    )
    if target is not None:
        data = with_target(data, target)
    if groups is not None:
        data = with_groups(data, groups)
    return as_weights(weights, data)


def unmasked(a: Any, what: str, fill: float | None = np.nan) -> Any:
    """Give a NumPy or dask masked array as a plain one: masked values become ``fill`` (missing), as in numpy.ma."""
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
    """Convert a float dtype wider than float64 (``longdouble``) to float64, warning of the precision lost."""
    if dtype_kind(a.dtype) != "f" or np.dtype(a.dtype).itemsize <= 8:
        return a
    from daskbatch._common import warn  # lazy: only longdouble input warns

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


def device_module(device: str) -> Any:
    """Import the array module of ``device``: a one-line error for anything else or a missing CuPy."""
    if device == "cpu":
        return None
    if device != "gpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    return gpu_module("describe")


def to_device(data: FeatureMatrix, device: str, transfer: str | None = None) -> FeatureMatrix:
    """Move the blocks to the GPU when ``device="gpu"``, as ``transfer`` says."""
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
        """Copy each block of ``a`` to the GPU."""
        # The function, not the method: typeshed's functools.wraps does not bind self.
        return da.map_blocks(cupy.asarray, a, meta=cupy.empty((0,) * a.ndim, dtype=a.dtype))

    label = None if data.label is None else move(data.label)
    weights = None if data.weights is None else move(data.weights)
    return dataclasses.replace(data, x=move(data.x), label=label, weights=weights, provenance=provenance)


def with_target(data: FeatureMatrix, target: Any) -> FeatureMatrix:
    """Put a continuous target where the label goes: the statistics of a target read it from there."""
    target, _ = _row_array(target, data, "target", "value", check_numeric)
    provenance = {**data.provenance, "target": {"dtype": str(target.dtype)}}
    return dataclasses.replace(data, label=target.astype(np.float64), provenance=provenance)


def refuse_beside_groups(label: Any, target: Any) -> None:
    """Refuse a label or a target given with groups: the group keys take the label's place."""
    given = "label=" if label is not None else "target=" if target is not None else None
    if given is not None:
        raise ValueError(
            f"{given} with groups= is not supported (the group keys take the label's place): describe the "
            f"{'classes' if label is not None else 'target'} and the groups in two runs, "
            f"describe(x, {given[:-1]}=...) and describe(x, groups=...)"
        )


def with_groups(data: FeatureMatrix, groups: Any) -> FeatureMatrix:
    """Put group keys where the label goes: the class machinery keys the grouped statistics."""
    groups, what = _row_array(groups, data, "groups", "group key", _check_group_keys)
    if groups.dtype == np.uint64:  # checked here, so that a key int64 cannot hold is named as a group key
        groups = da.map_blocks(_check_uint64_keys, groups, what=what, dtype=groups.dtype, meta=groups._meta)
    return dataclasses.replace(data, label=groups, provenance={**data.provenance, "groups": what})


def as_weights(weights: Any, data: FeatureMatrix) -> FeatureMatrix:
    """Attach sample ``weights`` to ``data``: a 1-D real array with one weight per row, or an array name in its store."""
    if weights is None:
        return data
    weights, what = _row_array(weights, data, "weights", "weight", check_numeric)
    weights = weights.rechunk((data.x.chunks[0],), method=rechunk_method())
    checked = da.map_blocks(_check_weights_block, weights, what=what, dtype=weights.dtype, meta=weights._meta)
    return dataclasses.replace(data, weights=checked, provenance={**data.provenance, "weights": what})


def _row_array(value: Any, data: FeatureMatrix, role: str, noun: str,
               check_dtype: Callable[[Any, str], None]) -> tuple[da.Array, str]:
    """``value`` (array, pandas or dask Series, or a stored array's name) as a dask array of one ``noun`` per row of x, and its name."""
    what = role
    if isinstance(value, str):
        value, what = _stored_array(value, data, role)
    check_series_index(value, data.row_index, role)
    value = series_values(value, what, f"row needs a {noun}", missing_as_nan=role == "target")
    # A masked target value is missing (NaN), a masked weight makes its row as if absent (0), as in
    # numpy.ma; a group key every row needs.
    value = unmasked(value, what, fill={"target": np.nan, "weights": 0.0}.get(role))
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = np.asarray(value)
    check_dtype(value.dtype, what)
    value = as_float64_if_wider(in_memory_as_dask(value), what)
    _check_known_chunks(value, what)
    rows = int(data.x.shape[0])
    if value.ndim != 1 or value.shape[0] != rows:
        raise ValueError(f"{what} has shape {tuple(value.shape)}; expected ({rows:,},): one {noun} per row of x")
    return value, what


def _check_group_keys(dtype: Any, what: str) -> None:
    """Refuse group keys that are not integers (or bool), in one line."""
    if dtype_kind(dtype) not in LABEL_KINDS:
        raise TypeError(f"{what} has dtype {dtype}; group keys must be integers (codes of the group values)")


def _check_uint64_keys(block: Any, *, what: str, block_info: dict[Any, Any] | None = None) -> Any:
    """Refuse a uint64 group key beyond int64 (the class machinery keys int64), naming the row."""
    too_big = block > np.uint64(np.iinfo(np.int64).max)
    if too_big.any():
        at = int(too_big.argmax())
        start = block_info[0]["array-location"][0][0] if block_info else 0
        raise ValueError(
            f"{what}: group key {int(block[at])} at row {start + at:,} does not fit in int64; "
            "group keys must be integers from -2**63 to 2**63-1 (codes of the group values)"
        )
    return block


def _stored_array(name: str, data: FeatureMatrix, role: str) -> tuple[da.Array, str]:
    """The array ``name`` of the store ``data`` came from (its ``role``: weights, target), as a dask array, and how to call it."""
    source = data.source
    path = getattr(source, "path", None)
    if source is None or path is None:
        raise TypeError(
            f"{role} {name!r} is a name, and a {role} name needs x to be a store path or a Dataset; "
            f"with arrays pass the {role} array itself"
        )
    column = getattr(source, "column", None)
    if callable(column):  # a table: its column of that name, a block per row group
        return column(name), f"{role} column {name!r} of {path}"
    if getattr(source, "skipped_rows", None):
        raise ValueError(f"{role} {name!r}: the store's rows were skipped (missing='skip'), so a stored {role} cannot align")
    from daskbatch.io.chunk_grid import array_label, storage_chunks  # lazy: zarr
    from daskbatch.io.zarr_store import BlockReader, ZarrStore  # lazy: zarr

    store = ZarrStore(path)
    arr = store.array(name, role)
    # Read as x is: CF-decoded, a failing chunk named.
    return BlockReader(arr).as_dask(storage_chunks(arr)[0], store.where), f"{role} {array_label(arr)}"


#: Weights beyond 2**±960 (1e±289) are refused: a float64 sum of weights that large can overflow
#: (1,000 rows of 1e306 sum to inf), and sums of weights that small times powers of the values sink
#: into subnormals and lose their digits (a weighted mean 10% off, a sketch out of bounds).
WEIGHT_EXPONENT_LIMIT = 960

#: Where a suggested power of two puts the largest weight: far from both limits, and on the same
#: side of 1 as the weight sum, so that ``W - ddof`` and every statistic but the weight sums are
#: as they would be (a power of two scales sums exactly).
_SUGGESTED_EXPONENT = 512


def _check_weights_block(block: Any, *, what: str, block_info: dict[Any, Any] | None = None) -> Any:
    """Refuse a block with a negative, NaN, infinite or out-of-range weight, naming the block and the row."""
    values = np.asarray(block) if type(block) is np.ndarray else block
    start = block_info[0]["array-location"][0][0] if block_info else 0
    index = block_info[0]["chunk-location"][0] if block_info else 0
    where = f"{what}: chunk {index} (rows {start:,}..{start + block.shape[0] - 1:,})"
    bad = ~(values >= 0) | (values == np.inf)  # NaN compares False
    if bad.any():
        at = int(bad.argmax())
        raise ValueError(
            f"{where} has weight {float(values[at])} at row {start + at:,}; weights must be finite and >= 0"
        )
    if values.shape[0] and dtype_kind(values.dtype) == "f":  # integer weights are never out of range
        check_weight_range(values, where, start)
    return block


def check_weight_range(values: Any, where: str, start: int = 0) -> None:
    """Refuse float weights of ``2**WEIGHT_EXPONENT_LIMIT`` or more, or all positive ones below its inverse."""
    at = int(values.argmax())
    largest = float(values[at])
    exponent = int(np.frexp(largest)[1]) - 1  # largest = m * 2**exponent, 1 <= m < 2
    if largest == 0 or abs(exponent) < WEIGHT_EXPONENT_LIMIT:
        return
    # A block of tiny weights beside large ones would not hurt, but a block cannot see the others.
    huge = exponent > 0
    shift = (_SUGGESTED_EXPONENT if huge else -_SUGGESTED_EXPONENT) - exponent
    problem = (
        f"has weight {largest:.3g} at row {start + at:,}, of 2**{WEIGHT_EXPONENT_LIMIT} or more, where float64 sums of "
        "weights overflow"
        if huge
        else f"has no weight above {largest:.3g} (row {start + at:,}) but zeros, below 2**-{WEIGHT_EXPONENT_LIMIT}, "
        "where float64 sums of weights lose their digits"
    )
    raise ValueError(
        f"{where} {problem}: multiply every weight by 2**{shift} (the statistics stay as they are; "
        "weight sums and weighted counts scale by it)"
    )
