"""A checkpoint directory on disk: its files (checksum line, JSON header, ``.npz``), its manifest, run logs and lock."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.engine.fingerprint import differences
from daskbatch.errors import CheckpointMismatchError, DataError, DiskFullError, Interrupted
from daskbatch.io import state_codec
from daskbatch.runtime.runlock import LOCK_NAME, RunLock, no_interrupt

if TYPE_CHECKING:
    from daskbatch.stats._base import BundleLike

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
    # No allow_pickle=False: np.savez takes it only from NumPy 2.1, and before that saved it as an array named
    # "allow_pickle" (every checkpoint then read back as damaged). state_codec.encode refuses object arrays.
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # the stubs read a key of arrays as allow_pickle
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
    line, _, payload = body.partition(b"\n")
    header = _header_or_none(line)
    if hashlib.sha256(body).hexdigest() != match.group(1).decode():
        nbytes = header.get("nbytes")
        if isinstance(nbytes, int) and nbytes != len(payload):
            raise DamagedCheckpoint(f"{path}: truncated ({len(payload)} of {nbytes} payload bytes)")
        raise DamagedCheckpoint(f"{path}: checksum mismatch (header or payload changed)")
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


log = logging.getLogger("daskbatch.engine.checkpoint")

#: Bumped whenever the on-disk layout changes; part of the fingerprint.
#: 2: checksum over header and payload; the data's real path, metadata and content token.
#: 3: the quantile sketch's state is a window of buckets per sign with its offsets.
#: 4: states are records of the state codec (:mod:`daskbatch.io.state_codec`), named by registry key.
FORMAT_VERSION = 4
MANIFEST = "daskbatch-checkpoint.json"
_SUFFIX = ".ckpt"
#: A pass name, and so the folder ``pass-<name>``: a plain name, never a path.
PASS_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NODE_FILE = re.compile(r"L\d+-\d{6,}\.ckpt")
_PASS_PREFIX = "pass-"


def _short(value: Any) -> str:
    """Printable form of a spec value; long sequences become a length and digest."""
    if isinstance(value, (tuple, list, np.ndarray)) and len(value) > 8:
        digest = hashlib.sha256(repr(tuple(np.asarray(value).tolist())).encode()).hexdigest()
        return f"{len(value)} values, sha256 {digest[:16]}"
    return repr(value)


def spec_items(bundle: BundleLike) -> dict[str, str]:
    """List every parameter of every statistic of ``bundle`` (ranges of a histogram included)."""
    items: dict[str, str] = {}
    for stat in bundle.stats:
        name: str = stat.name
        items[f"{name}.type"] = f"{type(stat).__module__}.{type(stat).__qualname__}"
        if dataclasses.is_dataclass(stat):
            # a request's fields (a histogram's range) are resolved into others before counting
            for f in dataclasses.fields(stat):
                if not f.metadata.get("request"):
                    items[f"{name}.{f.name}"] = _short(getattr(stat, f.name))
        else:  # a user's statistic that is not a dataclass: its repr stands for its parameters
            items[f"{name}.repr"] = repr(stat)
    items.update(getattr(bundle, "settings", {}))  # e.g. how a GPU run stages its blocks
    return items


def _digest(items: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def open_pass(
    directory: Path, items: dict[str, str], pass_name: str, spec: dict[str, str], force: bool,
    layout: dict[str, int],
) -> Path:
    """Check (or create) the manifest; return the folder of this pass."""
    manifest_path = directory / MANIFEST
    manifest: dict[str, Any] = {"input": items, "passes": {}}
    if manifest_path.exists():
        manifest = read_manifest(manifest_path)
        diffs = differences(manifest["input"], items)
        if diffs:
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} was written for other data: {'; '.join(diffs)}; "
                    "use --force (force=True) to discard it, or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting fresh (force)", directory, "; ".join(diffs))
            for name in manifest["passes"]:
                remove_pass(directory, name)
            manifest = {"input": items, "passes": {}}
        old_spec = manifest["passes"].get(pass_name)
        if old_spec is not None and (diffs := differences(old_spec, spec)):
            if not force:
                raise CheckpointMismatchError(
                    f"checkpoint {directory} was written for other statistics: {'; '.join(diffs)}; "
                    "use --force (force=True) to discard it, or choose another directory"
                )
            log.warning("checkpoint %s: %s; starting this pass fresh (force)", directory, "; ".join(diffs))
            remove_pass(directory, pass_name)
    manifest["input"] = items
    manifest["passes"][pass_name] = spec
    manifest["layout"] = layout
    write_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True).encode())
    folder = directory / pass_folder(pass_name)
    if folder.is_symlink():
        raise CheckpointMismatchError(
            f"{folder} is a symbolic link; daskbatch writes only into folders it created there"
        )
    folder.mkdir(exist_ok=True)
    return folder


def read_manifest(path: Path) -> dict[str, Any]:
    """Read the manifest, checked: string items, passes under plain names (never paths)."""
    def bad(why: str) -> CheckpointMismatchError:
        """Build the error for a malformed manifest."""
        return CheckpointMismatchError(
            f"{path} is not a daskbatch checkpoint manifest ({why}); "
            "remove it or choose another --checkpoint directory"
        )

    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise bad(str(exc)) from exc
    if not isinstance(manifest, dict) or not _is_items(manifest.get("input")):
        raise bad("no 'input' fingerprint")
    passes = manifest.get("passes")
    if not isinstance(passes, dict):
        raise bad("no 'passes'")
    for name, spec in passes.items():
        if not PASS_NAME.fullmatch(name):
            raise bad(f"pass name {name!r} is not a plain name")
        if not _is_items(spec):
            raise bad(f"pass {name!r} has no parameters")
    return manifest


def _is_items(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def recorded_layout(directory: str | os.PathLike[str]) -> dict[str, int] | None:
    """Read the layout of the run that wrote the checkpoint in ``directory``."""
    try:
        layout = json.loads((Path(directory) / MANIFEST).read_text()).get("layout")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(layout, dict) and {"chunk_rows", "split_every"} <= set(layout):
        try:
            return {k: int(layout[k]) for k in ("chunk_rows", "split_every")}
        except (TypeError, ValueError):
            return None
    return None


def pass_folder(pass_name: str) -> str:
    """Name the folder of a pass, refusing a name that is not plain."""
    if not PASS_NAME.fullmatch(pass_name):
        raise ValueError(f"checkpoint pass name {pass_name!r} is not a plain name ([A-Za-z0-9_-]+)")
    return f"{_PASS_PREFIX}{pass_name}"


def holds_finished_blocks(directory: str | os.PathLike[str]) -> bool:
    """Tell whether ``directory`` holds a finished block of some pass (what an interrupted run can resume from)."""
    root = Path(directory)
    passes = root.glob(f"{_PASS_PREFIX}*") if root.is_dir() else ()
    return any(_NODE_FILE.fullmatch(p.name) for folder in passes if folder.is_dir() for p in folder.iterdir())


def interrupted_message(exc: BaseException, checkpoint: str | os.PathLike[str] | None, option: str) -> str:
    """The one true line after a signal: which signal, and whether ``checkpoint`` kept finished blocks."""
    if isinstance(exc, Interrupted) and not exc.unaccounted:
        return str(exc)  # the block runner's: what finished, and where it is kept
    why = str(exc) if str(exc) else "interrupted by SIGINT (Ctrl-C)"  # a KeyboardInterrupt carries no text
    if checkpoint is None:
        return f"{why}; nothing was kept (no {option}): run the same command to start again"
    if holds_finished_blocks(checkpoint):
        return f"{why}; finished blocks are kept in {os.fspath(checkpoint)}, run the same command to resume"
    return f"{why} before any block finished: {os.fspath(checkpoint)} holds none, run the same command to start again"


def remove_pass(directory: Path, pass_name: str) -> None:
    """Delete only the files this module writes, in ``directory``'s own pass folder (never a user's other files)."""
    folder = directory / pass_folder(pass_name)
    if folder.is_symlink() or not folder.is_dir():
        if folder.is_symlink():
            log.warning("checkpoint %s: %s is a symbolic link; not following it", directory, folder)
        return
    for p in folder.iterdir():
        ours = _NODE_FILE.fullmatch(p.name) or p.name.startswith(TMP_PREFIX) or p.name == "runs.jsonl"
        if ours and (p.is_symlink() or p.is_file()):
            p.unlink()  # a link itself, never what it points to
    with contextlib.suppress(OSError):
        folder.rmdir()


def read_runs(directory: str | os.PathLike[str], pass_name: str) -> list[dict[str, Any]]:
    """Read the run log of one pass."""
    path = Path(directory) / pass_folder(pass_name) / "runs.jsonl"
    if not path.exists():
        return []
    runs, skipped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            runs.append(entry)
        else:
            skipped += 1
    if skipped:
        log.warning("%s: skipped %d unreadable line(s) of %d", path, skipped, skipped + len(runs))
    return runs


def append_run(path: Path, run: dict[str, Any]) -> None:
    """Append one line to the run log, on a line of its own even after a torn last line."""
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        torn = False
        if f.tell():
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        f.write((b"\n" if torn else b"") + json.dumps(run).encode() + b"\n")


def checkpoint_lock(directory: str | os.PathLike[str]) -> RunLock:
    """Get the run lock of a checkpoint directory (created if missing); re-entrant in one thread."""
    check_checkpoint_dir(directory)
    Path(directory).mkdir(parents=True, exist_ok=True)
    return _CheckpointLock(Path(directory) / LOCK_NAME, f"checkpoint directory {os.fspath(directory)}")


class _CheckpointLock(RunLock):
    """The run lock of a checkpoint directory; on a full disk it first deletes what killed runs left there."""

    def acquire(self) -> None:
        """Take the lock; when its file does not fit, delete dead writers' temporary files and try once more."""
        try:
            super().acquire()
        except DiskFullError:
            # O_EXCL found no lock file, so no run held the lock: a killed run's partial
            # checkpoint file may be what fills the disk.
            remove_stale_temps(self.path.parent)
            super().acquire()


def check_checkpoint_dir(directory: str | os.PathLike[str], what: str = "checkpoint") -> None:
    """Refuse a checkpoint path that holds something else: a file, or a folder with files but no checkpoint."""
    path = Path(directory)
    if "://" in os.fspath(directory):
        # pathlib would make a local folder named "s3:" of it: checkpoints need renames and a lock file.
        raise DataError(f"{what} {os.fspath(directory)} is a URL; checkpoints are written to a directory of a "
                        "local or shared file system: give its path")
    if not os.path.lexists(path):
        return
    if not path.is_dir():
        raise DataError(f"{what} {os.fspath(directory)} is a file, not a directory; choose another path")
    if any(path.iterdir()) and not ((path / MANIFEST).exists() or (path / LOCK_NAME).exists()):
        raise DataError(
            f"{what} {os.fspath(directory)} holds files and no daskbatch checkpoint; choose a new or empty directory"
        )
