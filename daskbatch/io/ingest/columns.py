"""The 1-D arrays ingested beside ``X``: labels and masks, by output name and key in each source.

``label_key="y"`` is the one label of earlier versions, written as ``y``;
``labels=`` and ``masks=`` add any number of named arrays.  Each is given as
a key (written under the same name) or a mapping of output name to key, so a
source key that would be an awkward array name can be renamed.  Every array
has one value per row of ``X``, shares its row chunks and its checksum codec,
and is written by the same task as the ``X`` chunk it belongs to, so a resume
continues all of them together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Column", "ColumnsArg", "columns_of"]

Role = Literal["label", "mask"]
#: What ``labels=`` and ``masks=`` take: one key, keys, or output name -> key.
ColumnsArg = str | Iterable[str] | Mapping[str, str] | None
#: Array names a user may give: the store's own files (``zarr.json``, the
#: ingest manifest and log, all ``daskbatch-*``) are never overwritten by one.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
#: Dtype kinds each role accepts (numpy ``dtype.kind``).
DTYPE_KINDS: dict[str, str] = {"label": "biuf", "mask": "biu"}


@dataclass(frozen=True)
class Column:
    """A 1-D array with one value per row of ``X``: its output name, key in each source and role."""

    name: str
    key: str
    role: Role


def _pairs(arg: ColumnsArg, what: str) -> list[tuple[str, str]]:
    """(output name, source key) pairs of one ``labels=``/``masks=`` argument."""
    if arg is None:
        return []
    if isinstance(arg, str):
        return [(arg, arg)]
    if isinstance(arg, Mapping):
        items = list(arg.items())
    else:
        items = [(k, k) for k in arg]
    for name, key in items:
        if not isinstance(name, str) or not isinstance(key, str):
            raise TypeError(f"{what} takes array names (str), got {name!r}: {key!r}")
    return items


def columns_of(label_key: str | None, labels: ColumnsArg, masks: ColumnsArg) -> tuple[Column, ...]:
    """Validate the label and mask arguments of :func:`~daskbatch.io.ingest.ingest`.

    Parameters
    ----------
    label_key : str, optional
        Key of the one label written as ``y`` (first in the result).
    labels, masks : str, iterable of str, or mapping of str to str, optional
        Keys (each written under its own name) or output name -> key.

    Returns
    -------
    tuple of Column
        In the order given: ``y`` first, then the labels, then the masks.

    Raises
    ------
    ValueError
        An output name that is not a plain array name, or one given twice.
    """
    given: list[tuple[Column, str]] = []
    if label_key is not None:
        given.append((Column("y", label_key, "label"), f"label_key={label_key!r}"))
    given += [(Column(n, k, "label"), f"labels[{n!r}]") for n, k in _pairs(labels, "labels")]
    given += [(Column(n, k, "mask"), f"masks[{n!r}]") for n, k in _pairs(masks, "masks")]
    seen = {"X": "the samples x features array"}
    for c, origin in given:
        if not _NAME.fullmatch(c.name) or c.name.startswith(("daskbatch-", "__")) or c.name == "zarr.json":
            raise ValueError(
                f"{c.role} name {c.name!r} is not a plain array name: use letters, digits, '_', '-' "
                "and '.', not starting with '.', '__' or 'daskbatch-' (a mapping renames it: "
                f"{{'new_name': {c.key!r}}})"
            )
        if not c.key:
            raise ValueError(f"{c.role} {c.name!r} has an empty source key")
        if c.name in seen:
            raise ValueError(f"output array {c.name!r} is named twice: by {seen[c.name]} and by {origin}")
        seen[c.name] = origin
    return tuple(c for c, _ in given)
