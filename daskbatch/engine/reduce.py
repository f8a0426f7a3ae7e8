"""What runs in a pass's tasks: a block's chunk task, the result task, copies to the host, staged GPU chunks.

The graph that calls them is built by :func:`daskbatch.engine.passes.tree_reduce`; the task-name prefixes the
dashboard shows are named here (``db-chunk``, ``db-merge``, ``db-result``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import numpy as np

from daskbatch._common import Array
from daskbatch.runtime.capacity import limited
from daskbatch.stats._base import Statistic
from daskbatch.stats.classes import labels_checked
from daskbatch.stats.kernels.ahead import start as compile_ahead
from daskbatch.stats.kernels.path import KernelPath, kernel_path, split_rows, stager
from daskbatch.stats.numerics import to_numpy

S = TypeVar("S")
R = TypeVar("R")


#: Task-name prefixes of a pass, as the dashboard shows them (``key_split`` of the keys).
TASK_PREFIXES = {"chunk": "db-chunk", "part": "db-part", "merge": "db-merge", "result": "db-result"}


def task_prefixes(tag: str = "") -> dict[str, str]:
    """The task-name prefixes of a tree tagged ``tag`` (letters and dashes, kept whole by ``key_split``): ``db-chunk-hist``, ..."""
    if tag and not re.fullmatch(r"[A-Za-z]+(-[A-Za-z]+)*", tag):
        raise ValueError(f"a task tag is letters and dashes only, got {tag!r}")
    return {k: f"{v}-{tag}" if tag else v for k, v in TASK_PREFIXES.items()}


def statistics_tag(stats: Any) -> str:
    """Name a pass's tasks after its statistics: their names' letters, joined by dashes (``moments-cov-sketch``)."""
    words = (re.sub(r"[^A-Za-z]", "", s.name) for s in stats)
    return "-".join(w for w in words if w)


def chunk_task(  # numpydoc ignore=PR01,RT01
    stat: Statistic[S, Any], checked: bool, x: Array, label: Array | None, *, whole: Any = None, **masks: Array
) -> S:
    """``stat.chunk(x, label, **masks)`` with one BLAS/numba thread when other dask threads run beside it.

    ``whole``: the bundle that ``stat`` is a part of (:func:`joined`), whose kernels a first call compiles ahead.
    """
    # A new install's first call: a helper compiles the later kernels.
    compile_ahead(stat if whole is None else whole, x, label, masks)
    with limited(), labels_checked() if checked else contextlib.nullcontext():
        return stat.chunk(x, label, **masks)


def joined(parts: Sequence[Sequence[int]], *states: tuple[Any, ...]) -> tuple[Any, ...]:  # numpydoc ignore=PR01,RT01
    """A bundle's state from the states of its ``parts`` (each the positions of its statistics in the bundle)."""
    by_position = {k: state for part, part_states in zip(parts, states, strict=True)
                   for k, state in zip(part, part_states, strict=True)}
    return tuple(by_position[k] for k in range(len(by_position)))


def host_result(finalize: Callable[[Any], Any] | None, state: Any) -> Any:  # numpydoc ignore=PR01,RT01
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
