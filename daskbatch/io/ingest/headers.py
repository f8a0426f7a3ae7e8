"""Reading one batch file's headers for ingest's pass 1: shapes, dtypes and where the data lie, not the data.

``.npy`` through :mod:`numpy.lib.format`, ``.npz`` members through their zip
entries (an uncompressed member is located byte-exactly so pass 2 can
memory-map it), HDF5 through h5py dataset metadata, Zarr through its array
metadata. A bad file raises a ValueError whose message
:func:`~daskbatch.io.ingest.scan.scan_sources` lists with the file's name.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib import format as npformat

__all__ = ["KINDS", "Part", "Source", "Wanted", "read_source"]

KINDS = {".npy": "npy", ".npz": "npz", ".h5": "h5", ".hdf5": "h5", ".zarr": "zarr"}

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
    import zarr  # lazy: zarr

    from daskbatch.io.zarr_store import group_arrays  # lazy: dask, zarr

    node = zarr.open(path, mode="r")

    def part(key: str | None, what: str) -> Part:
        if isinstance(node, zarr.Group):
            if key is None or key not in node:
                have = sorted(name for name, _ in group_arrays(node, max_depth=0))
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


def read_source(path: str, x_key: str | None, wanted: Wanted, has_label: bool) -> Source:
    """Read one batch file's headers: its identity and the shapes and dtypes of its arrays.

    Parameters
    ----------
    path : str
        The file (a Zarr store is a directory).
    x_key : str or None
        Name of X inside .npz, HDF5 and Zarr sources (None: ``"X"``).
    wanted : sequence of (str, str)
        The 1-D arrays asked of it, as (key, role), the label first.
    has_label : bool
        Whether the first of ``wanted`` is the label.

    Returns
    -------
    Source
        The file as scanned.

    Raises
    ------
    ValueError
        What is wrong with the file, in a phrase (read errors pass through).
    """
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
