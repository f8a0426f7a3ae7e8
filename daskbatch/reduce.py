"""The one graph builder: a ``split_every``-ary tree reduction of a statistic over row blocks.

Only public dask API is used (``Array.to_delayed`` and ``dask.delayed``).
The tree's shape and merge order depend only on the number of blocks and
``split_every``, so results are bitwise identical from run to run and between
one worker and many. Task keys read well on the dashboard:
``daskbatch-<stats>-chunk``, ``daskbatch-merge``, ``daskbatch-finalize``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import dask
import dask.array as da
from dask.base import tokenize
from dask.delayed import Delayed
from dask.sizeof import sizeof

from daskbatch import config
from daskbatch.arguments import strict_int
from daskbatch.stats._base import merge_all
from daskbatch.stats.comoments import CoMomentsState
from daskbatch.stats.histogram import HistogramState
from daskbatch.stats.moments import MomentsState


@sizeof.register(MomentsState)
@sizeof.register(CoMomentsState)
@sizeof.register(HistogramState)
def _sizeof_state(state: Any) -> int:
    # Without this dask would size states with sys.getsizeof (~56 bytes).
    return sum(int(getattr(f, "nbytes", 8)) for f in vars(state).values())


def resolve_split_every(split_every: int | None) -> int:
    """``split_every`` or the configured default, validated (>= 2)."""
    if split_every is None:
        return strict_int(config.get("split-every"), "daskbatch.split-every (dask config)", minimum=2)
    return strict_int(split_every, "split_every", minimum=2)


def tree_reduce(
    stat: Any,
    x: da.Array,
    y: da.Array | None = None,
    *,
    split_every: int | None = None,
    finalize: bool = True,
) -> Delayed:
    """Fold ``stat`` over the row blocks of ``x`` (and the matching blocks of ``y``).

    Parameters
    ----------
    stat : Statistic or Bundle
        Anything with ``name``, ``chunk(x, y)``, ``merge(a, b)`` and ``finalize(state)``.
    x : dask.array.Array, shape (samples, features)
        Chunked along axis 0 only.
    y : dask.array.Array, shape (samples,), optional
        A label, rechunked to the row blocks of ``x``.
    split_every : int, optional
        Fan-in of the merge tree; ``daskbatch.split-every`` from dask.config by default.
    finalize : bool, default True
        Return the finalized result; else the merged state (for checkpoints and accumulators).

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
    token = tokenize(x.name, None if y is None else y.name, stat, fan_in, finalize)
    x_blocks = x.to_delayed().ravel()
    if y is not None:
        y = y.rechunk((x.chunks[0],))
        y_blocks = list(y.to_delayed().ravel())
    else:
        y_blocks = [None] * len(x_blocks)

    chunk_name = f"daskbatch-{stat.name}-chunk-{token}"
    states = [
        dask.delayed(stat.chunk)(xb, yb, dask_key_name=(chunk_name, i))
        for i, (xb, yb) in enumerate(zip(x_blocks, y_blocks, strict=True))
    ]
    merge = functools.partial(merge_all, stat)
    level = 0
    while len(states) > 1:
        states = [
            dask.delayed(merge)(states[i : i + fan_in], dask_key_name=(f"daskbatch-merge-{token}", level, j))
            for j, i in enumerate(range(0, len(states), fan_in))
        ]
        level += 1
    last = stat.finalize if finalize else _identity
    return dask.delayed(_on_host(last))(states[0], dask_key_name=f"daskbatch-finalize-{token}")


def _identity(state: Any) -> Any:
    return state


def _on_host(func: Any) -> Any:
    """Wrap ``func`` so its (dataclass / tuple of dataclass) result holds NumPy arrays."""

    def run(state: Any) -> Any:
        return to_host(func(state))

    return run


def to_host(value: Any) -> Any:
    """``value`` with every array in it (inside tuples and dataclasses) copied to host NumPy."""
    from daskbatch.backend import to_numpy

    if isinstance(value, tuple):
        return tuple(to_host(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: to_host(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    if value is None or isinstance(value, (str, int, float)):
        return value
    return to_numpy(value)
