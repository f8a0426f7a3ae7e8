"""Parquet and Arrow IPC (Feather v2) tables as a (samples x features) input, read a row group at a time."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from daskbatch import config
from daskbatch._common import SamplesByFeatures, warn
from daskbatch.errors import DataError
from daskbatch.io.table_files import (
    TABLE_SUFFIXES,
    TEXT_SUFFIXES,
    Files,
    find_files,
    is_table_path,
)

__all__ = [
    "TABLE_SUFFIXES", "TEXT_SUFFIXES", "Table", "is_table_path", "open_table", "reopened",
    "ingest_array",
]

def _numeric_dtype(arrow_type: Any) -> np.dtype | None:
    """The NumPy dtype of a bool, integer or float Arrow type; None for any other type."""
    import pyarrow as pa  # lazy: pyarrow

    t = pa.types
    if t.is_boolean(arrow_type) or t.is_integer(arrow_type) or t.is_floating(arrow_type):
        return np.dtype(arrow_type.to_pandas_dtype())
    return None


def _column_dtype(arrow_type: Any) -> np.dtype | None:
    """A column's dtype: numeric as :func:`_numeric_dtype`, object for text, categories, times; else None."""
    import pyarrow.types as t  # lazy: pyarrow

    if _numeric_dtype(arrow_type) is not None:
        return _numeric_dtype(arrow_type)
    kinds = (t.is_string, t.is_large_string, t.is_dictionary, t.is_temporal, t.is_binary)
    return np.dtype(object) if any(f(arrow_type) for f in kinds) else None


def _read_group(files: Files, columns: tuple[str, ...], i: int, group: int) -> Any:
    """The ``columns`` of row group (or record batch) ``group`` of file ``i``, as an Arrow table."""
    import pyarrow as pa  # lazy: pyarrow
    import pyarrow.parquet as pq  # lazy: pyarrow

    with files.open(i) as source:
        if files.is_ipc(i):
            return pa.Table.from_batches([pa.ipc.open_file(source).get_batch(group)]).select(list(columns))
        return pq.ParquetFile(source).read_row_group(group, columns=list(columns))


def _read_frame(files: Files, columns: tuple[str, ...], *piece: int) -> Any:
    """The profiled (non-numeric) ``columns`` of one piece (file, row group, start, stop) as pandas."""
    return _read_group(files, columns, *piece[:2]).slice(piece[2], piece[3] - piece[2]).to_pandas(date_as_object=False)


@dataclass
class _Footer:
    """One file's schema, rows per row group (or record batch), content digest and whether it may hold nulls."""

    schema: Any
    groups: list[int]
    digest: str
    nullable: set[str] = field(default_factory=set)


def _footer(files: Files, i: int, wanted: Sequence[str] | None, fingerprint: bool) -> _Footer:
    """File ``i``'s footer; its digest covers the ``wanted`` columns (all when None), an IPC file's bytes if ``fingerprint``."""
    import pyarrow as pa  # lazy: pyarrow
    import pyarrow.parquet as pq  # lazy: pyarrow

    digest = hashlib.sha256()
    try:
        with files.open(i) as source:
            if files.is_ipc(i):
                reader = pa.ipc.open_file(source)
                schema = reader.schema
                groups = [reader.get_batch(b).num_rows for b in range(reader.num_record_batches)]
                nullable = {f.name for f in schema if f.nullable}
                source.seek(0)  # no statistics in an IPC file: its bytes are its content
                for block in iter(lambda: source.read(1 << 23), b"") if fingerprint else ():
                    digest.update(block)
            else:
                meta = pq.ParquetFile(source).metadata
                schema = meta.schema.to_arrow_schema()
                groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
                nullable = set()
                for g in range(meta.num_row_groups):
                    group = meta.row_group(g)
                    digest.update(f"group {g} {group.num_rows} {group.total_byte_size}\n".encode())
                    for c in range(group.num_columns):
                        chunk = group.column(c)
                        name = chunk.path_in_schema
                        if wanted is not None and name not in wanted:
                            continue  # another column rewritten leaves these numbers as they are
                        stats = chunk.statistics.to_dict() if chunk.statistics is not None else None
                        if stats is None or stats.get("null_count") != 0:
                            nullable.add(name)
                        sizes = [chunk.total_compressed_size, chunk.total_uncompressed_size]
                        facts = [name, *sizes, chunk.compression, chunk.encodings, stats]
                        digest.update(json.dumps(facts, default=str).encode())
    except pa.ArrowException as exc:  # a file pyarrow cannot read is named in one line
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{files.paths[i]}: not a readable Parquet or Arrow IPC file ({first_line})") from None
    digest.update(str(schema).encode())
    return _Footer(schema, groups, digest.hexdigest(), nullable)


@dataclass(frozen=True)
class _Read:
    """What each block task reads: the files, the columns and the dtype they fill."""

    files: Files
    columns: tuple[str, ...]
    dtype: str


def _read_block(spec: _Read, i: int, group: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of row group (or record batch) ``group`` of file ``i``, the columns as one array."""
    import pyarrow as pa  # lazy: pyarrow
    import pyarrow.compute as pc  # lazy: pyarrow

    columns = _read_group(spec.files, spec.columns, i, group).columns
    dtype = np.dtype(spec.dtype)
    out = np.empty((stop - start, len(columns)), dtype=dtype)
    for j, column in enumerate(columns):
        part = column.slice(start, stop - start)
        if part.null_count:
            if dtype.kind != "f":
                raise ValueError(f"{spec.files.paths[i]}: column {spec.columns[j]!r} has {part.null_count:,} nulls in "
                                 f"row group {group}, and a label, weights or group keys need a value for every row")
            part = pc.fill_null(part.cast(pa.from_numpy_dtype(dtype)), float("nan"))
        out[:, j] = part.to_numpy()
    return out


def _select(names: list[str], types: dict[str, np.dtype | None], columns: Any, label: str | None,
            where: str, quiet: bool) -> list[str]:
    """The numeric feature columns: all, or those ``columns`` names or matches (glob patterns), less the label."""
    if columns is None:
        chosen = names
    else:
        patterns = [columns] if isinstance(columns, str) else [str(c) for c in columns]
        chosen = []
        for pattern in patterns:
            matched = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
            if not matched:
                raise KeyError(f"{where}: no column matches {pattern!r} (columns: {', '.join(names[:20])})")
            if pattern in names and types[pattern] is None:
                raise TypeError(f"{where}: column {pattern!r} is neither numeric nor text, categories or times")
            chosen += [n for n in matched if n not in chosen]
    chosen = [n for n in chosen if n != label]
    skipped = [n for n in chosen if types[n] is None]
    kind = {n: "O" if t is None else t.kind for n, t in types.items()}  # "O": not a feature (profiled or skipped)
    if not [n for n in chosen if types[n] is not None]:  # nothing numeric and nothing profiled
        found = ", ".join(f"{n} ({'other type' if types[n] is None else kind[n]})" for n in names[:20])
        raise TypeError(f"{where} has no column to describe: numbers, booleans, text, categories or times "
                        f"(found: {found or 'none'})")
    if skipped and not quiet:
        warn(f"{where}: skipping {len(skipped)} column(s) of other types: {', '.join(skipped[:10])}"
             f"{', ...' if len(skipped) > 10 else ''} (daskbatch describes numbers, booleans, text, categories, times)",
             UserWarning)
    return [n for n in chosen if types[n] is not None]


@dataclass(frozen=True, eq=False, repr=False)
class Table(SamplesByFeatures):
    """Parquet or Arrow IPC files opened as a (samples x features) dask array, with a label column and names.

    Attributes
    ----------
    x, label : dask.array.Array
        Samples x features (a block per row group, or slice of one) and the label column (or None).
    feature_names : list of str
        The feature columns, in the files' order (``skipped_columns``: the non-numeric ones left out).
    path, label_name : str
        The path or URL given, and the label column (or None).
    files, row_groups, store_chunks, content
        How many files and row groups, the largest row group's shape, sha256 of the files' content facts.
    """

    x: da.Array
    label: da.Array | None
    feature_names: list[str]
    store_chunks: tuple[int, ...]
    path: str
    label_name: str | None = None
    files: int = 1
    row_groups: int = 0
    content: str = ""
    skipped_columns: tuple[str, ...] = ()
    profiled_columns: tuple[str, ...] = ()  # the text, category and time columns ``frames`` read
    frames: tuple[Any, ...] = ()  # the profiled (non-numeric) columns: (rows, Delayed pandas DataFrame) a block
    #: The fsspec options the files were opened with (a reopening for another label needs them).
    storage_options: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    zarr_x: Any = None
    zarr_label: Any = None
    skipped_rows: list[tuple[int, int]] = field(default_factory=list)

    def column(self, name: str) -> da.Array:
        """Read one numeric column of the files lazily, a block per row group (``weights="w"`` reads it so).

        Parameters
        ----------
        name : str
            The column (numbers or booleans; nulls read as NaN where its type allows).

        Returns
        -------
        dask.array.Array
            One value per row, named by the files' content.
        """
        table = _open_table(self.path, None, name, self.storage_options, quiet=True)
        assert table.label is not None
        return table.label

    def provenance(self) -> dict[str, Any]:
        """JSON-able facts about where the data came from.

        Returns
        -------
        dict
            ``path``, ``format``, ``files``, ``row_groups``, ``label``, ``shape``, ``dtype``,
            ``dask_chunk_rows``, ``content`` (sha256 of the files' content facts),
            ``skipped_columns`` and ``complete``.
        """
        return {
            "path": self.path, "format": "table", "files": self.files, "row_groups": self.row_groups,
            "label": self.label_name, "shape": list(self.shape), "dtype": str(self.x.dtype),
            "dask_chunk_rows": int(max(self.x.chunks[0])), "content": self.content,
            "skipped_columns": list(self.skipped_columns), "complete": True,
        }

    def __repr__(self) -> str:
        rows, cols = self.shape
        return (f"<daskbatch.Table {self.path}: {rows:,} x {cols:,} {self.x.dtype} from {self.files} file(s), "
                f"{self.row_groups} row groups, label {self.label_name or 'none'}>")


def open_table(
    path: str | os.PathLike[str],
    columns: str | Sequence[str] | None = None,
    label: str | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    exclude: Sequence[str] = (),
) -> Table:
    """Open Parquet or Arrow IPC (Feather v2) files as a :class:`Table`, reading only their footers.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.parquet``/``.pq``/``.arrow``/``.feather``/``.ipc`` file, a directory of
        them (searched recursively, in natural order; names starting with ``_`` or
        ``.`` skipped), or an fsspec URL of either (``s3://bucket/prefix/``).
    columns : str or sequence of str, optional
        Feature columns by name or glob pattern (``"f*"``); default every numeric
        and boolean column. Non-numeric columns matched by a pattern (or all of
        them, by default) are skipped with one warning naming them.
    label : str, optional
        The label column (left out of the features).
    storage_options : mapping, optional
        Passed to fsspec for URLs (credentials, endpoint), as in
        ``pandas.read_parquet``.
    exclude : sequence of str, optional
        Columns left out of the features: those ``describe`` reads as
        ``weights=``, ``target=`` or ``groups=`` by name (:meth:`Table.column`).

    Returns
    -------
    Table
        The lazily read features, label and the files' facts.

    Raises
    ------
    FileNotFoundError
        No such path, or no table file in the directory.
    KeyError
        A column or the label is not in the files.
    TypeError
        No numeric column, or a column named explicitly is not numeric.
    ValueError
        The files' schemas disagree on a selected column.
    """
    return _open_table(os.fspath(path), columns, label, storage_options, excluded=exclude)


def _open_table(where: str, columns: Any, label: str | None, storage_options: Mapping[str, Any] | None, *,
                quiet: bool = False, fingerprint: bool = True, excluded: Sequence[str] = ()) -> Table:
    """:func:`open_table`; ``quiet``: no warning of skipped columns; ``fingerprint``: hash Arrow IPC bytes."""
    try:
        import pyarrow  # noqa: F401  # lazy: pyarrow
    except ImportError as exc:  # pragma: no cover - the [parquet] extra
        raise ImportError("reading Parquet or Arrow files needs pyarrow: pip install 'daskbatch[parquet]'") from exc
    files = find_files(where, storage_options)
    first = _footer(files, 0, None, fingerprint=False)
    names = list(first.schema.names)
    types = {n: _column_dtype(first.schema.field(n).type) for n in names}
    if label is not None and label not in names:
        raise KeyError(f"label {label!r} is not a column of {where} (columns: {', '.join(names[:20])})")
    if label is not None and _numeric_dtype(first.schema.field(label).type) is None:
        raise TypeError(f"column {label!r} of {where} is {first.schema.field(label).type}: a label, weights, "
                        "target or group keys column holds numbers")
    selected = [n for n in _select(names, types, columns, label, where, quiet) if n not in excluded]
    profiled = tuple(n for n in selected if types[n] == np.dtype("O"))
    chosen = [n for n in selected if types[n] != np.dtype("O")]
    if not chosen and not profiled:
        raise ValueError(f"{where}: no numeric column is left for x (label, masks, non-numeric)")
    wanted = [*chosen, *([label] if label else [])]
    # The profiled columns are in the digest too: a rewritten text column is other content for a checkpoint.
    footers = [_footer(files, i, [*wanted, *profiled], fingerprint) for i in range(len(files.paths))]
    for i, footer in enumerate(footers):
        for name in [*wanted, *profiled]:  # profiled: text, categories or times in every file
            found = footer.schema.field(name).type if name in footer.schema.names else "absent"
            if isinstance(found, str) or (_numeric_dtype if name in wanted else _column_dtype)(found) is None:
                bad = f"column {name!r} is {found}"
                raise ValueError(f"{files.paths[i]}: {bad}, unlike in {files.paths[0]}")
    dtypes = [_numeric_dtype(f.schema.field(n).type) for f in footers for n in chosen]
    dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)  # none: only profiled columns
    if dtype.kind != "f" and any(n in f.nullable for f in footers for n in chosen):
        dtype = np.dtype(np.float64)  # nulls read as NaN
    pieces = _pieces([f.groups for f in footers], len(chosen) * dtype.itemsize)
    if not pieces:
        raise ValueError(f"{where} holds no rows")
    content = hashlib.sha256("".join(f.digest for f in footers).encode()).hexdigest()
    x = _as_dask(f"table-x-{content[:32]}", _Read(files, tuple(chosen), dtype.str), pieces, len(chosen))
    label_array = None
    if label is not None:
        label_dtype = np.result_type(*(_numeric_dtype(f.schema.field(label).type) for f in footers))
        label_array = _as_dask(f"table-label-{content[:32]}", _Read(files, (label,), label_dtype.str), pieces, 1)[:, 0]
    return Table(
        x=x, label=label_array, feature_names=chosen, path=where, label_name=label,
        store_chunks=(max(max(f.groups, default=0) for f in footers), len(chosen)),
        files=len(files.paths), row_groups=sum(len(f.groups) for f in footers), content=f"sha256 {content}",
        storage_options=dict(storage_options or {}),
        skipped_columns=tuple(n for n in names if types[n] is None and n != label),
        frames=tuple((p[3] - p[2], dask.delayed(_read_frame, pure=True)(files, profiled, *p)) for p in pieces) if profiled else (),
        profiled_columns=profiled,
    )


def _pieces(groups: list[list[int]], row_bytes: int) -> list[tuple[int, int, int, int]]:
    """(file, row group, start, stop) of each block: row groups, split in equal slices above the target size."""
    target = parse_bytes(config.get("target-chunk-bytes"))
    out = []
    for i, sizes in enumerate(groups):
        for g, rows in enumerate(sizes):
            parts = max(1, -(-rows * row_bytes // target))
            step = -(-rows // parts)
            out += [(i, g, a, min(a + step, rows)) for a in range(0, rows, step)]
    return out


def _as_dask(name: str, spec: _Read, pieces: list[tuple[int, int, int, int]], width: int) -> da.Array:
    """A dask array of one block per piece, each read by :func:`_read_block`."""
    graph = {(name, k, 0): (_read_block, spec, *piece) for k, piece in enumerate(pieces)}
    chunks = (tuple(b - a for _, _, a, b in pieces), (width,))
    return da.Array(graph, name, chunks, meta=np.empty((0, 0), dtype=np.dtype(spec.dtype)))


def reopened(table: Table, label: str | None, exclude: Sequence[str]) -> Table:  # numpydoc ignore=PR01,RT01
    """``table`` with ``label`` (or its own) and without the ``exclude`` columns (weights, target, groups by name)."""
    if (label is None or label == table.label_name) and not set(exclude) & set(table.feature_names):
        return table
    kept = [c for c in (*table.feature_names, *table.profiled_columns) if c != label and c not in exclude]
    return open_table(table.path, kept, label=label or table.label_name, storage_options=table.storage_options)


# --------------------------------------------------------------------------- ingest's view of one table file


def ingest_array(path: str, key: str, exclude: Sequence[str] = (), *, x: bool) -> da.Array:  # numpydoc ignore=PR01,RT01
    """The x of one ingest source (``key``: ``X``, every numeric column, or names; less ``exclude``), or column ``key``."""
    if not x:
        return _open_table(path, None, key, None, quiet=True, fingerprint=False).label  # type: ignore[return-value]
    names = None if key == "X" else key.split(",")
    table = _open_table(path, names, None, None, fingerprint=False, excluded=exclude)
    if not table.feature_names:
        raise TypeError(f"{path} has no numeric columns to ingest (only text, categories or times)")
    if table.frames:  # describe profiles them; ingest writes numbers only
        warn(f"{path}: skipping its non-numeric columns (text, categories, times): ingest writes numbers", UserWarning)
    return table.x
