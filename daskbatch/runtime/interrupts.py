"""SIGTERM as an exception, held back while a checkpoint file is being written.

Batch systems send SIGTERM (or a configurable signal) shortly before a job's
walltime; turned into :class:`~daskbatch.errors.Interrupted`, it lets a run
finish the file it is writing and exit with the "interrupted, resumable" code.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from daskbatch.errors import Interrupted

__all__ = ["no_interrupt", "sigterm_as_interrupt"]

_signals = threading.local()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`~daskbatch.errors.Interrupted` raised in the main thread.

    A checkpoint file being written when the signal arrives is finished first
    (the exception is raised right after it), so what is on disk stays whole.
    Outside the main thread (where Python cannot install handlers) this does nothing.

    Examples
    --------
    >>> with sigterm_as_interrupt():          # doctest: +SKIP
    ...     describe("data.zarr", checkpoint="ckpt")
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        """Raise :class:`Interrupted`, or defer it while a write is in progress.

        Parameters
        ----------
        signum : int
            The signal.
        frame : frame or None
            Where it arrived (unused).
        """
        if getattr(_signals, "depth", 0) > 0:
            _signals.pending = True  # raised when the write in progress is done
            return
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def no_interrupt() -> Iterator[None]:
    """Hold back an Interrupted from :func:`sigterm_as_interrupt` until the block is done."""
    _signals.depth = getattr(_signals, "depth", 0) + 1
    try:
        yield
    finally:
        _signals.depth -= 1
        if _signals.depth == 0 and getattr(_signals, "pending", False):
            _signals.pending = False
            raise Interrupted("interrupted by SIGTERM")
