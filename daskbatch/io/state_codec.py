"""One codec for statistic states: what checkpoints and saved summaries write of a state, and how it comes back.

A state (a dataclass of arrays and scalars) is written as a *record*, a JSON
header, and one plain array per field::

    {"codec": 1, "state": "daskbatch.stats.moments:MomentsState",
     "fields": [["n", "<f8", [5], false], ["shift", "<f8", [5], false], ...]}

``state`` is the class's key in the closed registry
(:mod:`daskbatch.stats.declaration`); each field has its dtype, shape and
whether it was a scalar. Reading looks the key up in the registry (nothing is
imported by a name read from a file), checks the fields, dtypes and shapes
against the header and the class, and builds the class from the arrays. No
pickle anywhere: object arrays are refused when writing. :func:`record_sha256`
is the checksum over a record (with what the container adds to it, such as the
statistic's parameters) and its arrays' bytes.

The containers around records: a checkpoint file holds several records and
one ``.npz`` of their arrays (:mod:`daskbatch.engine.checkpoint_files`), a saved
summary one Zarr group per record (:mod:`daskbatch.io.summary_states`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from daskbatch.stats import registry  # noqa: F401  (importing the table registers every built-in state)
from daskbatch.stats._base import registered_state, state_key

__all__ = ["CODEC_VERSION", "UnreadableState", "check_record", "decode", "encode",
           "record_sha256"]

#: Version of the record layout above; a record of another version is refused, never guessed at.
CODEC_VERSION = 1

class UnreadableState(ValueError):
    """A record cannot be rebuilt: another codec version, an unregistered class, fields that do not match."""


def encode(state: Any, *, registered: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Encode a state as a record header and its arrays, by field."""
    cls = type(state)
    if not (dataclasses.is_dataclass(state) and not isinstance(state, type)):
        raise TypeError(
            f"cannot save a state of type {cls.__qualname__}: states are dataclasses of arrays "
            "deriving from daskbatch.State"
        )
    key = state_key(cls)
    if registered and registered_state(key) is not cls:
        raise TypeError(
            f"cannot save a state of type {cls.__qualname__}: its class is not registered; derive it from "
            "daskbatch.State or decorate it with daskbatch.register_state"
        )
    arrays: dict[str, np.ndarray] = {}
    fields = []
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise TypeError(f"cannot save field {f.name!r} of {cls.__qualname__}: it is not numeric ({a.dtype})")
        arrays[f.name] = a
        fields.append([f.name, a.dtype.str, list(a.shape), not isinstance(value, np.ndarray)])
    return {"codec": CODEC_VERSION, "state": key, "fields": fields}, arrays


def record_sha256(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], context: Any = None) -> str:
    """Checksum a record: its header, what the container adds (``context``), and its arrays' bytes."""
    h = hashlib.sha256(json.dumps([dict(header), context], sort_keys=True).encode())
    for a in arrays.values():
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def check_record(header: Any, expected: type | None = None) -> type:
    """Check a record header read from a file, without its arrays; give the class it names."""
    if not isinstance(header, Mapping):
        raise UnreadableState(f"the state record is a {type(header).__name__}, not a mapping")
    if header.get("codec") != CODEC_VERSION:
        raise UnreadableState(
            f"the state record has codec version {header.get('codec')!r}, this daskbatch reads {CODEC_VERSION}; "
            "compute it again (or use the daskbatch that wrote it)"
        )
    key = header.get("state")
    if expected is not None:
        if key != state_key(expected):
            raise UnreadableState(f"state class {key!r} is not the expected {state_key(expected)!r}")
        cls: type | None = expected
    else:
        cls = registered_state(key) if isinstance(key, str) else None
    if cls is None or not dataclasses.is_dataclass(cls):
        # Never imported: a user's class is registered by the program that defines it.
        raise UnreadableState(f"state class {key!r} is not registered (register_state); nothing was imported")
    names = [f.name for f in dataclasses.fields(cls)]
    fields = header.get("fields")
    if not (isinstance(fields, list) and [_name_of(f) for f in fields] == names):
        raise UnreadableState(f"fields {fields!r} are not those of {cls.__name__} {names}")
    for f in fields:
        if not (isinstance(f[1], str) and isinstance(f[2], list) and isinstance(f[3], bool)):
            raise UnreadableState(f"field {f[0]!r}: {f[1:]!r} is not a dtype, a shape and a scalar flag")
    return cls


def _name_of(field: Any) -> Any:
    """The name of one ``[name, dtype, shape, scalar]`` entry, or None when it is not one."""
    return field[0] if isinstance(field, list) and len(field) == 4 else None


def decode(header: Any, arrays: Mapping[str, np.ndarray], expected: type | None = None) -> Any:
    """Rebuild a state from its record header and arrays (checked by :func:`check_record` first)."""
    cls = check_record(header, expected)
    values: dict[str, Any] = {}
    for name, dtype, shape, scalar in header["fields"]:
        a = arrays.get(name)
        if not isinstance(a, np.ndarray) or a.dtype.str != dtype or list(a.shape) != shape:
            got = "missing" if a is None else f"{getattr(a, 'dtype', '?')} {list(getattr(a, 'shape', ()))}"
            raise UnreadableState(f"field {name!r} is {got}, the record says {dtype} {shape}")
        values[name] = a[()] if scalar else a
    return cls(**values)
