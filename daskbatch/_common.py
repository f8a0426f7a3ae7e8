"""Helpers every layer shares: type aliases, strict argument checks, user-attributed warnings, HTML pieces."""

from __future__ import annotations

import html
import numbers
import os
import reprlib
import sys
import warnings
from collections.abc import Iterable, Sequence
from types import FrameType
from typing import Any, Literal, TypeAlias, cast

from daskbatch.errors import GPUUnavailableError

#: Any array-API array: numpy, cupy, array_api_strict.
Array: TypeAlias = Any
#: An array-API namespace module, as returned by ``array_namespace``.
Namespace: TypeAlias = Any

#: Where blocks are computed, the one vocabulary of every ``device`` argument and ``--device``
#: option: the GPU when it pays (``"auto"``), the host, or the GPU (CuPy).
Device: TypeAlias = Literal["auto", "cpu", "gpu"]
#: The values of :data:`Device`, in order.
DEVICES: tuple[Device, ...] = ("auto", "cpu", "gpu")


class SamplesByFeatures:
    """Base of the opened inputs (:class:`~daskbatch.Dataset`, :class:`~daskbatch.Table`): the shape of ``x``."""

    x: Any

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the samples x features array: ``(samples, features)``."""
        return (int(self.x.shape[0]), int(self.x.shape[1]))


#: How to get a working GPU stack, for every message that asks for one.
GPU_INSTALL = "pip install 'daskbatch[gpu-cu12]' (CUDA 12 driver) or 'daskbatch[gpu-cu13]' (CUDA 13)"


def checked_device(device: Any) -> Device:
    """Validate a ``device`` argument against the one vocabulary, :data:`~daskbatch._common.Device`."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of 'auto', 'cpu', 'gpu'; got {device!r}")
    return cast(Device, device)


def strict_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int, refusing bools, non-integral floats and non-numbers."""
    # bool is an int subclass: True would silently mean 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "a bool" if isinstance(value, bool) else f"a {type(value).__name__}"
        raise TypeError(f"{name} must be an integer, got {value!r} ({kind})")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif float(value).is_integer():
        result = int(float(value))
    else:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {result}")
    return result


def gpu_module(what: str) -> Any:
    """CuPy, for ``device="gpu"``: the one check that every function taking ``device=`` makes."""
    try:
        import cupy  # lazy: cupy
    except ImportError as exc:
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy does not import ({exc}); {GPU_INSTALL}") from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # a driver or runtime problem: CuPy raises its own CUDARuntimeError types
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy sees no CUDA device ({exc}); {GPU_INSTALL}") from None
    if count < 1:
        raise GPUUnavailableError(f"{what}(device='gpu'): CuPy sees no CUDA device; {GPU_INSTALL}")
    return cupy


def plural(n: float, word: str, plural: str | None = None) -> str:
    """Write a count with its noun: ``1 chunk``, ``2 chunks``, ``1,000 chunks``, ``2.5 storage chunks`` (``plural`` default: ``word + "s"``)."""
    text = f"{n:,}" if isinstance(n, int) else f"{n:,.4g}"
    return f"{text} {word if n == 1 else (plural or word + 's')}"


def short_repr(value: Any, limit: int = 40) -> str:
    """Show a value in a message: its repr cut at ``limit`` characters, never built whole."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_repr() -> reprlib.Repr:
    """A repr that stops after a few items, levels and characters."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict, short.maxset = 3, 4, 4, 4, 4
    short.maxstring = short.maxother = short.maxlong = 40
    return short


_SHORT_REPR = _short_repr()


# Every frame under this directory is daskbatch's own; the first frame outside it is the caller's.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str | Warning, category: type[Warning] | None = None) -> None:
    """Issue a warning attributed to the first frame outside the daskbatch package."""
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=(_PACKAGE_DIR,))
        return
    # Python 3.11 has no skip_file_prefixes: count the frames inside the package instead.
    # stacklevel 2 is warn()'s caller; each daskbatch frame above it adds one.
    level = 2
    caller: FrameType | None = sys._getframe(1)
    while caller is not None and caller.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, caller = level + 1, caller.f_back
    warnings.warn(message, category, stacklevel=level)


#: Scoped to the wrapper class, so the reprs do not restyle the rest of the notebook.
STYLE = """<style>
.daskbatch-repr { font-size: 0.9em; line-height: 1.35; }
.daskbatch-repr .db-title { margin: 0.2em 0 0.4em 0; }
.daskbatch-repr .db-sub { opacity: 0.75; }
.daskbatch-repr table { border-collapse: collapse; margin: 0.2em 0 0.6em 0; }
.daskbatch-repr th, .daskbatch-repr td { padding: 0.15em 0.6em; border: none; }
.daskbatch-repr thead th { border-bottom: 1px solid rgba(128,128,128,0.5); text-align: right; }
.daskbatch-repr tbody th { text-align: left; font-weight: normal; font-family: monospace; }
.daskbatch-repr td.num { text-align: right; font-family: monospace; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
.daskbatch-repr td.txt { text-align: left; }
.daskbatch-repr tr.db-warn, .daskbatch-repr td.db-warn { background: rgba(255, 170, 0, 0.22); }
.daskbatch-repr td.db-bad { background: rgba(220, 40, 40, 0.22); }
.daskbatch-repr td.db-ok { background: rgba(40, 170, 80, 0.18); }
.daskbatch-repr .db-warnings { margin: 0.2em 0 0.5em 0; padding: 0.3em 0.6em; list-style: none;
  border-left: 3px solid rgba(255, 170, 0, 0.9); background: rgba(255, 170, 0, 0.10); }
.daskbatch-repr .db-muted { opacity: 0.55; }
.daskbatch-repr details > summary { cursor: pointer; }
</style>"""


def escape(text: object) -> str:
    """Escape ``text`` as HTML text (quotes included, since names end up in attributes too)."""
    return html.escape(str(text), quote=True)


def repr_block(title: str, *parts: str, subtitle: str = "") -> str:
    """Wrap one repr: the style, a bold ``title`` (already HTML) and the ``parts`` below it."""
    sub = f" <span class='db-sub'>{subtitle}</span>" if subtitle else ""
    return (
        f"<div class='daskbatch-repr'>{STYLE}<div class='db-title'><b>{title}</b>{sub}</div>"
        + "".join(parts)
        + "</div>"
    )


def warning_list(items: Iterable[str]) -> str:
    """Render a highlighted list of warnings; an empty string when there are none."""
    body = "".join(f"<li>&#9888; {item}</li>" for item in items)
    return f"<ul class='db-warnings'>{body}</ul>" if body else ""


def key_value_table(rows: Iterable[tuple[str, str] | tuple[str, str, str]]) -> str:
    """Render a table of two columns, key and value."""
    body = []
    for row in rows:
        key, value = row[0], row[1]
        cls = ("txt " + row[2]) if len(row) > 2 and row[2] else "txt"  # type: ignore[misc]
        body.append(f"<tr><th>{escape(key)}</th><td class='{cls}'>{escape(value)}</td></tr>")
    return f"<table><tbody>{''.join(body)}</tbody></table>"


def table(
    index_name: str,
    columns: Sequence[str],
    rows: Iterable[tuple[str, Sequence[str], Sequence[str], str]],
) -> str:
    """Render a table of already formatted cells."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for label, cells, classes, row_class in rows:
        tds = "".join(f"<td class='{c}'>{escape(v)}</td>" for v, c in zip(cells, classes, strict=True))
        attr = f" class='{row_class}'" if row_class else ""
        body.append(f"<tr{attr}><th>{escape(label)}</th>{tds}</tr>")
    return (
        f"<table><thead><tr><th style='text-align:left'>{escape(index_name)}</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def details(summary: str, body: str, *, open: bool = False) -> str:
    """Render a collapsible section."""
    return f"<details{' open' if open else ''}><summary>{escape(summary)}</summary>{body}</details>"
