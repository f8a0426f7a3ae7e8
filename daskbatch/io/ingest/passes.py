"""The two passes of ingest over the batch files."""

from __future__ import annotations

import glob
import os
import re
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.readers import Reader, ZarrReader, open_reader, reader_class
from daskbatch.io.rowstore import RegionWriter
from daskbatch.io.table_files import natural_key

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
    """The 1-D arrays asked for, ``y`` (of ``label_key``) first, then labels, then masks; ValueError for bad names."""
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

@dataclass(frozen=True)
class Source:
    """One batch file as scanned: its identity (size, mtime) and the readers of its arrays."""

    path: str
    size: int
    mtime_ns: int
    x: Reader
    label: Reader | None = None
    #: One reader per column of the scan (``labels=``, ``masks=``), in its order.
    extra: tuple[Reader, ...] = ()

    @property
    def rows(self) -> int:
        """The source's rows."""
        return int(self.x.shape[0])

    @property
    def features(self) -> int:
        """The source's features."""
        return int(self.x.shape[1])

    def identity(self) -> dict[str, Any]:
        """The JSON-able facts a resumed run must find unchanged (a changed label or mask changes size or mtime)."""
        label = [list(self.label.shape), np.dtype(self.label.dtype).str] if self.label else None
        return {"size": self.size, "mtime_ns": self.mtime_ns,
                "x": [list(self.x.shape), np.dtype(self.x.dtype).str], "label": label}


def read_source(path: str, x_key: str | None, wanted: Sequence[tuple[str, str]], has_label: bool) -> Source:
    """One batch file's identity and the readers of x and the ``wanted`` (key, role) arrays; ValueError if bad."""
    reader = reader_class(path)
    if reader is ZarrReader and not _is_zarr_store(path):  # the readers' last word on a path: not one ingest reads
        raise ValueError("unknown file type (expected .npy, .npz, .h5/.hdf5, .parquet, .arrow/.feather or a Zarr store)")
    st = os.stat(path)
    if reader is not ZarrReader and st.st_size == 0:
        raise ValueError("empty file (0 bytes)")
    if reader.single and wanted:
        raise ValueError(
            ".npy files hold one array; labels and masks (--label-key, --label, --mask) "
            "need .npz, HDF5 or Zarr sources"
        )
    # A table's x is its numeric columns less those read as labels or masks.
    x = open_reader(path, key=x_key or "X", what="x", exclude=tuple(key for key, _ in wanted))
    parts = [open_reader(path, key=key, what=role) for key, role in wanted]
    if len(x.shape) != 2:
        raise ValueError(f"x has shape {x.shape}; expected 2-D (rows, features)")
    for (key, role), p in zip(wanted, parts, strict=True):
        if p.shape != (x.shape[0],):
            raise ValueError(
                f"{role} {key!r} has shape {p.shape} but x has {x.shape[0]} rows; expected ({x.shape[0]},)"
            )
    label = parts[0] if has_label else None
    extra = tuple(parts[1:] if has_label else parts)
    return Source(path, int(st.st_size), int(st.st_mtime_ns), x, label, extra)


def _is_zarr_store(path: str) -> bool:
    """Whether ``path`` names a Zarr store: a ``.zarr`` name, or a directory with Zarr metadata."""
    return path.rstrip("/").lower().endswith(".zarr") or os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, m)) for m in ("zarr.json", ".zarray", ".zgroup"))


#: Shown per kind of problem before "... and N more" (the count is always exact).
MAX_LISTED = 20


@dataclass(frozen=True)
class Scan:
    """Validated sources plus the output layout they imply."""

    sources: tuple[Source, ...]
    x_key: str | None
    label_key: str | None
    dtype: str
    label_dtype: str | None
    #: The arrays of ``labels=`` and ``masks=`` (the one of ``label_key`` is ``label_key``).
    columns: tuple[Column, ...] = ()
    #: Output dtype of each column.
    column_dtypes: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        """Count the rows of all the sources."""
        return sum(s.rows for s in self.sources)

    @property
    def features(self) -> int:
        """Count the features (the same in every source)."""
        return self.sources[0].features

    @property
    def offsets(self) -> np.ndarray:
        """Give the start row of each source in the output."""
        return np.concatenate([[0], np.cumsum([s.rows for s in self.sources])]).astype(np.int64)

    def outputs(self) -> list[tuple[str, str, str]]:
        """List every 1-D output array: the label of ``label_key`` (``y``) first, then the columns."""
        out = [("y", self.label_key, str(self.label_dtype))] if self.label_key else []
        return out + [(c.name, c.key, d) for c, d in zip(self.columns, self.column_dtypes, strict=True)]


def expand_sources(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """Expand globs (natural sort order within each pattern) and keep the given order across them."""
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    out: list[str] = []
    problems = []
    for item in items:
        text = os.fspath(item)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True), key=natural_key)
            if not matches:
                problems.append(f"{text}: no files match this pattern")
            out.extend(matches)
        elif os.path.exists(text):
            out.append(text)
        else:
            problems.append(f"{text}: no such file")
    if problems:
        raise DataError(_listing("source(s) not found", problems))
    unique = list(dict.fromkeys(os.path.abspath(p) for p in out))  # each file once, in the given order
    if not unique:
        raise DataError("no source files given")
    return unique


def _listing(title: str, problems: Sequence[str]) -> str:
    if len(problems) == 1:  # one problem, one line
        return f"1 {title}: {problems[0]}"
    lines = list(problems[:MAX_LISTED])
    if len(problems) > MAX_LISTED:
        lines.append(f"... and {len(problems) - MAX_LISTED} more")
    return f"{len(problems)} {title}:\n  " + "\n  ".join(lines)


def scan_sources(
    paths: Sequence[str],
    *,
    x_key: str | None = None,
    label_key: str | None = None,
    dtype: str | np.dtype | None = None,
    columns: Sequence[Column] = (),
) -> Scan:
    """Read every source's metadata and validate them together."""
    problems: list[str] = []
    sources: list[Source] = []
    wanted = ([(label_key, "label")] if label_key else []) + [(c.key, c.role) for c in columns]
    for path in paths:
        try:
            sources.append(read_source(path, x_key, wanted, label_key is not None))
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, struct.error) as exc:
            problems.append(f"{path}: {exc}")
        except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file, named
            problems.append(f"{path}: cannot read ({type(exc).__name__}: {exc})")
    if sources:
        counts = Counter(s.features for s in sources)
        common, n_common = counts.most_common(1)[0]
        for s in sources:
            if s.features != common:
                problems.append(
                    f"{s.path}: has {s.features} features; {n_common} other file(s) have {common}"
                )
    target = np.dtype(dtype) if dtype is not None else None
    if sources and target is None:
        by_dtype: dict[str, list[str]] = {}
        for s in sources:
            by_dtype.setdefault(np.dtype(s.x.dtype).name, []).append(s.path)
        if len(by_dtype) > 1:
            parts = [f"{d} ({len(v)} file(s), e.g. {v[0]})" for d, v in sorted(by_dtype.items())]
            problems.append(
                "mixed dtypes: " + "; ".join(parts) + "; pass --dtype/dtype= to cast them all"
            )
        else:
            target = np.dtype(sources[0].x.dtype).newbyteorder("=")
    if target is not None:
        if target.kind not in "biuf":
            raise DataError(f"output dtype must be numeric (bool, int, float), got {target}")
        for s in sources:
            src = np.dtype(s.x.dtype)
            if not np.can_cast(src, target, casting="same_kind"):
                problems.append(
                    f"{s.path}: dtype {src} cannot be cast to {target} (same-kind casting)"
                )
    label_dtype = None
    if label_key and sources:
        label_dtype = _column_dtype([(s.path, s.label) for s in sources], f"label {label_key!r}", "label", problems)
    column_dtypes = tuple(
        _column_dtype([(s.path, s.extra[i]) for s in sources], f"{c.role} {c.key!r}", c.role, problems)
        for i, c in enumerate(columns)
    ) if sources else ()
    if problems:
        raise DataError(_listing("bad source file(s); nothing was written", problems))
    scan = Scan(tuple(sources), x_key, label_key, target.str, label_dtype,  # type: ignore[union-attr]
                tuple(columns), column_dtypes)  # type: ignore[arg-type]
    if scan.rows == 0:
        raise DataError(f"the {len(sources)} source file(s) hold no rows")
    return scan


def _column_dtype(parts: list[tuple[str, Reader | None]], what: str, role: str, problems: list[str]) -> str | None:
    """The output dtype of one 1-D array over all sources (their common type); bad ones go to ``problems``."""
    present = [(path, np.dtype(p.dtype)) for path, p in parts if p is not None]
    bad = [(path, d) for path, d in present if d.kind not in DTYPE_KINDS[role]]
    need = "numeric" if role == "label" else "boolean or integer"
    problems.extend(f"{path}: {what} has dtype {d}; a {role} must be {need}" for path, d in bad)
    if not present or bad:
        return None
    return np.result_type(*(d for _, d in present)).newbyteorder("=").str


def resume_items(scan: Scan, options: dict[str, Any]) -> dict[str, Any]:
    """What a resumed ingest must find unchanged, keyed by what a refusal names: options, keys, arrays, each file."""
    columns = zip(scan.columns, scan.column_dtypes, strict=True)
    return {
        **{f"option {key}": value for key, value in options.items()},
        "x_key": scan.x_key, "label_key": scan.label_key, "dtype": scan.dtype, "label_dtype": scan.label_dtype,
        # Positions: the same files or arrays in another order are another output.
        **{f"{c.role} {c.name}": {"key": c.key, "dtype": d, "position": i} for i, (c, d) in enumerate(columns)},
        **{f"source {s.path}": {**s.identity(), "position": i} for i, s in enumerate(scan.sources)},
    }


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


def write_chunk(scan: Scan, writer: RegionWriter, chunk: int) -> int:
    """Read the source rows of output chunk ``chunk`` and write it whole; the rows written."""
    ps = pieces(scan.offsets, writer.chunk_rows, chunk)
    rows = sum(p.stop - p.start for p in ps)
    outputs = scan.outputs()
    xbuf = np.empty((rows, scan.features), dtype=scan.dtype)
    bufs = [np.empty(rows, dtype=dtype) for _, _, dtype in outputs]
    for p in ps:
        src = scan.sources[p.index]
        parts = ((src.label,) if src.label is not None else ()) + src.extra
        dest = slice(p.dest, p.dest + p.stop - p.start)
        try:
            # Assignment casts into the buffer; no temporary for mapped sources.
            xbuf[dest] = src.x.read(p.start, p.stop)
            for buf, part in zip(bufs, parts, strict=True):
                buf[dest] = part.read(p.start, p.stop)
        except (OSError, ValueError, KeyError, EOFError) as exc:
            raise DataError(
                f"cannot read rows {p.start}:{p.stop} of {src.path} (for output chunk {chunk}): "
                f"{type(exc).__name__}: {exc}; was the file changed after the scan?"
            ) from exc
    # The chunk is logged as done only after every array's share of it is written.
    writer.write(chunk, {"X": xbuf, **{name: buf for buf, (name, _, _) in zip(bufs, outputs, strict=True)}})
    return rows
