"""Run one dask task per row block, hand each result to the driver as it finishes, stop cleanly.

:func:`run_blocks` is the loop under :func:`daskbatch.transform` and
:func:`daskbatch.map_batches`.  Each block is one task ``fn(i, *args[i])``;
``on_done(i, result)`` runs in the calling thread as soon as that task has
finished (that is where a done-log line is appended, so the log only ever
names blocks that were written completely).

* **Local schedulers** (threads, sync): one ``dask.compute`` over all blocks,
  with a dask callback that reports finished tasks.  A stop request (a
  ``threading.Event``, SIGINT or SIGTERM) keeps dask from starting any further
  task of this run; the tasks already running finish and are reported, and
  nothing is left writing in the background when the call returns.
* **A distributed client** (the default scheduler): ``client.compute`` and
  ``as_completed``; a stop cancels the blocks not yet finished.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import dask
from dask.callbacks import Callback

from daskbatch._arguments import checked_device, gpu_module
from daskbatch._typing import DEVICES  # noqa: F401 - batches imports it from here
from daskbatch.errors import Cancelled, Interrupted
from daskbatch.runtime.progress import Progress, ProgressCallback, progress_options
from daskbatch.stats.backend import to_numpy

__all__ = ["on_device", "run_blocks"]

def check_device(device: str, what: str) -> None:
    """Raise for an unknown device, or ``"gpu"`` without a working CuPy (``what``: the call, for the message)."""
    if checked_device(device) == "gpu":
        gpu_module(what)


def on_device(block: Any, device: str) -> Any:
    """Move ``block`` where it is computed: as it is (auto), on the host (cpu) or the GPU (gpu, one ``cupy.asarray`` copy)."""
    if device == "auto":
        return block
    if device == "gpu":
        import cupy  # lazy: cupy

        return cupy.asarray(block)
    return to_numpy(block)


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


def _client() -> Any:
    """The distributed Client that dask would compute on, or None."""
    from dask.base import get_scheduler  # lazy: dask

    get = get_scheduler()
    owner = getattr(get, "__self__", None)
    return owner if owner is not None and type(owner).__module__.startswith("distributed") else None


@contextlib.contextmanager
def _signals_set(stop: threading.Event, started: threading.Event) -> Iterator[list[str]]:
    """SIGINT and SIGTERM set ``stop`` (main thread only); yields the names of signals received.

    Until ``started`` is set (the graph is being built, no block runs) a signal raises
    :class:`~daskbatch.errors.Interrupted` at once: building a large graph checks no stop request.
    """
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
    bar = Progress(label or name, total, rows=rows, **progress_options(progress))

    def done(i: int, result: Any) -> None:
        """Hand block ``i``'s result on and advance the progress bar."""
        on_done(i, result)
        finished.add(i)
        bar.advance()

    started = threading.Event()
    with bar, _signals_set(stop, started) as got:
        bar.skip(total - len(args))
        client = _client()
        if client is not None:
            tasks = [delayed(fn, pure=False)(i, *a, dask_key_name=f"{name}-{i}") for i, a in args.items()]
            started.set()  # a graph half sent to the scheduler could not be cancelled: stop at a block boundary
            _run_distributed(client, tasks, list(args), done, stop)
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


def _run_distributed(
    client: Any, tasks: list[Any], blocks: list[int], done: Callable[[int, Any], None], stop: threading.Event
) -> None:
    from distributed import as_completed  # lazy: distributed

    futures = client.compute(tasks)
    index = {f.key: i for f, i in zip(futures, blocks, strict=True)}
    pending = set(futures)
    try:
        for fut in as_completed(futures):
            pending.discard(fut)
            if fut.status == "cancelled":
                continue
            done(index[fut.key], fut.result())
            if stop.is_set():
                break
    finally:
        if pending:
            client.cancel(list(pending))
