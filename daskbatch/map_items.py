"""``map_batches`` over Python items: batches of any objects (tuples of small grids, dicts), one result per item.

>>> import daskbatch as db
>>> db.map_batches(lambda batch: [a + b for a, b in batch], [(1, 2), (3, 4), (5, 6)], batch_rows=2)
[3, 7, 11]

A list or tuple of items is cut into batches of ``batch_rows`` items (by
default at most 100 batches); a ``dask.bag.Bag`` brings its own partitions as
the batches.  Each batch is one dask task and ``func`` gets
it as a list.  ``on_error`` works as for arrays, with items for rows: a
failing batch is bisected down to ``min_batch_rows`` items, and ``"flag"``
turns the results of the items that still fail into ``None`` (with a
:class:`~daskbatch.batches.FlaggedRowsWarning` naming them).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from daskbatch.engine._batch_calls import (
    Misuse,
    Ranges,
    bisect,
    merged_ranges,
    on_error_modes,
    rows_text,
    warn_flagged,
)
from daskbatch.engine.blockrun import DEVICES, run_blocks
from daskbatch.errors import BatchError, FlaggedRowsWarning
from daskbatch.runtime.progress import ProgressCallback

__all__ = ["BatchError", "FlaggedRowsWarning", "map_items"]

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

    def failure(self, i: int, lo: int, hi: int, exc: BaseException) -> BatchError:
        """The error for items ``lo:hi`` of batch ``i`` (a bag's partitions do not say where they start)."""
        return BatchError(f"{self.name} failed on {rows_text(lo, hi, 'items')} of batch {i}: {type(exc).__name__}: {exc}")

    def run(self, i: int, part: Any) -> tuple[list[Any], Ranges]:
        """One batch: its results and the flagged item ranges, counted from the batch's first item."""
        items = list(part)  # a bag's partition may be a lazy iterator
        flagged: Ranges = []

        def leaf(piece: list[Any], at: int, exc: BaseException) -> list[Any]:
            if not self.flag:
                raise self.failure(i, at, at + len(piece), exc) from exc
            flagged.append((at, at + len(piece)))
            return [None] * len(piece)

        if not (self.fallback or self.flag):
            try:
                return self.call(items), flagged
            except Misuse as exc:  # the function's mistake, not a failed batch
                raise Misuse(f"{self.name} {exc} (batch {i})") from None
            except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
                raise self.failure(i, 0, len(items), exc) from exc
        try:
            return bisect(self.call, items, 0, self.min_items, leaf, lambda parts: parts[0] + parts[1]), flagged
        except Misuse as exc:
            raise Misuse(f"{self.name} {exc} (batch {i})") from None


def map_items(
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
    """Apply ``func`` (a list of items -> one result per item) to all items, batch by batch.

    Called by :func:`daskbatch.map_batches` for a list, tuple or ``dask.bag.Bag``.

    Parameters
    ----------
    func : callable
        Takes a list of items, returns a sequence of as many results.
    items : list, tuple or dask.bag.Bag
        The items.
    out : None
        Items come back as a list; an output store is for arrays.
    batch_rows : int or "plan", default "plan"
        Items per batch; ``"plan"``: at most :data:`MAX_BATCHES` batches (a bag's own partitions).
    device : {"auto", "cpu"}, default "auto"
        Items reach ``func`` as they are (move them to a GPU inside ``func``).
    on_error : {"raise", "flag", "fallback"} or ("fallback", "flag"), default "raise"
        As for arrays, with items for rows (see :mod:`daskbatch.batches`).
    min_batch_rows : int, optional
        Smallest piece a failing batch is bisected down to (default 1 item).
    progress : bool or callable, default False
        True draws a progress bar; a callable is called as ``progress(done, total, "map_batches")``.
    cancel : threading.Event, optional
        Set it to stop at the next batch boundary (the results so far are not kept).

    Returns
    -------
    list
        One result per item, in order (``None`` for flagged items).

    Raises
    ------
    BatchError
        ``func`` failed (``"raise"``; ``"fallback"`` when even the smallest piece fails).
    """
    import dask.bag  # lazy: dask

    if out is not None:
        raise ValueError("out= writes rows of an array; results of Python items come back as a list (drop out=)")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "gpu":
        raise ValueError("device='gpu' moves array batches to the GPU; Python items reach func as they are "
                         "(use device='auto' and move them inside func)")
    if min_batch_rows is not None and (isinstance(min_batch_rows, bool) or min_batch_rows < 1):
        raise ValueError(f"min_batch_rows must be >= 1, got {min_batch_rows!r}")
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
