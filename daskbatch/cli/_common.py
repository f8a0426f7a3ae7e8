"""The click group every ``daskbatch`` command hangs from: exit codes, one-line errors, and timestamped log lines on stderr (warnings among them)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import functools
import logging
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TextIO, TypeVar

import click

from daskbatch.errors import (
    DeviceUnavailableError,
    DiskFullError,
    PlanError,
    describe_lost,
    is_lost_scheduler,
    what_was_lost,
)
from daskbatch.runtime.progress import line_cleared
from daskbatch.runtime.runlock import exit_after_error, exit_now

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DATEFMT = "%Y-%m-%d %H:%M:%S"
_META_KEY = "daskbatch.logging"
_LOGGER = logging.getLogger("daskbatch")
_WARNINGS_LOGGER = logging.getLogger("py.warnings")  # where logging.captureWarnings sends them


@dataclasses.dataclass
class LogSettings:
    """What the logging options asked for (the main group's, then the command's)."""

    verbose: int = 0
    quiet: bool = False
    log_level: str | None = None

    @property
    def level(self) -> int:
        """The logging level these settings ask for (``--log-level``, else from -v/-q)."""
        if self.log_level is not None:
            return int(getattr(logging, self.log_level.upper()))
        if self.quiet:
            return logging.ERROR
        return logging.DEBUG if self.verbose else logging.INFO


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the current ``sys.stderr`` (click's test runner swaps it), clearing a terminal bar first."""

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns one: always stderr here
        pass

    def emit(self, record: logging.LogRecord) -> None:
        with line_cleared():
            super().emit(record)


class _WarningFormatter(logging.Formatter):
    """``WARNING RangeWarning: text`` from a captured warning's ``file:line: Category: text`` (one line)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        text = record.message.strip().splitlines()[0] if record.message.strip() else ""
        # warnings.formatwarning gives "path:lineno: Category: message" (a path may hold ": " too).
        match = re.match(r"^.*?:\d+: (\w+: .*)$", text)
        record.message = " ".join((match.group(1) if match else text).split())
        return super().formatMessage(record)


def _configure(settings: LogSettings) -> None:
    """Send the ``daskbatch`` logger's records (and warnings) to stderr at the asked level; idempotent."""
    level = settings.level
    verbose = level <= logging.DEBUG
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(asctime)s %(levelname)s %(message)s"
    _stderr_handler(_LOGGER).setFormatter(logging.Formatter(fmt, datefmt=DATEFMT))
    _LOGGER.setLevel(level)
    logging.captureWarnings(True)
    _stderr_handler(_WARNINGS_LOGGER).setFormatter(_WarningFormatter("%(asctime)s %(levelname)s %(message)s", datefmt=DATEFMT))
    _WARNINGS_LOGGER.setLevel(level)
    # dask and distributed keep their own handlers: only their level follows ours.
    quiet_others = logging.ERROR if settings.quiet and settings.log_level is None else None
    for name in ("distributed", "dask"):
        other = logging.getLogger(name)
        if settings.verbose >= 2:
            other.setLevel(logging.DEBUG)
        elif quiet_others is not None:
            other.setLevel(quiet_others)


def _stderr_handler(logger: logging.Logger) -> _StderrHandler:
    """The stderr handler of ``logger``, added on the first call."""
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        logger.addHandler(handler)
    return handler


# ---------------------------------------------------------------------- click


def _settings(ctx: click.Context) -> LogSettings:
    return ctx.find_root().meta.setdefault(_META_KEY, LogSettings())  # type: ignore[no-any-return]


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Option callback: note a value given on the command line, and apply it at once."""
    from click.core import ParameterSource

    if param.name is None or ctx.get_parameter_source(param.name) not in (
        ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT,
    ):
        return value
    settings = _settings(ctx)
    setattr(settings, param.name, value.upper() if param.name == "log_level" else value)
    if ctx.parent is not None:  # a command's option: the group has configured logging already
        _configure(settings)
    return value


def logging_params() -> list[click.Option]:
    """Build ``-v/--verbose``, ``-q/--quiet`` and ``--log-level`` (new objects for each command)."""
    return [
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_remember,
                     help="More log lines: DEBUG (-vv: dask's and distributed's too)."),
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_remember,
                     help="Errors only: no log lines, progress bar or report (JSON output stays)."),
        click.Option(["--log-level"], type=click.Choice(LEVELS, case_sensitive=False), metavar="LEVEL",
                     expose_value=False, callback=_remember,
                     help=f"Log level ({', '.join(LEVELS)}); default INFO."),
    ]


class OneLineUsageError(click.UsageError):
    """A usage error shown as daskbatch's own refusals are: one line on stderr, exit 2."""

    def show(self, file: Any = None) -> None:
        """Write ``error: <what>`` and where the options are explained, on one line."""  # numpydoc ignore=PR01
        where = f" (options: {self.ctx.command_path} --help)" if self.ctx is not None else ""
        click.echo(f"error: {' '.join(self.format_message().split())}{where}", err=True, file=file)


@contextlib.contextmanager
def _usage_in_one_line() -> Iterator[None]:
    """Within the block, click's usage errors (bad option values, missing arguments) become one line."""
    try:
        yield
    except (click.exceptions.NoArgsIsHelpError, OneLineUsageError):
        raise  # `daskbatch` alone shows the help; one line already
    except click.UsageError as exc:
        raise OneLineUsageError(exc.format_message(), exc.ctx) from None


class LoggingGroup(click.Group):
    """A click group whose commands all take the logging options (before or after their name)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register ``cmd`` with the logging options added to it."""  # numpydoc ignore=PR01
        taken = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
        cmd.params.extend(p for p in logging_params() if not taken.intersection(p.opts))
        super().add_command(cmd, name)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        """Parse the group's options; a usage error is one line."""  # numpydoc ignore=PR01,RT01
        with _usage_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        """Parse and run the command; its usage errors (and those it raises) are one line."""  # numpydoc ignore=PR01,RT01
        with _usage_in_one_line():
            return super().invoke(ctx)


def is_quiet() -> bool:
    """Tell whether ``-q/--quiet`` was given to the running command (False outside click)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and _settings(ctx).quiet


def report(text: str, *, err: bool = False) -> None:
    """Print a line of a command's human-readable report, unless ``-q`` asked for errors only."""  # numpydoc ignore=PR01
    if not is_quiet():
        click.echo(text, err=err)


def _snapshot() -> Any:
    """A function that puts back the loggers' levels and handlers and the warning hook as they are now."""
    loggers = [_LOGGER, logging.getLogger("distributed"), logging.getLogger("dask"), _WARNINGS_LOGGER]
    saved = [(lg, lg.level, list(lg.handlers)) for lg in loggers]
    showwarning = warnings.showwarning
    # Whether the caller captures warnings into logging already (then it stays so).
    capturing = getattr(showwarning, "__module__", None) == "logging"

    def restore() -> None:
        for lg, level, handlers in saved:
            lg.setLevel(level)
            lg.handlers[:] = handlers
        if not capturing:
            logging.captureWarnings(False)  # gives back the showwarning it replaced
        warnings.showwarning = showwarning

    return restore


F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes shared by every command (documented in ``daskbatch --help``).
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

    # Warnings (a missing chunk, an incomplete store, a range) become one log line each; the loggers
    # are put back as they were when the command ends.
    ctx = click.get_current_context()
    ctx.call_on_close(_snapshot())
    _configure(_settings(ctx))


def user_errors(func: F) -> F:
    """Turn expected errors into a one-line message and a non-zero exit code."""
    # The exit is leave's: a refusal raised while a pass still reads (a damaged chunk) must not wait
    # for those reads, nor meet them in the interpreter's finalisation (SIGABRT after the message);
    # the click contexts close first (the summary's lock, the loggers).

    @functools.wraps(func)
    def _wrapper(*args: Any, **kwargs: Any) -> Any:
        """Run the command; exit with a one-line message on an expected error."""
        from daskbatch import config  # lazy: dask

        try:
            config.check()  # before a cluster starts: a bad setting is one line, not a worker's traceback
            return func(*args, **kwargs)
        except PlanError as exc:
            click.echo(f"error: {exc}", err=True)
            leave(EXIT_PLAN)
        except (
            ValueError, TypeError, FileNotFoundError, KeyError, OSError, ImportError, DeviceUnavailableError,
            concurrent.futures.CancelledError,
        ) as exc:
            if is_lost_scheduler(exc, connecting=False):  # not bad input, though CommClosedError is an OSError
                click.echo(f"error: lost the scheduler ({describe_lost(exc)}); run the command again", err=True)
                leave(EXIT_FAILURE)
            if isinstance(exc, OSError) and (isinstance(exc, DiskFullError) or exc.errno in _DISK_FULL):
                click.echo(f"error: {_disk_full_message(exc)}", err=True)  # not bad input: the same run works with space
                leave(EXIT_NO_SPACE)
            # ImportError: an optional extra is missing (its message names the pip install);
            # DeviceUnavailableError: no CUDA device for --cluster cuda.
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            click.echo(f"error: {msg}", err=True)
            leave(EXIT_BAD_INPUT)

    return _wrapper  # type: ignore[return-value]


def leave(code: int, *, now: bool = False) -> NoReturn:
    """End the command with ``code``, its click contexts closed first (their locks released, the loggers put back).

    Parameters
    ----------
    code : int
        The exit status.
    now : bool, default False
        End at once (:func:`~daskbatch.runtime.runlock.exit_now`: an interrupt); else as after an error
        (:func:`~daskbatch.runtime.runlock.exit_after_error`: immediately if a pass has started reading).
    """
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        ctx.close()
        ctx = ctx.parent
    if now:
        exit_now(code)
    exit_after_error(code)


def exit_lost_scheduler(
    exc: BaseException, checkpoint: str | None, option: str, *, unkept: str = "nothing was written",
) -> NoReturn:
    """End a command whose scheduler (or every worker) was lost mid-run: one line, exit 75 when ``checkpoint`` lets the re-run resume, else 1.

    Parameters
    ----------
    exc : BaseException
        What the client raised (:func:`daskbatch.errors.is_lost_scheduler` accepted it).
    checkpoint : str or None
        The run's checkpoint directory, if it had one.
    option : str
        How a user gives a checkpoint to this command (``--checkpoint``, or the job file's key).
    unkept : str
        What stands without a checkpoint (said before "run the command again").
    """
    lost, why = what_was_lost(exc), describe_lost(exc)
    if checkpoint:
        click.echo(f"interrupted, resumable: lost {lost} ({why}); finished blocks are kept in {checkpoint}, "
                   "run the same command to resume", err=True)
        leave(EXIT_INTERRUPTED, now=True)
    click.echo(f"error: lost {lost} during the computation ({why}); {unkept}: run the command again "
               f"(with {option} to keep finished blocks)", err=True)
    sys.exit(EXIT_FAILURE)


#: The errnos of a full disk or quota.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full_message(exc: OSError) -> str:
    """One line for a full disk: daskbatch's own message, else the path the system names."""
    if isinstance(exc, DiskFullError):
        return str(exc)
    if exc.filename:
        return f"{exc.strerror} writing {exc.filename}; free space there and run the same command again"
    return f"{exc.strerror or 'disk or quota full'}; free space and run the same command again"


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
