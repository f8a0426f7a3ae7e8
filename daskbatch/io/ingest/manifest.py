"""The ingest manifest: what an output store was made from, and which chunks are finished.

Two files live inside the output store, next to ``zarr.json`` (zarr ignores them):

``daskbatch-ingest.json``
    written once before any chunk: the scan (every source's path, size, mtime,
    shape, dtype), the options, and the scan checksum.
``daskbatch-ingest-done.log``
    one output chunk index per line, appended by the single driver thread after
    that chunk was written completely.  A torn last line is ignored.

The group attribute ``daskbatch_ingest`` carries ``complete``; it is set to
true only after every chunk is in the log.  :func:`daskbatch.open_dataset`
warns while it is false.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

__all__ = ["DoneLog", "describe_difference", "read_done", "read_manifest", "write_manifest"]

MANIFEST_FILE = "daskbatch-ingest.json"
DONE_FILE = "daskbatch-ingest-done.log"
VERSION = 1


def write_manifest(out: str, doc: dict[str, Any], *, name: str = MANIFEST_FILE) -> None:
    """Write the manifest atomically (temp file + rename).

    Parameters
    ----------
    out : str
        The output store.
    doc : dict
        The manifest, JSON-able.
    name : str, default MANIFEST_FILE
        File name in ``out``: other writers keep their own.
    """
    path = os.path.join(out, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"version": VERSION, **doc}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(out: str, *, name: str = MANIFEST_FILE) -> dict[str, Any] | None:
    """Read the manifest of ``out``.

    Parameters
    ----------
    out : str
        The output store.
    name : str, default MANIFEST_FILE
        File name in ``out``.

    Returns
    -------
    dict or None
        The manifest, or None if it has none (not an ingest output).
    """
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None


def read_done(out: str, *, name: str = DONE_FILE) -> set[int]:
    """Read the indices of output chunks recorded as complete.

    Parameters
    ----------
    out : str
        The output store.
    name : str, default DONE_FILE
        File name of the done-log in ``out``.

    Returns
    -------
    set of int
        Chunk indices.
    """
    try:
        with open(os.path.join(out, name)) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return set()
    # Only newline-terminated lines count: the last element is '' or a torn write.
    return {int(line) for line in lines[:-1] if line.strip().isdigit()}


class DoneLog:
    """Append-only record of finished chunks (used by the driver thread only).

    Parameters
    ----------
    out : str
        The output store.
    name : str, default DONE_FILE
        File name of the log in ``out``.
    """

    def __init__(self, out: str, *, name: str = DONE_FILE) -> None:
        self._f: IO[str] = open(os.path.join(out, name), "a")  # noqa: SIM115 - closed in close()

    def add(self, index: int) -> None:
        """Record chunk ``index`` as finished (flushed at once).

        Parameters
        ----------
        index : int
            The chunk index.
        """
        self._f.write(f"{index}\n")
        self._f.flush()

    def close(self) -> None:
        """Close the log file."""
        self._f.close()


def describe_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between a stored manifest and a new run's.

    Parameters
    ----------
    old, new : dict
        Manifest documents (``options`` and ``scan`` keys).

    Returns
    -------
    list of str
        Empty when the two describe the same ingest.
    """
    out = []
    for key in sorted(set(old.get("options", {})) | set(new.get("options", {}))):
        a, b = old.get("options", {}).get(key), new.get("options", {}).get(key)
        if a != b:
            out.append(f"option {key}: {a!r} in the store, {b!r} now")
    old_scan, new_scan = old.get("scan", {}), new.get("scan", {})
    for key in ("x_key", "label_key", "dtype", "label_dtype"):
        if old_scan.get(key) != new_scan.get(key):
            out.append(f"{key}: {old_scan.get(key)!r} in the store, {new_scan.get(key)!r} now")
    out += _array_differences(old_scan.get("arrays", []), new_scan.get("arrays", []))
    # A source's labels and masks (shapes, dtypes) are compared when the set of them is the same.
    same_arrays = old_scan.get("arrays", []) == new_scan.get("arrays", [])
    fields = ("size", "mtime_ns", "x", "label") + (("arrays",) if same_arrays else ())
    olds = {s["path"]: s for s in old_scan.get("sources", [])}
    news = {s["path"]: s for s in new_scan.get("sources", [])}
    added = [p for p in news if p not in olds]
    removed = [p for p in olds if p not in news]
    if added:
        out.append(f"{len(added)} new source file(s), e.g. {added[0]}")
    if removed:
        out.append(f"{len(removed)} source file(s) no longer given, e.g. {removed[0]}")
    for path, s in news.items():
        o = olds.get(path)
        if o is None:
            continue
        changed = [k for k in fields if o.get(k) != s.get(k)]
        if changed:
            out.append(f"{path} changed since the first run ({', '.join(changed)})")
    if not out and [s["path"] for s in old_scan.get("sources", [])] != list(news):
        out.append("the same files in a different order")
    return out


def _array_differences(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """Labels and masks given in one run and not the other, or with another key, role or dtype."""
    olds, news = {a["name"]: a for a in old}, {a["name"]: a for a in new}
    out = []
    for name in sorted(set(olds) | set(news)):
        a, b = olds.get(name), news.get(name)
        if a is None or b is None:
            role = (a or b or {}).get("role", "array")
            out.append(
                f"{role} {name!r}: {'absent' if a is None else 'given'} in the store, "
                f"{'absent' if b is None else 'given'} now"
            )
        elif a != b:
            what = ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            out.append(f"{a.get('role', 'array')} {name!r} changed ({what})")
    if not out and list(olds) != list(news):
        out.append("the same labels and masks in a different order")
    return out
