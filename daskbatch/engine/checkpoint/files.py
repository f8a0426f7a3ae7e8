"""The checkpoint file format: a checksum line, one JSON header line (metadata), then an ``.npz``.

::

    daskbatch-checkpoint-node 2 sha256=<hex>      covers every byte below
    {"blocks": ..., "fields": ..., "index": ..., "level": ..., "nbytes": ..., "pass": ..., "types": ...}
    <npz payload>

Files are written atomically (temporary file, fsync, rename); reading verifies
the checksum over header *and* payload, then the header's fields against the
payload, and rebuilds only state classes of :mod:`daskbatch.stats` from plain
arrays (``allow_pickle=False``). Whatever is wrong with a file surfaces as
:class:`DamagedCheckpoint`, never as another exception.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from daskbatch.runtime.interrupts import no_interrupt
from daskbatch.stats._base import State

__all__ = ["DamagedCheckpoint", "decode_state", "encode_state", "fsync_dir", "read_header", "write_atomic"]

#: Prefix of files being written (left behind only by a kill, and ignored then).
TMP_PREFIX = ".tmp-"
#: First line of a node file, followed by ``sha256=<hex of everything after this line>``.
MAGIC = "daskbatch-checkpoint-node 2"
_FIRST_LINE = re.compile(rb"daskbatch-checkpoint-node 2 sha256=([0-9a-f]{64})")
_STATS = "daskbatch.stats."

def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (where the filesystem allows), so a rename in it lasts.

    Parameters
    ----------
    path : pathlib.Path
        The directory.
    """
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` via a fsynced temporary file and a rename.

    Parameters
    ----------
    path : pathlib.Path
        The file.
    payload : bytes
        Its content.
    """
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    with no_interrupt():
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)


def encode_state(state: tuple[Any, ...], meta: dict[str, Any]) -> bytes:
    """Encode a state as a checksum line, a JSON header line and an ``.npz`` of its arrays.

    The sha256 on the first line covers every byte after it (header and
    payload), so an edited header is detected like a flipped payload bit.

    Parameters
    ----------
    state : tuple
        A bundle state.
    meta : dict
        Further header fields, JSON-able.

    Returns
    -------
    bytes
        The file's content.
    """
    arrays: dict[str, np.ndarray] = {}
    types, fields = [], []
    for i, part in enumerate(state):
        cls = type(part)
        if not (dataclasses.is_dataclass(part) and (cls.__module__.startswith(_STATS) or isinstance(part, State))):
            raise TypeError(
                f"cannot checkpoint a state of type {cls.__qualname__}: states are dataclasses of arrays "
                "deriving from daskbatch.State"
            )
        types.append(f"{cls.__module__}:{cls.__qualname__}")
        names = [f.name for f in dataclasses.fields(part)]
        fields.append(names)
        for name in names:
            arrays[f"s{i}.{name}"] = np.asarray(getattr(part, name))
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    payload = buf.getvalue()
    header = dict(meta, types=types, fields=fields, nbytes=len(payload))
    body = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
    return f"{MAGIC} sha256={hashlib.sha256(body).hexdigest()}\n".encode() + body


class DamagedCheckpoint(Exception):
    """A checkpoint file is truncated, corrupt or from another checkpoint (internal)."""


def read_header(path: Path) -> tuple[dict[str, Any], bytes]:
    """Header and verified payload of a node file; :class:`DamagedCheckpoint` if anything is off.

    Checks, in order: the first line, the checksum over header and payload, the
    header's fields and types, and that the ``.npz`` holds exactly the arrays
    the header names for state classes of :mod:`daskbatch.stats` (without
    reading them), so that :func:`decode_state` cannot fail on a file that passed.

    Parameters
    ----------
    path : pathlib.Path
        A node file.

    Returns
    -------
    header : dict
        The header.
    payload : bytes
        The verified ``.npz`` bytes.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DamagedCheckpoint(f"{path}: unreadable ({exc})") from exc
    first, sep, body = raw.partition(b"\n")
    match = _FIRST_LINE.fullmatch(first)
    if not sep or match is None:
        raise DamagedCheckpoint(f"{path}: not a daskbatch checkpoint file (first line {first[:40]!r})")
    if hashlib.sha256(body).hexdigest() != match.group(1).decode():
        line, _, payload = body.partition(b"\n")
        nbytes = _header_or_none(line).get("nbytes")
        if isinstance(nbytes, int) and nbytes != len(payload):
            raise DamagedCheckpoint(f"{path}: truncated ({len(payload)} of {nbytes} payload bytes)")
        raise DamagedCheckpoint(f"{path}: checksum mismatch (header or payload changed)")
    line, _, payload = body.partition(b"\n")
    header = _header_or_none(line)
    _check_header(path, header, payload)
    return header, payload


def _header_or_none(line: bytes) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError:
        return {}
    return header if isinstance(header, dict) else {}


def _check_header(path: Path, header: dict[str, Any], payload: bytes) -> None:
    """Raise :class:`DamagedCheckpoint` unless ``header`` describes ``payload`` as encode_state writes it."""
    for key, kind in (("level", int), ("index", int), ("pass", str), ("types", list), ("fields", list),
                      ("nbytes", int)):
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise DamagedCheckpoint(f"{path}: header field {key!r} missing or not {kind.__name__}")
    if header["nbytes"] != len(payload) or len(header["types"]) != len(header["fields"]):
        raise DamagedCheckpoint(f"{path}: header does not match its payload")
    expected: set[str] = set()
    for i, (spec, names) in enumerate(zip(header["types"], header["fields"], strict=True)):
        cls = _state_class(path, spec)
        if not isinstance(names, list) or names != [f.name for f in dataclasses.fields(cls)]:
            raise DamagedCheckpoint(f"{path}: fields {names!r} are not those of {spec}")
        expected.update(f"s{i}.{name}" for name in names)
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            members = set(npz.files)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DamagedCheckpoint(f"{path}: payload is not an .npz ({exc})") from exc
    if members != expected:
        raise DamagedCheckpoint(f"{path}: payload arrays {sorted(members)} differ from the header's")


def _state_class(path: Path | None, spec: object) -> type:
    """The state dataclass a ``"module:qualname"`` names: never imports anything new.

    Classes of :mod:`daskbatch.stats`, or a user's :class:`~daskbatch.stats._base.State`
    subclass from a module this process has already imported (the statistic that
    wrote it is running): a header cannot make the reader import arbitrary code.
    """
    module, _, qualname = str(spec).partition(":")
    if not qualname.isidentifier():
        raise DamagedCheckpoint(f"{path}: state type {spec!r} is not a daskbatch statistic")
    if module.startswith(_STATS):
        try:
            cls = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError) as exc:
            raise DamagedCheckpoint(f"{path}: unknown state type {spec!r}") from exc
    else:
        cls = getattr(sys.modules.get(module), qualname, None)
        if not (isinstance(cls, type) and issubclass(cls, State)):
            raise DamagedCheckpoint(f"{path}: state type {spec!r} is not a daskbatch statistic's state")
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise DamagedCheckpoint(f"{path}: {spec!r} is not a state class")
    return cls


def decode_state(header: dict[str, Any], payload: bytes) -> tuple[Any, ...]:
    """Rebuild the state tuple written by :func:`encode_state` (only daskbatch.stats classes are built).

    Parameters
    ----------
    header : dict
        From :func:`read_header`, which has checked it.
    payload : bytes
        From :func:`read_header`.

    Returns
    -------
    tuple
        The bundle state.
    """
    parts = []
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        for i, (spec, names) in enumerate(zip(header["types"], header["fields"], strict=True)):
            cls = _state_class(None, spec)
            parts.append(cls(**{name: npz[f"s{i}.{name}"] for name in names}))
    return tuple(parts)
