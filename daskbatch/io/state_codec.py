"""One codec for statistic states: what checkpoints and saved summaries write of a state, and how it comes back."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from daskbatch._common import short_repr
from daskbatch.errors import DataError
from daskbatch.io.outputs import checksummed, zarr_target
from daskbatch.planning.plan import format_bytes
from daskbatch.stats import registry  # noqa: F401  (importing the table registers every built-in state)
from daskbatch.stats._base import reads_label, registered_state, registered_states, state_key
from daskbatch.stats.categorical import (
    CategoricalProfile,
    CategoricalState,
    decode_profile,
    encode_profile,
)
from daskbatch.stats.pairwise import PairwiseCoMomentsState
from daskbatch.stats.registry import (
    Kept,
    built_in_states,
    declared_state,
    statistic_from_params,
    statistic_params,
)

__all__ = ["CODEC_VERSION", "FORMAT_VERSION", "GROUP", "PROFILE_GROUP", "UnreadableState", "check_bounds",
           "check_record", "check_savable", "decode", "describe_error", "encode", "read_profile", "read_states",
           "record_sha256", "results_digest", "write_profile", "write_states"]

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
        if key != state_key(expected) and _state_named(key) is not expected:
            raise UnreadableState(f"state class {short_repr(key, 120)} is not the expected {state_key(expected)!r}")
        cls: type | None = expected
    else:
        cls = _state_named(key)
    if cls is None or not dataclasses.is_dataclass(cls):
        # Never imported: a user's class is registered by the program that defines it.
        raise UnreadableState(f"state class {short_repr(key, 120)} is not registered (register_state); nothing was imported")
    names = [f.name for f in dataclasses.fields(cls)]
    fields = header.get("fields")
    # A record may end before fields added since it was written whose default is None (the sketch's tails).
    later = [f.default for f in dataclasses.fields(cls)][len(fields) if isinstance(fields, list) else 0 :]
    if not (isinstance(fields, list) and [_name_of(f) for f in fields] == names[: len(fields)]
            and fields and all(default is None for default in later)):
        raise UnreadableState(f"fields {fields!r} are not those of {cls.__name__} {names}")
    for f in fields:
        if not (isinstance(f[1], str) and isinstance(f[2], list) and isinstance(f[3], bool)):
            raise UnreadableState(f"field {f[0]!r}: {f[1:]!r} is not a dtype, a shape and a scalar flag")
    return cls


def _state_named(key: Any) -> type | None:
    """The registered state class a record's ``"module:qualname"`` names; None when there is none."""
    module, _, qualname = key.partition(":") if isinstance(key, str) else ("", "", "")
    if module.partition(".")[0] != "daskbatch":
        return registered_state(key) if isinstance(key, str) else None  # a user's: by its full key
    # daskbatch's own by qualified name alone, so that a built-in state class can move between modules.
    own = [cls for cls in registered_states() if cls.__module__.partition(".")[0] == "daskbatch"]
    found = next((cls for cls in own if cls.__qualname__ == qualname), None)
    if found is None:
        raise UnreadableState(
            f"state class {short_repr(key, 120)} is not one of daskbatch's built-in states; nothing was imported"
        )
    return found


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


#: Version of the layout above; a summary written with another one is refused, never guessed at.
#: 2: the quantile sketch's state is a window of buckets per sign with its offsets.
#: 3: each state is a record of the state codec (its class by registry key, dtypes, shapes).
FORMAT_VERSION = 3
#: The subgroup of a summary store that holds the states.
GROUP = "states"


def results_digest(ds: Any) -> str:
    """Hash a summary's results: every variable of its xarray dataset, by name, dims, dtype, shape and values."""
    h = hashlib.sha256()
    for name in sorted(map(str, ds.variables)):
        var = ds.variables[name]
        a = np.asarray(var.values)
        h.update(json.dumps([name, list(map(str, var.dims))]).encode())
        # An empty coordinate (the features of a table of text only) is read back as float64: hashed as text.
        if a.dtype.kind in "OUSTV" or (a.size == 0 and name in ds.coords):
            h.update(json.dumps(a.tolist(), default=str).encode())
        else:
            h.update(f"{a.dtype.str} {a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _binding(results: str, digests: Mapping[str, str]) -> str:
    """One sha256 over the results' digest and every state's, by name: what ties the states to their summary."""
    return hashlib.sha256(json.dumps([results, sorted(digests.items())]).encode()).hexdigest()


def write_states(store: str, states: Mapping[str, Kept], results: str) -> None:
    """Write ``states`` into the ``states/`` group of the Zarr group at ``store`` (which must exist)."""
    import zarr  # lazy: zarr (checkpoints use the codec above without it)
    from zarr.codecs import ZstdCodec  # lazy: zarr

    root = zarr.open_group(zarr_target(store), mode="r+")
    group = root.create_group(GROUP, attributes={"format_version": FORMAT_VERSION})
    digests = {}
    for name, kept in states.items():
        user = declared_state(kept.statistic) is None
        statistic, params = _identity(kept.statistic)
        # A state whose in-memory layout differs from the saved one gives the saved one (co-moments: mirrored).
        state = kept.state.canonical() if callable(getattr(kept.state, "canonical", None)) else kept.state
        record, fields = encode(state, registered=not user)
        digests[name] = record_sha256(record, fields, [FORMAT_VERSION, statistic, params])
        sub = group.create_group(name, attributes={
            "format_version": FORMAT_VERSION, "statistic": statistic, "params": params,
            "sha256": digests[name], "user": user, **record,
        })
        for field, a in fields.items():
            sub.create_array(
                field, data=a, compressors=checksummed(ZstdCodec()), config={"write_empty_chunks": False}
            )
    group.update_attributes({"summary_sha256": _binding(results, digests)})


#: The group of a summary store that holds the non-numeric columns' profile (beside ``states/``, bound alike).
PROFILE_GROUP = "categorical"
_PROFILE = "CategoricalProfile"


def write_profile(store: str, kept: Kept, results: str) -> None:
    """Write the profile of the non-numeric columns (``kept``) into the group ``categorical/`` of ``store``."""
    import zarr  # lazy: zarr (checkpoints use the codec above without it)
    from zarr.codecs import ZstdCodec  # lazy: zarr

    record, fields = encode(encode_profile(kept.state))
    params = kept.statistic.params
    digest = record_sha256(record, fields, [FORMAT_VERSION, _PROFILE, params])
    group = zarr.open_group(zarr_target(store), mode="r+").create_group(PROFILE_GROUP, attributes={
        "format_version": FORMAT_VERSION, "statistic": _PROFILE, "params": params, "sha256": digest,
        "summary_sha256": _binding(results, {PROFILE_GROUP: digest}), **record,
    })
    for field, a in fields.items():
        group.create_array(field, data=a, compressors=checksummed(ZstdCodec()))


def read_profile(store: str, results: str) -> Kept | None:
    """The profile :func:`write_profile` wrote (None when the summary has none), verified like the states."""
    import zarr  # lazy: zarr

    try:
        group = zarr.open_group(zarr_target(store, read_only=True), mode="r")[PROFILE_GROUP]
    except KeyError:
        return None
    where = f"summary {store}: the profile of its non-numeric columns"
    attrs = dict(group.attrs)
    _check_version(store, "the profile of its non-numeric columns", attrs.get("format_version"))
    if attrs.get("summary_sha256") != _binding(results, {PROFILE_GROUP: str(attrs.get("sha256"))}):
        raise DataError(f"{where} does not belong to its results (the checksum over both differs): it was copied "
                        "from another summary or changed; describe the data again")
    params = attrs.get("params")
    try:
        if not isinstance(params, dict):
            raise TypeError(f"its parameters are {params!r}, not a mapping")
        profile = CategoricalProfile(**{str(k): int(v) for k, v in params.items()})  # type: ignore[arg-type]
        return Kept(profile, decode_profile(_decode(where, group, attrs, CategoricalState)))
    except DataError:  # _decode's own line
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise DataError(f"{where} cannot be read ({describe_error(exc)})") from None


def check_savable(states: Mapping[str, Kept]) -> None:
    """Refuse, before anything is written, a user's state that is not a dataclass of arrays."""
    for name, kept in states.items():
        if not (dataclasses.is_dataclass(kept.state) and not isinstance(kept.state, type)):
            raise ValueError(
                f"statistic {name!r}: its state is a {type(kept.state).__name__}, not a dataclass of arrays, "
                "so the summary cannot save it; make the state a frozen dataclass (subclass daskbatch.State)"
            )


def _identity(statistic: Any) -> tuple[str, Any]:
    """What the file records of a statistic: registered class name and JSON parameters, or a user's class path and repr."""
    if declared_state(statistic) is not None:
        return type(statistic).__name__, statistic_params(statistic)
    cls = type(statistic)
    if cls.__repr__ is object.__repr__:  # the default repr holds the object's address: its attributes instead
        params = repr(sorted(vars(statistic).items())) if hasattr(statistic, "__dict__") else ""
    else:
        params = repr(statistic)
    return f"{cls.__module__}:{cls.__qualname__}", params


def read_states(
    store: str, results: str, statistics: Sequence[Any] = (), n_features: int = 0
) -> dict[str, Kept] | None:
    """Read the states saved in the summary at ``store``, checking that they belong to its results."""
    import zarr  # lazy: zarr (checkpoints use the codec above without it)

    root = zarr.open_group(zarr_target(store, read_only=True), mode="r")
    try:
        group = root[GROUP]
    except KeyError:
        if statistics:
            raise DataError(f"summary {store} holds no states (saved without them)") from None
        return None
    if not isinstance(group, zarr.Group):
        raise DataError(f"summary {store}: {GROUP!r} is not a group of states")
    _check_version(store, "the states group", group.attrs.get("format_version"))
    given = {s.name: s for s in statistics}
    out: dict[str, Kept] = {}
    digests: dict[str, str] = {}
    for name, sub in sorted(group.groups()):
        # Every state's recorded digest, read or not: the binding covers the whole group.
        digests[name] = str(sub.attrs.get("sha256"))
        if sub.attrs.get("user"):
            if name in given:
                out[name] = _read_one(store, name, sub, given[name], n_features)
            continue
        out[name] = _read_one(store, name, sub)
    if group.attrs.get("summary_sha256") != _binding(results, digests):
        raise DataError(
            f"summary {store}: its {GROUP}/ group does not belong to its results (the checksum over results and "
            "states differs): it was copied from another summary or changed; describe the data again"
        )
    unknown = sorted(set(given) - set(out))
    if unknown:
        raise DataError(f"summary {store} holds no state of statistic(s) {', '.join(map(repr, unknown))}")
    return out


def _read_one(store: str, name: str, group: Any, user: Any = None, n_features: int = 0) -> Kept:
    """One state, verified: version, its statistic (registered, or the ``user``'s the caller passed), record, sha256."""
    where = f"summary {store}: state {name!r}"
    attrs = dict(group.attrs)
    _check_version(store, f"state {name!r}", attrs.get("format_version"))
    statistic_name, params = attrs.get("statistic"), attrs.get("params")
    if user is not None:  # verified against the user's statistic: nothing named by the file is imported
        recorded, user_params = _identity(user)
        if (statistic_name, params) != (recorded, user_params):
            raise DataError(f"{where} was saved by {statistic_name} {params}, not by {recorded} {user_params}")
        empty = user.chunk(np.empty((0, n_features)), np.empty(0, np.int64) if reads_label(user) else None)
        return Kept(user, _decode(where, group, attrs, type(empty)))
    try:
        statistic = statistic_from_params(str(statistic_name), params)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: {exc}") from None
    if statistic.name != name:
        raise DataError(f"{where} holds a {statistic_name} (named {statistic.name!r})")
    return Kept(statistic, _decode(where, group, attrs, _state_class(statistic, attrs.get("state"))))


def _state_class(statistic: Any, key: Any) -> type:
    """The state class a registered statistic's record must name: its own, or its weighted subclass if it names that."""
    pairwise = getattr(statistic, "rows", None) == "pairwise"  # CoMoments(rows="pairwise") keeps the pairs' state
    own = PairwiseCoMomentsState if pairwise else declared_state(statistic)
    assert own is not None  # a registered statistic's
    # Weighted moments and co-moments keep a subclass (weight sums and row counts); other weighted states, float64 counts.
    subclasses = (cls for cls in built_in_states() if issubclass(cls, own) and cls is not own)
    try:
        named = _state_named(key)
    except UnreadableState:
        named = None  # _decode refuses the record, naming its class
    return next((cls for cls in subclasses if cls is named), own)


def _decode(where: str, group: Any, attrs: dict[str, Any], expected: type) -> Any:
    """The state of one saved statistic, through the state codec: record checked, arrays read, sha256 verified."""
    record: dict[str, Any] = {key: attrs.get(key) for key in ("codec", "state", "fields")}
    try:
        check_record(record, expected)
        _check_stored(where, group, record["fields"])  # what the read allocates is what the record says
        try:
            arrays = {field[0]: np.asarray(group[field[0]][...]) for field in record["fields"]}
        except Exception as exc:  # a chunk failing its CRC-32C: zarr raises many kinds
            raise DataError(f"{where} cannot be read ({describe_error(exc)})") from None
        context = [FORMAT_VERSION, attrs.get("statistic"), attrs.get("params")]
        if record_sha256(record, arrays, context) != attrs.get("sha256"):
            raise DataError(f"{where} fails its sha256 checksum: it changed after it was written")
        return decode(record, arrays, expected)
    except UnreadableState as exc:
        raise DataError(f"{where}: {exc}") from None


def _readable_bytes() -> int:
    """The most bytes one read of metadata-described arrays may claim: half this process's memory (or RLIMIT_AS)."""
    from daskbatch.runtime.capacity import machine_memory_bytes  # lazy: distributed

    memory = machine_memory_bytes()
    try:
        import resource
    except ImportError:  # Windows
        return memory // 2
    address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if address_space != resource.RLIM_INFINITY:
        memory = min(memory, address_space)
    return memory // 2


def check_bounds(store: str) -> None:
    """Refuse, from the metadata alone, a summary whose arrays claim more chunks or bytes than a read may take."""
    import zarr  # lazy: zarr (checkpoints use the codec above without it)

    from daskbatch.io.chunk_grid import chunk_count, max_chunks, storage_chunks  # lazy: dask, zarr
    from daskbatch.io.zarr_store import group_arrays  # lazy: dask, zarr

    root = zarr.open_group(zarr_target(store, read_only=True), mode="r")
    total = 0
    largest: tuple[int, str, tuple[int, ...]] = (0, "", ())
    most_chunks = max_chunks()
    for path, node in group_arrays(root):
        chunks = chunk_count(node)
        if chunks > most_chunks:  # a summary's arrays have a few chunks each: this one's metadata was changed
            raise DataError(
                f"summary {store}: array {path!r} claims {chunks:,} chunks (shape {list(node.shape)}, chunks "
                f"{list(storage_chunks(node))}) > daskbatch.max-chunks {most_chunks:,}: it was damaged; "
                "describe the data again"
            )
        dtype = np.dtype(node.dtype) if not isinstance(node.dtype, np.dtype) else node.dtype
        # Strings are read as Python objects: count a pointer and a short string per element.
        itemsize = 64 if dtype.kind in "OTU" else dtype.itemsize
        claimed = math.prod(int(n) for n in node.shape) * itemsize
        total += claimed
        largest = max(largest, (claimed, path, tuple(node.shape)))
    limit = _readable_bytes()
    if total > limit:
        claimed, path, shape = largest
        raise DataError(
            f"summary {store}: its arrays claim {format_bytes(total)} > {format_bytes(limit)}, half the memory this "
            f"process may use (the largest, {path!r}, has shape {list(shape)}): it was damaged; describe the data again"
        )


def _check_stored(where: str, group: Any, fields: Sequence[Any]) -> None:
    """Refuse a state array whose metadata differs from its record's dtype and shape, before reading it."""
    for name, dtype, shape, _ in fields:
        try:
            array = group[name]
            stored = (np.dtype(array.dtype).str, [int(n) for n in array.shape])
        except Exception as exc:  # a missing or unreadable array: zarr raises many kinds
            raise DataError(f"{where} cannot be read ({describe_error(exc)})") from None
        if stored != (dtype, shape):
            raise DataError(
                f"{where}: field {name!r} is stored as {stored[0]} {stored[1]}, its record says {dtype} {shape}: "
                "it changed after it was written; describe the data again"
            )


def describe_error(exc: BaseException) -> str:
    """Say what a reader raised in a few words: its type and the start of its first line."""
    text = str(exc).strip()
    first_line = text.splitlines()[0] if text else ""
    if len(first_line) > 160:
        first_line = first_line[:160] + "..."
    return f"{type(exc).__name__}: {first_line}"


def _check_version(store: str, what: str, version: Any) -> None:
    """Refuse a states group or state of another format version, in one line that says what to do."""
    if version != FORMAT_VERSION:
        raise DataError(
            f"summary {store}: {what} has format version {version!r}, this daskbatch reads "
            f"{FORMAT_VERSION}; describe the data again (or use the daskbatch that wrote it)"
        )
