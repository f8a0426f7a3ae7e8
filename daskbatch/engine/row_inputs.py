"""Per-row inputs beside the features: a continuous target, group keys and sample weights.

Each puts its array, checked against the rows of a
:class:`~daskbatch.engine.inputs.FeatureMatrix`, where the statistics read it
(the label's place for a target and group keys; ``weights`` for weights).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from daskbatch.engine.inputs import (
    LABEL_KINDS,
    FeatureMatrix,
    _check_known_chunks,
    _in_memory_as_dask,
    _is_instance,
    as_float64_if_wider,
    check_numeric,
    check_series_index,
    dtype_kind,
    unmasked,
)


def with_target(data: FeatureMatrix, target: Any) -> FeatureMatrix:
    """Put a continuous target where the label goes: the statistics of a target read it from there.

    Parameters
    ----------
    data : FeatureMatrix
        The inputs (a Dataset's own label, if any, is replaced).
    target : array, pandas or dask Series, or str
        One real number per sample (float, integer or bool), read as float64; or the
        name of a 1-D array in the store ``data`` was opened from.

    Returns
    -------
    FeatureMatrix
        ``data`` with the target as its float64 label and ``provenance["target"]`` set.
    """
    target, _ = _row_array(target, data, "target", "value", check_numeric)
    provenance = {**data.provenance, "target": {"dtype": str(target.dtype)}}
    return dataclasses.replace(data, label=target.astype(np.float64), provenance=provenance)


def refuse_beside_groups(label: Any, target: Any) -> None:
    """Refuse a label or a target given with groups: the group keys take the label's place.

    Parameters
    ----------
    label, target : object or None
        The label and target given with ``groups``.
    """
    given = "label=" if label is not None else "target=" if target is not None else None
    if given is not None:
        raise ValueError(
            f"{given} with groups= is not supported (the group keys take the label's place): describe the "
            f"{'classes' if label is not None else 'target'} and the groups in two runs, "
            f"describe(x, {given[:-1]}=...) and describe(x, groups=...)"
        )


def with_groups(data: FeatureMatrix, groups: Any) -> FeatureMatrix:
    """Put group keys where the label goes: the class machinery keys the grouped statistics.

    Parameters
    ----------
    data : FeatureMatrix
        The inputs (a Dataset's own label, if any, is replaced).
    groups : array of int, pandas or dask Series, or str
        One integer group key per sample, or the name of a 1-D array in the
        store ``data`` was opened from.

    Returns
    -------
    FeatureMatrix
        ``data`` with the group keys as its label and ``provenance["groups"]`` set.
    """
    groups, what = _row_array(groups, data, "groups", "group key", _check_group_keys)
    if groups.dtype == np.uint64:  # checked here, so that a key int64 cannot hold is named as a group key
        groups = da.map_blocks(_check_uint64_keys, groups, what=what, dtype=groups.dtype, meta=groups._meta)
    return dataclasses.replace(data, label=groups, provenance={**data.provenance, "groups": what})


def as_weights(weights: Any, data: FeatureMatrix) -> FeatureMatrix:
    """Attach sample ``weights`` to ``data``: a 1-D real array with one weight per row, or an array name in its store.

    Each block is checked when it is read: a negative, NaN or infinite weight
    raises a ValueError naming the weights, the block and the row.

    Parameters
    ----------
    weights : array, dask array, pandas Series, str or None
        The weights, or the name of a 1-D array in the store ``data`` was opened from.
    data : FeatureMatrix
        The data the weights belong to.

    Returns
    -------
    FeatureMatrix
        ``data`` with its weights (``data`` itself for None).
    """
    if weights is None:
        return data
    weights, what = _row_array(weights, data, "weights", "weight", check_numeric)
    weights = weights.rechunk((data.x.chunks[0],))
    checked = da.map_blocks(_check_weights_block, weights, what=what, dtype=weights.dtype, meta=weights._meta)
    return dataclasses.replace(data, weights=checked, provenance={**data.provenance, "weights": what})


def _row_array(value: Any, data: FeatureMatrix, role: str, noun: str,
               check_dtype: Callable[[Any, str], None]) -> tuple[da.Array, str]:
    """``value`` (array, pandas or dask Series, or a stored array's name) as a dask array of one ``noun`` per row of x, and its name."""
    what = role
    if isinstance(value, str):
        value, what = _stored_array(value, data, role)
    if _is_instance(value, "pandas", "Series"):
        check_series_index(value, data.row_index, role)
        value = _pandas_values(value, what, noun, missing_as_nan=role == "target")
    elif _is_instance(value, "dask.dataframe", "Series"):
        value = value.to_dask_array(lengths=True)
    # A masked target value is missing (NaN), a masked weight makes its row as if absent (0), as in
    # numpy.ma; a group key every row needs.
    value = unmasked(value, what, fill={"target": np.nan, "weights": 0.0}.get(role))
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = np.asarray(value)
    check_dtype(value.dtype, what)
    value = as_float64_if_wider(_in_memory_as_dask(value), what)
    _check_known_chunks(value, what)
    rows = int(data.x.shape[0])
    if value.ndim != 1 or value.shape[0] != rows:
        raise ValueError(f"{what} has shape {tuple(value.shape)}; expected ({rows:,},): one {noun} per row of x")
    return value, what


def _pandas_values(series: Any, what: str, noun: str, *, missing_as_nan: bool) -> np.ndarray:
    """A pandas Series as NumPy: missing values as NaN (a target), else refused in one line."""
    if missing_as_nan:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if series.isna().any():
        raise ValueError(f"{what} has {int(series.isna().sum()):,} missing values; every row needs a {noun}")
    numpy_dtype = getattr(series.dtype, "numpy_dtype", None)  # nullable integers: their NumPy dtype
    return series.to_numpy(dtype=numpy_dtype) if numpy_dtype is not None else series.to_numpy()


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
    if getattr(source, "skipped_rows", None):
        raise ValueError(f"{role} {name!r}: the store's rows were skipped (missing='skip'), so a stored {role} cannot align")
    from daskbatch.io.chunk_grid import array_label  # lazy: zarr
    from daskbatch.io.zarr_store import ZarrStore  # lazy: zarr

    arr = ZarrStore(path).array(name, role)
    return da.from_zarr(arr), f"{role} {array_label(arr)}"


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
    """Refuse float weights of ``2**WEIGHT_EXPONENT_LIMIT`` or more, or all positive ones below its inverse.

    The message names the power of two that brings them in range, which changes
    no statistic but the weight sums.

    Parameters
    ----------
    values : array
        Float weights (NumPy or CuPy), checked finite and non-negative.
    where : str
        How to call them in the message (``"weights: chunk 3 (rows ...)"``).
    start : int, default 0
        The row of ``values[0]``.
    """
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
