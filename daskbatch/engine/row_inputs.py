"""Per-row inputs beside the features: a continuous target, group keys and sample weights.

Each puts its array, checked against the rows of a
:class:`~daskbatch.engine.inputs.FeatureMatrix`, where the statistics read it
(the label's place for a target and group keys; ``weights`` for weights).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dask.array as da
import numpy as np

from daskbatch.engine.inputs import (
    LABEL_KINDS,
    FeatureMatrix,
    _check_known_chunks,
    _from_series,
    _in_memory_as_dask,
    _is_instance,
    check_numeric,
    dtype_kind,
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
    if isinstance(target, str):
        target, _ = _stored_array(target, data, "target")
    if _is_instance(target, "pandas", "Series"):
        target = target.to_numpy(dtype=np.float64, na_value=np.nan)
    elif _is_instance(target, "dask.dataframe", "Series"):
        target = target.to_dask_array(lengths=True)
    if not hasattr(target, "dtype") or not hasattr(target, "shape"):
        target = np.asarray(target)
    check_numeric(target.dtype, "target")
    target = _in_memory_as_dask(target)
    _check_known_chunks(target, "target")
    rows = int(data.x.shape[0])
    if target.ndim != 1 or target.shape[0] != rows:
        raise ValueError(f"target has shape {tuple(target.shape)}; expected ({rows:,},): one value per row of x")
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
    what = "groups"
    if isinstance(groups, str):
        groups, what = _stored_array(groups, data, "groups")
    groups = _from_series(groups)
    if not hasattr(groups, "dtype") or not hasattr(groups, "shape"):
        groups = np.asarray(groups)
    if dtype_kind(groups.dtype) not in LABEL_KINDS:
        raise TypeError(f"{what} has dtype {groups.dtype}; group keys must be integers (codes of the group values)")
    groups = _in_memory_as_dask(groups)
    _check_known_chunks(groups, what)
    rows = int(data.x.shape[0])
    if groups.ndim != 1 or groups.shape[0] != rows:
        raise ValueError(f"{what} has shape {tuple(groups.shape)}; expected ({rows:,},): one group key per row of x")
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
    what = "weights"
    if isinstance(weights, str):
        weights, what = _stored_array(weights, data, "weights")
    weights = _from_series(weights)
    if not hasattr(weights, "dtype") or not hasattr(weights, "shape"):
        weights = np.asarray(weights)
    check_numeric(weights.dtype, what)
    rows = int(data.x.shape[0])
    if weights.ndim != 1 or weights.shape[0] != rows:
        raise ValueError(f"{what} has shape {tuple(weights.shape)}; expected ({rows:,},), one weight per row of x")
    weights = _in_memory_as_dask(weights)
    _check_known_chunks(weights, what)
    weights = weights.rechunk((data.x.chunks[0],))
    checked = da.map_blocks(_check_weights_block, weights, what=what, dtype=weights.dtype, meta=weights._meta)
    return dataclasses.replace(data, weights=checked, provenance={**data.provenance, "weights": what})


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
    from daskbatch.io.integrity import array_label  # lazy: zarr
    from daskbatch.io.zarr_nodes import get_array, open_node  # lazy: zarr

    root, where = open_node(path, None)
    arr = get_array(root, name, where, role)
    return da.from_zarr(arr), f"{role} {array_label(arr)}"


def _check_weights_block(block: Any, *, what: str, block_info: dict[Any, Any] | None = None) -> Any:
    """Refuse a block with a negative, NaN or infinite weight, naming the block and the row."""
    values = np.asarray(block) if type(block) is np.ndarray else block
    start = block_info[0]["array-location"][0][0] if block_info else 0
    index = block_info[0]["chunk-location"][0] if block_info else 0
    bad = ~(values >= 0) | (values == np.inf)  # NaN compares False
    if bad.any():
        at = int(bad.argmax())
        raise ValueError(
            f"{what}: chunk {index} (rows {start:,}..{start + block.shape[0] - 1:,}) has weight {float(values[at])} "
            f"at row {start + at:,}; weights must be finite and >= 0"
        )
    return block
