"""The output store of an ingest: its manifest, the log of finished chunks, and the writer of each chunk.

Two files live inside the output store, next to ``zarr.json`` (zarr ignores them):
``daskbatch-ingest.json``, written once before any chunk (the scan, the options
and the scan checksum), and ``daskbatch-ingest-done.log``, one output chunk index
per line, appended by the single driver thread after that chunk was written
completely (a torn last line is ignored). The group attribute
``daskbatch_ingest`` carries ``complete``, set only after every chunk is logged.

Pass 2 runs one :class:`ChunkWriter` task per output chunk, and each task writes
its whole chunk once, so no two writers touch one Zarr chunk however batch
boundaries fall; the source rows are read by each file's reader
(:data:`~daskbatch.io.readers.FILE_READERS`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.ingest.scan import Scan
from daskbatch.io.readers import FILE_READERS

MANIFEST_FILE = "daskbatch-ingest.json"
DONE_FILE = "daskbatch-ingest-done.log"
VERSION = 1


def write_manifest(out: str, doc: dict[str, Any], *, name: str = MANIFEST_FILE) -> None:
    """Write the manifest atomically (temp file + rename)."""
    path = os.path.join(out, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"version": VERSION, **doc}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(out: str, *, name: str = MANIFEST_FILE) -> dict[str, Any] | None:
    """Read the manifest of ``out``."""
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None


def read_done(out: str, *, name: str = DONE_FILE) -> set[int]:
    """Read the indices of output chunks recorded as complete."""
    try:
        with open(os.path.join(out, name)) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return set()
    # Only newline-terminated lines count: the last element is '' or a torn write.
    return {int(line) for line in lines[:-1] if line.strip().isdigit()}


class DoneLog:
    """Append-only record of finished chunks (used by the driver thread only)."""

    def __init__(self, out: str, *, name: str = DONE_FILE) -> None:
        self._f: IO[str] = open(os.path.join(out, name), "a")  # noqa: SIM115 - closed in close()

    def add(self, index: int) -> None:
        """Record chunk ``index`` as finished (flushed at once)."""
        self._f.write(f"{index}\n")
        self._f.flush()

    def close(self) -> None:
        """Close the log file."""
        self._f.close()


def describe_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between a stored manifest and a new run's."""
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


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, stop)`` of source ``index`` go to output rows from ``dest``."""

    index: int
    start: int
    stop: int
    dest: int


def pieces(offsets: np.ndarray, chunk_rows: int, chunk: int) -> list[Piece]:
    """The slices of the sources that make up output chunk ``chunk``."""
    total = int(offsets[-1])
    lo, hi = chunk * chunk_rows, min((chunk + 1) * chunk_rows, total)
    first = int(np.searchsorted(offsets, lo, side="right")) - 1
    out = []
    i = first
    while i < len(offsets) - 1 and offsets[i] < hi:
        s0, s1 = int(offsets[i]), int(offsets[i + 1])
        a, b = max(lo, s0), min(hi, s1)
        if b > a:
            out.append(Piece(i, a - s0, b - s0, a - lo))
        i += 1
    return out


class ChunkWriter:
    """Reads source rows and writes whole output chunks."""

    def __init__(self, scan: Scan, x: Any, columns: dict[str, Any], chunk_rows: int) -> None:
        self.scan = scan
        self.x = x
        self.columns = columns
        self.chunk_rows = chunk_rows
        self.offsets = scan.offsets

    def write(self, chunk: int) -> int:
        """Assemble and write output chunk ``chunk``."""
        ps = pieces(self.offsets, self.chunk_rows, chunk)
        rows = sum(p.stop - p.start for p in ps)
        lo = chunk * self.chunk_rows
        outputs = self.scan.outputs()
        xbuf = np.empty((rows, self.scan.features), dtype=self.scan.dtype)
        bufs = [np.empty(rows, dtype=dtype) for _, _, dtype in outputs]
        for p in ps:
            src = self.scan.sources[p.index]
            parts = ((src.label,) if src.label is not None else ()) + src.extra
            dest = slice(p.dest, p.dest + p.stop - p.start)
            try:
                # Assignment casts into the buffer; no temporary for mapped sources.
                reader = FILE_READERS[f".{src.kind}"]
                xbuf[dest] = reader.rows(src.path, src.x, self.scan.x_key or "X", p.start, p.stop)
                for buf, (_, key, _), part in zip(bufs, outputs, parts, strict=True):
                    buf[dest] = reader.rows(src.path, part, key, p.start, p.stop)
            except (OSError, ValueError, KeyError, EOFError) as exc:
                raise DataError(
                    f"cannot read rows {p.start}:{p.stop} of {src.path} (for output chunk {chunk}): "
                    f"{type(exc).__name__}: {exc}; was the file changed after the scan?"
                ) from exc
        # The chunk is logged as done only after every array's share of it is written.
        self.x[lo : lo + rows, :] = xbuf
        for buf, (name, _, _) in zip(bufs, outputs, strict=True):
            self.columns[name][lo : lo + rows] = buf
        return rows
