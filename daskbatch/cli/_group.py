"""The click group every ``daskbatch`` command hangs from, and shared error handling."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import click

from daskbatch.cli._logging import LoggingGroup, logging_params, setup_from_context
from daskbatch.errors import DeviceUnavailableError, DiskFullError, PlanError

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes shared by every command (documented in ``daskbatch --help``).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_PLAN = 3
EXIT_NO_SPACE = 74  # EX_IOERR: a disk or quota is full; free space and run the same command again
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: interrupted, re-run the same command to resume


@click.group(
    name="batch",  # the subcommand name under `dask` (dask_cli entry point): `dask batch ...`
    cls=LoggingGroup,  # -v, -q and --log-level here and on every command
    params=logging_params(),
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=(
        "Exit codes: 0 success, 1 unexpected failure, 2 bad input, 3 plan does not fit, "
        "74 disk or quota full (free space, run the same command again), "
        "75 interrupted (resumable: run the same command again)."
    ),
)
@click.version_option(package_name="daskbatch")
def main() -> None:
    """Out-of-core per-feature statistics over chunked (samples x features) arrays.

    Log lines (timestamped, on stderr) record the plan, each pass with its
    throughput, reused checkpoint blocks, warnings and a summary per run:
    -v for more, -q for errors only, --log-level to choose.
    """
    # dask reads its YAML files on its first import; through daskbatch.config a malformed one is one line (exit 2).
    from daskbatch import config  # noqa: F401  # lazy: dask

    # Warnings (a missing chunk, an incomplete store, a range) become one log line each.
    setup_from_context(click.get_current_context())


def user_errors(func: F) -> F:
    """Turn expected errors into a one-line message and a non-zero exit code."""

    @functools.wraps(func)
    def _wrapper(*args: Any, **kwargs: Any) -> Any:
        """Run the command; exit with a one-line message on an expected error."""
        from daskbatch import config  # lazy: dask

        try:
            config.check()  # before a cluster starts: a bad setting is one line, not a worker's traceback
            return func(*args, **kwargs)
        except PlanError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_PLAN)
        except (
            ValueError, TypeError, FileNotFoundError, KeyError, OSError, ImportError, DeviceUnavailableError,
            concurrent.futures.CancelledError,
        ) as exc:
            if is_lost_scheduler(exc, connecting=False):  # not bad input, though CommClosedError is an OSError
                click.echo(f"error: lost the scheduler ({describe_lost(exc)}); run the command again", err=True)
                sys.exit(EXIT_FAILURE)
            if isinstance(exc, OSError) and (isinstance(exc, DiskFullError) or exc.errno in _DISK_FULL):
                click.echo(f"error: {_disk_full_message(exc)}", err=True)  # not bad input: the same run works with space
                sys.exit(EXIT_NO_SPACE)
            # ImportError: an optional extra is missing (its message names the pip install);
            # DeviceUnavailableError: no CUDA device for --cluster cuda.
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            click.echo(f"error: {msg}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return _wrapper  # type: ignore[return-value]


#: The errnos of a full disk or quota.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full_message(exc: OSError) -> str:
    """One line for a full disk: daskbatch's own message, else the path the system names."""
    if isinstance(exc, DiskFullError):
        return str(exc)
    if exc.filename:
        return f"{exc.strerror} writing {exc.filename}; free space there and run the same command again"
    return f"{exc.strerror or 'disk or quota full'}; free space and run the same command again"


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
