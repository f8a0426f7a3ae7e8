"""One run at a time on a checkpoint directory (``DIR/daskbatch.lock``, :mod:`daskbatch.runtime.runlock`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from daskbatch.runtime.runlock import LOCK_NAME, RunLock


def checkpoint_lock(directory: str | os.PathLike[str]) -> RunLock:
    """Get the run lock of a checkpoint directory (created if missing); re-entrant in one thread.

    Parameters
    ----------
    directory : str or os.PathLike
        The checkpoint directory.

    Returns
    -------
    RunLock
        Its lock.
    """
    Path(directory).mkdir(parents=True, exist_ok=True)
    return RunLock(Path(directory) / LOCK_NAME, f"checkpoint directory {os.fspath(directory)}")


P = ParamSpec("P")
R = TypeVar("R")


def holding_checkpoint_lock(func: Callable[P, R]) -> Callable[P, R]:
    """Hold the lock of ``func``'s ``checkpoint=`` directory for the whole call (all its passes).

    Each pass takes the lock too; holding it across them keeps another run from
    slipping in between two passes and failing this one halfway.

    Parameters
    ----------
    func : callable
        A function with a ``checkpoint=`` keyword.

    Returns
    -------
    callable
        ``func`` under the lock.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``func`` holding the lock of its checkpoint, if it has one.

        Parameters
        ----------
        *args, **kwargs
            ``func``'s arguments.

        Returns
        -------
        R
            ``func``'s result.
        """
        directory = kwargs.get("checkpoint")
        if not isinstance(directory, (str, os.PathLike)):
            return func(*args, **kwargs)
        with checkpoint_lock(directory):
            return func(*args, **kwargs)

    return wrapper
