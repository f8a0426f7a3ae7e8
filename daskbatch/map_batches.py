"""Apply a user's vectorised function to large batches of rows, with GPU, fallbacks, flags and resume.

>>> import numpy as np, daskbatch as db
>>> def log1p(batch):                      # rows in, the same rows out
...     return np.log1p(np.abs(batch))
>>> db.map_batches(log1p, np.ones((4, 2)), batch_rows=2)
array([[0.69314718, 0.69314718],
       [0.69314718, 0.69314718],
       [0.69314718, 0.69314718],
       [0.69314718, 0.69314718]])

Each batch is one dask task (:mod:`daskbatch.engine.blockrun`).  A batch that
fails is handled by ``on_error``:

``"raise"``
    a :class:`BatchError` naming the batch's rows, chained to the original error;
``"flag"``
    its rows become NaN, a per-row mask records them (the ``failed`` array of
    the output store, the mask of the returned masked array) and the
    provenance lists the ranges; a :class:`FlaggedRowsWarning` says so;
``"fallback"``
    on the GPU: a memory error (``cupy.cuda.memory.OutOfMemoryError`` or any
    ``MemoryError``) splits the batch in halves, retried on the GPU down to
    ``min_batch_rows``; a piece that still fails, or any other error from the
    GPU (retrying smaller would not help), runs on the CPU.  On the CPU a
    failing batch is split in halves down to ``min_batch_rows``, and a
    smallest piece that still fails raises a :class:`BatchError` with its rows.

``func`` must treat rows independently (a row's output depends on that row
only): then the output is the same for any batch size, which is what makes
splitting, resuming and ``batch_rows`` safe.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from daskbatch._warnings import warn
from daskbatch.engine.blockrun import check_device, on_device, run_blocks
from daskbatch.engine.checkpoint.fingerprint import function_token, output_items
from daskbatch.engine.inputs import as_feature_matrix
from daskbatch.io.rowstore import (
    ArraySpec,
    OutputReport,
    RegionWriter,
    RowStore,
    layout,
    row_ranges,
)
from daskbatch.transform import _created, input_fingerprint, local_path, regular_rows

__all__ = ["BatchError", "FlaggedRowsWarning", "map_batches"]

KIND = "map_batches"
ON_ERROR = ("raise", "flag", "fallback")
#: Rows of the first batch run before the others, to learn the output's width and dtype.
PROBE_ROWS = 8


class BatchError(RuntimeError):
    """``func`` failed on a batch; the message names its rows (chained to the original error)."""


class _LossyCast(ValueError):
    """``func`` returned values that the output dtype cannot hold; never retried or flagged."""


class FlaggedRowsWarning(UserWarning):
    """``map_batches(on_error="flag")`` flagged rows whose batch failed; their output is NaN."""


def _rows_text(lo: int, hi: int) -> str:
    return f"rows {lo:,}-{hi - 1:,}"


def _failure(name: str, lo: int, hi: int, exc: BaseException) -> BatchError:
    return BatchError(f"{name} failed on {_rows_text(lo, hi)}: {type(exc).__name__}: {exc}")


def _is_memory_error(exc: BaseException) -> bool:
    """Out of (device) memory: CuPy's OutOfMemoryError is a MemoryError; cuBLAS/cuSOLVER say ALLOC_FAILED."""
    text = str(exc).upper()
    return isinstance(exc, MemoryError) or "OUT OF MEMORY" in text or "ALLOC_FAILED" in text


class _Runner:
    """Runs ``func`` on one batch as ``on_error`` says (picklable: it travels to workers)."""

    def __init__(
        self, func: Callable[[Any], Any], columns: int, dtype: np.dtype, device: str, on_error: str, min_rows: int
    ) -> None:
        self.func = func
        self.name = getattr(func, "__name__", "func")
        self.columns = columns
        self.dtype = dtype
        self.device = device
        self.on_error = on_error
        self.min_rows = min_rows
        self.declared = False

    # -- one call
    def call(self, block: Any) -> np.ndarray:
        """``func(block)`` checked (same rows, the probed width) and copied to a host array of ``dtype``."""
        from daskbatch.stats.backend import to_numpy

        # A retry must start from the batch as read: the failed attempt may have changed its argument in place.
        result = self.func(block.copy() if self.on_error == "fallback" else block)
        rows = int(block.shape[0])
        if not hasattr(result, "shape") or result.shape[:1] != (rows,) or result.ndim not in (1, 2):
            shape = tuple(getattr(result, "shape", ()))
            raise ValueError(f"returned shape {shape} for {rows} rows; expected ({rows}, {self.columns})")
        host = to_numpy(result)
        host = host.reshape(rows, -1) if host.ndim == 1 else host
        if host.shape[1] != self.columns:
            raise ValueError(f"returned {host.shape[1]} columns; the first batch had {self.columns}")
        return _cast(host, self.dtype, self.declared)

    # -- splitting
    def split(self, run: Callable[[Any], np.ndarray], block: Any, lo: int,
              leaf: Callable[[Any, int, BaseException], np.ndarray],
              when: Callable[[BaseException], bool] = lambda e: True) -> np.ndarray:
        """``run(block)``; on a failure that ``when`` accepts, halves until ``min_rows``, then ``leaf``."""
        n = int(block.shape[0])
        try:
            return run(block)
        except _LossyCast:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
            if n <= self.min_rows or not when(exc):
                return leaf(block, lo, exc)
        mid = n // 2
        return np.concatenate([
            self.split(run, block[:mid], lo, leaf, when),
            self.split(run, block[mid:], lo + mid, leaf, when),
        ])

    def cpu(self, block: Any, lo: int) -> np.ndarray:
        """On the host, halving on failure; the smallest failing piece raises with its rows."""
        from daskbatch.stats.backend import to_numpy

        def give_up(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            raise _failure(self.name, at, at + int(piece.shape[0]), exc) from exc

        return self.split(self.call, to_numpy(block), lo, give_up)

    def gpu(self, block: Any, lo: int, cpu_rows: list[tuple[int, int]]) -> np.ndarray:
        """On the GPU, halving on memory errors; what still fails runs on the CPU."""

        def to_cpu(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            _free_gpu_memory()
            cpu_rows.append((at, at + int(piece.shape[0])))
            return self.cpu(piece, at)

        def attempt(piece: Any) -> np.ndarray:
            try:
                return self.call(piece)
            except Exception:
                _free_gpu_memory()  # before a smaller retry, give back what the failed call held
                raise

        return self.split(attempt, block, lo, to_cpu, when=_is_memory_error)

    # -- one batch
    def run(self, block: Any, lo: int) -> tuple[np.ndarray, list[tuple[int, int]], list[tuple[int, int]]]:
        """The batch's output, the row ranges flagged, and those that fell back to the CPU."""
        from array_api_compat import is_cupy_array

        rows = int(block.shape[0])
        block = on_device(block, self.device)
        cpu_rows: list[tuple[int, int]] = []
        try:
            if self.on_error == "fallback":
                out = self.gpu(block, lo, cpu_rows) if is_cupy_array(block) else self.cpu(block, lo)
                return out, [], cpu_rows
            return self.call(block), [], []
        except _LossyCast as exc:  # a wrong dtype is the call's mistake, not a failed batch: never flagged
            raise BatchError(f"{self.name} on {_rows_text(lo, lo + rows)}: {exc}") from None
        except BatchError:  # "fallback" gave up on its smallest piece, naming its rows
            raise
        except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
            if self.on_error == "raise":
                raise _failure(self.name, lo, lo + rows, exc) from exc
        fill = np.nan if self.dtype.kind in "fc" else 0
        return np.full((rows, self.columns), fill, dtype=self.dtype), [(lo, lo + rows)], []


def _cast(values: np.ndarray, dtype: np.dtype, declared: bool) -> np.ndarray:
    """``values`` as ``dtype``, refusing a cast that changes a value (a declared float dtype may round)."""
    if values.dtype == dtype or np.can_cast(values.dtype, dtype, "safe"):
        return np.asarray(values, dtype=dtype)
    with np.errstate(all="ignore"):
        out = np.asarray(values, dtype=dtype)
        if declared and dtype.kind == "f" and values.dtype.kind == "f":
            bad = np.isfinite(values) & ~np.isfinite(out)  # rounding was asked for; overflow was not
        else:
            back = out.astype(values.dtype)
            bad = ~((back == values) | (np.isnan(back) & np.isnan(values)) if values.dtype.kind in "fc"
                    else back == values)
    if bad.any():
        first = np.unravel_index(int(np.argmax(bad)), bad.shape)
        what = "declared" if declared else "of the first rows"
        raise _LossyCast(
            f"returned {values.dtype} values that the output dtype {dtype} ({what}) cannot hold: "
            f"{values[first].item()!r} would become {out[first].item()!r}; pass dtype= a type that holds them"
        )
    return out


def _free_gpu_memory() -> None:
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:  # pragma: no cover - only called after a CuPy block failed
        pass


def _batch(
    i: int, xb: Any, yb: Any, *, runner: _Runner, per: int, writer: RegionWriter | None
) -> tuple[np.ndarray | None, list[tuple[int, int]], list[tuple[int, int]]]:
    from daskbatch.stats.backend import to_numpy

    lo = i * per
    out, failed, cpu_rows = runner.run(xb, lo)
    if writer is None:
        return out, failed, cpu_rows
    values = {"X": out}
    if yb is not None:
        values["y"] = to_numpy(yb)
    if "failed" in writer.arrays:
        mask = np.zeros(out.shape[0], dtype=bool)
        for a, b in failed:
            mask[a - lo : b - lo] = True
        values["failed"] = mask
    writer.write(i, values)
    return None, failed, cpu_rows


def _probe(runner: _Runner, x: Any) -> tuple[int, np.dtype]:
    """Width and dtype of ``func``'s output, from the first rows."""
    n = min(PROBE_ROWS, int(x.shape[0]))
    head = on_device(x[:n].compute(), runner.device)
    try:
        result = runner.func(head)
    except Exception as exc:
        raise BatchError(
            f"{runner.name} failed on {_rows_text(0, n)} (run first to learn the output's columns): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    shape = tuple(getattr(result, "shape", ()))
    if len(shape) not in (1, 2) or shape[0] != n:
        raise ValueError(f"{runner.name} returned shape {shape} for {n} rows; it must return one row per input row")
    return (shape[1] if len(shape) == 2 else 1), np.dtype(str(result.dtype))


def map_batches(
    func: Callable[[Any], Any],
    x: Any,
    *,
    out: str | os.PathLike[str] | None = None,
    batch_rows: int | Literal["plan"] = "plan",
    device: Literal["auto", "cpu", "gpu"] = "auto",
    on_error: Literal["raise", "flag", "fallback"] = "raise",
    min_batch_rows: int | None = None,
    feature_names: Sequence[str] | None = None,
    dtype: str | np.dtype | None = None,
    overwrite: bool = False,
    progress: bool = False,
    cancel: threading.Event | None = None,
) -> Any:
    """Apply ``func`` (a block of rows -> the same rows, any number of columns) to all rows, batch by batch.

    Parameters
    ----------
    func : callable
        Takes a (rows, D) NumPy or CuPy array, returns (rows, K) (or (rows,)).
        Rows must be independent (see the module docstring).
    x : path, Dataset, dask or NumPy array
        The (samples x features) input.
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
        ``"auto"``: batches run where they are.
    on_error : {"raise", "flag", "fallback"}, default "raise"
        See the module docstring.
    min_batch_rows : int, optional
        Smallest piece ``"fallback"`` splits down to (default ``batch_rows // 1024``, at least 1).
    feature_names : sequence of str, optional
        Output column names (default: the input's when the width is unchanged, else ``out0``, ``out1``, ...).
    dtype : str or numpy.dtype, optional
        Output dtype.  Default: the dtype ``func`` gives on the first rows.
        Every batch is checked: values the output dtype cannot hold (``0.7``
        into an integer dtype, an overflow) raise a :class:`BatchError` naming
        the batch; a declared float dtype rounds finite values as asked.
    overwrite : bool, default False
        Start an existing daskbatch output again (see :func:`daskbatch.transform`).
    progress : bool, default False
        A progress bar: a widget in Jupyter, a line on stderr in a terminal (start and end are logged either way).
    cancel : threading.Event, optional
        Set it to stop at the next batch boundary (SIGINT and SIGTERM do the same);
        with ``out`` the finished batches are kept and a re-run resumes.

    Returns
    -------
    numpy.ndarray, numpy.ma.MaskedArray or OutputReport
        Without ``out``: the output (a masked array, rows of failed batches
        masked, with ``on_error="flag"``).  With ``out``: the report
        (``failed_rows`` lists flagged ranges).

    Raises
    ------
    BatchError
        ``func`` failed (``"raise"``; ``"fallback"`` when even the smallest piece fails on the CPU).
    Cancelled
        Stopped by ``cancel``.
    Interrupted
        Stopped by a signal (SIGINT, SIGTERM).
    """
    t0 = time.perf_counter()
    check_device(device)
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    data = as_feature_matrix(x)
    if batch_rows == "plan":
        per_request = None
    elif isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a positive number of rows or 'plan', got {batch_rows!r}")
    else:
        per_request = batch_rows
    xs, ys, per = regular_rows(data, per_request)
    if min_batch_rows is not None and (isinstance(min_batch_rows, bool) or min_batch_rows < 1):
        raise ValueError(f"min_batch_rows must be >= 1, got {min_batch_rows!r}")
    min_rows = int(min_batch_rows or max(1, per // 1024))

    runner = _Runner(func, 0, np.dtype("f8"), device, on_error, min_rows)
    columns, probed = _probe(runner, xs)
    runner.declared = dtype is not None
    dtype = probed if dtype is None else np.dtype(dtype)
    runner.columns, runner.dtype = columns, dtype
    names = _output_names(feature_names, data.feature_names, columns)
    rows = int(xs.shape[0])
    xb = xs.to_delayed().ravel()
    yb = ys.to_delayed().ravel() if ys is not None else [None] * len(xb)
    label = "map_batches" if progress else None
    failed: list[tuple[int, int]] = []
    cpu_rows: list[tuple[int, int]] = []

    if out is None:
        result = np.empty((rows, columns), dtype=dtype)

        def place(i: int, r: Any) -> None:
            block, f, c = r
            result[i * per : i * per + block.shape[0]] = block
            failed.extend(f)
            cpu_rows.extend(c)

        fn = functools.partial(_batch, runner=runner, per=per, writer=None)
        run_blocks(fn, {i: (xb[i], None) for i in range(len(xb))}, name="db-map-batches", on_done=place,
                   cancel=cancel, progress=label, rows=rows)
        if on_error != "flag":
            return result
        _warn_flagged(sorted(failed), runner.name)
        mask = np.zeros(rows, dtype=bool)
        for a, b in failed:
            mask[a:b] = True
        return np.ma.MaskedArray(result, mask=np.broadcast_to(mask[:, None], result.shape).copy())

    fingerprint = input_fingerprint(data)
    func_name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', runner.name)}"
    # What must match to resume: the data (content token), the function by its code, the bit-changing settings.
    doc = {"kind": KIND, "items": output_items(
        data, {"function": f"{func_name}, {function_token(func)}"},
        {"batch_rows": per, "on_error": on_error, "columns": columns, "dtype": str(dtype), "device": device,
         "min_batch_rows": min_rows})}
    arrays = [ArraySpec("X", dtype, columns)]
    if ys is not None:
        arrays.append(ArraySpec("y", np.dtype(ys.dtype), None, ("sample",)))
    if on_error == "flag":
        arrays.append(ArraySpec("failed", np.dtype(bool), None, ("sample",)))
    from daskbatch._version import __version__

    attrs = {
        **layout(ys is not None, "failed" if on_error == "flag" else None),
        "feature_names": list(names),
        "provenance": {"input": fingerprint, "func": func_name, "on_error": on_error, "batch_rows": per,
                       "dtype": str(dtype), "daskbatch_version": __version__, "created": _created()},
    }
    store = RowStore.open(out, kind=KIND, rows=rows, chunk_rows=per, arrays=arrays, attrs=attrs, doc=doc,
                          overwrite=overwrite, protect=local_path(data))
    written: list[int] = []

    def done(i: int, r: Any) -> None:
        """Record block ``i`` as written, and the rows its function ran on the CPU.

        Parameters
        ----------
        i : int
            The block.
        r : tuple
            The block's result; its third item lists the rows run on the CPU.
        """
        store.mark_done(i)
        written.append(i)
        cpu_rows.extend(r[2])

    try:
        todo = store.todo
        if todo:
            fn = functools.partial(_batch, runner=runner, per=per, writer=store.writer)
            run_blocks(fn, {i: (xb[i], yb[i]) for i in todo}, name="db-map-batches", on_done=done,
                       cancel=cancel, progress=label, total=store.blocks, rows=rows)
        ranges: list[tuple[int, int]] = []
        if on_error == "flag":  # from the store: batches flagged by earlier, interrupted runs count too
            ranges = row_ranges(np.asarray(store.writer.arrays["failed"][:]))
        if not store.complete:
            prov = {**attrs["provenance"], "failed_rows": [list(r) for r in ranges]}
            store.finish({"provenance": prov})
    finally:
        store.close()
    if ranges:
        _warn_flagged(ranges, runner.name)
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


def _warn_flagged(ranges: list[tuple[int, int]], name: str) -> None:
    if not ranges:
        return
    shown = ", ".join(_rows_text(a, b) for a, b in ranges[:5]) + (", ..." if len(ranges) > 5 else "")
    rows = sum(b - a for a, b in ranges)
    warn(
        f"{name} failed on {len(ranges)} batch(es), {rows:,} rows flagged (NaN): {shown}",
        FlaggedRowsWarning,
    )
