"""Calling the user's function on one batch for :func:`daskbatch.map_batches` (arrays or items): ``on_error``'s
modes, bisecting a failing batch, the texts that name failed rows, and :class:`BatchRunner` (CPU or GPU, fallbacks)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch._common import warn
from daskbatch.engine.blockrun import on_device
from daskbatch.errors import BatchError, FlaggedRowsWarning
from daskbatch.stats.backend import to_numpy

if TYPE_CHECKING:
    from daskbatch.io.rowstore import RegionWriter

ON_ERROR = ("raise", "flag", "fallback")
#: Rows of the first batch run once to learn the output's width and dtype.
PROBE_ROWS = 8
Ranges = list[tuple[int, int]]


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


def _batch_failure(name: str, lo: int, hi: int, exc: BaseException) -> BatchError:
    """The error for rows ``lo:hi``, naming them and the original error."""
    return BatchError(f"{name} failed on {rows_text(lo, hi)}: {type(exc).__name__}: {exc}")


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
                raise _batch_failure(self.name, at, at + len(piece), exc) from exc
            flagged.append((at, at + len(piece)))
            return self._fill(len(piece))

        if not (self.fallback or self.flag):
            try:
                return self._call(block)
            except Misuse:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
                raise _batch_failure(self.name, lo, lo + len(block), exc) from exc
        return bisect(self._call, block, lo, self.min_rows, leaf, np.concatenate)

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
