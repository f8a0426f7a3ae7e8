"""A resumable Zarr v3 output of row blocks: one chunk per block, a done-log, a ``complete`` flag."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.dataset import LAYOUT_ATTR, open_dataset
from daskbatch.io.ingest.manifest import DoneLog, read_done
from daskbatch.io.rowstore_create import (
    CREATING_FILE,  # noqa: F401  (re-exported, with the other file names)
    DONE_FILE,
    MANIFEST_FILE,  # noqa: F401  (re-exported)
    OUTPUT_ATTR,
    ArraySpec,
    create_store,
    replace_or_resume,
)
from daskbatch.runtime.runlock import RunLock, output_lock_path

if TYPE_CHECKING:
    import zarr

__all__ = ["OUTPUT_ATTR", "ArraySpec", "OutputReport", "RegionWriter", "RowStore", "layout", "row_ranges"]

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


class RegionWriter:
    """Writes block ``i``'s rows of every output array (picklable: it travels to workers)."""

    def __init__(self, arrays: dict[str, Any], rows: int, chunk_rows: int) -> None:
        self.arrays = arrays
        self.rows = rows
        self.chunk_rows = chunk_rows

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


def _inside(a: str, b: str) -> bool:
    """True when path ``a`` is ``b`` or lies inside it."""
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


class RowStore:
    """An output store being written; use :meth:`open` to create or resume one."""

    def __init__(self, path: str, group: zarr.Group, rows: int, chunk_rows: int, names: list[str]) -> None:
        self.path = path
        self.group = group
        self.rows = rows
        self.chunk_rows = chunk_rows
        self.blocks = -(-rows // chunk_rows) if rows else 0
        self.done = read_done(path, name=DONE_FILE)
        # write_empty_chunks is a runtime setting: a block of fill values must still be stored.
        arrays = {n: group[n].with_config({"write_empty_chunks": True}) for n in names}  # type: ignore[union-attr]
        self.writer = RegionWriter(arrays, rows, chunk_rows)
        self._log: DoneLog | None = None
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
        protect: tuple[str, ...] = (),
    ) -> RowStore:
        """Create the store, or resume the same job's unfinished one."""
        out = os.fspath(path)
        if "://" in out:
            raise ValueError(f"outputs are written to local paths only, got {out!r}")
        real = os.path.realpath(out)
        for p in protect:
            rp = os.path.realpath(p)
            if _inside(real, rp) or _inside(rp, real):
                raise ValueError(f"refusing to write the output {out!r} over the input {p!r}: choose another path")
        doc = json.loads(json.dumps(doc))  # compare as it reads back: tuples become lists
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"cannot create {out!r}: directory {parent!r} does not exist")
        # Before looking at the path: a second run of the same call must not take an unfinished store for its own.
        lock = RunLock(output_lock_path(out), f"output {out}")
        lock.acquire()
        try:
            create = replace_or_resume(out, kind, doc, overwrite) if os.path.lexists(out) else True
            if create:
                create_store(out, kind, rows, chunk_rows, arrays, attrs, doc)
            import zarr  # lazy: zarr

            # An absolute path: the writer travels to workers that may start elsewhere.
            group = zarr.open_group(os.path.abspath(out), mode="r+")
            store = cls(out, group, rows, chunk_rows, [a.name for a in arrays])
        except BaseException:
            lock.release()
            raise
        store._run_lock = lock
        return store

    def mark_done(self, block: int) -> None:
        """Record ``block`` as written (append to the done-log and flush)."""
        with self._lock:
            if self._log is None:
                self._log = DoneLog(self.path, name=DONE_FILE)
            self._log.add(block)
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
        missing = set(range(self.blocks)) - read_done(self.path, name=DONE_FILE)
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
