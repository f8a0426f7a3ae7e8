"""SIGTERM as an exception, held back while a checkpoint file is being written."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

from daskbatch.errors import Interrupted

__all__ = ["exit_now", "no_interrupt", "sigterm_as_interrupt"]

_signals = threading.local()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`~daskbatch.errors.Interrupted` raised in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _handler(signum: int, frame: Any) -> None:
        """Raise :class:`Interrupted`, or defer it while a write is in progress."""
        if getattr(_signals, "depth", 0) > 0:
            _signals.pending = True  # raised when the write in progress is done
            return
        _quiet_teardown()
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, _handler)
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


def _quiet_teardown() -> None:
    """Silence the logs of a cluster being torn down because the run was interrupted."""
    # Closing a cluster whose tasks were cancelled makes distributed and asyncio log an error and a traceback
    # per cancelled task or closed comm; after an interrupt they say nothing the user can act on.
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` at once, after flushing the logs and the standard streams."""
    if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        raise SystemExit(code)
    logging.shutdown()  # flushes every log handler (a job's log file too)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(code)
