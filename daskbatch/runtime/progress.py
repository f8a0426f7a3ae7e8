"""Progress of long computations: one helper for describe's passes, ingest, transform and map_batches."""

from __future__ import annotations

import contextlib
import html
import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from daskbatch._common import plural
from daskbatch.errors import Cancelled
from daskbatch.runtime.capacity import active_client, local_scheduler

__all__ = ["LOG_EVERY_S", "Progress", "ProgressCallback", "compute", "in_jupyter", "line_cleared"]


# Erase the terminal line and return to its start.
_CLEAR = "\r\x1b[2K"


def in_jupyter() -> bool:
    """Tell whether this runs inside an IPython kernel (Jupyter, VS Code notebooks), not a terminal IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def display_for(title: str) -> _Terminal | _Widget | None:
    """Make the bar for where this process shows things."""
    if in_jupyter():
        try:
            return _Widget(title)
        except ImportError:  # no ipywidgets: Jupyter renders a carriage return on stderr as well
            return _Terminal(plain=True)
    stream = sys.stderr
    if stream is not None and stream.isatty():
        return _Terminal()
    return None


class _Widget:
    """An ipywidgets bar with the title before it and the counts after it, displayed at once."""

    def __init__(self, title: str) -> None:
        from IPython.display import display
        from ipywidgets import HTML, HBox, IntProgress, Layout

        self.label = HTML(f"<b>{html.escape(title)}</b>")
        self.bar = IntProgress(min=0, max=1, value=0, layout=Layout(width="40%"))
        self.text = HTML("")
        self.box = HBox([self.label, self.bar, self.text])
        display(self.box)

    def draw(self, done: int, total: int | None, status: str) -> None:
        self.bar.max = max(total or 1, 1)
        self.bar.value = min(done, self.bar.max)
        # The status starts with the title, which the label shows already.
        self.text.value = html.escape(status.split("  ", 1)[-1])

    def close(self, status: str, *, ok: bool) -> None:
        self.draw(self.bar.max if ok else self.bar.value, self.bar.max, status)
        self.bar.bar_style = "success" if ok else "danger"


_active_line: list[_Terminal] = []  # the terminal bar drawn now, if any (log lines clear it first)


class _Terminal:
    """One line on stderr, redrawn in place (``\\r`` and erase-line), ended with a newline when closed."""

    def __init__(self, *, plain: bool = False) -> None:
        self.plain = plain  # Jupyter without ipywidgets: \r only, no escape sequences
        self.text = ""
        _active_line[:] = [self]

    def _fit(self, text: str) -> str:
        width = shutil.get_terminal_size((100, 24)).columns
        return text if len(text) < width else text[: max(width - 2, 10)] + "…"

    def draw(self, done: int, total: int | None, status: str) -> None:
        self.text = self._fit(status)
        self._write(self.text)

    def _write(self, text: str, end: str = "") -> None:
        stream = sys.stderr  # looked up each time: tests and click swap it
        with contextlib.suppress(ValueError, OSError):  # a closed stream must not fail the computation
            stream.write(("\r" if self.plain else _CLEAR) + text + end)
            stream.flush()

    def close(self, status: str, *, ok: bool) -> None:
        self._write(self._fit(status), end="\n")
        if _active_line and _active_line[0] is self:
            _active_line.clear()


@contextlib.contextmanager
def line_cleared() -> Iterator[None]:
    """Erase the terminal bar for the duration of the block (a log line is written there), then redraw it."""
    bars = list(_active_line)
    for bar in bars:
        bar._write("")
    try:
        yield
    finally:
        for bar in bars:
            if _active_line and _active_line[0] is bar:
                bar._write(bar.text)


#: A caller's progress callback: ``callback(done, total, phase)`` (total None until known).
ProgressCallback = Callable[[int, "int | None", str], Any]

#: Seconds between two progress log lines of a step that draws no bar (a batch log).
LOG_EVERY_S = 10.0

log = logging.getLogger(__name__)


class Progress:
    """The progress of one labelled step: a bar where one can be seen, log lines always."""

    def __init__(
        self, title: str, total: int | None = None, *, unit: str = "blocks", rows: int | None = None,
        nbytes: int | None = None, progress: bool | str | ProgressCallback = False,
        cancel: threading.Event | None = None,
    ) -> None:
        # A verb's ``progress`` as its caller gave it: a bar (True), dask's own display ("dask") or a callback.
        if not callable(progress) and progress not in (True, False, "dask"):
            raise ValueError(f"progress must be True, False or 'dask', got {progress!r}")
        self.title, self.total, self.unit = title, total, unit
        self._callback = progress if callable(progress) else None
        self._cancel = cancel
        self._logged_at = 0.0
        self.rows, self.nbytes = rows, nbytes
        self.done = 0
        self._reported = -1  # the count the callback last saw: each count reaches it once
        self.skipped = 0  # done before this run (a checkpoint's or an output's finished blocks)
        self.seconds: float | None = None  # set when closed
        self._show = progress is True
        #: Whether dask's own progress display (distributed.progress, dask.diagnostics.ProgressBar) shows this step.
        self.dask_display = progress == "dask"
        self._display: _Terminal | _Widget | None = None  # drawn with draw(), finished with close()
        self._lock = threading.RLock()
        self._t0: float | None = None
        self._drawn_at = 0.0
        self._closed = False

    def __enter__(self) -> Progress:
        """Log the start and show the bar (Jupyter: display the widget now, in the calling cell)."""
        self._t0 = self._logged_at = time.perf_counter()
        log.info("%s: started%s", self.title, self._size_text())
        if self._show:
            try:
                self._display = display_for(self.title)
            except Exception as exc:  # a bar must never fail the computation it shows
                log.debug("no progress bar for %s: %s", self.title, exc)
            self._draw(force=True)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Finish the bar and log the end: units, time and throughput (or where it stopped)."""
        with self._lock:
            self._closed = True
            self.seconds = time.perf_counter() - (self._t0 or time.perf_counter())
            complete = exc_type is None and (self.total is None or self.done >= self.total)
            if self._display is not None:
                with contextlib.suppress(Exception):  # as in _draw: the result matters, not the bar
                    self._display.close(self._status(final=True), ok=complete)
        if complete:
            log.info("%s: done, %s", self.title, self._result_text())
        else:
            log.info("%s: stopped at %s", self.title, self._result_text())

    def skip(self, n: int) -> None:
        """Count ``n`` units that were done before this run (reused), outside the throughput."""
        with self._lock:
            self.skipped += n
            self.done += n
        self._counted(force=True)

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more finished units (any thread)."""
        with self._lock:
            self.done += n
        self._counted()

    def update(self, done: int) -> None:
        """Set the number of finished units (any thread; never goes backwards)."""
        with self._lock:
            self.done = max(self.done, done)
        self._counted()

    def _counted(self, *, force: bool = False) -> None:
        """After a count: the bar, the caller's callback (once per count), a periodic log line, the cancel check."""
        self._draw(force=force)
        if self._callback is not None:
            with self._lock:
                done, fresh = self.done, self.done != self._reported
                self._reported = done
            if fresh:
                self._callback(done, self.total, self.title)
        now = time.perf_counter()
        if self._display is None and not self._closed and now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.info("%s", self._status())
        if self._cancel is not None and self._cancel.is_set() and not self._closed:
            of = f" of {self.total:,}" if self.total is not None else ""
            raise Cancelled(f"{self.title}: cancelled after {self.done:,}{of} {self.unit}")

    def set_total(self, total: int) -> None:
        """Set the number of units once it is known (a widget's bar grows to it)."""
        self.total = total
        self._draw(force=True)

    def _status(self, *, final: bool = False) -> str:
        """The bar's text: counts, rows per second and the time left (or taken, when final)."""
        done = f"{self.done:,}/{self.total:,}" if self.total is not None else f"{self.done:,}"
        parts = [self.title, f"{done} {self.unit}"]
        # The rate and the ETA count this run's units only (reused ones left out), once something finished.
        computed = self.done - self.skipped
        elapsed = 0.0 if self._t0 is None else time.perf_counter() - self._t0
        if self.rows and self.total and computed > 0 and elapsed > 0:
            parts.append(f"{_si(computed / self.total * self.rows / elapsed)} rows/s")
        if not final and self.total is not None and computed > 0 and self.done < self.total:
            parts.append(f"ETA {_clock((self.total - self.done) * elapsed / computed)}")
        elif final and self.seconds is not None:
            parts.append(f"in {_clock(self.seconds)}")
        return "  ".join(parts)

    def _size_text(self) -> str:
        from dask.utils import format_bytes  # lazy: dask

        # "1 block", "2 blocks": units are named in the plural (blocks, chunks, tasks, batches)
        one = self.unit[:-2] if self.unit.endswith("ches") else self.unit.removesuffix("s")
        parts = [plural(self.total, one, self.unit)] if self.total is not None else []
        if self.rows is not None:
            parts.append(f"{self.rows:,} rows")
        if self.nbytes is not None:
            parts.append(format_bytes(self.nbytes))
        return f" ({', '.join(parts)})" if parts else ""

    def _result_text(self) -> str:
        from dask.utils import format_bytes  # lazy: dask

        computed = self.done - self.skipped
        seconds = self.seconds or 0.0
        of = f"/{self.total:,}" if self.total is not None else ""
        text = f"{self.done:,}{of} {self.unit}"
        if self.skipped:
            text += f" ({self.skipped:,} reused, {computed:,} computed)"
        text += f" in {seconds:.1f} s"
        if self.total and computed > 0 and seconds > 0:
            share = computed / self.total
            figures = []
            if self.rows:
                figures.append(f"{share * self.rows / seconds:,.0f} rows/s")
            if self.nbytes:
                figures.append(f"{format_bytes(int(share * self.nbytes / seconds))}/s")
            if figures:
                text += f" ({', '.join(figures)})"
        return text

    def _draw(self, *, force: bool = False) -> None:
        with self._lock:
            if self._display is None or self._closed:
                return
            now = time.perf_counter()
            # A widget update is a message to the browser: at most 10 redraws a second.
            if not force and now - self._drawn_at < 0.1 and self.done < (self.total or 0):
                return
            self._drawn_at = now
            try:
                self._display.draw(self.done, self.total, self._status())
            except Exception as exc:  # e.g. a widget whose kernel comm went away: stop drawing, carry on
                log.debug("progress bar of %s stopped: %s", self.title, exc)
                self._display = None


def _si(value: float) -> str:
    """1234567 -> '1.2M' (the rate in a bar)."""
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{suffix}"
    return f"{value:.0f}"


def _clock(seconds: float) -> str:
    """42 -> '0:42', 3723 -> '1:02:03'."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def compute(graph: Any, progress: Progress, *, prefix: str | None = None, along: Sequence[Any] = ()) -> Any:
    """``dask.compute(graph)[0]`` on the active scheduler, advancing ``progress`` as tasks finish."""
    import dask  # lazy: dask
    from dask.utils import key_split  # lazy: dask

    keys = set(graph.__dask_graph__())
    if prefix is not None and any(key_split(k) == prefix for k in keys):
        keys = {k for k in keys if key_split(k) == prefix}
    else:
        prefix = None
        if progress.unit == "blocks":
            progress.unit = "tasks"  # what is counted now
    if progress.total is None:
        progress.set_total(len(keys))
    client = active_client()
    if client is None:
        from dask.callbacks import Callback  # lazy: dask

        def start(dsk: Any) -> None:
            # Counting every task: those that run are the optimized graph's (fused, renamed),
            # which this first start after entering the callback sees.
            if prefix is None and not started:
                started.append(True)
                keys.clear()
                keys.update(dsk)
                progress.set_total(len(keys))

        def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if key in keys:  # the callback sees every computation of this process: count ours only
                progress.advance()

        started: list[bool] = []
        bar: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if progress.dask_display:  # dask's own display around the local computation
            from dask.diagnostics import ProgressBar  # lazy: dask

            bar = ProgressBar()
        with Callback(start=start, posttask=posttask), bar:
            result, *alongside = dask.compute(graph, *along, scheduler=local_scheduler())
        progress.update(progress.total or 0)
        return (result, alongside) if along else result
    if along:
        raise ValueError("compute(along=...) computes other collections with the graph on a local scheduler only")
    return _compute_distributed(client, graph, progress, keys)


def _compute_distributed(client: Any, graph: Any, progress: Progress, watched: set[Any]) -> Any:
    """Submit ``graph`` once, with futures on its ``watched`` keys; advance ``progress`` as they finish."""
    # The futures of the watched keys (a pass's chunk tasks) are released as soon as they finish, so their
    # states live no longer than the merges need them.
    from dask.delayed import Delayed  # lazy: dask
    from distributed import as_completed  # lazy: distributed

    if not isinstance(graph, Delayed):  # one key only: the bar jumps at the end
        result = client.compute(graph).result()
        progress.update(progress.total or 0)
        return result
    futures = client.get(graph.__dask_graph__(), [graph.key, *watched], sync=False)
    result, blocks = futures[0], futures[1:]
    if progress.dask_display:
        from distributed import progress as distributed_progress  # lazy: distributed

        # distributed's own bar on these futures: a widget in Jupyter, a text bar in a terminal
        # (which returns when they are done). Chunk futures are released only once they finished.
        distributed_progress(futures)
    try:
        for future in as_completed(blocks):
            if future.status == "error":
                break  # result() raises it
            progress.advance()
            future.release()
        value = result.result()
        result.release()  # at once: the client's reference would otherwise go with the garbage
        return value
    except BaseException:
        client.cancel(futures)
        raise

