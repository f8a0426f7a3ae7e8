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

from daskbatch.stats.registry import summary_variables

__all__ = [
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
def variable_attrs(name: str, summary: Any) -> dict[str, Any]:
    """The CF-style attributes of a summary's variable ``name``, as its statistic declares them."""
    declared = summary_variables().get(name)
    if declared is None:
        return {"long_name": name}
    attrs: dict[str, Any] = {"long_name": declared.long_name or name}
    if declared.units is not None:
        attrs["units"] = declared.units
    if declared.settings is not None:
        attrs.update(declared.settings(summary))
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
