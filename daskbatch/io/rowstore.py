"""A resumable Zarr v3 output of row blocks: one chunk per block, a done-log, a ``complete`` flag."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.chunk_grid import WRITES_EVERY_CHUNK, chunk_positions, max_chunks, stored_keys
from daskbatch.io.dataset import open_dataset
from daskbatch.io.outputs import MARKER as OUTPUT_ATTR
from daskbatch.io.outputs import (
    OutputExistsError,
    check_replaceable,
    check_separate,
    checksummed,
    flush_row_blocks,
    group_attrs,
    remove_path,
)
from daskbatch.io.zarr_store import LAYOUT_ATTR
from daskbatch.runtime.capacity import rechunk_method
from daskbatch.runtime.runlock import RunLock, output_lock_path

if TYPE_CHECKING:
    import zarr

    from daskbatch.engine.inputs import FeatureMatrix

__all__ = [
    "OUTPUT_ATTR", "ArraySpec", "OutputReport", "RegionWriter", "RowStore", "create_arrays", "created_now", "input_fingerprint", "layout",
    "local_path", "output_chunk_rows", "rechunk_rows", "regular_rows", "row_ranges", "read_done", "read_manifest",
    "write_manifest",
]

MANIFEST_FILE = "daskbatch-output.json"
DONE_FILE = "daskbatch-output-done.log"
#: Present from the first write of a new store until it is created completely.
CREATING_FILE = "daskbatch-output-creating"
#: Version of the manifests :func:`write_manifest` writes (ingest's and row stores').
MANIFEST_VERSION = 1
#: Why a row store (a transform's, ingest's) is never a URL, and the way out: both checks say it so.
LOCAL_ONLY = ("written to local paths only (a run resumes from a log appended beside the store, which an object "
              "store cannot append to)")
LOCAL_ONLY_FIX = "write to a local or shared directory and copy the store to the bucket"
#: The temporary copy zarr's LocalStore writes a chunk (or zarr.json) to, then renames into place: a kill
#: between the two leaves it beside the chunk, where a resume's rewrite of that chunk does not remove it.
KILLED_WRITE = re.compile(r".\.[0-9a-f]{32}\.partial$")


def write_manifest(out: str, doc: dict[str, Any]) -> None:
    """Write the manifest of the output ``out`` atomically (temp file + rename)."""
    path = os.path.join(out, MANIFEST_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"version": MANIFEST_VERSION, **doc}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(out: str) -> dict[str, Any] | None:
    """Read the manifest of the output ``out`` (None when absent or torn)."""
    try:
        with open(os.path.join(out, MANIFEST_FILE)) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_done(out: str) -> set[int]:
    """Read the indices of output chunks recorded as complete."""
    try:
        with open(os.path.join(out, DONE_FILE)) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return set()
    # Only newline-terminated lines count: the last element is '' or a torn write.
    return {int(line) for line in lines[:-1] if line.strip().isdigit()}


def _remove_killed_writes(out: str) -> None:
    """Delete the temporaries of zarr writes a kill cut short in ``out`` (ours, and held under its run lock)."""
    for root, _, files in os.walk(out):  # symbolic links to directories are not followed
        for name in files:
            if KILLED_WRITE.search(name):
                os.unlink(os.path.join(root, name))


@dataclass(frozen=True)
class ArraySpec:
    """One output array: ``columns`` None for a 1-D (per-row) array; ``fill`` None: NaN for floats, else 0."""

    name: str
    dtype: np.dtype
    columns: int | None = None
    dims: tuple[str, ...] = ("sample", "feature")
    fill: float | None = None


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Dotted keys at which two JSON documents differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        return out
    if old == new:
        return []
    key = where or "(document)"
    # Short values are named (a number, a name, an absent one); longer ones and whole documents by their key only.
    if all(v is None or isinstance(v, str | int | float) for v in (old, new)) and len(repr(old) + repr(new)) < 200:
        return [f"{key}: {old!r} then, {new!r} now"]
    return [key]


def replace_or_resume(out: str, kind: str, doc: dict[str, Any], overwrite: bool) -> bool:
    """Decide about an existing store at ``out``: remove it to be created again, or resume it."""
    directory = os.path.isdir(out) and not os.path.islink(out)
    # An empty directory holds nothing to protect; our own marker means interrupted while being created.
    if directory and (not os.listdir(out) or os.path.isfile(os.path.join(out, CREATING_FILE))):
        shutil.rmtree(out)
        return True
    check_replaceable(out)  # another's data is refused, with or without overwrite
    if overwrite:
        remove_path(out)  # a symbolic link itself, never its target
        return True
    found = group_attrs(out).get(OUTPUT_ATTR) if directory else None
    if found != kind:
        what = "is a symbolic link" if os.path.islink(out) else f"holds a daskbatch {found or 'dataset'} output"
        raise OutputExistsError(
            f"{out!r} {what}, not a daskbatch {kind} output; choose another path, or pass "
            "overwrite=True (--overwrite) to replace it"
        )
    old = read_manifest(out)
    if old is None:
        raise DataError(
            f"{out!r} is a daskbatch {kind} output without its {MANIFEST_FILE}; choose another path, "
            "or pass overwrite=True (--overwrite) to start again"
        )
    old.pop("version", None)
    # Name the items themselves (a store from before the items were kept differs as a whole).
    diffs = _differences(old.get("items"), doc["items"]) if "items" in doc else _differences(old, doc)
    if diffs:
        raise OutputExistsError(
            f"{out!r} was started by a different {kind} (differs in {', '.join(diffs[:6])}"
            f"{', ...' if len(diffs) > 6 else ''}); re-run the original call to resume it, "
            "or pass overwrite=True (--overwrite) to start again"
        )
    return False


def create_arrays(group: zarr.Group, rows: int, chunk_rows: int, arrays: list[ArraySpec], compressors: tuple[Any, ...]) -> None:
    """Create the ``arrays`` of a row store in ``group``, in chunks of whole rows, every one of which its writer writes."""
    for spec in arrays:
        dtype = np.dtype(spec.dtype)
        shape = (rows,) if spec.columns is None else (rows, spec.columns)
        chunks = (max(1, chunk_rows),) if spec.columns is None else (max(1, chunk_rows), max(1, spec.columns))
        group.create_array(
            spec.name,
            shape=shape,
            chunks=chunks,
            dtype=dtype,
            compressors=compressors,
            dimension_names=spec.dims[: len(shape)],
            # Unwritten float rows read as NaN, not as plausible zeros.
            fill_value=spec.fill if spec.fill is not None else np.nan if dtype.kind == "f" else 0,
            config={"write_empty_chunks": True},  # every chunk on disk: absent means missing
            attributes={WRITES_EVERY_CHUNK: True},  # ... and readers are told so
        )


def create_store(
    out: str, kind: str, rows: int, chunk_rows: int, arrays: list[ArraySpec],
    attrs: dict[str, Any], doc: dict[str, Any], compressors: tuple[Any, ...],
) -> None:
    """Create a new store at ``out``: the creating marker first, then the arrays and the manifest, the marker removed last."""
    import zarr  # lazy: zarr

    # First the marker that says "ours, being created", then the data; the marker is removed last.
    os.mkdir(out)
    with open(os.path.join(out, CREATING_FILE), "w") as f:
        f.write(f"{kind}\n")
        f.flush()
        os.fsync(f.fileno())
    # "a", not "w-": the directory is ours (os.mkdir just made it) and holds the marker already.
    group = zarr.open_group(
        out, mode="a", zarr_format=3,
        attributes={OUTPUT_ATTR: kind, "complete": False, **attrs},
    )
    create_arrays(group, rows, chunk_rows, arrays, compressors)
    write_manifest(out, doc)
    os.unlink(os.path.join(out, CREATING_FILE))


@dataclass(frozen=True)
class OutputReport:
    """What a run writing a row-block store did."""

    path: str
    rows: int
    features: int
    feature_names: tuple[str, ...]
    blocks: int
    written: tuple[int, ...]
    seconds: float
    failed_rows: tuple[tuple[int, int], ...] = ()

    def summary(self) -> str:
        """Summarise the output in one line for the CLI."""
        skipped = self.blocks - len(self.written)
        resumed = f" ({skipped} already done)" if skipped else ""
        return (
            f"wrote {self.rows:,} rows x {self.features:,} features to {self.path}: "
            f"{len(self.written)} of {self.blocks} row blocks in {self.seconds:.1f} s{resumed}"
        )

    def open(self) -> Any:
        """Open the output as a :class:`~daskbatch.Dataset`."""
        return open_dataset(self.path)


def row_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """Find the ``[start, stop)`` of each run of True in a 1-D boolean ``mask``."""
    padded = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


@dataclass
class RegionWriter:
    """Writes block ``i``'s rows of every output array (picklable: it travels to workers)."""

    arrays: dict[str, Any]
    rows: int
    chunk_rows: int
    #: Flush each block's chunks to the disk before the done-log names it (a resume that decodes them needs not).
    flush: bool = True

    def _bounds(self, block: int) -> tuple[int, int]:
        """Give the rows of block ``block``."""
        lo = block * self.chunk_rows
        return lo, min(lo + self.chunk_rows, self.rows)

    def write(self, block: int, values: dict[str, np.ndarray]) -> None:
        """Write whole chunk ``block`` of each array in ``values`` (host NumPy arrays)."""
        self.write_blocks(block, block + 1, values)

    def write_blocks(self, first: int, stop: int, values: dict[str, np.ndarray]) -> None:
        """Write whole chunks ``first`` to ``stop - 1`` of each array in ``values`` in one call."""
        lo, hi = self._bounds(first)[0], self._bounds(stop - 1)[1]
        what = f"block {first}" if stop == first + 1 else f"blocks {first}-{stop - 1}"
        for name, v in values.items():
            if v.shape[0] != hi - lo:
                raise ValueError(f"{what} of {name!r} has {v.shape[0]} rows, expected {hi - lo}")
            self.arrays[name][lo:hi] = v
            if self.flush:
                flush_row_blocks(self.arrays[name], first, stop)


def _array(group: zarr.Group, name: str, path: str) -> zarr.Array:
    """Array ``name`` of the store being resumed; one line if it was removed or replaced since."""
    import zarr  # lazy: zarr

    node = group.get(name)
    if not isinstance(node, zarr.Array):
        raise DataError(f"{path!r} has {'no' if node is None else 'a group, not an'} array {name!r}: it was changed "
                        "after it was started; pass overwrite=True (--overwrite) to start again")
    return node


class RowStore:
    """An output store being written; use :meth:`open` to create or resume one."""

    def __init__(self, path: str, group: zarr.Group, rows: int, chunk_rows: int, names: list[str], *,
                 flush: bool = True) -> None:
        self.path = path
        self.group = group
        self.rows = rows
        self.chunk_rows = chunk_rows
        self.blocks = -(-rows // chunk_rows) if rows else 0
        self.done = read_done(path)
        # write_empty_chunks is a runtime setting: a block of fill values must still be stored.
        arrays = {n: _array(group, n, path).with_config({"write_empty_chunks": True}) for n in names}
        self.writer = RegionWriter(arrays, rows, chunk_rows, flush=flush)
        self._log: IO[str] | None = None  # the done-log, opened at the first block written
        self._lock = threading.Lock()
        self._run_lock: RunLock | None = None

    @property
    def todo(self) -> list[int]:
        """List the blocks not yet in the done-log, in order."""
        return [b for b in range(self.blocks) if b not in self.done]

    @property
    def complete(self) -> bool:
        """Tell whether the store is marked complete."""
        return bool(self.group.attrs.get("complete"))

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        kind: str,
        rows: int,
        chunk_rows: int,
        arrays: list[ArraySpec],
        attrs: dict[str, Any],
        doc: dict[str, Any],
        overwrite: bool = False,
        protect: Mapping[str, str] | None = None,
        compressors: tuple[Any, ...] | None = None,
        check_chunks: bool = False,
    ) -> RowStore:
        """Create the store (zstd and a CRC-32C unless ``compressors``), or resume the same job's unfinished one.

        With ``check_chunks`` (a writer of deterministic data) a resumed block is done when its chunks decode,
        logged or not: what a cancel left unlogged is kept, a chunk torn by a kill is written again.
        """
        out = os.fspath(path)
        if "://" in out:
            raise ValueError(f"{kind} outputs are {LOCAL_ONLY}; got {out!r}: {LOCAL_ONLY_FIX}")
        check_separate(out, "the output", protect or {})  # never over, inside or around an input: overwrite deletes
        doc = json.loads(json.dumps(doc))  # compare as it reads back: tuples become lists
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"cannot create {out!r}: " + (f"{parent!r} is not a directory" if os.path.exists(
                parent) else f"directory {parent!r} does not exist"))
        # Before looking at the path: a second run of the same call must not take an unfinished store for its own.
        lock = RunLock(output_lock_path(out), f"output {out}")
        lock.acquire()
        try:
            create = replace_or_resume(out, kind, doc, overwrite) if os.path.lexists(out) else True
            if create:
                from zarr.codecs import ZstdCodec  # lazy: zarr

                try:
                    create_store(out, kind, rows, chunk_rows, arrays, attrs, doc,
                                 checksummed(ZstdCodec(level=1)) if compressors is None else compressors)
                except OSError as exc:  # permissions, a full disk: one line naming the store
                    raise OSError(exc.errno, f"cannot create the output store {out!r}: {exc.strerror or exc}") from exc
            import zarr  # lazy: zarr

            # An absolute path: the writer travels to workers that may start elsewhere.
            group = zarr.open_group(os.path.abspath(out), mode="r+")
            if not create:
                _remove_killed_writes(out)
            # Chunks that a resume decodes again need no flush before the done-log names them.
            store = cls(out, group, rows, chunk_rows, [a.name for a in arrays], flush=not check_chunks)
            if check_chunks and not create and not store.complete:
                store._keep_decoding()
        except BaseException:
            lock.release()
            raise
        store._run_lock = lock
        return store

    def _keep_decoding(self) -> None:
        """Take as done exactly the blocks whose chunks are stored and decode (the CRC-32C fails a torn one)."""
        decoding = set(range(self.blocks))
        for arr in self.writer.arrays.values():
            decoding -= {pos[0] for pos in chunk_positions(arr, stored_keys(arr))[1]}  # absent chunks
            for block in sorted(decoding):
                try:
                    arr.blocks[block]
                except Exception:  # any decode failure: write it again (the data are deterministic)
                    decoding.discard(block)
        self.done = set()
        for block in sorted(decoding):  # logged, so that finish() finds every block in the log
            self.mark_done(block)

    def mark_done(self, block: int) -> None:
        """Record ``block`` as written (append to the done-log and flush)."""
        with self._lock:
            if self._log is None:  # line-buffered: each block's line is flushed as it is written
                self._log = open(os.path.join(self.path, DONE_FILE), "a", buffering=1)  # noqa: SIM115 - closed in close()
            self._log.write(f"{block}\n")
            self.done.add(block)

    def close(self) -> None:
        """Close the done-log and release the run lock."""
        self._close_log()
        lock, self._run_lock = self._run_lock, None
        if lock is not None:
            lock.release()

    def _close_log(self) -> None:
        """Close the done-log (the lock stays held)."""
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def finish(self, attrs: dict[str, Any] | None = None) -> None:
        """Check that every block is logged, then set ``complete`` (and ``attrs``)."""
        self._close_log()
        missing = set(range(self.blocks)) - read_done(self.path)
        if missing:
            raise DataError(
                f"{len(missing)} row blocks of {self.path!r} were not written (first: {min(missing)}); "
                "re-run the same call to finish them"
            )
        self.group.update_attributes({**(attrs or {}), "complete": True})


def layout(label: bool, mask: str | None = None) -> dict[str, Any]:
    """Build the ``daskbatch`` layout attribute: :func:`~daskbatch.open_dataset` finds X and y by it."""
    out: dict[str, Any] = {"x": "X", "label": "y" if label else None}
    if mask:
        out["mask"] = mask
    return {LAYOUT_ATTR: out}


def input_fingerprint(data: FeatureMatrix) -> dict[str, Any]:
    """Identify the input of a job: path, array, shape, dtype and row chunks (JSON-able)."""
    source = data.source
    path = getattr(source, "path", None)
    out: dict[str, Any] = {
        "path": os.path.abspath(path) if path and "://" not in path else path,
        "array": getattr(source, "array_name", None),
        "label": getattr(source, "label_name", None) if data.label is not None else None,
        "shape": [int(s) for s in data.x.shape],
        "dtype": str(data.x.dtype),
        "chunks": [int(c) for c in data.x.chunks[0][:1]],
        "store_chunks": list(getattr(source, "store_chunks", ()) or ()) or None,
    }
    if path is None:
        out["dask_name"] = data.x.name
    return out


def local_path(data: FeatureMatrix) -> dict[str, str]:
    """Give the input's local store path, which the output must not overlap, by its description."""
    path = getattr(data.source, "path", None)
    return {f"the input {path}": path} if path and "://" not in path else {}


def output_chunk_rows(data: FeatureMatrix, chunk_rows: int | None) -> int:
    """Check ``chunk_rows`` and give the rows of one output chunk (default: the input's largest block)."""
    x = data.x
    rows = int(x.shape[0])
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or chunk_rows < 1):
        raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows!r}")
    per = int(chunk_rows or max(x.chunks[0]))
    per = max(1, min(per, rows))
    blocks = -(-rows // per)
    if blocks > max_chunks():  # checked before a rechunk builds one task per block
        raise DataError(
            f"the output would have {blocks:,} row blocks of {per:,} rows > daskbatch.max-chunks {max_chunks():,}; "
            f"use blocks of at least {-(-rows // max_chunks()):,} rows (chunk_rows, --chunk-rows, batch_rows)"
        )
    return per


def rechunk_rows(x: Any, rows: int) -> Any:
    """Rechunk ``x`` to blocks of ``rows`` rows, the last one shorter (or leave it when it already is)."""
    if any(c != rows for c in x.chunks[0][:-1]) or x.chunks[0][-1] > rows:
        return x.rechunk({0: rows}, method=rechunk_method())
    return x


def regular_rows(data: FeatureMatrix, chunk_rows: int | None) -> tuple[Any, Any, int]:
    """Rechunk X and label to blocks of ``chunk_rows`` rows (default: the input's blocks, made regular)."""
    per = output_chunk_rows(data, chunk_rows)
    # Output chunk b is exactly input block b: every block but the last has ``per`` rows.
    x = rechunk_rows(data.x, per)
    y = data.label
    if y is not None and y.chunks[0] != x.chunks[0]:
        y = y.rechunk({0: per}, method=rechunk_method())
    return x, y, per


def created_now() -> str:
    """The time now, UTC, to the second: the ``created`` of an output's provenance."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
