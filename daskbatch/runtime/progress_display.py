"""Where a :class:`~daskbatch.runtime.progress.Progress` bar is drawn: an ipywidgets bar in Jupyter, a redrawn line on a terminal."""

from __future__ import annotations

import contextlib
import html
import shutil
import sys
from collections.abc import Iterator
from typing import TextIO

__all__ = ["Display", "display_for", "in_jupyter", "line_cleared"]

# Erase the terminal line and return to its start.
_CLEAR = "\r\x1b[2K"


def in_jupyter() -> bool:
    """Tell whether this runs inside an IPython kernel (Jupyter, VS Code notebooks), not a terminal IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def display_for(title: str, total: int | None) -> Display | None:
    """Make the bar for where this process shows things."""
    if in_jupyter():
        try:
            return _Widget(title, total)
        except ImportError:  # no ipywidgets: Jupyter renders a carriage return on stderr as well
            return _Terminal(plain=True)
    stream = sys.stderr
    if stream is not None and stream.isatty():
        return _Terminal()
    return None


class _Widget:
    """An ipywidgets bar with the title before it and the counts after it, displayed at once."""

    def __init__(self, title: str, total: int | None) -> None:
        from IPython.display import display
        from ipywidgets import HTML, HBox, IntProgress, Layout

        self.label = HTML(f"<b>{html.escape(title)}</b>")
        self.bar = IntProgress(min=0, max=max(total or 1, 1), value=0, layout=Layout(width="40%"))
        self.text = HTML("")
        self.box = HBox([self.label, self.bar, self.text])
        display(self.box)

    def set_total(self, total: int) -> None:
        self.bar.max = max(total, 1)

    def draw(self, done: int, status: str) -> None:
        self.bar.value = min(done, self.bar.max)
        # The status starts with the title, which the label shows already.
        self.text.value = html.escape(status.split("  ", 1)[-1])

    def close(self, status: str, *, ok: bool) -> None:
        if ok:
            self.bar.value = self.bar.max
        self.bar.bar_style = "success" if ok else "danger"
        self.text.value = html.escape(status.split("  ", 1)[-1])


_active_line: list[_Terminal] = []  # the terminal bar drawn now, if any (log lines clear it first)


class _Terminal:
    """One line on stderr, redrawn in place (``\\r`` and erase-line), ended with a newline when closed."""

    def __init__(self, *, plain: bool = False) -> None:
        self.plain = plain  # Jupyter without ipywidgets: \r only, no escape sequences
        self.text = ""
        _active_line[:] = [self]

    def set_total(self, total: int) -> None:
        """A line shows no total to grow to."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr  # looked up each time: tests and click swap it

    def _fit(self, text: str) -> str:
        width = shutil.get_terminal_size((100, 24)).columns
        return text if len(text) < width else text[: max(width - 2, 10)] + "…"

    def draw(self, done: int, status: str) -> None:
        self.text = self._fit(status)
        self._write(self.text)

    def clear(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.stream.write("\r" if self.plain else _CLEAR)
            self.stream.flush()

    def _write(self, text: str, end: str = "") -> None:
        with contextlib.suppress(ValueError, OSError):  # a closed stream must not fail the computation
            self.stream.write(("\r" if self.plain else _CLEAR) + text + end)
            self.stream.flush()

    def close(self, status: str, *, ok: bool) -> None:
        self._write(self._fit(status), end="\n")
        if _active_line and _active_line[0] is self:
            _active_line.clear()


@contextlib.contextmanager
def line_cleared() -> Iterator[None]:
    """Erase the terminal bar for the duration of the block (a log line is written there), then redraw it."""
    bars = list(_active_line)
    for bar in bars:
        bar.clear()
    try:
        yield
    finally:
        for bar in bars:
            if _active_line and _active_line[0] is bar:
                bar._write(bar.text)


#: A bar, drawn with ``draw(done, status)`` and finished with ``close(status, ok=...)``.
Display = _Terminal | _Widget
