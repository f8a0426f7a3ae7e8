"""The checkpoint file format: a checksum line, one JSON header line (metadata), then an ``.npz``."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from daskbatch.errors import DiskFullError
from daskbatch.io import state_codec
from daskbatch.runtime.runlock import no_interrupt

__all__ = [
    "DamagedCheckpoint", "decode_state", "encode_state", "fsync_dir", "read_header", "remove_stale_temps", "write_atomic",
]

#: Prefix of files being written (left behind only by a kill; removed by the next run).
TMP_PREFIX = ".tmp-"
#: A temporary file's name: ``.tmp-<file name>-<pid of its writer>``.
_TMP_NAME = re.compile(re.escape(TMP_PREFIX) + r".+-(\d+)")
#: First line of a node file, followed by ``sha256=<hex of everything after this line>``.
MAGIC = "daskbatch-checkpoint-node 3"
_FIRST_LINE = re.compile(rb"daskbatch-checkpoint-node 3 sha256=([0-9a-f]{64})")
#: The ``.npy`` header versions ``np.savez`` writes, and their readers.
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (where the filesystem allows), so a rename in it lasts."""
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
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # a partial file would hold the space the next run needs
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(_disk_full(path, len(payload), exc)) from exc
            raise
        fsync_dir(path.parent)


def _disk_full(path: Path, needed: int, exc: OSError) -> str:
    """One line for a checkpoint file that did not fit: the file, the bytes it needs, the bytes free there."""
    try:
        free = f"{shutil.disk_usage(path.parent).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    return (
        f"{exc.strerror} writing checkpoint file {path}: it needs {needed:,} bytes ({free} there); "
        "free space there and run the same command again (finished blocks stay in the checkpoint)"
    )


def remove_stale_temps(directory: Path) -> None:
    """Delete the temporary files that killed runs left in a checkpoint directory and its pass folders."""
    import psutil  # lazy: psutil

    folders = [directory, *(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink())]
    for folder in folders:
        for p in folder.glob(f"{TMP_PREFIX}*"):
            match = _TMP_NAME.fullmatch(p.name)
            if match is None or not p.is_file():
                continue
            pid = int(match.group(1))
            if pid != os.getpid() and not psutil.pid_exists(pid):
                p.unlink(missing_ok=True)


def encode_state(state: tuple[Any, ...], meta: dict[str, Any]) -> bytes:
    """Encode a state as a checksum line, a JSON header line and an ``.npz`` of its arrays."""
    arrays: dict[str, np.ndarray] = {}
    records = []
    for i, part in enumerate(state):
        record, fields = state_codec.encode(part)
        records.append(record)
        arrays.update({f"s{i}.{name}": a for name, a in fields.items()})
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    payload = buf.getvalue()
    header = dict(meta, states=records, nbytes=len(payload))
    body = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
    return f"{MAGIC} sha256={hashlib.sha256(body).hexdigest()}\n".encode() + body


class DamagedCheckpoint(Exception):
    """A checkpoint file is truncated, corrupt or from another checkpoint (internal)."""


def read_header(path: Path) -> tuple[dict[str, Any], bytes]:
    """Header and verified payload of a node file; :class:`DamagedCheckpoint` if anything is off."""
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
    for key, kind in (("level", int), ("index", int), ("pass", str), ("states", list), ("nbytes", int)):
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise DamagedCheckpoint(f"{path}: header field {key!r} missing or not {kind.__name__}")
    if header["nbytes"] != len(payload):
        raise DamagedCheckpoint(f"{path}: header does not match its payload")
    expected: dict[str, tuple[str, tuple[int, ...]]] = {}
    for i, record in enumerate(header["states"]):
        try:
            state_codec.check_record(record)
        except state_codec.UnreadableState as exc:
            raise DamagedCheckpoint(f"{path}: state {i}: {exc}") from None
        expected.update({f"s{i}.{name}": (dtype, tuple(shape)) for name, dtype, shape, _ in record["fields"]})
    try:
        members = _npz_layout(payload)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DamagedCheckpoint(f"{path}: payload is not an .npz ({exc})") from exc
    if members != expected:
        raise DamagedCheckpoint(f"{path}: payload arrays {sorted(members)} differ from the header's")


def _npz_layout(payload: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Dtype and shape of every array of an ``.npz``, from the arrays' headers only (no data is read)."""
    layout = {}
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        for name in z.namelist():
            with z.open(name) as f:
                read = _HEADER_READERS.get(np.lib.format.read_magic(f))
                if read is None:
                    raise ValueError(f"{name} has an unknown .npy version")
                shape, _, dtype = read(f)
            if dtype.hasobject:
                raise ValueError(f"{name} holds objects")
            layout[name.removesuffix(".npy")] = (dtype.str, tuple(shape))
    return layout


def decode_state(header: dict[str, Any], payload: bytes) -> tuple[Any, ...]:
    """Rebuild the state tuple written by :func:`encode_state` (only registered state classes are built)."""
    parts = []
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        for i, record in enumerate(header["states"]):
            arrays = {field[0]: npz[f"s{i}.{field[0]}"] for field in record["fields"]}
            try:
                parts.append(state_codec.decode(record, arrays))
            except state_codec.UnreadableState as exc:
                raise DamagedCheckpoint(f"state {i}: {exc}") from None
    return tuple(parts)
