"""A resumable Zarr v3 output of row blocks: one chunk per block, a done-log, a ``complete`` flag.

:func:`daskbatch.transform` and :func:`daskbatch.map_batches` write their
results here (:mod:`daskbatch.io.rowstore_create` creates the store).  The store follows ingest's
recipe (:mod:`daskbatch.io.ingest.store`):

- ``daskbatch-output-creating`` is the first thing written when the store is
  created and the last removed: a store holding it was interrupted while being
  created (by daskbatch) and is simply made again. A store lacking both it and
  the manifest below is not one daskbatch made, and is never deleted for that;
- ``daskbatch-output.json`` describes the job (input fingerprint, steps,
  options); it is written once the arrays exist;
- ``daskbatch-output-done.log`` gets one block index per line, appended only
  after that block's chunks were written completely.  A re-run of the same job
  writes only the blocks missing from the log; a different job is refused
  with the difference named.
- group attributes ``daskbatch_output`` (the kind of job, the marker that
  makes the path daskbatch's to replace) and ``complete`` (true once every
  block is in the log).

One run at a time writes a store: :meth:`RowStore.open` takes the run lock
``.NAME.daskbatch-lock`` beside it (:mod:`daskbatch.runtime.runlock`), held
until :meth:`RowStore.close`; a second run fails at once naming the holder.

Every array has chunks of ``chunk_rows`` rows spanning all columns, a zstd +
crc32c codec chain (a corrupt chunk fails its checksum instead of decoding to
garbage) and ``write_empty_chunks``: every block is on disk once written.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.errors import DataError
from daskbatch.io.dataset import open_dataset
from daskbatch.io.ingest.store import DoneLog, read_done
from daskbatch.io.rowstore_create import (
    CREATING_FILE,  # noqa: F401  (re-exported, with the other file names)
    DONE_FILE,
    MANIFEST_FILE,  # noqa: F401  (re-exported)
    OUTPUT_ATTR,
    ArraySpec,
    create_store,
    replace_or_resume,
)
from daskbatch.io.zarr_store import LAYOUT_ATTR
from daskbatch.runtime.runlock import RunLock, output_lock_path

if TYPE_CHECKING:
    import zarr

__all__ = ["OUTPUT_ATTR", "ArraySpec", "OutputReport", "RegionWriter", "RowStore", "layout", "row_ranges"]

@dataclass(frozen=True)
class OutputReport:
    """What a run writing a row-block store did.

    Attributes
    ----------
    path : str
        The output store.
    rows, features : int
        Shape of the output ``X``.
    feature_names : tuple of str
    blocks : int
        Row blocks (output chunks) in all.
    written : tuple of int
        Blocks this run wrote (the others were already in the done-log).
    seconds : float
        Wall time of this run.
    failed_rows : tuple of (int, int)
        Row ranges ``[start, stop)`` that ``map_batches(on_error="flag")`` flagged.
    """

    path: str
    rows: int
    features: int
    feature_names: tuple[str, ...]
    blocks: int
    written: tuple[int, ...]
    seconds: float
    failed_rows: tuple[tuple[int, int], ...] = ()

    def summary(self) -> str:
        """Summarise the output in one line for the CLI.

        Returns
        -------
        str
            The line.
        """
        skipped = self.blocks - len(self.written)
        resumed = f" ({skipped} already done)" if skipped else ""
        return (
            f"wrote {self.rows:,} rows x {self.features:,} features to {self.path}: "
            f"{len(self.written)} of {self.blocks} row blocks in {self.seconds:.1f} s{resumed}"
        )

    def open(self) -> Any:
        """Open the output as a :class:`~daskbatch.Dataset`.

        Returns
        -------
        Dataset
            The output's arrays.
        """
        return open_dataset(self.path)


def row_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """Find the ``[start, stop)`` of each run of True in a 1-D boolean ``mask``.

    Parameters
    ----------
    mask : numpy.ndarray of bool
        1-D.

    Returns
    -------
    list of tuple of int
        The runs, in order.
    """
    padded = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


class RegionWriter:
    """Writes block ``i``'s rows of every output array (picklable: it travels to workers).

    Parameters
    ----------
    arrays : dict of str to zarr.Array
        The output arrays, by name.
    rows, chunk_rows : int
        Rows of every array, and per chunk (= per block).
    """

    def __init__(self, arrays: dict[str, Any], rows: int, chunk_rows: int) -> None:
        self.arrays = arrays
        self.rows = rows
        self.chunk_rows = chunk_rows

    def _bounds(self, block: int) -> tuple[int, int]:
        """Give the rows of block ``block``."""
        lo = block * self.chunk_rows
        return lo, min(lo + self.chunk_rows, self.rows)

    def write(self, block: int, values: dict[str, np.ndarray]) -> None:
        """Write whole chunk ``block`` of each array in ``values`` (host NumPy arrays).

        Parameters
        ----------
        block : int
            The block index.
        values : dict of str to numpy.ndarray
            The block's rows of each array, by name.
        """
        self.write_blocks(block, block + 1, values)

    def write_blocks(self, first: int, stop: int, values: dict[str, np.ndarray]) -> None:
        """Write whole chunks ``first`` to ``stop - 1`` of each array in ``values`` in one call.

        Parameters
        ----------
        first, stop : int
            The blocks, ``[first, stop)``.
        values : dict of str to numpy.ndarray
            Their rows of each array, by name.
        """
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
    """An output store being written; use :meth:`open` to create or resume one.

    Parameters
    ----------
    path : str
        Local path of the store.
    group : zarr.Group
        The open store.
    rows, chunk_rows : int
        Rows of every array, and per chunk (= per block).
    names : list of str
        The output arrays.

    Attributes
    ----------
    path : str
        Local path of the store.
    rows, chunk_rows, blocks : int
        Rows, rows per block, and number of blocks.
    done : set of int
        Blocks already in the done-log when the store was opened.
    writer : RegionWriter
        Writes the blocks (on workers).
    """

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
        """List the blocks not yet in the done-log, in order.

        Returns
        -------
        list of int
            Block indices.
        """
        return [b for b in range(self.blocks) if b not in self.done]

    @property
    def complete(self) -> bool:
        """Tell whether the store is marked complete.

        Returns
        -------
        bool
            The ``complete`` attribute.
        """
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
        """Create the store, or resume the same job's unfinished one.

        Parameters
        ----------
        path : str or os.PathLike
            Local path of the output.
        kind : str
            The job, stored as the ``daskbatch_output`` attribute.
        rows, chunk_rows : int
            Rows of every array, and per chunk (= per block).
        arrays : list of ArraySpec
            Name, dtype and trailing shape of each output array.
        attrs : dict
            Further group attributes (feature names, provenance), JSON-able.
        doc : dict
            What must match for a resume (input fingerprint, steps, options), JSON-able.
        overwrite : bool, default False
            Replace an existing daskbatch output (never anything else).
        protect : tuple of str
            Paths the output must not overlap (the input store).

        Returns
        -------
        RowStore
            The store, ready to write its remaining blocks.

        Raises
        ------
        ValueError
            ``path`` is or overlaps a protected path, or is a URL.
        FileExistsError
            ``path`` exists and is not a daskbatch output.
        DataError
            ``path`` holds a different job's output, or another kind of
            daskbatch output such as a summary (without ``overwrite``).
        LockHeldError
            Another run is writing ``path``.
        """
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
        """Record ``block`` as written (append to the done-log and flush).

        Parameters
        ----------
        block : int
            The block index.
        """
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
        """Check that every block is logged, then set ``complete`` (and ``attrs``).

        Parameters
        ----------
        attrs : dict, optional
            Further group attributes to set.
        """
        self._close_log()
        missing = set(range(self.blocks)) - read_done(self.path, name=DONE_FILE)
        if missing:
            raise DataError(
                f"{len(missing)} row blocks of {self.path!r} were not written (first: {min(missing)}); "
                "re-run the same call to finish them"
            )
        self.group.update_attributes({**(attrs or {}), "complete": True})


def layout(label: bool, mask: str | None = None) -> dict[str, Any]:
    """Build the ``daskbatch`` layout attribute: :func:`~daskbatch.open_dataset` finds X and y by it.

    Parameters
    ----------
    label : bool
        Whether the store has a label array.
    mask : str, optional
        Name of a row-mask array.

    Returns
    -------
    dict
        The attribute's value.
    """
    out: dict[str, Any] = {"x": "X", "label": "y" if label else None}
    if mask:
        out["mask"] = mask
    return {LAYOUT_ATTR: out}
