"""Paths daskbatch reads and writes: local ``::`` paths, and outputs checked before any compute, replaced only when complete."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from daskbatch.errors import DataError, DiskFullError

log = logging.getLogger("daskbatch.io.outputs")

#: Root attribute (Zarr) or first key (JSON) naming what kind of daskbatch output a path holds.
MARKER = "daskbatch_output"
#: First line of a selection saved as CSV: what marks the file as daskbatch's.
SELECTION_HEADER = "# daskbatch-selection "
#: What each kind is called in messages.
_NOUNS = {
    "summary": "daskbatch summary", "tiled_cov": "daskbatch tiled covariance", "selection": "daskbatch selection",
    "job_report": "daskbatch job report", "transform": "daskbatch transform output", "drift": "daskbatch drift report",
}
#: Kinds that carry no marker (an image cannot hold one): an existing file is replaced only with ``overwrite``.
_UNMARKED = {"figure"}
#: Root attributes of the datasets daskbatch writes besides :data:`MARKER`: synth's ground truth.
_DATASET_ATTRS = ("synth",)

Form = Literal["zarr", "file"]


class OutputError(DataError):
    """An output path is unusable or would destroy something; the message names the path and the way out."""


class OutputExistsError(OutputError, FileExistsError):
    """The path holds something that is not a daskbatch output of the kind being written."""


@dataclass(frozen=True)
class OutputTarget:
    """A checked output path: its kind (marker), form, name in messages, overwrite and the paths it must avoid."""

    path: str
    kind: str
    form: Form
    what: str
    overwrite: bool
    protected: Mapping[str, str]

    @property
    def is_url(self) -> bool:
        """Whether the output goes to a URL rather than a local path."""
        return _is_url(self.path)


def is_chained_url(path: str) -> bool:
    """Whether ``path`` is an fsspec chained URL: no local path of that name, and before ``::`` a protocol or URL."""
    if "::" not in path or os.path.lexists(path):
        return False
    import fsspec  # lazy: fsspec

    first = path.split("::", 1)[0]
    return "://" in first or first in fsspec.available_protocols()


#: The extra that installs the filesystem of a URL protocol, named when that package is missing.
_PROTOCOL_EXTRAS = {"s3": "s3", "s3a": "s3"}


def check_url(path: Any, what: str | None = None) -> None:
    """Refuse a URL whose protocol fsspec does not know, or whose package is missing, in one line naming it.

    ``what``: the output's name in messages (an OutputError); None for a path to read, where a missing package
    is an ImportError naming the pip install and an unknown protocol is left to whoever opens it.
    """
    if not isinstance(path, str) or "://" not in path:
        return
    import fsspec  # lazy: fsspec

    for url in path.split("::"):  # each link of a chained URL
        protocol = url.split("://", 1)[0] if "://" in url else url
        try:
            fsspec.get_filesystem_class(protocol)
        except ValueError:  # fsspec's "Protocol not known: zz" names neither the path nor what is known
            if what is None:
                continue
            known = ", ".join(p for p in ("file", "s3", "gs", "az", "http", "memory") if p in fsspec.available_protocols())
            raise OutputError(f"{what} {path}: unknown URL protocol {protocol!r} (known ones include {known})") from None
        except ImportError as exc:  # its message names the package to install
            if what is not None:
                raise OutputError(f"{what} {path}: {exc}") from None
            extra = _PROTOCOL_EXTRAS.get(protocol)
            hint = f"pip install 'daskbatch[{extra}]'" if extra else str(exc).strip().splitlines()[0]
            raise ImportError(f"reading {path!r} needs the {protocol}:// filesystem for fsspec: {hint}") from None


def zarr_target(path: str, *, read_only: bool = False) -> Any:
    """What to hand zarr for ``path``: a local store for a local path with ``::``, else the path itself."""
    if "::" not in path or "://" in path or is_chained_url(path):
        return path
    import zarr  # lazy: zarr

    return zarr.storage.LocalStore(path, read_only=read_only)


def checksummed(compressor: Any | None) -> tuple[Any, ...]:
    """The ``compressors`` of an array daskbatch writes: ``compressor`` then a CRC-32C that every read checks."""
    from zarr.codecs import Crc32cCodec  # lazy: zarr

    return (Crc32cCodec(),) if compressor is None else (compressor, Crc32cCodec())


def _is_url(path: str) -> bool:
    """Whether ``path`` is a URL."""
    return "://" in path


def _real(path: str) -> str:
    """Comparable form of a path: symlinks resolved for local paths, trailing slashes dropped for URLs."""
    return path.rstrip("/") if _is_url(path) else os.path.realpath(os.path.abspath(path))


def path_contains(outer: str, inner: str) -> bool:
    """Whether ``inner`` is ``outer`` or lies below it (both already :func:`_real`)."""
    if _is_url(outer) != _is_url(inner):
        return False
    if _is_url(outer):
        return inner == outer or inner.startswith(outer + "/")
    return os.path.commonpath([outer, inner]) == outer


def check_separate(path: str, what: str, protected: Mapping[str, str | os.PathLike[str] | None]) -> None:
    """Refuse (OutputError) ``path`` when it is, lies inside, or holds any of the ``protected`` paths."""
    mine = _real(path)
    for description, other in protected.items():
        if other is None:
            continue
        theirs = _real(os.fspath(other))
        if mine == theirs:
            relation = "is"
        elif path_contains(theirs, mine):
            relation = "is inside"
        elif path_contains(mine, theirs):
            relation = "holds"
        else:
            continue
        raise OutputError(f"{what} {path} {relation} {description}; choose another path")


def output_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of daskbatch output at ``path`` (its :data:`MARKER`), or None for anything else."""
    where = os.fspath(path)
    if not _is_url(where) and os.path.isfile(where):
        return _file_kind(where)
    if _is_url(where):
        import fsspec  # lazy: fsspec

        fs, inside = fsspec.core.url_to_fs(where)
        if fs.isfile(inside):  # a JSON output (--json, a report) is one object
            return _file_kind(where, opener=fsspec.open)
    import zarr  # lazy: zarr

    try:
        attrs = dict(zarr.open_group(zarr_target(where, read_only=True), mode="r").attrs)
    except (OSError, ValueError, TypeError):  # not a Zarr group (TypeError: attributes that are no mapping)
        return None
    kind = attrs.get(MARKER)
    return kind if isinstance(kind, str) else None


def _file_kind(path: str, opener: Callable[..., Any] = open) -> str | None:
    """The marker of a file daskbatch wrote, from its first bytes: a JSON file's first key, an HTML page's comment."""
    try:
        with opener(path, "rb") as f:
            head = f.read(256).decode("utf-8", errors="replace")
    except OSError:
        return None
    if head.startswith(SELECTION_HEADER):
        return "selection"
    found = re.match(r'\s*\{\s*"' + MARKER + r'"\s*:\s*"([^"]+)"', head) or re.match(
        r"<!DOCTYPE html>\s*<!-- " + MARKER + r": (\w+) -->", head)
    return found.group(1) if found else None


def group_attrs(path: str) -> dict[str, Any]:
    """The attributes in the ``zarr.json`` of a local Zarr v3 group ({} for anything else)."""
    try:
        with open(os.path.join(path, "zarr.json"), encoding="utf-8") as f:
            attrs = json.load(f).get("attributes", {})
    except (OSError, ValueError, AttributeError):  # no Zarr v3 group: nothing daskbatch wrote
        return {}
    return attrs if isinstance(attrs, dict) else {}


def check_replaceable(path: str) -> None:
    """Refuse to delete ``path`` unless daskbatch wrote it (a symlink, an empty directory, or a marked group)."""
    if os.path.islink(path) or (os.path.isdir(path) and not os.listdir(path)):
        return
    if any(key in group_attrs(path) for key in (MARKER, *_DATASET_ATTRS)):
        return
    raise OutputExistsError(
        f"{path} already exists and is not a store daskbatch wrote; daskbatch does not replace other data, "
        "even with --overwrite (overwrite=True): choose another path or remove it yourself"
    )


def check_output(
    path: str | os.PathLike[str],
    *,
    kind: str,
    form: Form = "zarr",
    what: str = "path",
    overwrite: bool = False,
    protected: Mapping[str, str | os.PathLike[str] | None] | None = None,
    make_parents: bool = False,
) -> OutputTarget:
    """Check, before any compute, that ``path`` can take a new output of ``kind`` (one-line OutputError if not)."""
    where = os.fspath(path)
    if not where:
        raise OutputError(f"{what} is an empty path; give a path to write to")
    check_url(where, what)
    guarded = {k: os.fspath(v) for k, v in (protected or {}).items() if v is not None}
    check_separate(where, what, guarded)
    target = OutputTarget(path=where, kind=kind, form=form, what=what, overwrite=overwrite, protected=guarded)
    if not target.is_url:
        recover(where)
        parent = os.path.dirname(os.path.abspath(where))
        while make_parents and not os.path.lexists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise OutputError(f"{what} {where}: directory {parent} does not exist; create it or choose another path")
        try:  # by trying: os.access says yes to root on read-only mounts
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".daskbatch-probe-"):
                pass
        except OSError:
            raise OutputError(f"{what} {where}: directory {parent} is not writable; choose another path") from None
        if form == "file" and os.path.isdir(where):
            raise OutputError(f"{what} {where} is a directory; give a file name")
        exists = os.path.lexists(where)
    else:
        import fsspec  # lazy: fsspec

        fs, inside = fsspec.core.url_to_fs(where)
        bucket = inside.split("/", 1)[0]
        if bucket and not fs.exists(bucket):  # local-like URLs (file://, memory://) start with "/": no bucket
            raise OutputError(f"{what} {where}: bucket {bucket} does not exist (or these credentials cannot see "
                              "it); create it or choose another path")
        exists = bool(fs.exists(inside))
    if not exists:
        return target
    if kind in _UNMARKED:  # a figure carries no mark: --overwrite replaces one
        if not overwrite:
            raise OutputExistsError(
                f"{what} {where} already exists; choose another path (or pass --overwrite / overwrite=True to replace it)"
            )
        return target
    if not target.is_url and os.path.isdir(where) and not os.listdir(where) and not os.path.islink(where):
        # an empty local directory (a user's ``mkdir out``): nothing to lose
        return target
    # One rule: daskbatch replaces only what it wrote; a link is replaced itself, never its target.
    there, noun = output_kind(where), _NOUNS.get(kind, f"daskbatch {kind} output")
    if there is None and not os.path.islink(where):
        raise OutputExistsError(
            f"{what} {where} already exists and is not a {noun} (daskbatch did not write it); daskbatch replaces only "
            "its own outputs, even with --overwrite: choose another path or remove it yourself"
        )
    if there != kind and not overwrite:
        what_it_is = f"is not a {noun}" if there is None else f"is daskbatch's {there} output, not a {noun}"
        raise OutputExistsError(
            f"{what} {where} already exists and {what_it_is}; choose another path "
            "(or pass --overwrite / overwrite=True to replace it)"
        )
    return target


def check_outputs(
    outputs: Mapping[str, tuple[str | None, str, Form]],
    *,
    overwrite: bool | Mapping[str, bool] = False,
    protected: Mapping[str, str | os.PathLike[str] | None] | None = None,
    make_parents: bool = False,
) -> dict[str, OutputTarget]:
    """Check all the outputs of one run (name -> (path, kind, form)) before any is written, none overlapping."""
    guarded: dict[str, str | os.PathLike[str] | None] = dict(protected or {})
    targets: dict[str, OutputTarget] = {}
    for name, (path, kind, form) in outputs.items():
        if path is None:
            continue
        replace = overwrite.get(name, False) if isinstance(overwrite, Mapping) else overwrite
        targets[name] = check_output(path, kind=kind, form=form, what=name, overwrite=replace, protected=guarded,
                                     make_parents=make_parents)
        guarded[name] = path
    return targets


def recover(path: str | os.PathLike[str]) -> None:
    """Finish a replacement killed between its two renames: put the old output back, or delete leftovers."""
    where = os.fspath(path)
    if _is_url(where):
        return
    parent, name = os.path.split(os.path.abspath(where))
    try:
        mine = re.compile(re.escape(f".{name}.old-") + r"\d+-[0-9a-f]{8}")  # what staged() names an old output
        aside = [os.path.join(parent, f) for f in os.listdir(parent) if mine.fullmatch(f)]
    except OSError:
        return
    aside.sort(key=lambda p: os.lstat(p).st_ctime, reverse=True)  # a rename updates ctime: newest first
    if aside and not os.path.lexists(where):
        try:
            os.rename(aside[0], where)
            log.warning("%s: put back the output that an interrupted replacement had moved aside", where)
            aside = aside[1:]
        except OSError:  # another run finished its replacement meanwhile
            pass
    if os.path.lexists(where):
        for old in aside:
            with contextlib.suppress(OSError):
                remove_path(old)


def remove_path(path: str) -> None:
    """Delete a file, a symlink (not what it points to) or a directory tree."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _sibling(path: str, tag: str) -> str:
    """A hidden, unused name beside ``path``: ``.NAME.<tag>-<pid>-<hex>``."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}")


def write_output(target: OutputTarget, write: Callable[[str], Any]) -> str:
    """Check ``target`` again, call ``write(tmp)`` on a fresh sibling and rename it into place; the path."""
    target = check_output(
        target.path, kind=target.kind, form=target.form, what=target.what,
        overwrite=target.overwrite, protected=target.protected,
    )
    try:
        if target.is_url:
            _write_remote(target, write)
            return target.path
        with staged(target.path) as tmp:
            write(tmp)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # The system's error names a file inside the removed temporary copy, if any: name the output.
        raise DiskFullError(
            f"{exc.strerror} writing {target.what} {target.path} (nothing was written there); "
            "free space there and run the same command again"
        ) from exc
    return target.path


@contextlib.contextmanager
def staged(path: str) -> Iterator[str]:
    """Yield a temporary sibling of ``path`` to fill; on success it replaces ``path`` (old one removed last)."""
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise OutputError(f"nothing was written to {path}")
        if os.path.isfile(tmp) and not os.path.isdir(path):
            os.replace(tmp, path)  # atomic for single files
            return
        old = None
        if os.path.lexists(path):
            old = _sibling(path, "old")
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            if old is not None:
                os.rename(old, path)
            raise
        if old is not None:
            with contextlib.suppress(FileNotFoundError):  # recover() of another run may have removed it
                remove_path(old)
    except BaseException:
        if os.path.lexists(tmp):
            remove_path(tmp)
        raise


def _write_remote(target: OutputTarget, write: Callable[[str], Any]) -> None:
    """Object stores have no rename: replace an allowed existing output in place (a file by one PUT over it)."""
    import fsspec  # lazy: fsspec

    fs, where = fsspec.core.url_to_fs(target.path)
    if fs.exists(where) and not (target.form == "file" and fs.isfile(where)):
        fs.rm(where, recursive=True)
        # zarr writes through its own (asynchronous) instance of the file system, whose listings
        # cached before the removal would still show the old objects: "already contains data".
        for instance in list(getattr(type(fs), "_cache", {}).values()):
            instance.invalidate_cache(where)
    write(target.path)


def write_text(target: OutputTarget, text: str) -> str:
    """Write ``text`` as the file ``target``: locally a fsynced temporary renamed into place, to a URL one PUT."""

    def _write(tmp: str) -> None:
        """Write the text to ``tmp``, a local path or a URL."""
        if target.is_url:
            import fsspec  # lazy: fsspec

            with fsspec.open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            return
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # before the rename: a crash never leaves an empty file under the name

    return write_output(target, _write)


def write_json(
    target: OutputTarget, payload: Mapping[str, Any], *, indent: int | None = None,
    default: Callable[[Any], Any] = str,
) -> str:
    """Write ``payload`` as a JSON file whose first key is the :data:`MARKER`, atomically; the path."""
    text = json.dumps({MARKER: target.kind, **payload}, indent=indent, default=default)
    return write_text(target, text if indent is None else text + "\n")


def flush_row_blocks(arr: Any, first: int, stop: int) -> None:  # numpydoc ignore=PR01
    """Flush the chunk files of blocks ``first .. stop - 1`` of ``arr``, and the folders naming them, to the disk."""
    # Before the done-log names the blocks: a killed process leaves its writes in the page cache, but a power loss
    # or a node's crash loses what was not flushed, and a resume trusts the log (it does not read the chunks).
    from daskbatch.io.chunk_grid import chunk_key  # lazy: zarr

    root = getattr(arr.store, "root", None)
    if root is None:  # not a LocalStore: nothing of ours to flush
        return
    root, folders = str(root), set()
    for block in range(first, stop):
        path = os.path.join(root, chunk_key(arr, (block,) + (0,) * (arr.ndim - 1)))
        _fsync(path)
        folder = os.path.dirname(path)
        while folder not in folders and len(folder) > len(root):  # the new ones too: c/, c/<block>/
            folders.add(folder)
            folder = os.path.dirname(folder)
    for folder in folders:
        with contextlib.suppress(OSError):  # not every file system lets a folder be opened
            _fsync(folder)


def _fsync(path: str) -> None:
    """Flush the file or folder ``path`` to the disk."""
    # Windows flushes only a file opened for writing (and opens no folder: the caller passes over that).
    fd = os.open(path, os.O_RDWR if os.name == "nt" else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
