"""Whether a path can take a daskbatch output, checked before any compute; and recovery of an interrupted replacement.

A path may take an output when its directory exists and is writable, it is not
the input store, inside it or a directory holding it, and it is either new, an
earlier daskbatch output of the same kind (recognised by the :data:`MARKER`
attribute every output carries), or ``overwrite`` was asked for. Writing
through a temporary sibling is :mod:`daskbatch.io.outputs`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from daskbatch.errors import DataError
from daskbatch.io.locations import zarr_target

log = logging.getLogger("daskbatch.io.outputs")  # the name users filter on, from before the split

__all__ = [
    "MARKER",
    "OutputError",
    "OutputExistsError",
    "OutputTarget",
    "SELECTION_HEADER",
    "check_output",
    "check_outputs",
    "check_replaceable",
    "check_separate",
    "output_kind",
    "recover",
    "remove_path",
]

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

#: Written by tiled_covariance before the marker existed; still recognised as ours.
_LEGACY_ATTRS = {"tiled_cov": "daskbatch_tiled_cov"}

Form = Literal["zarr", "file"]


class OutputError(DataError):
    """An output path is unusable or would destroy something; the message names the path and the way out."""


class OutputExistsError(OutputError, FileExistsError):
    """The path holds something that is not a daskbatch output of the kind being written."""


@dataclass(frozen=True)
class OutputTarget:
    """A checked output path.

    Attributes
    ----------
    path : str
        The path as given.
    kind : str
        The marker value written with the output (``"summary"``, ``"tiled_cov"``).
    form : {"zarr", "file"}
        A Zarr store (a directory) or a single file.
    what : str
        How messages call the path (``"--out"``, ``"path"``, ``"cov_out"``).
    overwrite : bool
        Whether something that is not our output may be replaced.
    protected : mapping of str to str
        Paths the output must stay clear of, by description (``"the input store"``).
    """

    path: str
    kind: str
    form: Form
    what: str
    overwrite: bool
    protected: Mapping[str, str]

    @property
    def is_url(self) -> bool:
        """Tell whether the output goes to a URL rather than a local path.

        Returns
        -------
        bool
            True for a URL.
        """
        return _is_url(self.path)


def _is_url(path: str) -> bool:
    return "://" in path


def _real(path: str) -> str:
    """Comparable form of a path: symlinks resolved for local paths, trailing slashes dropped for URLs."""
    return path.rstrip("/") if _is_url(path) else os.path.realpath(os.path.abspath(path))


def _contains(outer: str, inner: str) -> bool:
    """True when ``inner`` is ``outer`` or lies below it (both already :func:`_real`)."""
    if _is_url(outer) != _is_url(inner):
        return False
    if _is_url(outer):
        return inner == outer or inner.startswith(outer + "/")
    return os.path.commonpath([outer, inner]) == outer


def check_separate(path: str, what: str, protected: Mapping[str, str | os.PathLike[str] | None]) -> None:
    """Refuse ``path`` when it is, lies inside, or holds any of the ``protected`` paths.

    Parameters
    ----------
    path : str
        The output.
    what : str
        How messages call it.
    protected : mapping of description to path
        E.g. ``{"the input store": "data.zarr"}``; None values are skipped.

    Raises
    ------
    OutputError
    """
    mine = _real(path)
    for description, other in protected.items():
        if other is None:
            continue
        theirs = _real(os.fspath(other))
        if mine == theirs:
            relation = "is"
        elif _contains(theirs, mine):
            relation = "is inside"
        elif _contains(mine, theirs):
            relation = "holds"
        else:
            continue
        raise OutputError(f"{what} {path} {relation} {description}; choose another path")


def output_kind(path: str | os.PathLike[str]) -> str | None:
    """Find the kind of daskbatch output at ``path`` (its :data:`MARKER`).

    Parameters
    ----------
    path : str or os.PathLike
        A path.

    Returns
    -------
    str or None
        The kind, or None for anything else.
    """
    where = os.fspath(path)
    if not _is_url(where) and os.path.isfile(where):
        return _json_kind(where)
    import zarr  # lazy: zarr

    try:
        attrs = dict(zarr.open_group(zarr_target(where, read_only=True), mode="r").attrs)
    except (OSError, ValueError):  # not a Zarr group (zarr's errors are ValueErrors)
        return None
    kind = attrs.get(MARKER)
    if isinstance(kind, str):
        return kind
    return next((k for k, attr in _LEGACY_ATTRS.items() if isinstance(attrs.get(attr), dict)), None)


def _json_kind(path: str) -> str | None:
    """The marker of a JSON file written by :func:`~daskbatch.io.outputs.write_json` (its first key), from its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(256).decode("utf-8", errors="replace")
    except OSError:
        return None
    if head.startswith(SELECTION_HEADER):
        return "selection"
    found = re.match(r'\s*\{\s*"' + MARKER + r'"\s*:\s*"([^"]+)"', head)
    return found.group(1) if found else None


def _exists(path: str) -> bool:
    if not _is_url(path):
        return os.path.lexists(path)
    import fsspec  # lazy: fsspec

    fs, where = fsspec.core.url_to_fs(path)
    return bool(fs.exists(where))


#: Root attributes of the datasets daskbatch writes (besides the :data:`MARKER` of its outputs): synth's ground truth and ingest's state.
_DATASET_ATTRS = ("synth", "daskbatch_ingest")


def check_replaceable(path: str) -> None:
    """Refuse to delete ``path`` for a new store unless daskbatch wrote what is there, whatever ``overwrite`` says.

    Deletable are a symbolic link (the link, never its target), an empty
    directory, and a Zarr group whose root attributes carry :data:`MARKER` or
    one of the dataset attributes that ``synth`` and ``ingest`` write.

    Parameters
    ----------
    path : str
        A local path that exists.

    Raises
    ------
    OutputExistsError
        One line naming the path.
    """
    if os.path.islink(path) or (os.path.isdir(path) and not os.listdir(path)):
        return
    try:
        with open(os.path.join(path, "zarr.json"), encoding="utf-8") as f:
            attrs = json.load(f).get("attributes", {})
    except (OSError, ValueError, AttributeError):  # no Zarr v3 group: nothing daskbatch wrote
        attrs = {}
    if isinstance(attrs, dict) and any(key in attrs for key in (MARKER, *_DATASET_ATTRS)):
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
    """Check that ``path`` can take a new output of ``kind``, before anything is computed.

    Parameters
    ----------
    path : str or path
        Where the output will go.
    kind : str
        ``"summary"`` or ``"tiled_cov"``: an existing output of the same kind may be replaced;
        ``"figure"`` (an image, which carries no marker) replaces nothing without ``overwrite``.
    form : {"zarr", "file"}, default "zarr"
        A Zarr store or a single file (a JSON document).
    what : str, default "path"
        How messages call the path (the option or argument name).
    overwrite : bool, default False
        Also replace something that is not a daskbatch output of this kind.
    protected : mapping of description to path, optional
        Paths never to write into, over, or as a parent of (the input store).
    make_parents : bool, default False
        The caller creates missing parent directories: check that the nearest
        existing one is writable instead of refusing.

    Returns
    -------
    OutputTarget
        The checked path and how to write it.

    Raises
    ------
    OutputError
        With a one-line message naming the path and what to do.
    """
    where = os.fspath(path)
    if not where:
        raise OutputError(f"{what} is an empty path; give a path to write to")
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
        if not _can_create_in(parent):
            raise OutputError(f"{what} {where}: directory {parent} is not writable; choose another path")
        if form == "file" and os.path.isdir(where):
            raise OutputError(f"{what} {where} is a directory; give a file name")
    if _exists(where) and not overwrite:
        if kind in _UNMARKED:
            raise OutputExistsError(
                f"{what} {where} already exists; choose another path (or pass --overwrite / overwrite=True to replace it)"
            )
        found = output_kind(where)
        if found != kind:
            noun = _NOUNS.get(kind, f"daskbatch {kind} output")
            raise OutputExistsError(
                f"{what} {where} already exists and is not a {noun}; choose another path "
                f"(or pass --overwrite / overwrite=True to replace it)"
            )
    return target


def _can_create_in(directory: str) -> bool:
    """Whether a file can be created in ``directory``, by trying (os.access says yes to root on read-only mounts)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".daskbatch-probe-"):
            return True
    except OSError:
        return False


def check_outputs(
    outputs: Mapping[str, tuple[str | None, str, Form]],
    *,
    overwrite: bool | Mapping[str, bool] = False,
    protected: Mapping[str, str | os.PathLike[str] | None] | None = None,
    make_parents: bool = False,
) -> dict[str, OutputTarget]:
    """Check all the outputs of one run before any of them is written: each as :func:`check_output`, none overlapping another.

    Parameters
    ----------
    outputs : mapping of str to (path, kind, form)
        By the name messages call them (``"outputs.summary"``); None paths are skipped.
    overwrite : bool or mapping of str to bool, default False
        Replace what is not an earlier output of the same kind (per output, by name).
    protected : mapping of description to path, optional
        Paths none of them may be, lie inside or hold (the input store).
    make_parents : bool, default False
        The caller creates missing parent directories.

    Returns
    -------
    dict of str to OutputTarget
        The checked outputs, by name.

    Raises
    ------
    OutputError
        The first problem, in one line naming the output.
    """
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
    """Finish a replacement that was killed between its two renames (see :func:`daskbatch.io.outputs.staged`).

    With nothing at ``path`` and an old output aside (``.NAME.old-*``), the old
    output goes back to ``path``: it was complete there before. With an output at
    ``path``, the old ones aside are leftovers of replacements that finished
    and are deleted.

    Parameters
    ----------
    path : str or os.PathLike
        An output's path (URLs are left alone: they are replaced in place).
    """
    where = os.fspath(path)
    if _is_url(where):
        return
    parent, name = os.path.split(os.path.abspath(where))
    try:
        mine = re.compile(re.escape(f".{name}.old-") + r"\d+-[0-9a-f]{8}")  # what outputs.staged names an old output moved aside
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
    """Delete a file, a symlink (not what it points to) or a directory tree.

    Parameters
    ----------
    path : str
        A local path.
    """
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
