"""Ingest many batch files into one chunked Zarr store, in constant memory, resumably."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch._common import strict_int
from daskbatch.io.ingest.passes import (
    ColumnsArg,
    Scan,
    columns_of,
    expand_sources,
    resume_items,
    scan_sources,
    write_chunk,
)
from daskbatch.io.outputs import checksummed
from daskbatch.io.rowstore import ArraySpec, RowStore
from daskbatch.io.zarr_store import LAYOUT_ATTR
from daskbatch.runtime.progress import Progress, ProgressCallback

__all__ = ["IngestReport", "ingest"]

#: Output chunks default to about this many bytes (rounded down to a power-of-two row count).
DEFAULT_CHUNK_BYTES = 16 * 2**20
COMPRESSORS = ("zstd", "lz4", "none")
#: The ``kind`` of an ingest's output (its marker, in messages, and what a resume must find).
KIND = "ingest"


@dataclass(frozen=True)
class IngestReport:
    """What an ingest run did.

    Attributes
    ----------
    path : str
        Output store.
    rows, features : int
        Shape of ``X``.
    files : int
        Number of source files.
    chunks, chunks_written : int
        Output chunks in all, and written by this run (fewer after a resume).
    nbytes : int
        Uncompressed bytes of the output arrays.
    bytes_written : int
        Bytes the output arrays occupy in the store.
    seconds : float
        Wall time of this run.
    labels, masks : tuple of str
        Names of the label and mask arrays written beside ``X`` (``y`` for ``label_key``).
    """

    path: str
    rows: int
    features: int
    files: int
    chunks: int
    chunks_written: int
    nbytes: int
    bytes_written: int
    seconds: float
    labels: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """Compute the compression ratio (uncompressed / stored).

        Returns
        -------
        float
            The ratio.
        """
        return self.nbytes / self.bytes_written if self.bytes_written else float("nan")

    @property
    def throughput_bytes(self) -> float:
        """Compute the uncompressed bytes per second written by this run.

        Returns
        -------
        float
            Bytes per second.
        """
        frac = self.chunks_written / self.chunks if self.chunks else 0.0
        return self.nbytes * frac / self.seconds if self.seconds > 0 else float("nan")

    def summary(self) -> str:
        """Write the final line the CLI prints.

        Returns
        -------
        str
            The line.
        """
        resumed = ""
        if self.chunks_written < self.chunks:
            resumed = (
                f" ({self.chunks - self.chunks_written} of {self.chunks} chunks were already done)"
            )
        beside = [f"{len(names)} {what}{'s' if len(names) > 1 else ''} ({', '.join(names)})"
                  for what, names in (("label", self.labels), ("mask", self.masks)) if names]
        return (
            f"ingested {self.rows:,} rows x {self.features:,} features"
            + (f" with {' and '.join(beside)}" if beside else "")
            + f" from {self.files:,} files "
            f"into {self.path}: {self.bytes_written / 2**20:,.1f} MiB written, "
            f"compression ratio {self.ratio:.2f}, {self.throughput_bytes / 2**20:,.1f} MiB/s "
            f"in {self.seconds:.1f} s{resumed}"
        )


def _layout(scan: Scan) -> dict[str, Any]:
    """The layout attribute: X, the label ``open_dataset`` takes by default, and every label and mask."""
    labels = (["y"] if scan.label_key else []) + [c.name for c in scan.columns if c.role == "label"]
    masks = [c.name for c in scan.columns if c.role == "mask"]
    # With several labels none is the default: describe(path, label=NAME) picks one.
    layout: dict[str, Any] = {"x": "X", "label": "y" if scan.label_key else (labels[0] if len(labels) == 1 else None)}
    if scan.columns:
        layout.update(labels=labels, masks=masks)
    return layout


def ingest(
    sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    x_key: str | None = None,
    label_key: str | None = None,
    labels: ColumnsArg = None,
    masks: ColumnsArg = None,
    dtype: str | np.dtype | None = None,
    chunk_rows: int | None = None,
    compressor: str = "zstd",
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> IngestReport:
    """Copy many batch files into one Zarr v3 store (``X``, and optional labels and masks).

    Parameters
    ----------
    sources : str, path or iterable of them
        Files or glob patterns: ``.npy``, ``.npz`` (arrays by key), ``.h5``/``.hdf5``
        (needs h5py), Zarr stores, or Parquet / Arrow IPC files (needs pyarrow:
        x is their numeric columns less those read as labels or masks, which are
        columns by name).  Globs are sorted naturally (``b2`` before ``b10``).
    out : str or path
        Local path of the output store.
    x_key : str, optional
        Key of the samples x features array in .npz/HDF5/Zarr sources (default ``"X"``).
    label_key : str, optional
        Key of a 1-D label array with one entry per row; written as ``y``, and
        the label :func:`~daskbatch.open_dataset` and ``describe`` use by default.
    labels : str, sequence of str or mapping of str to str, optional
        More 1-D label arrays, one entry per row: keys in every source, each
        written under its own name, or a mapping of output name to key.  Pick
        one by name: ``describe(out, label="head3")``.  One label alone (and
        no ``label_key``) is the default label; of several, none is.
    masks : str, sequence of str or mapping of str to str, optional
        1-D boolean or integer arrays, one entry per row, given like ``labels``;
        stored beside ``X`` (the group attribute ``daskbatch`` lists them) and
        not applied to anything.
    dtype : str or numpy.dtype, optional
        Output dtype (inputs must cast to it within their kind); default: the
        inputs' dtype, which must then be the same for all files.
    chunk_rows : int, optional
        Rows per output chunk; default about 16 MiB per chunk.
    compressor : {"zstd", "lz4", "none"}
        Codec of the output arrays.
    workers : int, optional
        Chunks written in parallel (default: CPU count).  Peak memory is about
        ``workers`` x (one chunk + one source batch).
    overwrite : bool, default False
        Replace an existing ``out`` that daskbatch wrote (never other data, nor
        a symbolic link's target).  Without it an unfinished ingest of the same
        inputs is resumed, and anything else is refused.
    progress : bool or callable, default False
        Show a progress bar: a widget in Jupyter, a line on stderr in a terminal
        (start and end are logged either way); a callable is called as
        ``progress(done, total, "ingest")`` after every chunk written.
    cancel : threading.Event, optional
        Set from another thread, it stops the ingest after the chunks in flight:
        :class:`~daskbatch.Cancelled`; the same call resumes.

    Returns
    -------
    IngestReport
        What was written: rows, bytes, time and the output's path.

    Raises
    ------
    DataError
        Bad sources (all listed: a missing key, a label or mask whose length is
        not the file's row count, dtypes), or ``out`` was started from different inputs.
    LockHeldError
        Another live ingest writes ``out`` (the lock file and its holder are named).
    FileExistsError
        ``out`` exists and is not a daskbatch ingest output.
    OSError
        Writing failed (disk full, permissions); the store stays marked incomplete
        and the same call resumes it.
    """
    t0 = time.perf_counter()
    if compressor not in COMPRESSORS:
        raise ValueError(f"compressor must be one of {', '.join(COMPRESSORS)}, got {compressor!r}")
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    # CPU_COUNT: the cores this process may use (affinity, cgroup quota)
    from dask.system import CPU_COUNT  # lazy: dask
    from zarr.codecs import BloscCodec, ZstdCodec  # lazy: zarr

    # None is the CPU count; 0 is no count of writers (``workers or CPU_COUNT`` took it for all of them).
    workers = CPU_COUNT if workers is None else strict_int(workers, "workers", minimum=1)
    columns = columns_of(label_key, labels, masks)[1 if label_key is not None else 0 :]
    paths = expand_sources(sources)
    scan = scan_sources(paths, x_key=x_key, label_key=label_key, dtype=dtype, columns=columns)
    if chunk_rows is None:  # about DEFAULT_CHUNK_BYTES, rounded down to a power of two rows
        rows = max(1, DEFAULT_CHUNK_BYTES // max(1, scan.features * np.dtype(scan.dtype).itemsize))
        chunk_rows = 1 << (rows.bit_length() - 1)
    arrays = [ArraySpec("X", np.dtype(scan.dtype), scan.features)]
    arrays += [ArraySpec(name, np.dtype(dt), None, ("sample",)) for name, _, dt in scan.outputs()]
    # A CRC-32C per chunk: a changed byte fails the read instead of changing the numbers.
    codec = {"zstd": ZstdCodec(level=1), "lz4": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), "none": None}
    layout = _layout(scan)
    store = RowStore.open(
        out, kind=KIND, rows=scan.rows, chunk_rows=chunk_rows, arrays=arrays, attrs={LAYOUT_ATTR: layout},
        doc={"kind": KIND, "items": resume_items(scan, {"chunk_rows": chunk_rows, "compressor": compressor})},
        overwrite=overwrite, protect={f"the source {p}": p for p in paths}, compressors=checksummed(codec[compressor]),
    )
    try:
        todo = [] if store.complete else store.todo
        if not store.complete:
            bar = Progress(KIND, store.blocks, unit="chunks", rows=scan.rows,
                           nbytes=scan.rows * scan.features * np.dtype(scan.dtype).itemsize,
                           cancel=cancel, progress=progress)
            with bar:
                bar.skip(store.blocks - len(todo))
                _run(scan, store, todo, workers, bar)
            store.finish()  # only with every chunk in the log (_run raises otherwise) is the store complete
    finally:
        store.close()
    written = store.writer.arrays.values()
    return IngestReport(
        path=store.path,
        rows=scan.rows,
        features=scan.features,
        files=len(scan.sources),
        chunks=store.blocks,
        chunks_written=len(todo),
        nbytes=int(sum(a.nbytes for a in written)),
        bytes_written=int(sum(a.nbytes_stored() for a in written)),
        seconds=time.perf_counter() - t0,
        labels=tuple(layout.get("labels", ["y"] if scan.label_key else [])),
        masks=tuple(layout.get("masks", [])),
    )


def _run(scan: Scan, store: RowStore, todo: list[int], workers: int, bar: Progress) -> None:
    """Write ``todo`` chunks of ``scan``'s rows, ``workers`` at a time; log each as it finishes."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="daskbatch-ingest")
    running = {pool.submit(write_chunk, scan, store.writer, c): c for c in todo}  # a queued chunk holds no memory until it runs
    try:
        for f in as_completed(running):
            c = running.pop(f)
            try:
                f.result()
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"writing output chunk {c} failed: {exc.strerror or exc}. The store is left "
                    "incomplete; fix the cause and re-run the same command to resume",
                ) from exc
            store.mark_done(c)
            bar.advance()
    finally:  # also KeyboardInterrupt or a cancel: stop cleanly, keep the log
        pool.shutdown(wait=True, cancel_futures=True)
        # Chunks that finished while we were stopping are complete: record them too.
        for f, c in running.items():
            if f.done() and not f.cancelled() and f.exception() is None:
                store.mark_done(c)
