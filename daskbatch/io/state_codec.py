"""One codec for statistic states: what checkpoints and saved summaries write of a state, and how it comes back.

A state (a dataclass of arrays and scalars) is written as a *record*, a JSON
header, and one plain array per field::

    {"codec": 1, "state": "daskbatch.stats.moments:MomentsState",
     "fields": [["n", "<f8", [5], false], ["shift", "<f8", [5], false], ...]}

``state`` is the class's key in the closed registry
(:mod:`daskbatch.stats.state_registry`); each field has its dtype, shape and
whether it was a scalar. Reading looks the key up in the registry (nothing is
imported by a name read from a file), checks the fields, dtypes and shapes
against the header and the class, and builds the class from the arrays. No
pickle anywhere: object arrays are refused when writing. :func:`record_sha256`
is the checksum over a record (with what the container adds to it, such as the
statistic's parameters) and its arrays' bytes.

The containers around records: a checkpoint file holds several records and
one ``.npz`` of their arrays (:mod:`daskbatch.engine.checkpoint.files`), a saved
summary one Zarr group per record (:mod:`daskbatch.io.summary_states`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

# The built-in states: importing their modules registers them (State's subclass hook).
from daskbatch.stats.class_moments import ClassMomentsState
from daskbatch.stats.classes import ClassValuesState
from daskbatch.stats.comoments import CoMomentsState, WeightedCoMomentsState
from daskbatch.stats.content_digest import DigestState
from daskbatch.stats.histogram import HistogramState
from daskbatch.stats.moments import MomentsState, WeightedMomentsState
from daskbatch.stats.pairwise import PairwiseCoMomentsState
from daskbatch.stats.sketch import SketchState
from daskbatch.stats.state_registry import registered_state, state_key
from daskbatch.stats.target import TargetMomentsState
from daskbatch.stats.tiled import CrossCoMomentsState, WeightedCrossCoMomentsState

__all__ = ["BUILT_IN_STATES", "CODEC_VERSION", "UnreadableState", "check_record", "decode", "encode",
           "record_sha256"]

#: Version of the record layout above; a record of another version is refused, never guessed at.
CODEC_VERSION = 1

#: The state classes of daskbatch's own statistics (a user's register themselves, see the registry).
BUILT_IN_STATES: tuple[type, ...] = (
    MomentsState, WeightedMomentsState, CoMomentsState, WeightedCoMomentsState, CrossCoMomentsState,
    HistogramState, ClassMomentsState, ClassValuesState, SketchState, TargetMomentsState, WeightedCrossCoMomentsState,
    DigestState, PairwiseCoMomentsState,
)


class UnreadableState(ValueError):
    """A record cannot be rebuilt: another codec version, an unregistered class, fields that do not match."""


def encode(state: Any, *, registered: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Encode a state as a record header and its arrays, by field.

    Parameters
    ----------
    state : dataclass instance
        A state with NumPy arrays (or scalars) as fields.
    registered : bool, default True
        Require its class to be registered, as reading it back by its key
        alone does; a saved summary reads a user's state with the class the
        caller's statistic gives instead.

    Returns
    -------
    header : dict
        The record's JSON header.
    arrays : dict of str to numpy.ndarray
        One array per field, in field order.

    Raises
    ------
    TypeError
        The state is not a dataclass, its class is not registered, or a field is not numeric.
    """
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
    """Checksum a record: its header, what the container adds (``context``), and its arrays' bytes.

    Parameters
    ----------
    header : mapping
        The record's header, as :func:`encode` gives it.
    arrays : mapping of str to numpy.ndarray
        Its arrays, by field, in field order.
    context : JSON-able, optional
        What else the checksum covers (a summary's statistic and parameters).

    Returns
    -------
    str
        The hex sha256.
    """
    h = hashlib.sha256(json.dumps([dict(header), context], sort_keys=True).encode())
    for a in arrays.values():
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def check_record(header: Any, expected: type | None = None) -> type:
    """Check a record header read from a file, without its arrays; give the class it names.

    Parameters
    ----------
    header : object
        The header as read (anything: it comes from a file).
    expected : type, optional
        The class the record must name, used instead of the registry's (a
        summary's statistic fixes it).

    Returns
    -------
    type
        The registered state class.

    Raises
    ------
    UnreadableState
        One line saying what is wrong.
    """
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
    """Rebuild a state from its record header and arrays (checked by :func:`check_record` first).

    Parameters
    ----------
    header : object
        The record's header, as read.
    arrays : mapping of str to numpy.ndarray
        Its arrays, by field.
    expected : type, optional
        The class the record must name.

    Returns
    -------
    dataclass instance
        The state; a field written as a scalar comes back as a NumPy scalar.

    Raises
    ------
    UnreadableState
        One line saying what is wrong.
    """
    cls = check_record(header, expected)
    values: dict[str, Any] = {}
    for name, dtype, shape, scalar in header["fields"]:
        a = arrays.get(name)
        if not isinstance(a, np.ndarray) or a.dtype.str != dtype or list(a.shape) != shape:
            got = "missing" if a is None else f"{getattr(a, 'dtype', '?')} {list(getattr(a, 'shape', ()))}"
            raise UnreadableState(f"field {name!r} is {got}, the record says {dtype} {shape}")
        values[name] = a[()] if scalar else a
    return cls(**values)
