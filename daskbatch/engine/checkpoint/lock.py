"""One run at a time on a checkpoint directory (``DIR/daskbatch.lock``, :mod:`daskbatch.runtime.runlock`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from daskbatch.engine.checkpoint.files import remove_stale_temps
from daskbatch.engine.checkpoint.manifest import MANIFEST
from daskbatch.errors import DataError, DiskFullError
from daskbatch.runtime.runlock import LOCK_NAME, RunLock


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
    if "://" in os.fspath(directory) or not os.path.lexists(path):
        return
    if not path.is_dir():
        raise DataError(f"{what} {os.fspath(directory)} is a file, not a directory; choose another path")
    if any(path.iterdir()) and not ((path / MANIFEST).exists() or (path / LOCK_NAME).exists()):
        raise DataError(
            f"{what} {os.fspath(directory)} holds files and no daskbatch checkpoint; choose a new or empty directory"
        )


P = ParamSpec("P")
R = TypeVar("R")


def holding_checkpoint_lock(func: Callable[P, R]) -> Callable[P, R]:
    """Hold the lock of ``func``'s ``checkpoint=`` directory for the whole call (all its passes)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``func`` holding the lock of its checkpoint, if it has one."""
        directory = kwargs.get("checkpoint")
        if not isinstance(directory, (str, os.PathLike)):
            return func(*args, **kwargs)
        with checkpoint_lock(directory):
            return func(*args, **kwargs)

    return wrapper
