"""The one graph builder: a ``split_every``-ary tree reduction of a statistic over row blocks.

Only public dask API is used (``Array.to_delayed`` and ``dask.delayed``).
The tree's shape and merge order depend only on the number of blocks and
``split_every``, so results are bitwise identical from run to run and between
one worker and many. Task keys read well on the dashboard (``dask.utils.key_split``):
``db-chunk``, ``db-merge``, ``db-result``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import dask
import dask.array as da
from dask.base import tokenize
from dask.delayed import Delayed
from dask.sizeof import sizeof

from daskbatch import config
from daskbatch._arguments import strict_int
from daskbatch._typing import Array
from daskbatch.engine.sizeof import register as register_sizeof
from daskbatch.runtime.thread_limits import limited
from daskbatch.stats._base import Statistic, merge_all
from daskbatch.stats.backend import to_numpy
from daskbatch.stats.classes import labels_checked

S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")

register_sizeof(sizeof)  # every graph with states in its tasks is built here


#: Task-name prefixes of a pass, as the dashboard shows them (``key_split`` of the keys).
TASK_PREFIXES = {"chunk": "db-chunk", "merge": "db-merge", "result": "db-result"}


def task_prefixes(tag: str = "") -> dict[str, str]:
    """Give the task-name prefixes of a tree tagged ``tag`` (``db-chunk-hist``, ...): passes named apart on the dashboard.

    Parameters
    ----------
    tag : str, default ""
        Letters and dashes only, so that ``dask.utils.key_split`` keeps it whole; "" for the plain prefixes.

    Returns
    -------
    dict
        ``"chunk"``, ``"merge"`` and ``"result"`` prefixes.
    """
    if tag and not re.fullmatch(r"[A-Za-z]+(-[A-Za-z]+)*", tag):
        raise ValueError(f"a task tag is letters and dashes only, got {tag!r}")
    return {k: f"{v}-{tag}" if tag else v for k, v in TASK_PREFIXES.items()}


def statistics_tag(stats: Any) -> str:
    """Name a pass's tasks after its statistics: their names' letters, joined by dashes (``moments-cov-sketch``).

    Parameters
    ----------
    stats : sequence of Statistic
        The statistics of the pass.

    Returns
    -------
    str
        The tag (may be "").
    """
    words = (re.sub(r"[^A-Za-z]", "", s.name) for s in stats)
    return "-".join(w for w in words if w)


def resolve_split_every(split_every: int | None) -> int:
    """Resolve ``split_every`` to itself or the configured default, validated (>= 2).

    Parameters
    ----------
    split_every : int or None
        The caller's fan-in.

    Returns
    -------
    int
        The fan-in.
    """
    if split_every is None:
        return strict_int(config.get("split-every"), "daskbatch.split-every (dask config)", minimum=2)
    return strict_int(split_every, "split_every", minimum=2)


def tree_reduce(
    stat: Statistic[S, R],
    x: da.Array,
    label: da.Array | None = None,
    *,
    complete: da.Array | None = None,
    weights: da.Array | None = None,
    split_every: int | None = None,
    finalize: bool = True,
    tag: str = "",
    labels_checked: bool = False,
) -> Delayed:
    """Fold ``stat`` over the row blocks of ``x`` (and the matching blocks of ``label``).

    Parameters
    ----------
    stat : Statistic or Bundle
        Anything with ``name``, ``chunk(x, label)``, ``merge(a, b)`` and ``finalize(state)``.
    x : dask.array.Array, shape (samples, features)
        Chunked along axis 0 only.
    label : dask.array.Array, shape (samples,), optional
        The class label, rechunked to the row blocks of ``x``; passed to ``chunk`` by position.
    complete : dask.array.Array of bool, shape (samples,), optional
        Rows to use, rechunked like ``label`` and passed to ``chunk`` as
        ``complete=`` (for statistics that share one complete-row mask, such as
        the tiles of :class:`~daskbatch.stats.tiled.CrossCoMoments`).
    weights : dask.array.Array, shape (samples,), optional
        Sample weights, rechunked like ``label`` and passed to ``chunk`` as
        ``weights=`` (statistics with ``takes_weights``).
    split_every : int, optional
        Fan-in of the merge tree; ``daskbatch.split-every`` from dask.config by default.
    finalize : bool, default True
        Return the finalized result; else the merged state (for checkpoints and accumulators).
    tag : str, default ""
        Added to the task names (see :func:`task_prefixes`), so that the dashboard tells passes apart.
    labels_checked : bool, default False
        Every label is known to be one of the statistics' class values: the
        chunk tasks skip that check (see :func:`daskbatch.stats.classes.labels_checked`).

    Returns
    -------
    dask.delayed.Delayed
        The result (or state), with host NumPy arrays in place of device arrays.
    """
    if x.ndim != 2 or x.numblocks[1] != 1:
        raise ValueError(
            f"tree_reduce needs a 2-D array chunked along axis 0 only; got numblocks={x.numblocks}"
        )
    fan_in = resolve_split_every(split_every)
    token = tokenize(
        x.name, None if label is None else label.name, None if complete is None else complete.name,
        stat, fan_in, finalize, *(() if weights is None else (weights.name,)),
    )
    x_blocks = x.to_delayed().ravel()
    label_blocks = _row_blocks(label, x, len(x_blocks))
    complete_blocks = _row_blocks(complete, x, len(x_blocks))
    weight_blocks = _row_blocks(weights, x, len(x_blocks))

    # Short prefixes that dask.utils.key_split keeps whole (the dashboard groups and
    # labels tasks by them): "daskbatch-finalize-<token>" used to split to "daskbatch",
    # and long prefixes were cut off in the task stream.
    prefixes = task_prefixes(tag)
    chunk_name = f"{prefixes['chunk']}-{token}"
    chunk = functools.partial(_chunk_task, stat, labels_checked)
    states = [
        dask.delayed(chunk)(
            xb, lb, dask_key_name=(chunk_name, i),
            **({} if cb is None else {"complete": cb}), **({} if wb is None else {"weights": wb}),
        )
        for i, (xb, lb, cb, wb) in enumerate(
            zip(x_blocks, label_blocks, complete_blocks, weight_blocks, strict=True)
        )
    ]
    merge = functools.partial(merge_all, stat)
    level = 0
    while len(states) > 1:
        states = [
            dask.delayed(merge)(states[i : i + fan_in], dask_key_name=(f"{prefixes['merge']}-{token}", level, j))
            for j, i in enumerate(range(0, len(states), fan_in))
        ]
        level += 1
    last: Callable[[S], R | S] = stat.finalize if finalize else _identity
    return dask.delayed(_on_host(last))(states[0], dask_key_name=f"{prefixes['result']}-{token}")


def _row_blocks(rows: da.Array | None, x: da.Array, n_blocks: int) -> list[Delayed] | list[None]:
    """The delayed blocks of a per-row array aligned to the row blocks of ``x`` (Nones if absent)."""
    if rows is None:
        return [None] * n_blocks
    return list(rows.rechunk((x.chunks[0],)).to_delayed().ravel())


def _chunk_task(stat: Statistic[S, Any], checked: bool, x: Array, label: Array | None, **masks: Array) -> S:
    """``stat.chunk(x, label, **masks)`` with one BLAS/numba thread when other dask threads run beside it."""
    with limited(), labels_checked() if checked else contextlib.nullcontext():
        return stat.chunk(x, label, **masks)


def _identity(state: T) -> T:
    return state


def _on_host(func: Callable[[S], T]) -> Callable[[S], T]:
    """Wrap ``func`` so its (dataclass / tuple of dataclass) result holds NumPy arrays."""

    def run(state: S) -> T:
        return to_host(func(state))

    return run


def to_host(value: Any) -> Any:
    """Copy every array in ``value`` (inside tuples, dicts and dataclasses) to host NumPy.

    Parameters
    ----------
    value : object
        An array, a tuple, dict or dataclass of them, or anything else.

    Returns
    -------
    object
        ``value`` with host arrays.
    """
    if isinstance(value, tuple):
        items = [to_host(v) for v in value]
        return type(value)(*items) if hasattr(value, "_asdict") else tuple(items)  # a named tuple keeps its type
    if isinstance(value, dict):  # a user's state or result may be a dict of arrays
        return {k: to_host(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: to_host(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    if value is None or isinstance(value, (str, int, float)):
        return value
    return to_numpy(value)
