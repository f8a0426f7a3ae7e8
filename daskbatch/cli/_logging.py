"""Logging of the ``daskbatch`` command line: timestamped lines on stderr, warnings among them."""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import warnings
from typing import Any, TextIO

import click

from daskbatch.runtime.progress import line_cleared

__all__ = ["LEVELS", "LoggingGroup", "LogSettings", "is_quiet", "logging_params"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DATEFMT = "%Y-%m-%d %H:%M:%S"
_META_KEY = "daskbatch.logging"


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

    def __init__(self) -> None:
        super().__init__()

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
    handler = next((h for h in _logger().handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        _logger().addHandler(handler)
    verbose = level <= logging.DEBUG
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(asctime)s %(levelname)s %(message)s"
    handler.setFormatter(logging.Formatter(fmt, datefmt=DATEFMT))
    _logger().setLevel(level)
    logging.captureWarnings(True)
    captured = _warnings_logger()
    warned = next((h for h in captured.handlers if isinstance(h, _StderrHandler)), None)
    if warned is None:
        warned = _StderrHandler()
        captured.addHandler(warned)
    warned.setFormatter(_WarningFormatter("%(asctime)s %(levelname)s %(message)s", datefmt=DATEFMT))
    captured.setLevel(level)
    # dask and distributed keep their own handlers: only their level follows ours.
    quiet_others = logging.ERROR if settings.quiet and settings.log_level is None else None
    for name in ("distributed", "dask"):
        other = logging.getLogger(name)
        if settings.verbose >= 2:
            other.setLevel(logging.DEBUG)
        elif quiet_others is not None:
            other.setLevel(quiet_others)


def _logger() -> logging.Logger:
    return logging.getLogger("daskbatch")


def _warnings_logger() -> logging.Logger:
    return logging.getLogger("py.warnings")  # where logging.captureWarnings sends them


# ---------------------------------------------------------------------- click


def _settings(ctx: click.Context) -> LogSettings:
    meta = ctx.find_root().meta
    if _META_KEY not in meta:
        meta[_META_KEY] = LogSettings()
    return meta[_META_KEY]  # type: ignore[no-any-return]


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


class LoggingGroup(click.Group):
    """A click group whose commands all take the logging options (before or after their name)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register ``cmd`` with the logging options added to it."""  # numpydoc ignore=PR01
        taken = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
        cmd.params.extend(p for p in logging_params() if not taken.intersection(p.opts))
        super().add_command(cmd, name)


def is_quiet() -> bool:
    """Tell whether ``-q/--quiet`` was given to the running command (False outside click)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and _settings(ctx).quiet


def setup_from_context(ctx: click.Context) -> None:
    """Configure logging from the options parsed so far (the main group's callback calls this)."""
    root = ctx.find_root()
    if "daskbatch.logging.saved" not in root.meta:
        root.meta["daskbatch.logging.saved"] = True
        root.call_on_close(_snapshot())
    _configure(_settings(ctx))


def _snapshot() -> Any:
    """A function that puts back the loggers' levels and handlers and the warning hook as they are now."""
    loggers = [_logger(), logging.getLogger("distributed"), logging.getLogger("dask"), _warnings_logger()]
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
