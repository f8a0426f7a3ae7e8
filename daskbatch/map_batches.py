"""Apply a user's vectorised function to large batches of rows, with GPU, fallbacks, flags and resume.

>>> import numpy as np, daskbatch as db
>>> def log1p(batch):                      # rows in, the same rows out
...     return np.log1p(np.abs(batch))
>>> db.map_batches(log1p, np.ones((4, 2)), batch_rows=2)
array([[0.69314718, 0.69314718],
       [0.69314718, 0.69314718],
       [0.69314718, 0.69314718],
       [0.69314718, 0.69314718]])

Each batch is one dask task (:mod:`daskbatch.engine.blockrun`), on the device
``device`` names; ``"auto"`` sends host batches to the GPU when it passes
daskbatch's GPU preflight and a batch is large enough to pay for its transfer
(:mod:`daskbatch.planning.devices`, ``daskbatch.gpu-min-batch-bytes``), else
runs them on the CPU.  The choice is logged and recorded in the output's
provenance.  A batch that fails is handled by ``on_error``, one mode or
``("fallback", "flag")``:

``"raise"``
    a :class:`BatchError` naming the batch's rows, chained to the original error;
``"fallback"``
    on the GPU: a memory error (``cupy.cuda.memory.OutOfMemoryError`` or any
    ``MemoryError``) splits the batch in halves, retried on the GPU down to
    ``min_batch_rows`` (default ``batch_rows // 1024``); a piece that still fails, or any other error from the
    GPU (retrying smaller would not help), runs on the CPU, and so does
    everything when CuPy is missing; a :class:`~daskbatch.errors.GPUFallbackWarning`
    says so once.  On the CPU a failing batch is bisected down to
    ``min_batch_rows`` (default 1), and a smallest piece that still fails raises a
    :class:`BatchError` with its rows;
``"flag"``
    a failing batch is bisected down to ``min_batch_rows`` (single rows by
    default) and only the smallest pieces that still fail
    become NaN; a per-row mask records them (the ``failed`` array of the output
    store, the mask of the returned masked array), the provenance lists the
    ranges and a :class:`FlaggedRowsWarning` says so;
``("fallback", "flag")``
    both: retried on the CPU first, then only the rows that still fail are flagged.

With ``device="auto"`` a batch that fails on the GPU runs on the CPU whatever
``on_error`` says (the GPU was daskbatch's choice, not the caller's).

``func`` must treat rows independently (a row's output depends on that row
only): then the output is the same for any batch size, which is what makes
splitting, resuming and ``batch_rows`` safe.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from daskbatch._warnings import warn
from daskbatch.engine.blockrun import DEVICES, on_device, run_blocks
from daskbatch.engine.checkpoint.fingerprint import function_token, output_items
from daskbatch.engine.inputs import as_feature_matrix
from daskbatch.errors import GPUFallbackWarning
from daskbatch.io.rowstore import (
    ArraySpec,
    OutputReport,
    RegionWriter,
    RowStore,
    layout,
    row_ranges,
)
from daskbatch.planning.devices import DeviceChoice
from daskbatch.transforms.apply import _created, input_fingerprint, local_path, regular_rows

__all__ = ["BatchError", "FlaggedRowsWarning", "map_batches"]

log = logging.getLogger(__name__)

KIND = "map_batches"
ON_ERROR = ("raise", "flag", "fallback")
#: Rows of the first batch run before the others, to learn the output's width and dtype.
PROBE_ROWS = 8
Ranges = list[tuple[int, int]]


class BatchError(RuntimeError):
    """``func`` failed on a batch; the message names its rows (chained to the original error)."""


class Misuse(ValueError):
    """``func`` broke its contract (a result of the wrong length or shape): never retried or flagged."""


class _LossyCast(Misuse):
    """``func`` returned values that the output dtype cannot hold; never retried or flagged."""


class FlaggedRowsWarning(UserWarning):
    """``map_batches(on_error="flag")`` flagged rows that failed; their output is NaN."""


def on_error_modes(on_error: Any) -> tuple[bool, bool]:
    """Read ``on_error``: one of :data:`ON_ERROR`, or ``"fallback"`` and ``"flag"`` together.

    Parameters
    ----------
    on_error : str or sequence of str
        As given to :func:`map_batches`.

    Returns
    -------
    tuple of bool
        ``(fallback, flag)``.
    """
    modes = (on_error,) if isinstance(on_error, str) else tuple(on_error) if isinstance(on_error, list | tuple) else ()
    if not modes or any(m not in ON_ERROR for m in modes) or ("raise" in modes and len(modes) > 1):
        raise ValueError(f"on_error must be one of {ON_ERROR} or ('fallback', 'flag'), got {on_error!r}")
    return "fallback" in modes, "flag" in modes


def _rows_text(lo: int, hi: int, noun: str = "rows") -> str:
    return f"{noun[:-1]} {lo:,}" if hi - lo == 1 else f"{noun} {lo:,}-{hi - 1:,}"


def _failure(name: str, lo: int, hi: int, exc: BaseException) -> BatchError:
    return BatchError(f"{name} failed on {_rows_text(lo, hi)}: {type(exc).__name__}: {exc}")


def _is_memory_error(exc: BaseException) -> bool:
    """Out of (device) memory: CuPy's OutOfMemoryError is a MemoryError; cuBLAS/cuSOLVER say ALLOC_FAILED."""
    text = str(exc).upper()
    return isinstance(exc, MemoryError) or "OUT OF MEMORY" in text or "ALLOC_FAILED" in text


def bisect(run: Callable[[Any], Any], piece: Any, lo: int, min_rows: int,
           leaf: Callable[[Any, int, BaseException], Any], join: Callable[[list[Any]], Any],
           when: Callable[[BaseException], bool] = lambda e: True) -> Any:
    """Return ``run(piece)``; on a failure that ``when`` accepts, bisect down to ``min_rows``, then ``leaf``.

    Parameters
    ----------
    run : callable
        The attempt on one piece.
    piece : sliceable
        Rows (an array) or items (a list).
    lo : int
        Index of the piece's first row, for ``leaf``.
    min_rows : int
        A failing piece this small is not split again.
    leaf : callable
        ``leaf(piece, lo, error)`` for a smallest failing piece: raise, or return its stand-in output.
    join : callable
        Joins the outputs of two halves (a list of two).
    when : callable, optional
        Which errors split the piece (default: all); the others go to ``leaf`` at once.

    Returns
    -------
    object
        The piece's output.
    """
    n = len(piece)
    try:
        return run(piece)
    except Misuse:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
        if n <= min_rows or not when(exc):
            return leaf(piece, lo, exc)
    mid = n // 2
    return join([bisect(run, piece[:mid], lo, min_rows, leaf, join, when),
                 bisect(run, piece[mid:], lo + mid, min_rows, leaf, join, when)])


class _Runner:
    """Runs ``func`` on one batch as ``device`` and ``on_error`` say (picklable: it travels to workers)."""

    def __init__(
        self, func: Callable[[Any], Any], columns: int, dtype: np.dtype, device: str, on_error: Any, min_rows: int,
        gpu_min_rows: int | None = None, gpu_fallback: bool = False,
    ) -> None:
        self.func = func
        self.name = getattr(func, "__name__", "func")
        self.columns = columns
        self.dtype = dtype
        self.device = device
        self.fallback, self.flag = on_error_modes(on_error)
        # device="auto": the GPU was daskbatch's choice, so a batch it fails runs on the CPU instead
        self.gpu_fallback = self.fallback or gpu_fallback
        self.min_rows = min_rows
        self.gpu_min_rows = min_rows if gpu_min_rows is None else gpu_min_rows
        self.declared = False

    # -- one call
    def call(self, block: Any) -> np.ndarray:
        """``func(block)`` checked (same rows, the probed width) and copied to a host array of ``dtype``."""
        from daskbatch.stats.backend import to_numpy

        # A retry must start from the batch as read: the failed attempt may have changed its argument in place.
        retried = self.fallback or self.flag or self.gpu_fallback
        result = self.func(block.copy() if retried else block)
        rows = int(block.shape[0])
        if not hasattr(result, "shape") or result.shape[:1] != (rows,) or result.ndim not in (1, 2):
            shape = tuple(getattr(result, "shape", ()))
            raise Misuse(f"returned shape {shape} for {rows} rows; expected ({rows}, {self.columns})")
        host = to_numpy(result)
        host = host.reshape(rows, -1) if host.ndim == 1 else host
        if host.shape[1] != self.columns:
            raise Misuse(f"returned {host.shape[1]} columns; the first batch had {self.columns}")
        return _cast(host, self.dtype, self.declared)

    def fill(self, rows: int) -> np.ndarray:
        """The output of ``rows`` flagged rows: NaN (zero for integer outputs; the mask tells them apart)."""
        return np.full((rows, self.columns), np.nan if self.dtype.kind in "fc" else 0, dtype=self.dtype)

    def narrow(self, block: Any, lo: int, flagged: Ranges) -> np.ndarray:
        """Where it is, bisecting on failure; the smallest failing pieces are flagged ("flag") or raise."""

        def leaf(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            if not self.flag:
                raise _failure(self.name, at, at + len(piece), exc) from exc
            flagged.append((at, at + len(piece)))
            return self.fill(len(piece))

        if not (self.fallback or self.flag):
            try:
                return self.call(block)
            except Misuse:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
                raise _failure(self.name, lo, lo + len(block), exc) from exc
        return bisect(self.call, block, lo, self.min_rows, leaf, np.concatenate)

    def gpu(self, block: Any, lo: int, cpu_rows: Ranges, flagged: Ranges) -> np.ndarray:
        """On the GPU, halving on memory errors; what still fails runs on the CPU."""
        from daskbatch.stats.backend import to_numpy

        def to_cpu(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            _free_gpu_memory()
            cpu_rows.append((at, at + len(piece)))
            return self.narrow(to_numpy(piece), at, flagged)

        def attempt(piece: Any) -> np.ndarray:
            try:
                return self.call(piece)
            except Exception:
                _free_gpu_memory()  # before a smaller retry, give back what the failed call held
                raise

        return bisect(attempt, block, lo, self.gpu_min_rows, to_cpu, np.concatenate, when=_is_memory_error)

    # -- one batch
    def run(self, block: Any, lo: int) -> tuple[np.ndarray, Ranges, Ranges]:
        """The batch's output, the row ranges flagged, and those that fell back to the CPU."""
        from daskbatch.stats.backend import to_numpy

        rows = int(block.shape[0])
        flagged: Ranges = []
        cpu_rows: Ranges = []
        try:
            if self.device != "gpu":
                return self.narrow(to_numpy(block), lo, flagged), flagged, cpu_rows
            try:
                moved = on_device(block, "gpu")
            except Exception:  # no device, out of memory for the copy: the batch stays on the host
                if not self.gpu_fallback:
                    raise
                _free_gpu_memory()
                cpu_rows.append((lo, lo + rows))
                return self.narrow(to_numpy(block), lo, flagged), flagged, cpu_rows
            if self.gpu_fallback:
                return self.gpu(moved, lo, cpu_rows, flagged), flagged, cpu_rows
            return self.narrow(moved, lo, flagged), flagged, cpu_rows
        except Misuse as exc:  # a wrong dtype or shape is the call's mistake, not a failed batch: never flagged
            raise BatchError(f"{self.name} on {_rows_text(lo, lo + rows)}: {exc}") from None


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
    """Width and dtype of ``func``'s output, from the first rows (where they fail, as ``on_error`` allows)."""
    from daskbatch.stats.backend import to_numpy

    n = min(PROBE_ROWS, int(x.shape[0]))
    head = x[:n].compute()
    tries: list[Callable[[], Any]] = [lambda: on_device(head, runner.device)]
    if runner.device == "gpu" and runner.gpu_fallback:
        tries.append(lambda: to_numpy(head))
    if runner.flag:  # a bad row among the first ones is flagged later, not fatal here
        tries.extend(functools.partial(lambda i: to_numpy(head[i : i + 1]), i) for i in range(n))
    first: Exception | None = None
    for k, take in enumerate(tries):
        try:
            piece = take()
        except Exception:  # the copy to the GPU failed: the next try is on the host
            if k + 1 == len(tries):
                raise
            continue
        try:
            result = runner.func(piece)
            break
        except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
            first = first or exc
    else:
        assert first is not None
        raise BatchError(
            f"{runner.name} failed on {_rows_text(0, n)} (run first to learn the output's columns): "
            f"{type(first).__name__}: {first}"
        ) from first
    shape = tuple(getattr(result, "shape", ()))
    if len(shape) not in (1, 2) or shape[0] != len(piece):
        raise ValueError(
            f"{runner.name} returned shape {shape} for {len(piece)} rows; it must return one row per input row"
        )
    return (shape[1] if len(shape) == 2 else 1), np.dtype(str(result.dtype))


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
    progress: bool = False,
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
        back (:func:`daskbatch.map_items.map_items`).
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
    progress : bool, default False
        A progress bar: a widget in Jupyter, a line on stderr in a terminal (start and end are logged either way).
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
    ImportError
        ``device="gpu"`` without CuPy, unless ``on_error`` includes ``"fallback"`` (then the CPU, with a warning).
    Cancelled
        Stopped by ``cancel``.
    Interrupted
        Stopped by a signal (SIGINT, SIGTERM).
    """
    t0 = time.perf_counter()
    fallback, flag = on_error_modes(on_error)
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    if _is_items(x):
        from daskbatch.map_items import map_items

        return map_items(func, x, out=out, batch_rows=batch_rows, device=device, on_error=on_error,
                         min_batch_rows=min_batch_rows, progress=progress, cancel=cancel)
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
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
    # Failures are bisected down to single rows; out-of-memory halving on the GPU stops sooner (tiny pieces waste it).
    min_rows, gpu_min_rows = int(min_batch_rows or 1), int(min_batch_rows or max(1, per // 1024))
    choice = _where(device, fallback, batch_bytes=per * int(xs.shape[1]) * xs.dtype.itemsize,
                    on_gpu=type(getattr(xs, "_meta", None)).__module__.split(".")[0] == "cupy")

    runner = _Runner(func, 0, np.dtype("f8"), choice.device, on_error, min_rows, gpu_min_rows,
                     gpu_fallback=device == "auto" and choice.device == "gpu")
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
        _warn_cpu_rows(cpu_rows, runner.name)
        if not flag:
            return result
        mask = np.zeros(rows, dtype=bool)
        for a, b in failed:
            mask[a:b] = True
        _warn_flagged(row_ranges(mask), runner.name)
        return np.ma.MaskedArray(result, mask=np.broadcast_to(mask[:, None], result.shape).copy())

    fingerprint = input_fingerprint(data)
    func_name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', runner.name)}"
    # What must match to resume: the data (content token), the function by its code, the bit-changing settings.
    doc = {"kind": KIND, "items": output_items(
        data, {"function": f"{func_name}, {function_token(func)}"},
        {"batch_rows": per, "on_error": _on_error_text(on_error), "columns": columns, "dtype": str(dtype), "device": device,
         "min_batch_rows": min_rows})}
    arrays = [ArraySpec("X", dtype, columns)]
    if ys is not None:
        arrays.append(ArraySpec("y", np.dtype(ys.dtype), None, ("sample",)))
    if flag:
        arrays.append(ArraySpec("failed", np.dtype(bool), None, ("sample",)))
    from daskbatch._version import __version__

    attrs = {
        **layout(ys is not None, "failed" if flag else None),
        "feature_names": list(names),
        "provenance": {"input": fingerprint, "func": func_name, "on_error": _on_error_text(on_error), "batch_rows": per,
                       "device": choice.device, "device_reason": choice.reason,
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
        if flag:  # from the store: batches flagged by earlier, interrupted runs count too
            ranges = row_ranges(np.asarray(store.writer.arrays["failed"][:]))
        if not store.complete:
            prov = {**attrs["provenance"], "failed_rows": [list(r) for r in ranges],
                    "cpu_rows": [list(r) for r in _merged(cpu_rows)]}
            store.finish({"provenance": prov})
    finally:
        store.close()
    _warn_cpu_rows(cpu_rows, runner.name)
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


def _warn_flagged(ranges: Ranges, name: str, noun: str = "rows") -> None:
    if not ranges:
        return
    shown = ", ".join(_rows_text(a, b, noun) for a, b in ranges[:5]) + (", ..." if len(ranges) > 5 else "")
    rows = sum(b - a for a, b in ranges)
    count = f"{rows:,} {noun}" if rows != 1 else f"1 {noun[:-1]}"
    warn(f"{name} failed on {count} ({len(ranges)} range(s)), flagged: {shown}", FlaggedRowsWarning)


def _merged(ranges: Ranges) -> Ranges:
    """Sorted ranges with touching ones joined."""
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def _warn_cpu_rows(ranges: Ranges, name: str) -> None:
    """Say once per call which rows meant for the GPU ran on the CPU."""
    if not ranges:
        return
    merged = _merged(ranges)
    shown = ", ".join(_rows_text(a, b) for a, b in merged[:5]) + (", ..." if len(merged) > 5 else "")
    text = f"{name}: {sum(b - a for a, b in merged):,} rows ran on the CPU after failing on the GPU: {shown}"
    log.warning(text)
    warn(text, GPUFallbackWarning)


def _on_error_text(on_error: Any) -> str:
    """``on_error`` for the provenance and the resume fingerprint: ``"fallback+flag"`` for the combination."""
    return on_error if isinstance(on_error, str) else "+".join(sorted(on_error))


def _is_items(x: Any) -> bool:
    """A sequence of Python items (a list or tuple, or a dask bag), not an array or a store."""
    if isinstance(x, list | tuple):
        return True
    import dask.bag

    return isinstance(x, dask.bag.Bag)


def _where(device: str, fallback: bool, *, batch_bytes: int, on_gpu: bool) -> DeviceChoice:
    """The device the batches run on: ``device``, or ``"auto"``'s choice; CuPy missing falls back when allowed."""
    if device == "auto":
        from daskbatch.engine.devices import auto_device

        return auto_device(batch_bytes, on_gpu=on_gpu)
    if device == "cpu":
        return DeviceChoice("cpu", "device='cpu'")
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        if not fallback:
            raise ImportError("device='gpu' needs CuPy: pip install 'daskbatch[gpu]'") from exc
        text = f"device='gpu' needs CuPy, which does not import ({exc}): every batch runs on the CPU"
        log.warning(text)
        warn(text, GPUFallbackWarning)
        return DeviceChoice("cpu", text)
    return DeviceChoice("gpu", "device='gpu'")
