"""Pass 1 of ingest: find the batch files and read their shapes, dtypes and keys, not their data.

Headers only: ``.npy`` through :mod:`numpy.lib.format`, ``.npz`` members
through their zip entries (an uncompressed member is located byte-exactly so
pass 2 can memory-map it), HDF5 through h5py dataset metadata, Zarr through
its array metadata.  Every problem is collected, so one run reports every bad
file by name before anything is written.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.lib import format as npformat

from daskbatch.errors import DataError
from daskbatch.io.ingest.columns import DTYPE_KINDS, Column

__all__ = ["Scan", "Source", "expand_sources", "scan_sources"]

KINDS = {".npy": "npy", ".npz": "npz", ".h5": "h5", ".hdf5": "h5", ".zarr": "zarr"}
#: Shown per kind of problem before "... and N more" (the count is always exact).
MAX_LISTED = 20


@dataclass(frozen=True)
class Part:
    """Where one array (x, a label or a mask) lives inside a source file."""

    shape: tuple[int, ...]
    dtype: str
    fortran: bool = False
    offset: int | None = None  # byte offset of raw data, for memory mapping (npy, stored npz)


@dataclass(frozen=True)
class Source:
    """One batch file as scanned: its identity (size, mtime) and its arrays' metadata."""

    path: str
    kind: str
    size: int
    mtime_ns: int
    x: Part
    label: Part | None = None
    #: One part per column of the scan (``labels=``, ``masks=``), in its order.
    extra: tuple[Part, ...] = ()

    @property
    def rows(self) -> int:
        """Count the source's rows.

        Returns
        -------
        int
            Rows.
        """
        return int(self.x.shape[0])

    @property
    def features(self) -> int:
        """Count the source's features.

        Returns
        -------
        int
            Features.
        """
        return int(self.x.shape[1])

    def identity(self) -> dict[str, Any]:
        """Give the JSON-able facts a resumed run must find unchanged.

        Returns
        -------
        dict
            Path, size, modification time, shapes and dtypes.
        """
        out = {
            "path": self.path,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "x": [list(self.x.shape), self.x.dtype],
            "label": [list(self.label.shape), self.label.dtype] if self.label else None,
        }
        if self.extra:  # absent without labels=/masks=: manifests of earlier versions still match
            out["arrays"] = [[list(p.shape), p.dtype] for p in self.extra]
        return out


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
        """Count the rows of all the sources.

        Returns
        -------
        int
            Rows.
        """
        return sum(s.rows for s in self.sources)

    @property
    def features(self) -> int:
        """Count the features (the same in every source).

        Returns
        -------
        int
            Features.
        """
        return self.sources[0].features

    @property
    def offsets(self) -> np.ndarray:
        """Give the start row of each source in the output.

        Returns
        -------
        numpy.ndarray
            Start rows, plus the total at the end.
        """
        return np.concatenate([[0], np.cumsum([s.rows for s in self.sources])]).astype(np.int64)

    def outputs(self) -> list[tuple[str, str, str]]:
        """List every 1-D output array: the label of ``label_key`` (``y``) first, then the columns.

        Returns
        -------
        list of (str, str, str)
            Output name, key in the sources and output dtype of each.
        """
        out = [("y", self.label_key, str(self.label_dtype))] if self.label_key else []
        return out + [(c.name, c.key, d) for c, d in zip(self.columns, self.column_dtypes, strict=True)]

    def checksum(self) -> str:
        """Hash every source's identity and the keys and dtypes (SHA-256).

        Returns
        -------
        str
            The hex digest.
        """
        doc = {
            "sources": [s.identity() for s in self.sources],
            "x_key": self.x_key,
            "label_key": self.label_key,
            "dtype": self.dtype,
            "label_dtype": self.label_dtype,
        }
        if self.columns:
            doc["arrays"] = _columns_json(self)
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _columns_json(scan: Scan) -> list[dict[str, str]]:
    """The columns of ``scan`` as JSON: name, key, role, output dtype."""
    return [
        {"name": c.name, "key": c.key, "role": c.role, "dtype": d}
        for c, d in zip(scan.columns, scan.column_dtypes, strict=True)
    ]


def _natural_key(path: str) -> list[Any]:
    # batch_2 before batch_10: numbers compare as numbers.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def expand_sources(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """Expand globs (natural sort order within each pattern) and keep the given order across them.

    Parameters
    ----------
    sources : str, path or iterable of them
        File paths or glob patterns (``**`` recurses).

    Returns
    -------
    list of str
        Absolute paths, duplicates removed.

    Raises
    ------
    DataError
        A pattern matches nothing or a named file does not exist.
    """
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    out: list[str] = []
    problems = []
    for item in items:
        text = os.fspath(item)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True), key=_natural_key)
            if not matches:
                problems.append(f"{text}: no files match this pattern")
            out.extend(matches)
        elif os.path.exists(text):
            out.append(text)
        else:
            problems.append(f"{text}: no such file")
    if problems:
        raise DataError(_listing("source(s) not found", problems))
    seen: set[str] = set()
    unique = []
    for p in (os.path.abspath(p) for p in out):
        if p not in seen:
            seen.add(p)
            unique.append(p)
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


def _kind(path: str) -> str | None:
    ext = os.path.splitext(path.rstrip("/"))[1].lower()
    if ext in KINDS:
        return KINDS[ext]
    if os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, m)) for m in ("zarr.json", ".zarray", ".zgroup")
    ):
        return "zarr"
    return None


def _npy_header(fp: Any) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, header length) from an open .npy stream at its start."""
    version = npformat.read_magic(fp)
    if version == (1, 0):
        shape, fortran, dtype = npformat.read_array_header_1_0(fp)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = npformat.read_array_header_2_0(fp)
    else:  # pragma: no cover - read_magic rejects others
        raise ValueError(f"unsupported .npy version {version}")
    return tuple(int(s) for s in shape), bool(fortran), np.dtype(dtype), fp.tell()


def _check_payload(where: str, shape: tuple[int, ...], dtype: np.dtype, have: int) -> None:
    if dtype.hasobject:
        raise ValueError(
            f"{where} holds Python objects (dtype {dtype}); only numeric arrays can be ingested"
        )
    need = int(np.prod(shape)) * dtype.itemsize
    if have < need:
        raise ValueError(
            f"{where} is truncated: header says {shape} {dtype} = {need} bytes, found {have}"
        )


def _scan_npy(path: str, size: int) -> Part:
    with open(path, "rb") as fp:
        shape, fortran, dtype, header = _npy_header(fp)
    _check_payload("file", shape, dtype, size - header)
    return Part(shape, dtype.str, fortran, header)


_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip local file header, 30 bytes


def _scan_npz_member(zf: zipfile.ZipFile, path: str, key: str, what: str) -> Part:
    name = f"{key}.npy"
    try:
        info = zf.getinfo(name)
    except KeyError:
        keys = sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))
        raise ValueError(
            f"missing {what} key {key!r} (keys in file: {', '.join(keys) or 'none'})"
        ) from None
    with zf.open(info) as member:
        shape, fortran, dtype, header = _npy_header(member)
    _check_payload(f"member {key!r}", shape, dtype, info.file_size - header)
    offset = None
    if info.compress_type == zipfile.ZIP_STORED:
        # Uncompressed member: find its bytes in the zip so pass 2 can memory-map them.
        with open(path, "rb") as raw:
            raw.seek(info.header_offset)
            fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
        offset = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1] + header
    return Part(shape, dtype.str, fortran, offset)


#: The 1-D arrays asked of each source: (key, role) pairs, ``label_key`` first.
Wanted = Sequence[tuple[str, str]]


def _scan_npz(path: str, x_key: str, wanted: Wanted) -> tuple[Part, list[Part]]:
    with zipfile.ZipFile(path) as zf:
        x = _scan_npz_member(zf, path, x_key, "x")
        return x, [_scan_npz_member(zf, path, key, role) for key, role in wanted]


def _scan_h5(path: str, x_key: str, wanted: Wanted) -> tuple[Part, list[Part]]:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - optional extra
        raise ValueError("reading HDF5 needs h5py: pip install 'daskbatch[hdf5]'") from exc

    def part(f: Any, key: str, what: str) -> Part:
        node = f.get(key)
        if not isinstance(node, h5py.Dataset):
            keys = []
            f.visititems(lambda n, o: keys.append(n) if isinstance(o, h5py.Dataset) else None)
            raise ValueError(
                f"missing {what} key {key!r} (datasets in file: {', '.join(keys) or 'none'})"
            )
        return Part(tuple(int(s) for s in node.shape), np.dtype(node.dtype).str)

    with h5py.File(path, "r") as f:
        return part(f, x_key, "x"), [part(f, key, role) for key, role in wanted]


def _scan_zarr(path: str, x_key: str | None, wanted: Wanted) -> tuple[Part, list[Part]]:
    import zarr

    from daskbatch.io.zarr_nodes import array_names

    node = zarr.open(path, mode="r")

    def part(key: str | None, what: str) -> Part:
        if isinstance(node, zarr.Group):
            if key is None or key not in node:
                have = array_names(node)
                raise ValueError(
                    f"missing {what} key {key!r} (arrays in store: {', '.join(have) or 'none'})"
                )
            arr = node[key]
            if not isinstance(arr, zarr.Array):
                raise ValueError(f"{what} key {key!r} is a Zarr group, not an array")
        elif what != "x":
            raise ValueError(f"is a single array; it has no {what} key {key!r}")
        else:
            arr = node
        return Part(tuple(int(s) for s in arr.shape), np.dtype(arr.dtype).str)

    return part(x_key, "x"), [part(key, role) for key, role in wanted]


def _scan_one(path: str, x_key: str | None, wanted: Wanted, has_label: bool) -> Source:
    kind = _kind(path)
    if kind is None:
        raise ValueError("unknown file type (expected .npy, .npz, .h5/.hdf5 or a Zarr store)")
    st = os.stat(path)
    if kind != "zarr" and st.st_size == 0:
        raise ValueError("empty file (0 bytes)")
    parts: list[Part] = []
    if kind == "npy":
        if wanted:
            raise ValueError(
                ".npy files hold one array; labels and masks (--label-key, --label, --mask) "
                "need .npz, HDF5 or Zarr sources"
            )
        x = _scan_npy(path, st.st_size)
    elif kind == "npz":
        x, parts = _scan_npz(path, x_key or "X", wanted)
    elif kind == "h5":
        x, parts = _scan_h5(path, x_key or "X", wanted)
    else:
        x, parts = _scan_zarr(path, x_key or "X", wanted)
    if len(x.shape) != 2:
        raise ValueError(f"x has shape {x.shape}; expected 2-D (rows, features)")
    for (key, role), p in zip(wanted, parts, strict=True):
        if p.shape != (x.shape[0],):
            raise ValueError(
                f"{role} {key!r} has shape {p.shape} but x has {x.shape[0]} rows; expected ({x.shape[0]},)"
            )
    label = parts[0] if has_label else None
    extra = tuple(parts[1:] if has_label else parts)
    return Source(path, kind, int(st.st_size), int(st.st_mtime_ns), x, label, extra)


def scan_sources(
    paths: Sequence[str],
    *,
    x_key: str | None = None,
    label_key: str | None = None,
    dtype: str | np.dtype | None = None,
    columns: Sequence[Column] = (),
) -> Scan:
    """Read every source's metadata and validate them together.

    Parameters
    ----------
    paths : sequence of str
        Files (already expanded, see :func:`expand_sources`).
    x_key : str, optional
        Array name inside .npz/HDF5/Zarr sources (default ``"X"``; a bare Zarr array needs none).
    label_key : str, optional
        Name of a 1-D label array in each source.
    dtype : str or numpy.dtype, optional
        Output dtype; inputs must cast to it safely within their kind.  Default:
        the inputs' common dtype, which must be unique.
    columns : sequence of Column, optional
        More 1-D arrays (labels, masks) with one value per row, in each source.

    Returns
    -------
    Scan
        The sources and the common output layout.

    Raises
    ------
    DataError
        Lists every bad file with its reason: unreadable, truncated, empty, missing
        keys, wrong feature count, dtypes that do not cast, labels or masks of the wrong
        length or dtype.
    """
    problems: list[str] = []
    sources: list[Source] = []
    wanted = ([(label_key, "label")] if label_key else []) + [(c.key, c.role) for c in columns]
    for path in paths:
        try:
            sources.append(_scan_one(path, x_key, wanted, label_key is not None))
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


def _column_dtype(parts: list[tuple[str, Part | None]], what: str, role: str, problems: list[str]) -> str | None:
    """The output dtype of one 1-D array over all sources (their common type); bad ones go to ``problems``."""
    present = [(path, np.dtype(p.dtype)) for path, p in parts if p is not None]
    bad = [(path, d) for path, d in present if d.kind not in DTYPE_KINDS[role]]
    need = "numeric" if role == "label" else "boolean or integer"
    problems.extend(f"{path}: {what} has dtype {d}; a {role} must be {need}" for path, d in bad)
    if not present or bad:
        return None
    return np.result_type(*(d for _, d in present)).newbyteorder("=").str


def as_json(scan: Scan) -> dict[str, Any]:
    """Convert the scan to JSON (written into the output's manifest).

    Parameters
    ----------
    scan : Scan
        The scan.

    Returns
    -------
    dict
        JSON-able.
    """
    out = {
        "x_key": scan.x_key,
        "label_key": scan.label_key,
        "dtype": scan.dtype,
        "label_dtype": scan.label_dtype,
        "rows": scan.rows,
        "features": scan.features,
        "sources": [{**s.identity(), "kind": s.kind, "x_part": asdict(s.x)} for s in scan.sources],
    }
    if scan.columns:  # absent without labels=/masks=: manifests of earlier versions still match
        out["arrays"] = _columns_json(scan)
    return out
