"""The checkpoint file format: one JSON header line (sha256, length, metadata) then an ``.npz``.

Files are written atomically (temporary file, fsync, rename); reading verifies
length and checksum and rebuilds only state classes of :mod:`daskbatch.stats`
from plain arrays (``allow_pickle=False``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from daskbatch.runtime.interrupts import no_interrupt

__all__ = ["DamagedCheckpoint", "decode_state", "encode_state", "fsync_dir", "read_header", "write_atomic"]

#: Prefix of files being written (left behind only by a kill, and ignored then).
TMP_PREFIX = ".tmp-"

def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` via a fsynced temporary file and a rename."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    with no_interrupt():
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)


def encode_state(state: tuple[Any, ...], meta: dict[str, Any]) -> bytes:
    """A header line (JSON, with the payload's sha256) followed by an ``.npz`` of ``state``'s arrays."""
    arrays: dict[str, np.ndarray] = {}
    types, fields = [], []
    for i, part in enumerate(state):
        cls = type(part)
        if not (dataclasses.is_dataclass(part) and cls.__module__.startswith("daskbatch.stats.")):
            raise TypeError(f"cannot checkpoint a state of type {cls.__qualname__}")
        types.append(f"{cls.__module__}:{cls.__qualname__}")
        names = [f.name for f in dataclasses.fields(part)]
        fields.append(names)
        for name in names:
            arrays[f"s{i}.{name}"] = np.asarray(getattr(part, name))
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    payload = buf.getvalue()
    header = dict(meta, types=types, fields=fields, nbytes=len(payload),
                  sha256=hashlib.sha256(payload).hexdigest())
    return json.dumps(header, sort_keys=True).encode() + b"\n" + payload


class DamagedCheckpoint(Exception):
    """A checkpoint file is truncated, corrupt or from another checkpoint (internal)."""


def read_header(path: Path) -> tuple[dict[str, Any], bytes]:
    """Header and verified payload of a node file; :class:`DamagedCheckpoint` if anything is off."""
    raw = path.read_bytes()
    line, sep, payload = raw.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise DamagedCheckpoint(f"{path}: unreadable header") from exc
    if not sep or not isinstance(header, dict) or header.get("nbytes") != len(payload):
        raise DamagedCheckpoint(f"{path}: truncated ({len(payload)} of {header.get('nbytes')} payload bytes)"
                                if isinstance(header, dict) else f"{path}: unreadable header")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise DamagedCheckpoint(f"{path}: checksum mismatch")
    return header, payload


def decode_state(header: dict[str, Any], payload: bytes) -> tuple[Any, ...]:
    """The state tuple written by :func:`encode_state` (only daskbatch.stats classes are built)."""
    parts = []
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        for i, (spec, names) in enumerate(zip(header["types"], header["fields"], strict=True)):
            module, _, qualname = spec.partition(":")
            if not module.startswith("daskbatch.stats."):
                raise DamagedCheckpoint(f"state type {spec!r} is not a daskbatch statistic")
            cls = getattr(importlib.import_module(module), qualname)
            parts.append(cls(**{name: npz[f"s{i}.{name}"] for name in names}))
    return tuple(parts)
