"""Run one dask task per row block and stop cleanly (:func:`run_blocks`); call the user's function on a batch.

Used by :func:`daskbatch.transform` and :func:`daskbatch.map_batches`: each result reaches ``on_done`` in the calling
thread as its block finishes, and a stop (an event, SIGINT or SIGTERM) starts no further block.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
from dask.callbacks import Callback

from daskbatch._common import warn
from daskbatch.engine.run_options import on_device
from daskbatch.errors import BatchError, Cancelled, FlaggedRowsWarning, Interrupted
from daskbatch.runtime.capacity import active_client
from daskbatch.runtime.progress import Progress, ProgressCallback
from daskbatch.stats.numerics import to_numpy

if TYPE_CHECKING:
    from daskbatch.io.rowstore import RegionWriter

__all__ = ["BatchRunner", "compute_each", "probe_output", "run_batch", "run_blocks"]

ON_ERROR = ("raise", "flag", "fallback")
#: Rows of the first batch run once to learn the output's width and dtype.
PROBE_ROWS = 8
Ranges = list[tuple[int, int]]


class _Stop(Exception):
    """Raised in dask's scheduler loop to start no further task."""


class _Tracker:
    """Blocks running and finished in this process (so a stop can wait for the running ones)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running = 0
        self.finished: dict[int, Any] = {}

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def tracked(i: int, *args: Any) -> Any:
            with self.cond:
                self.running += 1
            try:
                result = fn(i, *args)
                with self.cond:
                    self.finished[i] = result
                return result
            finally:
                with self.cond:
                    self.running -= 1
                    self.cond.notify_all()

        return tracked

    def wait_idle(self) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.running == 0)


@contextlib.contextmanager
def _signals_set(stop: threading.Event, started: threading.Event) -> Iterator[list[str]]:
    """SIGINT and SIGTERM set ``stop`` (main thread only), or raise Interrupted before ``started``; yields their names."""
    # Before started is set the graph is being built, which checks no stop request: the signal raises at once.
    got: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def handler(signum: int, frame: Any) -> None:
        got.append(signal.Signals(signum).name)
        stop.set()
        if not started.is_set():
            raise Interrupted(
                f"interrupted by {got[0]} before any block started: nothing ran, run the same call again"
            )

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_blocks(
    fn: Callable[..., Any],
    args: Mapping[int, tuple[Any, ...]],
    *,
    name: str,
    on_done: Callable[[int, Any], None],
    cancel: threading.Event | None = None,
    progress: bool | ProgressCallback = False,
    label: str | None = None,
    total: int | None = None,
    rows: int | None = None,
    resumable: bool = True,
) -> None:
    """Compute ``fn(i, *args[i])`` for every block ``i``, calling ``on_done(i, result)`` in this thread as each finishes."""
    # cancel (set from another thread), SIGINT or SIGTERM stop at the next block boundary: Cancelled or
    # Interrupted, the finished blocks reported. total and rows are the whole job's (blocks not in args count
    # as done); resumable: on_done keeps finished blocks where the same call finds them again (an output store).
    from dask import delayed  # lazy: dask

    stop = cancel if cancel is not None else threading.Event()
    total = len(args) if total is None else total
    finished: set[int] = set()
    bar = Progress(label or name, total, rows=rows, progress=progress)

    def done(i: int, result: Any) -> None:
        """Hand block ``i``'s result on and advance the progress bar."""
        on_done(i, result)
        finished.add(i)
        bar.advance()

    started = threading.Event()
    with bar, _signals_set(stop, started) as got:
        bar.skip(total - len(args))
        client = active_client()
        if client is not None:
            tasks = [delayed(fn, pure=False)(i, *a, dask_key_name=f"{name}-{i}") for i, a in args.items()]
            started.set()  # a graph half sent to the scheduler could not be cancelled: stop at a block boundary
            compute_each(client, tasks, list(args), done, stop)
        else:
            _run_local(fn, args, name, done, stop, started)
    if stop.is_set() and len(finished) < len(args):
        # Only an output store keeps finished blocks: results held in memory are lost with the stop.
        kept = ("what finished is kept, run the same call again to resume" if resumable
                else "results are returned in memory, so nothing is kept: run the call again to start over")
        if not got:  # the caller's cancel event, not a signal
            raise Cancelled(f"cancelled at a block boundary; {kept}")
        raise Interrupted(f"stopped by {got[0]} at a block boundary; {kept}")


def _run_local(
    fn: Callable[..., Any], args: Mapping[int, tuple[Any, ...]], name: str,
    done: Callable[[int, Any], None], stop: threading.Event, started: threading.Event,
) -> None:
    """Compute the blocks with a local scheduler; ``started`` is set once the graph is built and runs."""
    from dask import delayed  # lazy: dask

    tracker = _Tracker()
    keys = {f"{name}-{i}": i for i in args}
    tasks = [delayed(tracker.wrap(fn), pure=False)(i, *a, dask_key_name=f"{name}-{i}") for i, a in args.items()]
    reported: set[int] = set()
    ours: list[Any] = []

    def start_state(dsk: Any, state: Any) -> None:
        # Called once the graph is built and ordered, before its first task: from here a stop is at a block boundary.
        if not ours and any(k in dsk for k in keys):
            ours.append(dsk)
            started.set()

    def pretask(key: Any, dsk: Any, state: Any) -> None:
        # Only this run's graph: another computation in another thread carries on.
        if stop.is_set() and ours and dsk is ours[0]:
            raise _Stop

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        i = keys.get(key) if isinstance(key, str) else None
        if i is not None and dsk is ours[0]:
            reported.add(i)
            done(i, result)

    # Our tracker lives in this process: threads (or sync), never processes.
    scheduler = dask.config.get("scheduler", None)
    scheduler = "sync" if scheduler in ("sync", "synchronous", "single-threaded") else "threads"
    try:
        with Callback(start_state=start_state, pretask=pretask, posttask=posttask):
            dask.compute(*tasks, scheduler=scheduler)
    except _Stop:
        pass
    finally:
        # Tasks already running when dask stopped (on a stop or an error) finish first, and count.
        tracker.wait_idle()
        for i, result in sorted(tracker.finished.items()):
            if i not in reported:
                reported.add(i)
                done(i, result)


def compute_each(
    client: Any, tasks: list[Any], blocks: list[int], done: Callable[[int, Any], None], stop: threading.Event | None = None,
) -> None:
    """Compute ``tasks`` on ``client``, handing each result to ``done(block, result)`` in this thread as it comes."""
    from distributed import as_completed  # lazy: distributed

    futures = client.compute(tasks)
    index = {f.key: i for f, i in zip(futures, blocks, strict=True)}
    pending = set(futures)
    try:
        for fut in as_completed(futures):
            pending.discard(fut)
            if stop is not None and stop.is_set() and fut.status == "cancelled":  # the runner says what is undone
                continue
            done(index[fut.key], fut.result())  # a unit cancelled without a stop (a lost scheduler) raises here
            fut.release()  # its result is handed on: the cluster need not hold it until the last one
            if stop is not None and stop.is_set():
                break
    finally:
        if pending:  # a stop, or an error: start nothing more
            client.cancel(list(pending))


class Misuse(ValueError):
    """``func`` broke its contract (a result of the wrong length or shape): never retried or flagged."""


def on_error_modes(on_error: Any) -> tuple[bool, bool]:
    """Read ``on_error`` (one of :data:`ON_ERROR`, or ``"fallback"`` and ``"flag"`` together) as ``(fallback, flag)``."""
    modes = (on_error,) if isinstance(on_error, str) else tuple(on_error) if isinstance(on_error, list | tuple) else ()
    if not modes or any(m not in ON_ERROR for m in modes) or ("raise" in modes and len(modes) > 1):
        raise ValueError(f"on_error must be one of {ON_ERROR} or ('fallback', 'flag'), got {on_error!r}")
    return "fallback" in modes, "flag" in modes


def rows_text(lo: int, hi: int, noun: str = "rows") -> str:
    """Name rows ``lo:hi`` for a message: ``row 5`` or ``rows 0-99`` (``noun``: what is counted, plural)."""
    return f"{noun[:-1]} {lo:,}" if hi - lo == 1 else f"{noun} {lo:,}-{hi - 1:,}"


def _is_memory_error(exc: BaseException) -> bool:
    """Out of (device) memory: CuPy's OutOfMemoryError is a MemoryError; cuBLAS/cuSOLVER say ALLOC_FAILED."""
    text = str(exc).upper()
    return isinstance(exc, MemoryError) or "OUT OF MEMORY" in text or "ALLOC_FAILED" in text


def bisect(run: Callable[[Any], Any], piece: Any, lo: int, min_rows: int,
           leaf: Callable[[Any, int, BaseException], Any], join: Callable[[list[Any]], Any],
           when: Callable[[BaseException], bool] = lambda e: True) -> Any:
    """Return ``run(piece)``; on a failure ``when`` accepts, bisect down to ``min_rows``, then ``leaf(piece, lo, error)``."""
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


def warn_flagged(ranges: Ranges, name: str, noun: str = "rows") -> None:
    """Say once per call which rows (or items) were flagged, the first five ranges named."""
    if not ranges:
        return
    shown = ", ".join(rows_text(a, b, noun) for a, b in ranges[:5]) + (", ..." if len(ranges) > 5 else "")
    rows = sum(b - a for a, b in ranges)
    count = f"{rows:,} {noun}" if rows != 1 else f"1 {noun[:-1]}"
    warn(f"{name} failed on {count} ({len(ranges)} range(s)), flagged: {shown}", FlaggedRowsWarning)


def merged_ranges(ranges: Ranges) -> Ranges:
    """Sort ``[start, stop)`` ranges and join those that touch or overlap."""
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def on_error_text(on_error: Any) -> str:
    """Write ``on_error`` for the provenance and the resume fingerprint (``"fallback+flag"`` for both)."""
    return on_error if isinstance(on_error, str) else "+".join(sorted(on_error))


class BatchRunner:
    """Runs ``func`` on one batch as ``device`` and ``on_error`` say (picklable: it travels to workers)."""

    def __init__(
        self, func: Callable[[Any], Any], columns: int, dtype: np.dtype, device: str, on_error: Any, min_rows: int,
        gpu_min_rows: int | None = None, gpu_fallback: bool = False,
    ) -> None:
        self.func = func
        self.name = getattr(func, "__name__", "func")
        self.columns = columns  # the output's width and dtype, learnt by probe_output
        self.dtype = dtype
        self.device = device
        self.fallback, self.flag = on_error_modes(on_error)
        # device="auto": the GPU was daskbatch's choice, so a batch it fails runs on the CPU instead
        self.gpu_fallback = self.fallback or gpu_fallback
        self.min_rows = min_rows
        self.gpu_min_rows = min_rows if gpu_min_rows is None else gpu_min_rows
        self.declared = False

    # -- one call
    def _call(self, block: Any) -> np.ndarray:
        """``func(block)`` checked (same rows, the probed width) and copied to a host array of ``dtype``."""
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
        return _cast_output(host, self.dtype, self.declared)

    def _fill(self, rows: int) -> np.ndarray:
        """The output of ``rows`` flagged rows: NaN (zero for integer outputs; the mask tells them apart)."""
        return np.full((rows, self.columns), np.nan if self.dtype.kind in "fc" else 0, dtype=self.dtype)

    def _narrow(self, block: Any, lo: int, flagged: Ranges) -> np.ndarray:
        """Where it is, bisecting on failure; the smallest failing pieces are flagged ("flag") or raise."""

        def leaf(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            if not self.flag:
                raise BatchError(f"{self.name} failed on {rows_text(at, at + len(piece))}: {type(exc).__name__}: {exc}") from exc
            flagged.append((at, at + len(piece)))
            return self._fill(len(piece))

        smallest = self.min_rows if self.fallback or self.flag else len(block)  # else the first failure raises
        return bisect(self._call, block, lo, smallest, leaf, np.concatenate)

    def _gpu(self, block: Any, lo: int, cpu_rows: Ranges, flagged: Ranges) -> np.ndarray:
        """On the GPU, halving on memory errors; what still fails runs on the CPU."""
        def to_cpu(piece: Any, at: int, exc: BaseException) -> np.ndarray:
            _free_gpu_memory()
            cpu_rows.append((at, at + len(piece)))
            return self._narrow(to_numpy(piece), at, flagged)

        def attempt(piece: Any) -> np.ndarray:
            try:
                return self._call(piece)
            except Exception:
                _free_gpu_memory()  # before a smaller retry, give back what the failed call held
                raise

        return bisect(attempt, block, lo, self.gpu_min_rows, to_cpu, np.concatenate, when=_is_memory_error)

    # -- one batch
    def run(self, block: Any, lo: int) -> tuple[np.ndarray, Ranges, Ranges]:
        """Run one batch (rows from ``lo``) where it belongs: its host output, the rows flagged, the rows moved to the CPU."""
        rows = int(block.shape[0])
        flagged: Ranges = []
        cpu_rows: Ranges = []
        try:
            if self.device != "gpu":
                return self._narrow(to_numpy(block), lo, flagged), flagged, cpu_rows
            try:
                moved = on_device(block, "gpu")
            except Exception:  # no device, out of memory for the copy: the batch stays on the host
                if not self.gpu_fallback:
                    raise
                _free_gpu_memory()
                cpu_rows.append((lo, lo + rows))
                return self._narrow(to_numpy(block), lo, flagged), flagged, cpu_rows
            if self.gpu_fallback:
                return self._gpu(moved, lo, cpu_rows, flagged), flagged, cpu_rows
            return self._narrow(moved, lo, flagged), flagged, cpu_rows
        except Misuse as exc:  # a wrong dtype or shape is the call's mistake, not a failed batch: never flagged
            raise BatchError(f"{self.name} on {rows_text(lo, lo + rows)}: {exc}") from None


class _LossyCast(Misuse):
    """``func`` returned values that the output dtype cannot hold; never retried or flagged."""


def _cast_output(values: np.ndarray, dtype: np.dtype, declared: bool) -> np.ndarray:
    """``values`` as ``dtype``, refusing a cast that changes a value (a declared float dtype may round)."""
    # NumPy calls int64 -> float64 "safe", yet 2**53 + 1 becomes 2**53: integers into a float or
    # complex dtype are checked value by value below, like every other cast that may change a value.
    exact_kinds = not (values.dtype.kind in "iu" and dtype.kind in "fc")
    if values.dtype == dtype or (exact_kinds and np.can_cast(values.dtype, dtype, "safe")):
        return np.asarray(values, dtype=dtype)
    with np.errstate(all="ignore"):
        out = np.asarray(values, dtype=dtype)
        if declared and dtype.kind == "f" and values.dtype.kind == "f":
            bad = np.isfinite(values) & ~np.isfinite(out)  # rounding was asked for; overflow was not
        else:
            back = out.astype(values.dtype)
            bad = ~((back == values) | (np.isnan(back) & np.isnan(values)) if values.dtype.kind in "fc"
                    else back == values)
            if not exact_kinds:  # rounded past the integer type's top, the way back is undefined (0, or saturated)
                bad |= np.real(out) >= 2.0 ** (8 * values.dtype.itemsize - (values.dtype.kind == "i"))
    if bad.any():
        first = np.unravel_index(int(np.argmax(bad)), bad.shape)
        what = "declared" if declared else "of the first rows"
        raise _LossyCast(
            f"returned {values.dtype} values that the output dtype {dtype} ({what}) cannot hold: "
            f"{values[first].item()!r} would become {out[first].item()!r}; pass dtype= a type that holds them"
        )
    return out


def _free_gpu_memory() -> None:
    """Give CuPy's pooled blocks back to the device (before a retry on a smaller piece or on the CPU)."""
    try:
        import cupy  # lazy: cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:  # pragma: no cover - only called after a CuPy block failed
        pass


def run_batch(
    i: int, xb: Any, yb: Any, *, runner: BatchRunner, per: int, writer: RegionWriter | None
) -> tuple[np.ndarray | None, list[tuple[int, int]], list[tuple[int, int]]]:
    """Run batch ``i`` (one dask task, first row ``i * per``); with a writer, write it to the output store instead of returning it."""
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


def probe_output(runner: BatchRunner, x: Any) -> tuple[int, np.dtype]:
    """Learn the width and dtype of ``func``'s output from the first rows (where they fail, as ``on_error`` allows)."""
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
            f"{runner.name} failed on {rows_text(0, n)} (run first to learn the output's columns): "
            f"{type(first).__name__}: {first}"
        ) from first
    shape = tuple(getattr(result, "shape", ()))
    if len(shape) not in (1, 2) or shape[0] != len(piece):
        raise ValueError(
            f"{runner.name} returned shape {shape} for {len(piece)} rows; it must return one row per input row"
        )
    return (shape[1] if len(shape) == 2 else 1), np.dtype(str(result.dtype))
