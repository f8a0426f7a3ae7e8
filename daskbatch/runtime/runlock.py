"""One run at a time (a lock file with stale detection on a checkpoint directory or an ingest output), and SIGTERM as an exception, held back while a checkpoint file is written."""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from daskbatch.errors import DiskFullError, Interrupted, LockHeldError

__all__ = ['LOCK_NAME', 'RunLock', 'exit_after_error', 'exit_now', 'no_interrupt', 'output_lock_path', 'pass_started',
           'sigterm_as_interrupt', 'summary_lock']


log = logging.getLogger(__name__)

#: Lock file inside a checkpoint directory.
LOCK_NAME = "daskbatch.lock"
#: A lock file this young that cannot be parsed is still being written by its holder.
_WRITING_GRACE_S = 5.0
#: Above any pid a kernel hands out (Linux's PID_MAX_LIMIT is 2**22).
_MAX_PID = 2**22

#: Locks this process holds: real path -> thread id. A thread that holds a lock may
#: take it again (describe holds it for all its passes, each pass takes it).
_HELD: dict[str, int] = {}
_HELD_GUARD = threading.Lock()


def output_lock_path(out: str | os.PathLike[str]) -> Path:
    """Name the lock file of an ingest output: hidden, beside it (it survives ``overwrite``'s delete)."""
    path = Path(os.path.abspath(out))
    return path.with_name(f".{path.name}.daskbatch-lock")


def summary_lock(path: str | os.PathLike[str]) -> contextlib.AbstractContextManager[Any]:
    """The run lock of a saved summary, which ``describe --update`` holds from reading it to writing it back."""
    where = os.fspath(path)
    if "://" in where:
        return contextlib.nullcontext()
    return RunLock(output_lock_path(where), f"summary {where}")


def _process_started(pid: int) -> float | None:
    """Start time (epoch seconds) of process ``pid``, None if it does not exist."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # exists, owned by someone else
        return 0.0


class RunLock:
    """An exclusive lock file held for the duration of a ``with`` block."""

    def __init__(self, path: str | os.PathLike[str], what: str, stale_after: float | None = None) -> None:
        self.path = Path(path)
        self.what = what
        if stale_after is None:
            from dask.utils import parse_timedelta  # lazy: dask

            from daskbatch import config  # lazy: dask

            stale_after = parse_timedelta(config.get("lock-stale-after"), default="s")
        self.stale_after = float(stale_after)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._key = os.path.realpath(self.path)
        self._nested = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, taking over a stale one; raise :class:`LockHeldError` if a live run holds it."""
        with _HELD_GUARD:
            self._nested = _HELD.get(self._key) == threading.get_ident()
        if self._nested:
            return
        self._acquire_file()
        with _HELD_GUARD:
            _HELD[self._key] = threading.get_ident()

    def _acquire_file(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "token": self.token}
        content = json.dumps(me).encode()
        for _ in range(10):  # a few rounds: another run may take over the same stale lock meanwhile
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._judge_existing()
                continue
            except OSError as exc:
                self._raise_disk_full(exc, len(content))
                raise
            try:
                try:
                    os.write(fd, content)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                # An empty lock file left here would lock out every run for its grace period.
                self.path.unlink(missing_ok=True)
                self._raise_disk_full(exc, len(content))
                raise
            self._start_heartbeat()
            return
        raise LockHeldError(f"{self.what} is in use: could not take {self.path} (other runs keep taking it)")

    def _raise_disk_full(self, exc: OSError, nbytes: int) -> None:
        """Raise DiskFullError naming the lock file when ``exc`` is a full disk or quota (the lock was free)."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"{exc.strerror} writing lock file {self.path} ({nbytes} bytes); "
                "free space there and run the same command again"
            ) from exc

    def release(self) -> None:
        """Stop the heartbeat and delete the lock file if it is still ours (outermost level only)."""
        if self._nested:
            return
        with _HELD_GUARD:
            _HELD.pop(self._key, None)
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        holder = _read(self.path)[0]
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink(missing_ok=True)
        elif holder is not None:
            log.warning("%s was taken over by pid %s on %s while this run held it",
                        self.path, holder.get("pid"), holder.get("host"))

    def _judge_existing(self) -> None:
        """Return when the existing lock is gone or was stale (and removed); raise when it is held."""
        holder, raw, age = _read(self.path)
        if raw is None and os.path.islink(self.path):
            # O_EXCL does not follow it and reading does not find it: without this every round ends here.
            raise LockHeldError(
                f"{self.what} cannot be locked: lock file {self.path} is a dangling symbolic link "
                f"(to {os.readlink(self.path)}); remove the link, then run again"
            )
        if raw is None:
            return  # released meanwhile: try again
        reason = self._stale_reason(holder, age)
        if reason is None:
            raise LockHeldError(f"{self.what} is in use by another run: lock file {self.path} is held by "
                                f"{_who(holder)}; if no such run is alive, delete the lock file")
        log.warning("%s: taking over a stale lock (%s)", self.path, reason)
        self._break(raw)

    def _stale_reason(self, holder: dict[str, Any] | None, age: float) -> str | None:
        if holder is None:
            return None if age < _WRITING_GRACE_S else f"unreadable and {age:.0f} s old"
        pid, host, since = holder["pid"], holder["host"], holder["since"]
        if host == socket.gethostname():
            started = _process_started(pid)
            if started is None:
                return f"pid {pid} on {host} is not running"
            if started > since + 1.0:  # 1 s: create_time is rounded by some kernels
                return f"pid {pid} on {host} was reused by a process started after the lock was taken"
            return None
        if age > self.stale_after:
            return f"held by pid {pid} on {host}, no heartbeat for {age:.0f} s (over {self.stale_after:.0f} s)"
        return None

    def _break(self, raw: bytes) -> None:
        """Remove the lock file if it still holds ``raw`` (another run may have replaced it meanwhile)."""
        aside = self.path.with_name(f"{self.path.name}.stale-{self.token}")
        try:
            os.rename(self.path, aside)  # atomic: of several runs taking over, one moves it
        except FileNotFoundError:
            return
        if aside.read_bytes() != raw:
            # A fresh lock went up between our read and the rename: put it back, never over another.
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
        aside.unlink(missing_ok=True)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        interval = max(0.05, self.stale_after / 4)

        def beat() -> None:
            while not self._stop.wait(interval):
                with contextlib.suppress(OSError):
                    os.utime(self.path)

        self._heartbeat = threading.Thread(target=beat, name="daskbatch-lock-heartbeat", daemon=True)
        self._heartbeat.start()


def _read(path: Path) -> tuple[dict[str, Any] | None, bytes | None, float]:
    """(holder or None if unparseable, raw bytes or None if absent, age in seconds by mtime)."""
    try:
        raw = path.read_bytes()
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None, None, 0.0
    except OSError as exc:  # a directory, or unreadable: not a lock this module wrote
        raise LockHeldError(f"{path} is in the way of the run lock ({exc.strerror}); remove it") from None
    try:
        holder = json.loads(raw)
    except ValueError:
        return None, raw, age
    return (holder if _valid_holder(holder) else None), raw, age


def _valid_holder(holder: Any) -> bool:
    """Whether a parsed lock file names a possible holder: a real pid, a host, a start time not in the future."""
    if not isinstance(holder, dict):
        return False
    pid, host, since = holder.get("pid"), holder.get("host"), holder.get("since")
    return (isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < _MAX_PID
            and isinstance(host, str) and bool(host)
            and isinstance(since, (int, float)) and not isinstance(since, bool)
            and 0.0 <= since <= time.time() + 86400.0)  # a day of clock skew between hosts


def _who(holder: dict[str, Any] | None) -> str:
    if holder is None:
        return "a run that is still writing it"
    since = datetime.datetime.fromtimestamp(holder["since"]).isoformat(sep=" ", timespec="seconds")
    return f"pid {holder['pid']} on host {holder['host']} since {since}"


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
        raise _interrupt(signal.Signals(signum).name)

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
            raise _interrupt("SIGTERM")


def _interrupt(signal_name: str) -> Interrupted:
    """An :class:`Interrupted` raised outside the block runner, marked as not saying what was kept."""
    exc = Interrupted(f"interrupted by {signal_name}")
    exc.unaccounted = True
    return exc


def _quiet_teardown() -> None:
    """Silence the logs of a cluster being torn down because the run was interrupted."""
    # Closing a cluster whose tasks were cancelled makes distributed and asyncio log an error and a traceback
    # per cancelled task or closed comm; after an interrupt they say nothing the user can act on.
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


#: Set once a pass has started reading in this process: an error after it may leave reads in flight.
_pass_started = threading.Event()


def pass_started() -> None:
    """Note that a pass has started reading in this process (:func:`exit_after_error` ends at once from then on)."""
    _pass_started.set()


def exit_after_error(code: int) -> NoReturn:
    """End the process with ``code`` after an error's message: by :func:`exit_now` if a pass has started reading, else ``sys.exit``."""
    # Before any pass there is nothing in flight, and the exit hooks (a user's too) run as on any exit.
    if _pass_started.is_set():
        exit_now(code)
    sys.exit(code)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` at once, after flushing the logs and the standard streams."""
    if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        raise SystemExit(code)
    # No exit hooks and no finalisation: that would join the threads whose reads are still in flight
    # (a dask pool's, the rows' token, zarr's executor), and a thread of an object store's Rust runtime
    # coming back to Python while the interpreter finalises ends the process with SIGABRT. The one
    # hook that matters here, ending the kernels' compile helper (nothing outlives the process), runs.
    helper = sys.modules.get("daskbatch.stats.kernels.ahead")  # loaded only where a pass ran
    if helper is not None:
        helper.end_helper()
    logging.shutdown()  # flushes every log handler (a job's log file too)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(code)
