"""Values checked against type hints (``int | None``, ``Literal[...]``, ``list[float]``), and types in words for errors."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from daskbatch._arguments import short_repr


def expected(tp: Any) -> str:
    """Say a type in words: 'an integer', "one of 'omit', 'raise'", 'a list of numbers or null'."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp)
        return f"a list of ({expected(item)})" if typing.get_origin(item) else f"a list of {plural(item)}"
    if origin is dict or tp is dict:
        return "a mapping"
    return {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, str(tp)
    )


def plural(tp: Any) -> str:
    """Say a type in words, plural: 'integers', 'numbers'."""
    return {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(tp, expected(tp))


def matches(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check ``value`` against the type hint ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, conv = matches(value, arg)
            if ok:
                return True, conv
        return False, value
    if origin is Literal:
        return value in typing.get_args(tp) and not isinstance(value, bool), value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return False, value
        (item,) = typing.get_args(tp)
        out = []
        for v in value:
            ok, conv = matches(v, item)
            if not ok:
                return False, value
            out.append(conv)
        return True, out
    if origin is dict or tp is dict:
        return isinstance(value, Mapping), dict(value) if isinstance(value, Mapping) else value
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    return isinstance(value, tp), value


def describe_value(value: Any) -> str:
    """Show a value as an error does: its repr (cut at 40 characters) and its type."""
    return f"{short_repr(value)} ({type(value).__name__})"  # never the whole repr: a file's value may be huge


def short_text(text: Any, limit: int = 60) -> str:
    """Cut a key or a name from a file to about ``limit`` characters for a message."""
    if not isinstance(text, str):
        return short_repr(text, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."
