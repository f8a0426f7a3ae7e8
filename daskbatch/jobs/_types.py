"""Values checked against type hints (``int | None``, ``Literal[...]``, ``list[float]``), and types in words for errors."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import yaml

from daskbatch._arguments import short_repr
from daskbatch.jobs.schema import JobConfigError


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


#: Largest file read (a job file is a few hundred bytes; dask settings add little).
MAX_FILE_BYTES = 1 << 20
#: Most nested mappings and lists, aliases expanded (a job nests 4 deep, dask settings about 6).
MAX_DEPTH = 50
#: Most values (keys, scalars, mappings, lists), each alias counted as what it names.
MAX_VALUES = 100_000

_OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_bounded(data: bytes, where: str) -> Any:
    """Build the value of a YAML file's bytes, refusing what exceeds the bounds."""
    if len(data) > MAX_FILE_BYTES:
        raise JobConfigError(f"{where}: is larger than {MAX_FILE_BYTES} bytes, far more than a configuration file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobConfigError(f"{where}: is not UTF-8 text (byte {exc.start})") from None
    try:
        _check_shape(text, where)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that also refuses repeated keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow: no line, a position
            at, problem = f" (character {exc.position})", f"{exc.reason} {exc.character!r}"
        else:
            problem = getattr(exc, "problem", None) or str(exc)
        raise JobConfigError(f"{where}: not valid YAML{at}: {' '.join(str(problem).split())}") from None


def _check_shape(text: str, where: str) -> None:
    """Scan the events of ``text``: depth and number of values, each alias as what it names, no alias in itself."""
    named: dict[str, tuple[int, int]] = {}  # anchor -> (values, depth below it) of the node it names
    open_nodes: list[list[Any]] = []  # [values so far, depth below, anchor] of each mapping or list being read
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, _OPENING):
            if len(open_nodes) >= MAX_DEPTH:
                raise _too_deep(where, event)
            open_nodes.append([1, 1, event.anchor])
            continue
        if isinstance(event, _CLOSING):
            values, depth, anchor = open_nodes.pop()
            if anchor is not None:
                named[anchor] = (values, depth)
        elif isinstance(event, yaml.ScalarEvent):
            values, depth = 1, 0
            if event.anchor is not None:
                named[event.anchor] = (values, depth)
        elif isinstance(event, yaml.AliasEvent):
            if any(node[2] == event.anchor for node in open_nodes):
                raise JobConfigError(f"{where}: line {event.start_mark.line + 1}: the alias *{event.anchor} is "
                                     "inside the value it names (a value that contains itself)")
            values, depth = named.get(event.anchor, (1, 0))  # an undefined alias: the loader says so
            if len(open_nodes) + depth > MAX_DEPTH:
                raise _too_deep(where, event)
        else:
            continue
        if open_nodes:
            parent = open_nodes[-1]
            parent[0] += values
            parent[1] = max(parent[1], depth + 1)
            values = parent[0]
        if values > MAX_VALUES:
            raise JobConfigError(
                f"{where}: line {event.start_mark.line + 1}: more than {MAX_VALUES} values with its aliases "
                "expanded, far more than a configuration file holds"
            )


def _too_deep(where: str, event: Any) -> JobConfigError:
    """The error of a value nested deeper than :data:`MAX_DEPTH`."""
    return JobConfigError(f"{where}: line {event.start_mark.line + 1}: mappings and lists nested more than "
                          f"{MAX_DEPTH} deep (aliases expanded), far more than a configuration file holds")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives a key twice (the safe loader keeps the last)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        """Build a mapping, refusing a repeated key (keys merged in by ``<<`` may be overridden, as YAML says)."""
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the safe loader refuses it with its own words
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {describe_value(key)} is given twice", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]
