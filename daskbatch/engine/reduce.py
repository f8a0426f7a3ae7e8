"""The one graph builder: a ``split_every``-ary tree reduction of a statistic over row blocks, and its chunk tasks.

The tree's shape and merge order depend only on the number of blocks and ``split_every``, so results are bitwise
identical from run to run and between one worker and many. Task keys: ``db-chunk``, ``db-merge``, ``db-result``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed

from daskbatch._common import Array
from daskbatch.config import resolve_split_every
from daskbatch.runtime.capacity import limited
from daskbatch.stats._base import Statistic, merge_all
from daskbatch.stats.classes import labels_checked
from daskbatch.stats.kernels.ahead import start as compile_ahead
from daskbatch.stats.kernels.path import KernelPath, kernel_path, split_rows, stager
from daskbatch.stats.numerics import to_numpy

S = TypeVar("S")
R = TypeVar("R")


#: Task-name prefixes of a pass, as the dashboard shows them (``key_split`` of the keys).
TASK_PREFIXES = {"chunk": "db-chunk", "merge": "db-merge", "result": "db-result"}


def task_prefixes(tag: str = "") -> dict[str, str]:
    """The task-name prefixes of a tree tagged ``tag`` (letters and dashes, kept whole by ``key_split``): ``db-chunk-hist``, ..."""
    if tag and not re.fullmatch(r"[A-Za-z]+(-[A-Za-z]+)*", tag):
        raise ValueError(f"a task tag is letters and dashes only, got {tag!r}")
    return {k: f"{v}-{tag}" if tag else v for k, v in TASK_PREFIXES.items()}


def statistics_tag(stats: Any) -> str:
    """Name a pass's tasks after its statistics: their names' letters, joined by dashes (``moments-cov-sketch``)."""
    words = (re.sub(r"[^A-Za-z]", "", s.name) for s in stats)
    return "-".join(w for w in words if w)


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
    """Fold ``stat`` over the row blocks of ``x`` (and the matching blocks of the per-row arrays): a delayed host result."""
    # The label goes to chunk by position, complete= (one mask of complete rows shared by the tiles of a
    # tiled covariance) and weights= by keyword; finalize=False keeps the merged state (checkpoints,
    # accumulators); labels_checked: every label is one of the statistics' classes, the chunks skip that check.
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

    # Short prefixes that dask.utils.key_split keeps whole: the dashboard groups and labels tasks by them.
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
    result = functools.partial(_host_result, stat.finalize if finalize else None)
    return dask.delayed(result)(states[0], dask_key_name=f"{prefixes['result']}-{token}")


def _row_blocks(rows: da.Array | None, x: da.Array, n_blocks: int) -> list[Delayed] | list[None]:
    """The delayed blocks of a per-row array aligned to the row blocks of ``x`` (Nones if absent)."""
    if rows is None:
        return [None] * n_blocks
    return list(rows.rechunk((x.chunks[0],)).to_delayed().ravel())


def _chunk_task(stat: Statistic[S, Any], checked: bool, x: Array, label: Array | None, **masks: Array) -> S:
    """``stat.chunk(x, label, **masks)`` with one BLAS/numba thread when other dask threads run beside it."""
    compile_ahead(stat, x, label, masks)  # a new install's first call: a helper compiles the later kernels
    with limited(), labels_checked() if checked else contextlib.nullcontext():
        return stat.chunk(x, label, **masks)


def _host_result(finalize: Callable[[Any], Any] | None, state: Any) -> Any:
    """The finalized state (the merged one without ``finalize``), its arrays in host NumPy."""
    return to_host(state if finalize is None else finalize(state))


def to_host(value: Any) -> Any:
    """Copy every array in ``value`` (inside tuples, dicts and dataclasses) to host NumPy."""
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


# -- staged chunk tasks (daskbatch.gpu-transfer: staged): host blocks reduced on the GPU with overlapped copies.
# With device="gpu" each block is normally moved by a task of its own (cupy.asarray, a synchronous copy from
# pageable memory). Staged, the chunk task splits its host block into parts of part_rows rows, copies them
# through the calling thread's pinned double buffer (stats.kernels.path.Stager) and reduces part i while part
# i + 1 is in flight, folding the parts' states left to right. The split depends only on the block's rows and
# part_rows, so results are bitwise reproducible; they differ from the block transfer's in the last bits (one
# more level of merges), which is why a checkpoint records the transfer (Staged.settings).


#: How ``describe(device="gpu")`` moves host blocks to the GPU: a copy task per block, or staged in the chunk task.
TRANSFERS = ("block", "staged")

#: A part's input is at least this many co-moments states (D x D float64): each part pays
#: a fixed D x D correction and merge (about 1.2 ms at D = 5,000 on an H200), which parts
#: of a fixed byte size would pay ever more often as D grows.
STATE_MULTIPLE = 2


def part_rows_for(n_features: int, itemsize: int, part_bytes: int) -> int:
    """Rows of one staged part: ``part_bytes`` of input, and at least :data:`STATE_MULTIPLE` D x D float64 states."""
    row = max(1, int(n_features) * int(itemsize))
    return max(1, int(part_bytes) // row, STATE_MULTIPLE * 8 * int(n_features) ** 2 // row)


@dataclass(frozen=True)
class Staged(Generic[S, R]):
    """A statistic (or Bundle) whose chunk step stages host blocks to the GPU in parts of ``part_rows`` rows."""

    inner: Statistic[S, R]
    part_rows: int

    def __post_init__(self) -> None:
        if int(self.part_rows) < 1:
            raise ValueError(f"part_rows must be at least 1, got {self.part_rows}")

    @property
    def name(self) -> str:
        """The inner statistic's name."""
        return str(self.inner.name)

    @property
    def stats(self) -> tuple[Statistic[Any, Any], ...]:
        """The statistics computed: a bundle's, or the inner statistic alone."""
        return tuple(getattr(self.inner, "stats", (self.inner,)))

    @property
    def settings(self) -> dict[str, str]:
        """What a checkpoint records besides the statistics: the transfer changes the last bits."""
        return {"gpu transfer": f"staged, parts of {self.part_rows:,} rows"}

    def kernel_path(self, x: Array) -> KernelPath:
        """The kernels that reduce ``x``: a host block's parts are reduced on the GPU."""
        if kernel_path(x).kind in ("numba-cpu", "array-api-numpy"):
            return kernel_path("cupy", self.inner, dtype=x.dtype, ndim=x.ndim)
        return kernel_path(x, self.inner)

    def chunk(self, x: Array, label: Array | None = None, /, **masks: Array) -> S:
        """Reduce the block ``x`` (with its ``label`` and per-row ``masks``), staging a host block in parts."""
        if kernel_path(x).kind not in ("numba-cpu", "array-api-numpy"):  # not a host block: already on the device
            return self.inner.chunk(x, label, **masks)
        keys = tuple(masks)
        if x.shape[0] == 0:  # nothing to copy: the statistic's empty state, on the device
            import cupy  # lazy: cupy

            return self._chunk_parts(keys, cupy.asarray(x), None if label is None else cupy.asarray(label),
                                     *(cupy.asarray(masks[k]) for k in keys))
        parts = (
            (x[a:b], None if label is None else np.asarray(label[a:b]), *(np.asarray(masks[k][a:b]) for k in keys))
            for a, b in split_rows(x.shape[0], int(self.part_rows))
        )
        state = stager().reduce(parts, lambda *arrays: self._chunk_parts(keys, *arrays), self.inner.merge)
        return cast(S, state)  # not None: x has rows, so there is at least one part

    def _chunk_parts(self, keys: tuple[str, ...], x: Array, label: Array | None, *masks: Array) -> S:
        """The inner chunk of one part, its per-row masks given back their names."""
        return self.inner.chunk(x, label, **dict(zip(keys, masks, strict=True)))

    def merge(self, a: S, b: S) -> S:
        """Merge as the inner statistic does."""
        return self.inner.merge(a, b)

    def finalize(self, state: S) -> R:
        """Finalize as the inner statistic does."""
        return self.inner.finalize(state)
