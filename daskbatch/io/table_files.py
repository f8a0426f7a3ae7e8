"""Where a table's files are: the Parquet and Arrow IPC files of a path or fsspec URL, in natural order.

Also tells a table from a Zarr store, and refuses a missing path, a text table or a URL whose package is absent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from daskbatch.io.outputs import check_url

__all__ = ["IPC_SUFFIXES", "TABLE_SUFFIXES", "TEXT_SUFFIXES", "Files", "find_files", "is_table_path",
           "refuse_unreadable_path"]

#: File suffixes read as tables; the last three are Arrow IPC (Feather v2) files.
TABLE_SUFFIXES = (".parquet", ".pq", ".parq", ".arrow", ".feather", ".ipc")
#: The Arrow IPC (Feather v2) suffixes among them.
IPC_SUFFIXES = (".arrow", ".feather", ".ipc")
#: Text tables, named in the refusal of one (they carry no types and no row groups).
TEXT_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz")


def is_table_path(x: Any) -> bool:  # numpydoc ignore=PR01,RT01
    """Whether ``x`` is the path or URL of a table file, or of a directory of them that is not a Zarr store."""
    where = os.fspath(x) if isinstance(x, str | os.PathLike) else None
    if not isinstance(where, str) or where.rstrip("/").lower().endswith(TABLE_SUFFIXES):
        return isinstance(where, str)
    try:  # one listing; a URL only when it ends with "/" (a Zarr store's URL mostly does not)
        if "://" in where and where.endswith("/"):
            import fsspec  # lazy: fsspec

            fs, root = fsspec.core.url_to_fs(where)
            names = [os.path.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
        else:
            names = os.listdir(where) if "://" not in where and os.path.isdir(where) else []
    except (OSError, ValueError, ImportError):
        return False  # not ours to judge: the Zarr reader names what is wrong
    zarr = {"zarr.json", ".zarray", ".zgroup"} & set(names)
    return not zarr and any(_is_table_name(n) for n in names)


def refuse_unreadable_path(where: Any) -> None:  # numpydoc ignore=PR01
    """Refuse a missing local path, a text table, or a URL whose protocol's package is missing, in one line."""
    if not isinstance(where, str):
        return
    if "://" in where:
        check_url(where)
    elif "::" not in where and not os.path.exists(where):
        raise FileNotFoundError(f"no such file or directory: {where!r}")
    if where.lower().endswith(TEXT_SUFFIXES) and os.path.isfile(where):
        raise ValueError(
            f"{where!r} is a text table, which daskbatch does not read (no types, no row groups): convert it to "
            "Parquet once, e.g. pyarrow.parquet.write_table(pyarrow.csv.read_csv(path), 'data.parquet'), and describe that"
        )


def _is_table_name(name: str) -> bool:
    """A table file's name: its suffix, and not a hidden or bookkeeping file (``_SUCCESS``, ``_metadata``)."""
    return name.lower().endswith(TABLE_SUFFIXES) and not name.startswith(("_", "."))


def natural_key(path: str) -> list[Any]:
    """Sort key with numbers compared as numbers (part-2 before part-10)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


@dataclass(frozen=True)
class Files:
    """Where the files are: their filesystem (None: local) and paths, in row order."""

    fs: Any
    paths: tuple[str, ...]

    @contextmanager
    def open(self, i: int) -> Any:
        """File ``i`` as pyarrow reads it: a memory map locally, an fsspec file elsewhere."""
        import pyarrow as pa  # lazy: pyarrow

        if self.fs is None:
            with pa.memory_map(self.paths[i], "r") as source:
                yield source
        else:
            with self.fs.open(self.paths[i], "rb") as source:
                yield source

    def is_ipc(self, i: int) -> bool:
        """Whether file ``i`` is Arrow IPC (else Parquet)."""
        return self.paths[i].lower().endswith(IPC_SUFFIXES)


def find_files(where: str, storage_options: Mapping[str, Any] | None) -> Files:
    """The table files at ``where`` (a file, a directory searched recursively, or a URL of either)."""
    if "://" in where or "::" in where:
        import fsspec  # lazy: fsspec

        check_url(where)
        fs, root = fsspec.core.url_to_fs(where, **dict(storage_options or {}))
        if not fs.exists(root):
            raise FileNotFoundError(f"no such file or directory: {where!r}")
        found = [root]
        if fs.isdir(root):
            found = [p for p in fs.find(root) if _is_table_name(os.path.basename(p))]
    else:
        if not os.path.exists(where):
            raise FileNotFoundError(f"no such file or directory: {where!r}")
        fs, found = None, [where]
        if os.path.isdir(where):
            found = []
            for d, subdirs, names in os.walk(where):
                subdirs[:] = [
                    s for s in subdirs if not s.startswith(("_", "."))
                ]  # _temporary, .hidden
                found += [os.path.join(d, n) for n in names if _is_table_name(n)]
    if not found:
        raise FileNotFoundError(f"{where!r} holds no table files ({', '.join(TABLE_SUFFIXES)})")
    return Files(fs, tuple(sorted(found, key=natural_key)))
