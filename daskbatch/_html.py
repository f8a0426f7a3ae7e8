"""Small HTML building blocks shared by the notebook reprs (Summary, Plan, Dataset)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["details", "escape", "key_value_table", "repr_block", "table", "warning_list"]

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
