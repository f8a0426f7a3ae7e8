"""The merged states of a saved summary: the ``states/`` group of its Zarr store.

Layout (format version :data:`FORMAT_VERSION`)::

    SUMMARY.zarr/states/                      attrs {"format_version": 1}
    SUMMARY.zarr/states/<name>/               attrs {"format_version", "statistic", "params", "fields", "sha256"}
    SUMMARY.zarr/states/<name>/<field>        one Zarr array per field of the state

``<name>`` is the statistic's name (``"moments"``, ``"hist"``, ...),
``statistic`` its class name and ``params`` its parameters as JSON (a
histogram's bins, ranges and class values, ...). ``sha256`` covers all of it:
the statistic, its parameters, and every field's dtype, shape and bytes, so a
changed array or attribute is detected on load. Arrays carry zstd and a
CRC-32C per chunk like the summary's other arrays; chunks of zeros are not
written (the mostly empty quantile sketch) and read back as zeros, which the
digest confirms.

The states are bound to the summary they belong to: the states group's
``summary_sha256`` is one sha256 over the summary's results (every variable of
its dataset, :func:`results_digest`) and every state's ``sha256``. A ``states/``
group copied in from another summary (whose means would show right while merges
used the other summary's data) fails it and is refused.

Loading rebuilds only the statistics and states of
:mod:`daskbatch.stats.registry` from plain arrays and JSON: no pickle, no
import of a name read from the file. Whatever is wrong is one
:class:`~daskbatch.errors.DataError` line naming the summary and the state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from daskbatch.errors import DataError
from daskbatch.io.integrity import checksummed
from daskbatch.stats.registry import STATE_CLASSES, Kept, statistic_from_params, statistic_params

__all__ = ["FORMAT_VERSION", "GROUP", "read_states", "results_digest", "write_states"]

#: Version of the layout above; a summary written with another one is refused, never guessed at.
FORMAT_VERSION = 1
#: The subgroup of a summary store that holds the states.
GROUP = "states"


def _digest(statistic: str, params: Any, fields: Mapping[str, np.ndarray]) -> str:
    """sha256 over the statistic's name and parameters and every field's dtype, shape and bytes."""
    h = hashlib.sha256()
    header = {
        "format_version": FORMAT_VERSION, "statistic": statistic, "params": params,
        "fields": [[name, a.dtype.str, list(a.shape)] for name, a in fields.items()],
    }
    h.update(json.dumps(header, sort_keys=True).encode())
    for a in fields.values():
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def results_digest(ds: Any) -> str:
    """Hash a summary's results: every variable of its xarray dataset, by name, dims, dtype, shape and values.

    Strings (feature names) are hashed as JSON text, so that the in-memory
    dataset and the one read back from Zarr (another string dtype) agree.

    Parameters
    ----------
    ds : xarray.Dataset
        The summary as :meth:`Summary.to_xarray` gives it, or as read back (loaded).

    Returns
    -------
    str
        The hex sha256.
    """
    h = hashlib.sha256()
    for name in sorted(map(str, ds.variables)):
        var = ds.variables[name]
        a = np.asarray(var.values)
        h.update(json.dumps([name, list(map(str, var.dims))]).encode())
        if a.dtype.kind in "OUSTV":
            h.update(json.dumps(a.tolist(), default=str).encode())
        else:
            h.update(f"{a.dtype.str} {a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _binding(results: str, digests: Mapping[str, str]) -> str:
    """One sha256 over the results' digest and every state's, by name: what ties the states to their summary."""
    return hashlib.sha256(json.dumps([results, sorted(digests.items())]).encode()).hexdigest()


def write_states(store: str, states: Mapping[str, Kept], results: str) -> None:
    """Write ``states`` into the ``states/`` group of the Zarr group at ``store`` (which must exist).

    Parameters
    ----------
    store : str
        Path or URL of the summary store being written (its temporary path).
    states : mapping of str to Kept
        The summary's statistics and merged states, by name.
    results : str
        :func:`results_digest` of the summary's dataset: the states are bound to it.
    """
    from zarr.codecs import ZstdCodec

    root = zarr.open_group(store, mode="r+")
    group = root.create_group(GROUP, attributes={"format_version": FORMAT_VERSION})
    digests = {}
    for name, kept in states.items():
        cls = type(kept.statistic)
        params = statistic_params(kept.statistic)
        fields = {f.name: np.asarray(getattr(kept.state, f.name)) for f in dataclasses.fields(kept.state)}
        digests[name] = _digest(cls.__name__, params, fields)
        sub = group.create_group(name, attributes={
            "format_version": FORMAT_VERSION, "statistic": cls.__name__, "params": params,
            "fields": list(fields), "sha256": digests[name],
        })
        for field, a in fields.items():
            sub.create_array(
                field, data=a, compressors=checksummed(ZstdCodec()), config={"write_empty_chunks": False}
            )
    group.update_attributes({"summary_sha256": _binding(results, digests)})


def read_states(store: str, results: str) -> dict[str, Kept] | None:
    """Read the states saved in the summary at ``store``, checking that they belong to its results.

    Parameters
    ----------
    store : str
        The summary store.
    results : str
        :func:`results_digest` of the summary's dataset as read from ``store``.

    Returns
    -------
    dict of str to Kept or None
        The kept states by statistic; None when it has none (older or tiled summaries).

    Raises
    ------
    DataError
        A state has another format version, fails its checksum, names
        something that is not a daskbatch statistic, or the states do not
        belong to the summary's results (one line naming the summary and the state).
    """
    root = zarr.open_group(store, mode="r")
    try:
        group = root[GROUP]
    except KeyError:
        return None
    if not isinstance(group, zarr.Group):
        raise DataError(f"summary {store}: {GROUP!r} is not a group of states")
    _check_version(store, "the states group", group.attrs.get("format_version"))
    out: dict[str, Kept] = {}
    digests: dict[str, str] = {}
    for name, sub in sorted(group.groups()):
        out[name] = _read_one(store, name, sub)
        digests[name] = str(sub.attrs["sha256"])  # _read_one checked it against the arrays
    if group.attrs.get("summary_sha256") != _binding(results, digests):
        raise DataError(
            f"summary {store}: its {GROUP}/ group does not belong to its results (the checksum over results and "
            "states differs): it was copied from another summary or changed; describe the data again"
        )
    return out


def _check_version(store: str, what: str, version: Any) -> None:
    if version != FORMAT_VERSION:
        raise DataError(
            f"summary {store}: {what} has format version {version!r}, this daskbatch reads "
            f"{FORMAT_VERSION}; describe the data again (or use the daskbatch that wrote it)"
        )


def _read_one(store: str, name: str, group: Any) -> Kept:
    """One state, verified: version, registered class, fields, sha256."""
    where = f"summary {store}: state {name!r}"
    attrs = dict(group.attrs)
    _check_version(store, f"state {name!r}", attrs.get("format_version"))
    statistic_name, params, fields = attrs.get("statistic"), attrs.get("params"), attrs.get("fields")
    try:
        statistic = statistic_from_params(str(statistic_name), params)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: {exc}") from None
    if statistic.name != name:
        raise DataError(f"{where} holds a {statistic_name} (named {statistic.name!r})")
    state_cls = STATE_CLASSES[type(statistic)]
    expected = [f.name for f in dataclasses.fields(state_cls)]
    if fields != expected:
        raise DataError(f"{where}: fields {fields!r} are not those of {state_cls.__name__} {expected}")
    try:
        arrays = {f: np.asarray(group[f][...]) for f in expected}
    except Exception as exc:  # a missing array or a chunk failing its CRC-32C: zarr raises many kinds
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DataError(f"{where} cannot be read ({type(exc).__name__}: {first_line})") from None
    if _digest(str(statistic_name), params, arrays) != attrs.get("sha256"):
        raise DataError(f"{where} fails its sha256 checksum: it changed after it was written")
    return Kept(statistic, state_cls(**arrays))
