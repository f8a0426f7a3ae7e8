"""What a batch job's log says about a whole call: one summary line at its end."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from daskbatch.runtime.capacity import active_client

__all__ = ["logged_run", "note_pass", "peak_memory", "process_peak_bytes"]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class _Run:
    name: str
    rows: int = 0
    features: int = 0
    passes: int = 0


_current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("daskbatch_run", default=None)


def note_pass(rows: int, features: int) -> None:
    """Count one finished pass over ``rows`` x ``features`` for the summary line of the call running now."""
    run = _current.get()
    if run is not None:
        run.passes += 1
        run.rows, run.features = max(run.rows, int(rows)), max(run.features, int(features))


def logged_run(name: str) -> Callable[[F], F]:
    """Decorate an API function: log ``"<name>: R rows x F features in T s (...), N passes, peak M"`` at its end."""

    def decorate(func: F) -> F:
        """Wrap ``func`` so that its call is timed and summed up in one log line."""  # numpydoc ignore=PR01,RT01

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            """Run ``func``, then log its summary line."""  # numpydoc ignore=PR01,RT01
            if _current.get() is not None:
                return func(*args, **kwargs)
            run = _Run(name)
            token = _current.set(run)
            t0 = time.perf_counter()
            try:
                result = func(*args, **kwargs)
            finally:
                _current.reset(token)
            if log.isEnabledFor(logging.INFO):  # peak memory may ask the workers: only when it is shown
                log.info("%s", summary_line(run, time.perf_counter() - t0))
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def summary_line(run: _Run, seconds: float) -> str:
    """Return the one line that sums up a call."""
    rate = f" ({run.rows / seconds:,.0f} rows/s)" if seconds > 0 and run.rows else ""
    passes = f"{run.passes} pass{'es' if run.passes != 1 else ''}"
    return (
        f"{run.name}: {run.rows:,} rows x {run.features:,} features in {seconds:.1f} s{rate}, "
        f"{passes}, peak {_peak_memory_text()}"
    )


def process_peak_bytes() -> int | None:
    """Read the largest resident set of this process so far (None where ``resource`` does not exist)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def peak_memory(client: Any, *, warn: bool = False) -> dict[str, Any]:
    """Read the peak resident memory of this process and, with a client, of each worker."""
    out: dict[str, Any] = {"process_bytes": process_peak_bytes()}
    if client is not None:
        try:
            peaks = client.run(process_peak_bytes).items()
        except Exception as exc:  # a worker gone or a closing client: the caller's line still gets written
            log.log(logging.WARNING if warn else logging.DEBUG, "could not read the workers' peak memory: %s", exc)
        else:
            out["workers_bytes"] = {str(k): int(v) for k, v in peaks if v is not None}
    return out


def _peak_memory_text() -> str:
    """Return the peak memory as text: ``"412.00 MiB"``, plus ``"; workers 1.20 GiB (largest)"`` under a client."""
    from dask.utils import format_bytes  # lazy: dask

    peak = peak_memory(active_client())
    own = peak["process_bytes"]
    text = format_bytes(own) if own is not None else "unknown"
    workers = peak.get("workers_bytes")
    return f"{text}; workers {format_bytes(max(workers.values()))} (largest)" if workers else text
