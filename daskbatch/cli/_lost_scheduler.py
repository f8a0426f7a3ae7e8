"""A run that loses its scheduler ends with one line, not distributed's tracebacks.

When the scheduler dies (killed, its node lost, the batch job's walltime), the
client raises ``FutureCancelledError`` (a ``concurrent.futures.CancelledError``),
``CommClosedError`` or an ``OSError`` from its comm layer, and distributed
logs several tracebacks while it closes. :func:`is_lost_scheduler` recognises
those errors, and :func:`one_line_distributed_logs` keeps distributed's log
lines but drops their tracebacks, so that a job log ends with the command's own
message and exit code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Iterator
from types import TracebackType

__all__ = ["describe_lost", "is_lost_scheduler", "one_line_distributed_logs"]


def _raised_in_distributed_comm(tb: TracebackType | None) -> bool:
    """True when the innermost frame of ``tb`` is in distributed's comm layer or RPC core."""
    module = ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return module.startswith(("distributed.comm", "distributed.core"))


def is_lost_scheduler(exc: BaseException, *, connecting: bool = True) -> bool:
    """Tell the errors a client raises when its scheduler goes away during a compute."""
    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return True
    try:
        from distributed.comm.core import CommClosedError  # lazy: distributed
    except ImportError:  # distributed is optional for --cluster threads
        return False
    if isinstance(exc, CommClosedError):
        return True
    return connecting and isinstance(exc, OSError) and _raised_in_distributed_comm(exc.__traceback__)


def describe_lost(exc: BaseException) -> str:
    """Give a short, one-line account of ``exc`` (distributed's messages span lines)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _OneLine(logging.Filter):
    """Drop tracebacks from distributed's log records (and the records that are only a traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if not record.getMessage().strip():
                # ``log_errors`` logs the bare exception of every coroutine the shutdown cancels.
                return False
            record.msg = f"{record.getMessage()} ({describe_lost(exc)})"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


@contextlib.contextmanager
def one_line_distributed_logs() -> Iterator[None]:
    """Within the block, distributed's log handlers print one line per record, without tracebacks."""
    names = [n for n in logging.Logger.manager.loggerDict if n == "distributed" or n.startswith("distributed.")]
    handlers = {h for n in names for h in logging.getLogger(n).handlers}
    quiet = _OneLine()
    for h in handlers:
        h.addFilter(quiet)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(quiet)
