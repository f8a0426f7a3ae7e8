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

__all__ = ["Scan", "Source", "expand_sources", "scan_sources"]

KINDS = {".npy": "npy", ".npz": "npz", ".h5": "h5", ".hdf5": "h5", ".zarr": "zarr"}
#: Shown per kind of problem before "... and N more" (the count is always exact).
MAX_LISTED = 20


@dataclass(frozen=True)
class Part:
    """Where one array (x or label) lives inside a source file."""

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
        return {
            "path": self.path,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "x": [list(self.x.shape), self.x.dtype],
            "label": [list(self.label.shape), self.label.dtype] if self.label else None,
        }


@dataclass(frozen=True)
class Scan:
    """Validated sources plus the output layout they imply."""

    sources: tuple[Source, ...]
    x_key: str | None
    label_key: str | None
    dtype: str
    label_dtype: str | None

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

    def checksum(self) -> str:
        """Hash every source's identity and the keys and dtypes (SHA-256).

        Returns
        -------
        str
            The hex digest.
        """
        blob = json.dumps(
            {
                "sources": [s.identity() for s in self.sources],
                "x_key": self.x_key,
                "label_key": self.label_key,
                "dtype": self.dtype,
                "label_dtype": self.label_dtype,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()


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


def _scan_npz(path: str, x_key: str, label_key: str | None) -> tuple[Part, Part | None]:
    with zipfile.ZipFile(path) as zf:
        x = _scan_npz_member(zf, path, x_key, "x")
        label = _scan_npz_member(zf, path, label_key, "label") if label_key else None
    return x, label


def _scan_h5(path: str, x_key: str, label_key: str | None) -> tuple[Part, Part | None]:
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
        return part(f, x_key, "x"), (part(f, label_key, "label") if label_key else None)


def _scan_zarr(path: str, x_key: str | None, label_key: str | None) -> tuple[Part, Part | None]:
    import zarr

    node = zarr.open(path, mode="r")

    def part(key: str | None, what: str) -> Part:
        if isinstance(node, zarr.Group):
            if key is None or key not in node:
                have = sorted(n for n, _ in node.arrays())
                raise ValueError(
                    f"missing {what} key {key!r} (arrays in store: {', '.join(have) or 'none'})"
                )
            arr = node[key]
            if not isinstance(arr, zarr.Array):
                raise ValueError(f"{what} key {key!r} is a Zarr group, not an array")
        elif what == "label":
            raise ValueError(f"is a single array; it has no label key {key!r}")
        else:
            arr = node
        return Part(tuple(int(s) for s in arr.shape), np.dtype(arr.dtype).str)

    return part(x_key, "x"), (part(label_key, "label") if label_key else None)


def _scan_one(path: str, x_key: str | None, label_key: str | None) -> Source:
    kind = _kind(path)
    if kind is None:
        raise ValueError("unknown file type (expected .npy, .npz, .h5/.hdf5 or a Zarr store)")
    st = os.stat(path)
    if kind != "zarr" and st.st_size == 0:
        raise ValueError("empty file (0 bytes)")
    if kind == "npy":
        if label_key:
            raise ValueError(
                ".npy files hold one array; --label-key needs .npz, HDF5 or Zarr sources"
            )
        x, label = _scan_npy(path, st.st_size), None
    elif kind == "npz":
        x, label = _scan_npz(path, x_key or "X", label_key)
    elif kind == "h5":
        x, label = _scan_h5(path, x_key or "X", label_key)
    else:
        x, label = _scan_zarr(path, x_key or "X", label_key)
    if len(x.shape) != 2:
        raise ValueError(f"x has shape {x.shape}; expected 2-D (rows, features)")
    if label is not None and label.shape != (x.shape[0],):
        raise ValueError(
            f"label has shape {label.shape} but x has {x.shape[0]} rows; expected ({x.shape[0]},)"
        )
    return Source(path, kind, int(st.st_size), int(st.st_mtime_ns), x, label)


def scan_sources(
    paths: Sequence[str],
    *,
    x_key: str | None = None,
    label_key: str | None = None,
    dtype: str | np.dtype | None = None,
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

    Returns
    -------
    Scan
        The sources and the common output layout.

    Raises
    ------
    DataError
        Lists every bad file with its reason: unreadable, truncated, empty, missing
        keys, wrong feature count, dtypes that do not cast, labels of the wrong length.
    """
    problems: list[str] = []
    sources: list[Source] = []
    for path in paths:
        try:
            sources.append(_scan_one(path, x_key, label_key))
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
        ldts = [np.dtype(s.label.dtype) for s in sources if s.label is not None]
        bad = [
            s for s in sources if s.label is not None and np.dtype(s.label.dtype).kind not in "biuf"
        ]
        for s in bad:
            problems.append(f"{s.path}: label dtype {s.label.dtype} is not numeric")  # type: ignore[union-attr]
        if ldts and not bad:
            label_dtype = np.result_type(*ldts).newbyteorder("=").str
    if problems:
        raise DataError(_listing("bad source file(s); nothing was written", problems))
    scan = Scan(tuple(sources), x_key, label_key, target.str, label_dtype)  # type: ignore[union-attr]
    if scan.rows == 0:
        raise DataError(f"the {len(sources)} source file(s) hold no rows")
    return scan


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
    return {
        "x_key": scan.x_key,
        "label_key": scan.label_key,
        "dtype": scan.dtype,
        "label_dtype": scan.label_dtype,
        "rows": scan.rows,
        "features": scan.features,
        "sources": [{**s.identity(), "kind": s.kind, "x_part": asdict(s.x)} for s in scan.sources],
    }
