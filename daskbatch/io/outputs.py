"""Where daskbatch writes its results, checked before any compute and replaced only when complete.

Every writer (``Summary.save``, the ``describe`` CLI's ``--out``/``--json``, the
tiled covariance store) goes through this module, which

* checks a path before anything is computed: its directory exists and is
  writable, it is not the input store, inside it or a directory holding it, and
  it is either new, an earlier daskbatch output of the same kind (recognised by
  the :data:`MARKER` attribute that every output carries), or ``overwrite`` was
  asked for;
* writes into a hidden temporary sibling (``.NAME.tmp-<pid>-<hex>``) and renames
  it into place, so that an interrupted or failed write never leaves half an
  output, and an old output is removed only once the new one is complete.
  Replacing a directory takes two renames (old aside to ``.NAME.old-<pid>-<hex>``,
  new into place): a run killed between them leaves the old output aside, and
  :func:`recover` (called by every check and by ``load_summary``) puts it back;

:func:`check_outputs` checks all the outputs of one run together, so that no
two of them overlap and a refused run writes nothing.

Remote URLs (``s3://...``) cannot be renamed atomically: they are checked the
same way, and an output of ours there is replaced in place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from daskbatch.errors import DiskFullError
from daskbatch.io.output_paths import (
    MARKER,
    SELECTION_HEADER,
    OutputError,
    OutputExistsError,
    OutputTarget,
    check_output,
    check_outputs,
    check_separate,
    output_kind,
    recover,
    remove_path,
)
from daskbatch.io.output_paths import Form as Form  # re-exported: callers annotate with it

__all__ = [
    "MARKER",
    "OutputError",
    "OutputExistsError",
    "OutputTarget",
    "SELECTION_HEADER",
    "check_output",
    "check_outputs",
    "check_separate",
    "output_kind",
    "recover",
    "write_json",
    "write_output",
]


def _sibling(path: str, tag: str) -> str:
    """A hidden, unused name beside ``path``: ``.NAME.<tag>-<pid>-<hex>``."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}")


def write_output(target: OutputTarget, write: Callable[[str], Any]) -> str:
    """Write an output through a temporary sibling and rename it into place.

    Parameters
    ----------
    target : OutputTarget
        From :func:`check_output` (checked again here: the disk may have changed during compute).
    write : callable
        Called with the path to write to (a fresh, not yet existing path);
        must create the complete output there.

    Returns
    -------
    str
        ``target.path``.

    Raises
    ------
    daskbatch.errors.DiskFullError
        The disk or quota filled up (ENOSPC, EDQUOT); nothing was written at the path.
    """
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
    """Yield a temporary sibling of ``path`` to fill; on success it replaces ``path``, on failure it is removed.

    An existing ``path`` is moved aside first and deleted only after the new
    output is in place (put back if the rename fails, and by :func:`recover`
    if the process dies between the renames). Callers must have checked
    ``path`` with :func:`check_output`.

    Parameters
    ----------
    path : str
        The output's path.

    Yields
    ------
    str
        The temporary path to fill.
    """
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
    """Object stores have no rename: replace an allowed existing output in place."""
    import fsspec  # lazy: fsspec

    fs, where = fsspec.core.url_to_fs(target.path)
    if fs.exists(where):
        fs.rm(where, recursive=True)
    write(target.path)


def write_json(target: OutputTarget, payload: Mapping[str, Any]) -> str:
    """Write ``payload`` as a JSON file whose first key is the :data:`MARKER`, atomically.

    Parameters
    ----------
    target : OutputTarget
        The checked output.
    payload : mapping
        JSON-able content.

    Returns
    -------
    str
        The path written.
    """
    text = json.dumps({MARKER: target.kind, **payload}, default=str)

    def _write(tmp: str) -> None:
        """Write the text to ``tmp``, locally or through fsspec."""
        if target.is_url:
            import fsspec  # lazy: fsspec

            with fsspec.open(tmp, "w") as f:
                f.write(text)
        else:
            with open(tmp, "w") as f:
                f.write(text)

    return write_output(target, _write)
