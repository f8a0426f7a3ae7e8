"""Apply a user's vectorised function to large batches of rows, with GPU, fallbacks, flags and resume."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from daskbatch._common import DEVICES, gpu_module, warn
from daskbatch._version import __version__
from daskbatch.engine.blockrun import (
    BatchRunner,
    Misuse,
    Ranges,
    bisect,
    merged_ranges,
    on_error_modes,
    on_error_text,
    probe_output,
    rows_text,
    run_batch,
    run_blocks,
    warn_flagged,
)
from daskbatch.engine.fingerprint import function_token, output_items
from daskbatch.engine.inputs import as_feature_matrix
from daskbatch.engine.run_options import auto_device
from daskbatch.errors import BatchError, FlaggedRowsWarning, GPUFallbackWarning
from daskbatch.io.rowstore import (
    ArraySpec,
    OutputReport,
    RowStore,
    created_now,
    input_fingerprint,
    layout,
    local_path,
    regular_rows,
    row_ranges,
)
from daskbatch.planning.search import DeviceChoice
from daskbatch.runtime.progress import ProgressCallback

__all__ = ["BatchError", "FlaggedRowsWarning", "map_batches"]

log = logging.getLogger("daskbatch.map_batches")  # the name users filter on, whatever the module

KIND = "map_batches"


def map_batches(
    func: Callable[[Any], Any],
    x: Any,
    *,
    out: str | os.PathLike[str] | None = None,
    batch_rows: int | Literal["plan"] = "plan",
    device: Literal["auto", "cpu", "gpu"] = "auto",
    on_error: Literal["raise", "flag", "fallback"] | Sequence[Literal["flag", "fallback"]] = "raise",
    min_batch_rows: int | None = None,
    feature_names: Sequence[str] | None = None,
    dtype: str | np.dtype | None = None,
    overwrite: bool = False,
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> Any:
    """Apply ``func`` (a block of rows -> the same rows, any number of columns) to all rows, batch by batch.

    Parameters
    ----------
    func : callable
        Takes a (rows, D) NumPy or CuPy array, returns (rows, K) (or (rows,)).
        Rows must be independent (see the module docstring).
    x : path, Dataset, dask or NumPy array, list, tuple or dask.bag.Bag
        The (samples x features) input, or a sequence of Python items (any
        objects, such as tuples of small grids): then ``func`` takes a list of
        items and returns one result per item, and a list of the results comes
        back (:func:`_map_items`).
    out : str or os.PathLike, optional
        Write to this Zarr store, incrementally and resumably (as
        :func:`daskbatch.transform`): ``X``, ``y`` when the input has a label,
        ``failed`` (bool per row) with ``on_error="flag"``.  Default: return a
        NumPy array (for data that fit in memory).
    batch_rows : int or "plan", default "plan"
        Rows per batch (and output chunk).  ``"plan"``: the input's dask blocks
        (for stores, whole storage chunks within ``daskbatch.target-chunk-bytes``).
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"gpu"``: one ``cupy.asarray`` per batch (the only host-to-device copy);
        ``"auto"``: the GPU when it passes the preflight (``daskbatch info --gpu``)
        and a batch has at least ``daskbatch.gpu-min-batch-bytes`` (planned by
        default), else the CPU; blocks already on the GPU stay there.  The
        choice is logged and recorded in the output's provenance.
    on_error : {"raise", "flag", "fallback"} or ("fallback", "flag"), default "raise"
        See the module docstring.
    min_batch_rows : int, optional
        Smallest piece ``"fallback"`` and ``"flag"`` bisect a failing batch down to (default 1 row; out of
        memory on the GPU halving stops at ``batch_rows // 1024``).  A batch where every row fails costs about
        ``2 * batch_rows / min_batch_rows`` calls.
    feature_names : sequence of str, optional
        Output column names (default: the input's when the width is unchanged, else ``out0``, ``out1``, ...).
    dtype : str or numpy.dtype, optional
        Output dtype.  Default: the dtype ``func`` gives on the first rows.
        Every batch is checked: values the output dtype cannot hold (``0.7``
        into an integer dtype, an overflow) raise a :class:`BatchError` naming
        the batch; a declared float dtype rounds finite values as asked.
    overwrite : bool, default False
        Start an existing daskbatch output again (see :func:`daskbatch.transform`).
    progress : bool or callable, default False
        True draws a progress bar: a widget in Jupyter, a line on stderr in a terminal (start and end are
        logged either way); a callable is called as ``progress(done, total, "map_batches")`` after every batch.
    cancel : threading.Event, optional
        Set it to stop at the next batch boundary (SIGINT and SIGTERM do the same);
        with ``out`` the finished batches are kept and a re-run resumes.

    Returns
    -------
    numpy.ndarray, numpy.ma.MaskedArray, OutputReport or list
        Without ``out``: the output (a masked array, the rows that failed
        masked, with ``"flag"``); a list for Python items.  With ``out``: the report
        (``failed_rows`` lists flagged ranges).

    Raises
    ------
    BatchError
        ``func`` failed (``"raise"``; ``"fallback"`` when even the smallest piece fails on the CPU).
    GPUUnavailableError
        ``device="gpu"`` where CuPy does not import or sees no device (``device="auto"`` runs on the CPU there).
    Cancelled
        Stopped by ``cancel``.
    Interrupted
        Stopped by a signal (SIGINT, SIGTERM).
    """
    t0 = time.perf_counter()
    _, flag = on_error_modes(on_error)  # validates on_error; fallback is the runner's
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if min_batch_rows is not None and (isinstance(min_batch_rows, bool) or min_batch_rows < 1):
        raise ValueError(f"min_batch_rows must be >= 1, got {min_batch_rows!r}")
    if _is_items(x):
        return _map_items(func, x, out=out, batch_rows=batch_rows, device=device, on_error=on_error,
                         min_batch_rows=min_batch_rows, progress=progress, cancel=cancel)
    data = as_feature_matrix(x)
    if batch_rows != "plan" and (isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1):
        raise ValueError(f"batch_rows must be a positive number of rows or 'plan', got {batch_rows!r}")
    xs, ys, per = regular_rows(data, None if batch_rows == "plan" else batch_rows)
    # Failures are bisected down to single rows; out-of-memory halving on the GPU stops sooner (tiny pieces waste it).
    min_rows, gpu_min_rows = int(min_batch_rows or 1), int(min_batch_rows or max(1, per // 1024))
    choice = _where(device, batch_bytes=per * int(xs.shape[1]) * xs.dtype.itemsize,
                    on_gpu=type(getattr(xs, "_meta", None)).__module__.split(".")[0] == "cupy")

    runner = BatchRunner(func, 0, np.dtype("f8"), choice.device, on_error, min_rows, gpu_min_rows,
                     gpu_fallback=device == "auto" and choice.device == "gpu")
    columns, probed = probe_output(runner, xs)
    runner.declared = dtype is not None
    dtype = probed if dtype is None else np.dtype(dtype)
    runner.columns, runner.dtype = columns, dtype
    names = _output_names(feature_names, data.feature_names, columns)
    rows = int(xs.shape[0])
    xb = xs.to_delayed().ravel()
    yb = ys.to_delayed().ravel() if ys is not None else [None] * len(xb)
    failed: list[tuple[int, int]] = []
    cpu_rows: list[tuple[int, int]] = []

    if out is None:
        result = np.empty((rows, columns), dtype=dtype)

        def place(i: int, r: Any) -> None:
            block, f, c = r
            result[i * per : i * per + block.shape[0]] = block
            failed.extend(f)
            cpu_rows.extend(c)

        fn = functools.partial(run_batch, runner=runner, per=per, writer=None)
        run_blocks(fn, {i: (xb[i], None) for i in range(len(xb))}, name="db-map-batches", on_done=place,
                   cancel=cancel, progress=progress, label="map_batches", rows=rows, resumable=False)
        _warn_cpu_rows(cpu_rows, runner.name)
        if not flag:
            return result
        mask = np.zeros(rows, dtype=bool)
        for a, b in failed:
            mask[a:b] = True
        warn_flagged(row_ranges(mask), runner.name)
        return np.ma.MaskedArray(result, mask=np.broadcast_to(mask[:, None], result.shape).copy())

    fingerprint = input_fingerprint(data)
    func_name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', runner.name)}"
    # What must match to resume: the data (content token), the function by its code, the bit-changing settings.
    doc = {"kind": KIND, "items": output_items(
        data, {"function": f"{func_name}, {function_token(func)}"},
        {"batch_rows": per, "on_error": on_error_text(on_error), "columns": columns, "dtype": str(dtype), "device": device,
         "min_batch_rows": min_rows})}
    arrays = [ArraySpec("X", dtype, columns)]
    if ys is not None:
        arrays.append(ArraySpec("y", np.dtype(ys.dtype), None, ("sample",)))
    if flag:
        arrays.append(ArraySpec("failed", np.dtype(bool), None, ("sample",)))
    attrs = {
        **layout(ys is not None, "failed" if flag else None),
        "feature_names": list(names),
        "provenance": {"input": fingerprint, "func": func_name, "on_error": on_error_text(on_error), "batch_rows": per,
                       "device": choice.device, "device_reason": choice.reason,
                       "dtype": str(dtype), "daskbatch_version": __version__, "created": created_now()},
    }
    store = RowStore.open(out, kind=KIND, rows=rows, chunk_rows=per, arrays=arrays, attrs=attrs, doc=doc,
                          overwrite=overwrite, protect=local_path(data))
    written: list[int] = []

    def done(i: int, r: Any) -> None:
        """Record block ``i`` as written, and the rows (``r[2]``) its function ran on the CPU."""  # numpydoc ignore=PR01
        store.mark_done(i)
        written.append(i)
        cpu_rows.extend(r[2])

    try:
        todo = store.todo
        if todo:
            fn = functools.partial(run_batch, runner=runner, per=per, writer=store.writer)
            run_blocks(fn, {i: (xb[i], yb[i]) for i in todo}, name="db-map-batches", on_done=done,
                       cancel=cancel, progress=progress, label="map_batches", total=store.blocks, rows=rows)
        ranges: list[tuple[int, int]] = []
        if flag:  # from the store: batches flagged by earlier, interrupted runs count too
            ranges = row_ranges(np.asarray(store.writer.arrays["failed"][:]))
        if not store.complete:
            prov = {**attrs["provenance"], "failed_rows": [list(r) for r in ranges],
                    "cpu_rows": [list(r) for r in merged_ranges(cpu_rows)]}
            store.finish({"provenance": prov})
    finally:
        store.close()
    _warn_cpu_rows(cpu_rows, runner.name)
    if ranges:
        warn_flagged(ranges, runner.name)
    return OutputReport(
        path=store.path, rows=rows, features=columns, feature_names=names, blocks=store.blocks,
        written=tuple(sorted(written)), seconds=time.perf_counter() - t0, failed_rows=tuple(ranges),
    )


def _output_names(given: Sequence[str] | None, inputs: Sequence[str], columns: int) -> tuple[str, ...]:
    if given is not None:
        names = tuple(str(n) for n in given)
        if len(names) != columns:
            raise ValueError(f"{len(names)} feature_names for {columns} output columns")
        return names
    return tuple(inputs) if len(inputs) == columns else tuple(f"out{i}" for i in range(columns))


def _warn_cpu_rows(ranges: Ranges, name: str) -> None:
    """Say once per call which rows meant for the GPU ran on the CPU."""
    if not ranges:
        return
    merged = merged_ranges(ranges)
    shown = ", ".join(rows_text(a, b) for a, b in merged[:5]) + (", ..." if len(merged) > 5 else "")
    text = f"{name}: {sum(b - a for a, b in merged):,} rows ran on the CPU after failing on the GPU: {shown}"
    log.warning(text)
    warn(text, GPUFallbackWarning)


def _is_items(x: Any) -> bool:
    """A sequence of Python items (a list or tuple, or a dask bag), not an array or a store."""
    if isinstance(x, list | tuple):
        return True
    import dask.bag  # lazy: dask

    return isinstance(x, dask.bag.Bag)


def _where(device: str, *, batch_bytes: int, on_gpu: bool) -> DeviceChoice:
    """The device the batches run on: ``device``, or ``"auto"``'s choice (the CPU when the GPU does not work)."""
    if device == "auto":
        return auto_device(batch_bytes, on_gpu=on_gpu)
    if device == "cpu":
        return DeviceChoice("cpu", "device='cpu'")
    gpu_module("map_batches")
    return DeviceChoice("gpu", "device='gpu'")


#: Batches a list of items is cut into when ``batch_rows="plan"``.
MAX_BATCHES = 100


class _ItemRunner:
    """Runs ``func`` on one batch of items as ``on_error`` says (picklable: it travels to workers)."""

    def __init__(self, func: Callable[[list[Any]], Any], on_error: Any, min_items: int) -> None:
        self.func = func
        self.name = getattr(func, "__name__", "func")
        self.fallback, self.flag = on_error_modes(on_error)
        self.min_items = min_items

    def call(self, items: list[Any]) -> list[Any]:
        """``func(items)`` as a list, checked to hold one result per item."""
        results = self.func(items)
        try:
            results = list(results)
        except TypeError:
            raise Misuse(f"returned a {type(results).__name__}; expected a sequence of {len(items)} results") from None
        if len(results) != len(items):
            raise Misuse(f"returned {len(results)} results for {len(items)} items")
        return results

    def run(self, i: int, part: Any) -> tuple[list[Any], Ranges]:
        """One batch: its results and the flagged item ranges, counted from the batch's first item."""
        items = list(part)  # a bag's partition may be a lazy iterator
        flagged: Ranges = []

        def leaf(piece: list[Any], at: int, exc: BaseException) -> list[Any]:
            if not self.flag:  # items counted from the batch's first (a bag's partitions do not say where they start)
                raise BatchError(f"{self.name} failed on {rows_text(at, at + len(piece), 'items')} of batch {i}: "
                                 f"{type(exc).__name__}: {exc}") from exc
            flagged.append((at, at + len(piece)))
            return [None] * len(piece)

        smallest = self.min_items if self.fallback or self.flag else len(items)  # else the first failure raises
        try:
            return bisect(self.call, items, 0, smallest, leaf, lambda parts: parts[0] + parts[1]), flagged
        except Misuse as exc:  # the function's mistake, not a failed batch
            raise Misuse(f"{self.name} {exc} (batch {i})") from None


def _map_items(
    func: Callable[[list[Any]], Any],
    items: Sequence[Any] | Any,
    *,
    out: Any = None,
    batch_rows: int | str = "plan",
    device: str = "auto",
    on_error: Any = "raise",
    min_batch_rows: int | None = None,
    progress: bool | ProgressCallback = False,
    cancel: threading.Event | None = None,
) -> list[Any]:
    """Apply ``func`` (a list of items -> one result per item) to all items, batch by batch."""
    import dask.bag  # lazy: dask

    if out is not None:
        raise ValueError("out= writes rows of an array; results of Python items come back as a list (drop out=)")
    if device == "gpu":
        raise ValueError("device='gpu' moves array batches to the GPU; Python items reach func as they are "
                         "(use device='auto' and move them inside func)")
    bag: Any = None
    if isinstance(items, dask.bag.Bag):
        if batch_rows != "plan":
            raise ValueError("a dask.bag's partitions are its batches: leave batch_rows='plan', or build the bag "
                             "with dask.bag.from_sequence(items, partition_size=...)")
        bag = items
    elif batch_rows != "plan" and (isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1):
        raise ValueError(f"batch_rows must be a positive number of items or 'plan', got {batch_rows!r}")
    runner = _ItemRunner(func, on_error, int(min_batch_rows or 1))
    if bag is not None:
        parts: list[Any] = bag.to_delayed()
    elif not len(items):
        return []
    else:
        # Slices, each in a holder dask does not look into: dask.bag.from_sequence would hash every item
        # (seconds for thousands of small arrays) and a bare list would become a task per item.
        per = -(-len(items) // MAX_BATCHES) if batch_rows == "plan" else int(batch_rows)
        parts = [_Batch(items[lo : lo + per]) for lo in range(0, len(items), per)]
    done: dict[int, tuple[list[Any], Ranges]] = {}
    run_blocks(functools.partial(_run, runner=runner), {i: (p,) for i, p in enumerate(parts)}, name="db-map-items",
               on_done=done.__setitem__, cancel=cancel, progress=progress, label="map_batches", resumable=False)
    results: list[Any] = []
    flagged: Ranges = []
    for i in range(len(parts)):
        values, ranges = done[i]
        flagged.extend((a + len(results), b + len(results)) for a, b in ranges)
        results.extend(values)
    warn_flagged(merged_ranges(flagged), runner.name, noun="items")
    return results


def _run(i: int, part: Any, *, runner: _ItemRunner) -> tuple[list[Any], Ranges]:
    """One batch's task."""
    return runner.run(i, part.items if isinstance(part, _Batch) else part)


class _Batch:
    """A batch of items, opaque to dask's traversal of task arguments."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Batch, (self.items,))
