"""Input readers behind one small protocol, as xarray's backends (``BackendEntrypoint``) are.

``describe``'s input and each of ingest's batch files are opened by the first :data:`READERS` entry that can
(:func:`open_reader`): shape, dtype, rows read a block at a time, integrity facts. A new format is one class plus
one registry line.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import zipfile
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import dask.array as da
import dask.base
import numpy as np
from dask.utils import parse_bytes
from numpy.lib import format as npformat

from daskbatch import config
from daskbatch.io import tables
from daskbatch.io.table_files import refuse_unreadable_path
from daskbatch.stats.categorical import frame_blocks, is_profiled

# --------------------------------------------------------------------------- helpers


def is_instance(obj: Any, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module`` (not imported: obj cannot be one)."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


def in_memory_as_dask(a: Any) -> da.Array:
    """An in-memory (NumPy or array-API) array wrapped as a Dask array; a Dask array as it is."""
    if isinstance(a, da.Array):
        return a
    arr = np.asarray(a) if not hasattr(a, "__array_namespace__") or isinstance(a, np.ndarray) else a
    return da.from_array(arr, chunks=("auto", -1) if arr.ndim == 2 else "auto")


def check_series_index(series: Any, index: Any, role: str, what: str = "DataFrame") -> None:
    """Refuse a pandas Series whose index is not the DataFrame's row index (it would be used by position)."""
    if index is not None and is_instance(series, "pandas", "Series") and not series.index.equals(index):
        raise ValueError(f"{role}: the Series' index does not match the rows of the {what}; use {role}.reindex(df.index)")


def _zarr_array_of(a: Any, store: Any = None) -> Any:
    """:func:`~daskbatch.io.dataset.zarr_array_of`, without importing zarr where no zarr array can be."""
    if not isinstance(a, da.Array) or "zarr" not in sys.modules:  # no zarr array without zarr imported
        return None
    from daskbatch.io.dataset import zarr_array_of  # lazy: zarr

    return zarr_array_of(a, store)


# --------------------------------------------------------------------------- the protocol, and in-memory inputs


class Reader:
    """One kind of input, opened: its array, label, feature names and facts; rows read a block at a time.

    ``what`` names it in messages; ``key`` picks one array of a source that holds several (ingest's x, label or
    mask keys); ``exclude``: a table's columns that are not features (weights, target, group keys, labels).
    """

    #: Whether a source of this format holds one array only (no labels or masks beside it).
    single: ClassVar[bool] = False

    def __init__(self, x: Any, label: Any = None, *, what: str | None = None, missing: str = "auto",
                 key: str | None = None, exclude: tuple[str, ...] = ()) -> None:
        self.array, self.label, self.what = x, label, what
        self.missing, self.key, self.exclude = missing, key, exclude
        self.names: tuple[str, ...] | None = None
        self.provenance: dict[str, Any] = {}
        self.source: Any = None  # the Dataset the arrays came from
        self.row_index: Any = None  # a pandas DataFrame's row index
        self.frames: list[Any] = []  # the non-numeric columns: (rows, Delayed pandas DataFrame) a block
        self.block_read: Any = None  # set once a block of the store is read (chunk_grid.armed_block_read)

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether this reader reads ``x``."""
        return True

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return tuple(self.array.shape)

    @property
    def dtype(self) -> Any:
        """The array's dtype."""
        return self.array.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """Rows of each block of :meth:`to_dask`."""
        return tuple(int(c) for c in self.to_dask().chunks[0])

    def to_dask(self) -> da.Array:
        """The array as a lazy dask array."""
        return in_memory_as_dask(self.array)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as NumPy."""
        return np.asarray(self.to_dask()[start:stop].compute(scheduler="sync"))

    def facts(self) -> dict[str, Any]:
        """Integrity facts: absent chunks, the value they read as, a content digest (none for in-memory data)."""
        return {}


class DatasetReader(Reader):
    """A :class:`~daskbatch.io.dataset.Dataset`: its arrays, label, names and provenance."""

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is a Dataset."""
        return hasattr(x, "x") and hasattr(x, "feature_names")

    def _open(self, dataset: Any, label: Any) -> None:
        """Take the arrays, label (unless given), names and provenance of ``dataset``."""
        self.array, self.label = dataset.x, dataset.label if label is None else label
        self.source, self.frames = dataset, list(getattr(dataset, "frames", ()))
        self.block_read = getattr(dataset, "block_read", None)
        self.names = tuple(str(n) for n in dataset.feature_names)
        self.provenance.update(dataset.provenance())
        self.what = self.what or f"array {getattr(dataset, 'array_name', 'X')!r} of {getattr(dataset, 'path', '?')}"

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        super().__init__(x, label, **options)
        self._open(x, label)
        if getattr(x, "zarr_x", None) is not None:  # a Dataset opened before: its event, unless taken
            from daskbatch.io.chunk_grid import armed_block_read  # lazy: zarr

            self.block_read = armed_block_read(x.zarr_x, self.block_read)

    def facts(self) -> dict[str, Any]:
        """Absent chunks, what they read as, and the stored chunks' CRC-32C digest (None without one)."""
        from daskbatch.io.chunk_grid import chunk_checksums  # lazy: zarr

        facts = {k: self.provenance.get(k) for k in ("absent_chunks", "absent_lost_chunks", "absent_read_as")}
        zarr_x = getattr(self.source, "zarr_x", None)
        return {**facts, "checksums": chunk_checksums(zarr_x) if zarr_x is not None else None}


class ZarrReader(DatasetReader):
    """A Zarr store (path, URL, ``::`` path, zip file, zarr group or array, or ``da.from_zarr`` of one).

    Opened whole (``describe``: CF-decoded, integrity checked), or one array by ``key`` as stored (ingest).
    """

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is a path, a zarr node, or a dask array that reads a whole zarr array."""
        node = is_instance(x, "zarr", "Group") or is_instance(x, "zarr", "Array")
        return isinstance(x, str | os.PathLike) or node or _zarr_array_of(x) is not None

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        from daskbatch.io.dataset import Dataset  # lazy: zarr
        from daskbatch.io.zarr_store import ZarrStore  # lazy: zarr

        Reader.__init__(self, x, label, **options)
        if self.key is not None:  # one array as stored: no decoding, no integrity facts
            self.array = ZarrStore(os.fspath(x)).array(self.key, self.what or "x", "key")
            return
        chunks: Any = "auto"
        if isinstance(x, str | os.PathLike):
            x = os.fspath(x)
            refuse_unreadable_path(x)
        elif (found := _zarr_array_of(x)) is not None:  # read through the store, as its path is: block cache once
            x, chunks = found
        # A label by name, or one that reads a whole array of x's store (da.from_zarr): read in x's blocks, cached once.
        name = label if isinstance(label, str) else None if isinstance(x, str) else _zarr_array_of(label, x.store)
        # The store's open path in one call; then the Dataset's provenance (open_dataset would enter io/dataset twice).
        self._open(Dataset(**ZarrStore.read_store(x, label=name, missing=self.missing, chunks=chunks)),
                   None if name is not None else label)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as NumPy (of the array as stored, when opened by key)."""
        return np.asarray(self.array[start:stop]) if self.key is not None else super().read(start, stop)


class TableReader(DatasetReader):
    """Parquet or Arrow IPC files (a file, a directory, a URL), or a :class:`~daskbatch.io.tables.Table`.

    By ``key`` (ingest): x is ``X`` (every numeric column) or comma-separated names, less ``exclude``; a label or
    a mask is the column ``key``.
    """

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is a Table or the path or URL of table files."""
        return isinstance(x, tables.Table) or tables.is_table_path(x)

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        Reader.__init__(self, x, label, **options)
        if self.key is not None:
            self.array = tables.ingest_array(os.fspath(x), self.key, self.exclude, x=self.what in (None, "x"))
            return
        name = label if isinstance(label, str) else None
        x = tables.reopened(x, name, self.exclude) if isinstance(x, tables.Table) else tables.open_table(
            x, label=name, exclude=self.exclude)
        self.what = self.what or f"table {x.path}"
        self._open(x, None if name is not None else label)


#: Rows per block of a pandas DataFrame of text, category or time columns only (the numbers' blocks set it otherwise).
TEXT_ONLY_BLOCK_ROWS = 65_536


class DataFrameReader(Reader):
    """A pandas or dask DataFrame: its columns are the features; a column name may be the label."""

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is a pandas or dask DataFrame."""
        return is_instance(x, "pandas", "DataFrame") or is_instance(x, "dask.dataframe", "DataFrame")

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        super().__init__(x, label, **options)
        is_pandas = is_instance(x, "pandas", "DataFrame")
        what = self.what = self.what or "DataFrame"
        if isinstance(label, str):
            if label not in x.columns:
                raise KeyError(f"label {label!r} is not a column of the {what} (columns: {list(x.columns)[:10]})")
            label, x = x[label], x.drop(columns=[label])
        profiled = [c for c, t in x.dtypes.items() if is_profiled(t)]  # text, categories, times: profiled
        frame, x = x[profiled], x.drop(columns=profiled)
        if is_pandas:
            check_series_index(label, x.index, "label", what)
        if is_pandas and profiled and not len(x.columns):
            # Text, categories or times only: zero numeric features in blocks of rows, named by the text's content
            # (the name is the input's token: two different frames must not look like the same rows).
            rows = len(x.index)
            array = da.from_array(np.empty((rows, 0)), chunks=(min(rows, TEXT_ONLY_BLOCK_ROWS) or 1, 0),
                                  name=f"text-columns-{dask.base.tokenize(frame)}")
        elif is_pandas:
            plain = all(isinstance(t, np.dtype) for t in x.dtypes)
            # Nullable extension columns (Int64, boolean, Float64) become float64 with NaN for <NA>.
            array = x.to_numpy() if plain else x.to_numpy(dtype=np.float64, na_value=np.nan)
            if profiled:  # named by the text too: frames of the same numbers and other text are other rows
                array = da.from_array(array, chunks=("auto", -1), name=f"frame-{dask.base.tokenize(array, frame)}")
        else:
            array = x.to_dask_array(lengths=True)
        self.array, self.label = array, label
        self.names = tuple(str(c) for c in x.columns)
        self.row_index = x.index if is_pandas else None
        self.frames = frame_blocks(frame, self.chunks) if profiled else []


class DataArrayReader(Reader):
    """An xarray DataArray: the coordinate of its second dimension names the features."""

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is an xarray DataArray."""
        return hasattr(x, "dims") and hasattr(x, "coords") and hasattr(x, "variable")

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        super().__init__(x.data, label, **options)
        if self.what is None and x.name is not None:
            self.what = f"DataArray {x.name!r}"
        if x.ndim == 2 and x.dims[1] in x.coords:
            self.names = tuple(str(n) for n in x.coords[x.dims[1]].values)


# --------------------------------------------------------------------------- readers of local array files


@dataclass(frozen=True)
class Part:
    """Where an array lives inside a file: shape, dtype, order, byte offset of its raw data (to map it)."""

    shape: tuple[int, ...]
    dtype: str
    fortran: bool = False
    offset: int | None = None  # byte offset of raw data, for memory mapping (npy, stored npz)


class FileReader(Reader):
    """A local file of arrays by key (``X`` by default), opened by its :meth:`header` and read by :meth:`read`.

    ``describe`` reads its rows a block at a time through :meth:`to_dask`; a label by name is the array of that key.
    """

    #: The format's file name suffixes.
    suffixes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def can_open(cls, x: Any) -> bool:
        """Whether ``x`` is a local path with one of :attr:`suffixes`."""
        path = os.fspath(x) if isinstance(x, str | os.PathLike) else ""
        return "://" not in path and path.lower().endswith(cls.suffixes)

    def __init__(self, x: Any, label: Any = None, **options: Any) -> None:
        super().__init__(None, label, **options)
        self.path, by_key, self.key = os.fspath(x), self.key is not None, self.key or "X"
        refuse_unreadable_path(self.path)
        try:
            if os.path.getsize(self.path) == 0:
                raise ValueError("empty file (0 bytes)")
            self.part = self.header()
        except ValueError as exc:  # opened by key, by ingest, which names the file before the problem
            raise exc if by_key else ValueError(f"{self.path}: {exc}") from None
        # a 0-d array has no rows to read: its shape is refused by the caller
        self.array = self._blocks() if self.part.shape else np.empty((), np.dtype(self.part.dtype))
        if isinstance(label, str) and not self.single:
            self.label = type(self)(self.path, key=label, what="label").array

    def header(self) -> Part:
        """Shape, dtype and place of the array named ``key`` (``what`` it is); ValueError names what is wrong."""
        raise NotImplementedError

    def _blocks(self) -> da.Array:
        """The array as dask, a block of about ``target-chunk-bytes`` at a time, each block a :meth:`read`."""
        shape, dtype = self.part.shape, np.dtype(self.part.dtype)
        row_bytes = max(1, int(np.prod(shape[1:])) * dtype.itemsize)
        rows, step = shape[0], max(1, parse_bytes(config.get("target-chunk-bytes")) // row_bytes)
        stat = os.stat(self.path)
        name = f"{type(self).__name__.lower()}-{dask.base.tokenize(self.path, self.key, stat.st_size, stat.st_mtime_ns)}"
        starts = range(0, rows, step)
        graph = {(name, k, *(0,) * (len(shape) - 1)): (self.read, a, min(a + step, rows)) for k, a in enumerate(starts)}
        chunks = (tuple(min(step, rows - a) for a in starts) or (0,), *((n,) for n in shape[1:]))
        return da.Array(graph, name, chunks, meta=np.empty((0,) * len(shape), dtype=dtype))


def _npy_header(fp: Any) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, header length) from an open .npy stream at its start."""
    # read_magic refuses versions it does not know; 2.0 and 3.0 share a header layout.
    one = npformat.read_magic(fp) == (1, 0)
    shape, fortran, dtype = (npformat.read_array_header_1_0 if one else npformat.read_array_header_2_0)(fp)
    return tuple(int(s) for s in shape), bool(fortran), np.dtype(dtype), fp.tell()


def _check_payload(where: str, shape: tuple[int, ...], dtype: np.dtype, have: int) -> None:
    """Refuse object arrays and payloads shorter than the header says."""
    if dtype.hasobject:
        raise ValueError(f"{where} holds Python objects (dtype {dtype}); only numeric arrays can be ingested")
    need = int(np.prod(shape)) * dtype.itemsize
    if have < need:
        raise ValueError(f"{where} is truncated: header says {shape} {dtype} = {need} bytes, found {have}")


def _mapped(path: str, part: Part, start: int, stop: int) -> np.ndarray:
    """Rows of an uncompressed array at ``part.offset`` of ``path``, memory-mapped."""
    order: Literal["F", "C"] = "F" if part.fortran else "C"
    mm = np.memmap(path, dtype=np.dtype(part.dtype), mode="r", offset=part.offset or 0, shape=part.shape, order=order)
    return mm[start:stop]


class NpyReader(FileReader):
    """A ``.npy`` file: one array, memory-mapped."""

    suffixes, single = (".npy",), True

    def header(self) -> Part:
        """The file's header (the key is not used)."""
        with open(self.path, "rb") as fp:
            shape, fortran, dtype, header = _npy_header(fp)
        _check_payload("file", shape, dtype, os.stat(self.path).st_size - header)
        return Part(shape, dtype.str, fortran, header)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows of the mapped file."""
        return _mapped(self.path, self.part, start, stop)


_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip local file header, 30 bytes


class _Inflated(threading.local):
    """Per-thread cache of the inflated members of the last ``.npz`` file (consecutive chunks share files)."""

    path: str | None = None
    arrays: dict[str, np.ndarray] | None = None


class NpzReader(FileReader):
    """A ``.npz`` file: arrays by key; an uncompressed member is memory-mapped, a compressed one inflated once."""

    suffixes = (".npz",)
    _cache = _Inflated()

    def header(self) -> Part:
        """The member's header, and its byte offset when stored uncompressed."""
        key, path = self.key, self.path
        with zipfile.ZipFile(path) as zf:
            try:
                info = zf.getinfo(f"{key}.npy")
            except KeyError:
                keys = sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))
                raise ValueError(f"missing {self.what or 'x'} key {key!r} (keys in file: {', '.join(keys) or 'none'})") from None
            with zf.open(info) as member:
                shape, fortran, dtype, header = _npy_header(member)
        _check_payload(f"member {key!r}", shape, dtype, info.file_size - header)
        offset = None
        if info.compress_type == zipfile.ZIP_STORED:  # find its bytes in the zip, to map them
            with open(path, "rb") as raw:
                raw.seek(info.header_offset)
                fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
            offset = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1] + header
        return Part(shape, dtype.str, fortran, offset)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows of the mapped member, or of the inflated one (kept for the next chunk of this thread)."""
        if self.part.offset is not None:
            return _mapped(self.path, self.part, start, stop)
        cache = self._cache
        if cache.path != self.path or cache.arrays is None:
            cache.arrays, cache.path = {}, self.path  # the previous batch dropped before inflating the next
        key = str(self.key)
        if key not in cache.arrays:
            with np.load(self.path, allow_pickle=False) as z:
                cache.arrays[key] = z[key]
        return cache.arrays[key][start:stop]


class H5Reader(FileReader):
    """An HDF5 file (needs h5py): datasets by key."""

    suffixes = (".h5", ".hdf5")

    def header(self) -> Part:
        """The dataset's shape and dtype."""
        try:
            import h5py
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ValueError("reading HDF5 needs h5py: pip install 'daskbatch[hdf5]'") from exc
        with h5py.File(self.path, "r") as f:
            node = f.get(self.key)
            if not isinstance(node, h5py.Dataset):
                keys: list[str] = []
                f.visititems(lambda n, o: keys.append(n) if isinstance(o, h5py.Dataset) else None)
                raise ValueError(f"missing {self.what or 'x'} key {self.key!r} (datasets in file: {', '.join(keys) or 'none'})")
            return Part(tuple(int(s) for s in node.shape), np.dtype(node.dtype).str)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows of the dataset."""
        import h5py

        with h5py.File(self.path, "r") as f:
            return f[self.key][start:stop]


# --------------------------------------------------------------------------- the registry


#: The readers, asked in this order; the last (NumPy, dask, array-API arrays) takes the rest.
READERS: tuple[type[Reader], ...] = (TableReader, NpyReader, NpzReader, H5Reader, ZarrReader, DatasetReader,
                                      DataFrameReader, DataArrayReader, Reader)


def reader_class(x: Any) -> type[Reader]:
    """The first of :data:`READERS` that reads ``x``."""
    return next(c for c in READERS if c.can_open(x))


def open_reader(x: Any, label: Any = None, **options: Any) -> Reader:
    """Open ``x`` (and its label) with the first reader that can; ``options``: those of :class:`Reader`."""
    reader = reader_class(x)(x, label, **options)
    reader.label = series_values(reader.label, "label", "sample needs a class")
    return reader


def series_values(series: Any, what: str, need: str, *, missing_as_nan: bool = False) -> Any:
    """A pandas or dask Series as a NumPy or dask array (others as they are): missing values NaN, or refused."""
    if is_instance(series, "dask.dataframe", "Series"):
        return series.to_dask_array(lengths=True)
    if not is_instance(series, "pandas", "Series"):
        return series
    if missing_as_nan:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if series.isna().any():
        raise ValueError(f"{what} has {int(series.isna().sum()):,} missing values; every {need}")
    numpy_dtype = getattr(series.dtype, "numpy_dtype", None)  # nullable integers: their NumPy dtype
    return series.to_numpy(dtype=numpy_dtype) if numpy_dtype is not None else series.to_numpy()
