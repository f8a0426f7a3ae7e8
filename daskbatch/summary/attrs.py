"""The labels of a summary as an ``xarray.Dataset``: CF-style variable attributes and provenance attributes.

:meth:`daskbatch.Summary.to_xarray` gives each variable a ``long_name`` (and
``units`` where the statistic has its own: ``"1"`` for counts and
correlations, ``"nat"``/``"bit"`` for mutual information), records the
settings a number depends on (``ddof`` on var/std/cov, ``bias`` on
skew/kurtosis), and spreads the provenance over the dataset attributes, one
per key (nested dicts flattened to dotted keys, ``plan.budget_bytes``), so that
they read like any other attribute. Only values attributes cannot hold as they
are (lists of lists or of dicts) are JSON text; their keys are listed in
``provenance_json_keys`` so :func:`decode_provenance` reads them back.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = [
    "COUNT_FIELDS",
    "FORMAT",
    "decode_provenance",
    "encode_provenance",
    "variable_attrs",
]

#: Version of the on-disk layout: 1 held the provenance as one JSON string attribute.
FORMAT = 2
#: Attributes of the saved Dataset that are not provenance ("daskbatch_output": the marker outputs check).
RESERVED = frozenset({
    "title", "cov_count", "daskbatch_summary_format", "provenance_json_keys", "provenance", "daskbatch_output",
})
#: Summary fields holding exact counts in float64 (stored as int64, read back as float64).
COUNT_FIELDS = ("count", "nan_count", "posinf_count", "neginf_count", "class_count", "target_count")

_COUNT = {"units": "1"}
_LONG_NAMES: dict[str, str] = {
    "count": "number of values that are not NaN",
    "nan_count": "number of NaN values",
    "posinf_count": "number of +inf values",
    "neginf_count": "number of -inf values",
    "mean": "mean",
    "var": "variance",
    "std": "standard deviation",
    "skew": "skewness (Fisher-Pearson)",
    "kurtosis": "excess kurtosis (Fisher)",
    "min": "minimum",
    "max": "maximum",
    "cov": "covariance over the complete rows",
    "corr": "Pearson correlation over the complete rows",
    "hist_counts": "histogram counts",
    "hist_edges": "histogram bin edges",
    "underflow": "number of values below the histogram range",
    "overflow": "number of values above the histogram range",
    "joint_counts": "counts per (feature, histogram slot, class)",
    "mi": "mutual information with the label",
    "class_count": "number of finite values per class",
    "class_mean": "mean of the finite values per class",
    "class_m2": "sum of squared deviations from the class mean",
    "target_count": "number of finite values of the feature (rows used with the target)",
    "target_mean": "mean of the target over the rows where the feature is finite",
    "target_m2": "sum of squared deviations of the target from its mean",
    "target_x_m2": "sum of squared deviations of the feature from its mean",
    "target_comoment": "sum of products of the feature's and the target's deviations",
    "sketch_counts": "quantile sketch counts",
    "sketch_extrema": "finite minimum and maximum seen by the quantile sketch",
    "quantile_counts": "quantile histogram counts: below the range, the bins, above",
    "quantile_range": "range of the quantile histogram",
    "weight_sum": "sum of the sample weights of the finite values",
}
_UNITLESS = frozenset({
    "count", "nan_count", "posinf_count", "neginf_count", "corr", "hist_counts", "underflow", "overflow",
    "joint_counts", "class_count", "target_count", "sketch_counts", "quantile_counts",
})


def variable_attrs(name: str, provenance: dict[str, Any], cov_count: int | None = None) -> dict[str, Any]:
    """Give the CF-style attributes of the variable ``name`` of a summary's Dataset.

    Parameters
    ----------
    name : str
        The variable.
    provenance : dict
        The summary's provenance (settings such as ``ddof``).
    cov_count : int, optional
        Complete rows of the covariance.

    Returns
    -------
    dict
        The attributes.
    """
    attrs: dict[str, Any] = {"long_name": _LONG_NAMES.get(name, name)}
    if name in _UNITLESS:
        attrs.update(_COUNT)
    if name in ("var", "std", "cov") and provenance.get("ddof") is not None:
        attrs["ddof"] = int(provenance["ddof"])
    if name in ("skew", "kurtosis") and provenance.get("bias") is not None:
        attrs["bias"] = int(bool(provenance["bias"]))  # an int: netCDF attributes have no bool
        attrs["comment"] = "bias=1: biased estimator (scipy.stats default); 0: bias-corrected"
    if name in ("cov", "corr") and cov_count is not None:
        attrs["complete_rows"] = int(cov_count)
    if name == "mi":
        attrs["units"] = "bit" if provenance.get("mi_units") == "bits" else "nat"
    if name == "joint_counts":
        attrs["comment"] = "slot -1: below the histogram range, 0..bins-1: the bins, bins: above it"
    if name == "sketch_counts" and isinstance(provenance.get("sketch"), dict):
        attrs["relative_accuracy"] = float(provenance["sketch"].get("alpha", float("nan")))
    return attrs


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _fits_an_attribute(value: Any) -> bool:
    """A scalar or a flat list of scalars of one kind (what attribute formats hold)."""
    if _is_scalar(value):
        return True
    if isinstance(value, list):
        kinds = {str if isinstance(v, str) else float for v in value if v is not None}
        return all(_is_scalar(v) and v is not None for v in value) and len(kinds) <= 1
    return False


def encode_provenance(provenance: dict[str, Any]) -> dict[str, Any]:
    """Encode ``provenance`` as Dataset attributes: one per key, nested dicts as dotted keys.

    Values first go through JSON (``default=str``), exactly as the former single
    JSON attribute did, so reading them back gives the same dict. Keys that hold
    a dot themselves (they would read back as nesting) go whole, as JSON, into
    ``provenance_dotted``.

    Parameters
    ----------
    provenance : dict
        The summary's provenance.

    Returns
    -------
    dict
        The attributes.
    """
    plain = json.loads(json.dumps(provenance, default=str))
    attrs: dict[str, Any] = {}
    as_json: list[str] = []

    def _put(key: str, value: Any) -> None:
        """Store ``value`` under ``key``, nested dicts under dotted keys."""
        if isinstance(value, dict) and value and not any("." in k for k in value):
            for k, v in value.items():
                _put(f"{key}.{k}", v)
        elif _fits_an_attribute(value):
            attrs[key] = value
        else:
            attrs[key] = json.dumps(value)
            as_json.append(key)

    dotted = {k: v for k, v in plain.items() if "." in k}
    for key, value in plain.items():
        if key not in dotted:
            _put(key, value)
    if dotted:
        attrs["provenance_dotted"] = json.dumps(dotted)
    attrs["provenance_json_keys"] = as_json
    return attrs


def decode_provenance(attrs: dict[str, Any]) -> dict[str, Any]:
    """Decode the provenance dict from a summary Dataset's attributes (both layouts).

    Parameters
    ----------
    attrs : dict
        The Dataset's attributes.

    Returns
    -------
    dict
        The provenance.
    """
    if isinstance(attrs.get("provenance"), str):  # format 1: one JSON string
        return dict(json.loads(attrs["provenance"]))
    as_json = set(_as_list(attrs.get("provenance_json_keys", [])))
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key in RESERVED:
            continue
        if key == "provenance_dotted":
            out.update(json.loads(value))
            continue
        value = json.loads(value) if key in as_json else _plain(value)
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [value]
    return list(np.asarray(value).tolist()) if not isinstance(value, list) else value


def _plain(value: Any) -> Any:
    """NumPy values an attribute store hands back, as the JSON types the provenance had."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


def count_array(a: np.ndarray) -> np.ndarray:
    """Convert exact float64 counts to int64 (left as they are if any is not a whole finite number).

    Parameters
    ----------
    a : numpy.ndarray
        Counts.

    Returns
    -------
    numpy.ndarray
        The counts as int64, or ``a`` itself.
    """
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return a.astype(np.int64, copy=False)
    if a.size and not (np.all(np.isfinite(a)) and np.all(a == np.rint(a))):
        return a
    return np.rint(a).astype(np.int64)
