"""Chunk tasks that reduce host blocks on the GPU with overlapped copies (``daskbatch.gpu-transfer: staged``).

With ``describe(device="gpu")`` every block is normally moved to the GPU by a
task of its own (``cupy.asarray``, a synchronous copy from pageable memory)
before the chunk task reduces it. With the ``staged`` transfer the blocks stay
on the host and the chunk task itself splits its block into parts of
:attr:`Staged.part_rows` rows, copies them through the calling thread's pinned
double buffer (:mod:`daskbatch.stats.kernels._staging`) and reduces part *i*
while part *i + 1* is in flight, folding the parts' states left to right.

The split depends only on the block's rows and ``part_rows`` (fixed when the
graph is built), so results are bitwise reproducible, between runs and between
one worker and many; they differ from the ``block`` transfer's in the last
bits (one more level of merges), which is why a checkpoint records the
transfer (:attr:`Staged.settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats._base import Statistic
from daskbatch.stats.kernels._staging import split_rows, stager
from daskbatch.stats.kernels.path import KernelPath, kernel_path

__all__ = ["TRANSFERS", "Staged", "part_rows_for"]

#: How ``describe(device="gpu")`` moves host blocks to the GPU: a copy task per block, or staged in the chunk task.
TRANSFERS = ("block", "staged")

S = TypeVar("S")
R = TypeVar("R")


#: A part's input is at least this many co-moments states (D x D float64): each part pays
#: a fixed D x D correction and merge (about 1.2 ms at D = 5,000 on an H200), which parts
#: of a fixed byte size would pay ever more often as D grows.
STATE_MULTIPLE = 2


def part_rows_for(n_features: int, itemsize: int, part_bytes: int) -> int:
    """Size one staged part: ``part_bytes`` of input, and at least :data:`STATE_MULTIPLE` D x D float64 states.

    Parameters
    ----------
    n_features : int
        Features of the input.
    itemsize : int
        Bytes per input element.
    part_bytes : int
        Bytes of a part.

    Returns
    -------
    int
        Rows per part.
    """
    row = max(1, int(n_features) * int(itemsize))
    return max(1, int(part_bytes) // row, STATE_MULTIPLE * 8 * int(n_features) ** 2 // row)


@dataclass(frozen=True)
class Staged(Generic[S, R]):  # numpydoc ignore=PR02
    """A statistic (or :class:`~daskbatch.stats.Bundle`) whose chunk step stages host blocks to the GPU.

    It has the statistic's ``name``, ``stats``, ``merge`` and ``finalize``;
    only ``chunk`` differs, and only for host NumPy blocks (device blocks go
    straight to the statistic).

    Parameters
    ----------
    inner : Statistic or Bundle
        What to compute.
    part_rows : int
        Rows per staged part (see :func:`part_rows_for`).
    """

    inner: Statistic[S, R]
    part_rows: int

    def __post_init__(self) -> None:
        if int(self.part_rows) < 1:
            raise ValueError(f"part_rows must be at least 1, got {self.part_rows}")

    @property
    def name(self) -> str:
        """Name it as the inner statistic.

        Returns
        -------
        str
            The inner statistic's name.
        """
        return str(self.inner.name)

    @property
    def stats(self) -> tuple[Statistic[Any, Any], ...]:
        """List the statistics computed: a bundle's, or the inner statistic alone.

        Returns
        -------
        tuple of Statistic
            The statistics.
        """
        return tuple(getattr(self.inner, "stats", (self.inner,)))

    @property
    def settings(self) -> dict[str, str]:
        """Give what a checkpoint records besides the statistics: the transfer changes the last bits.

        Returns
        -------
        dict of str to str
            The transfer setting.
        """
        return {"gpu transfer": f"staged, parts of {self.part_rows:,} rows"}

    def kernel_path(self, x: Array) -> KernelPath:
        """Tell which kernels reduce the block ``x``: a host block's parts are reduced on the GPU.

        Parameters
        ----------
        x : array
            The block, host or device.

        Returns
        -------
        KernelPath
            The path of the inner statistic on the parts (on ``x`` itself when it is on the device).
        """
        if kernel_path(x).kind in ("numba-cpu", "array-api-numpy"):
            return kernel_path("cupy", self.inner, dtype=x.dtype, ndim=x.ndim)
        return kernel_path(x, self.inner)

    def chunk(self, x: Array, label: Array | None = None, /, **masks: Array) -> S:
        """Reduce the block ``x`` (with its ``label`` and per-row ``masks``), staging a host block in parts.

        Parameters
        ----------
        x : array
            The block, host or device.
        label : array or None
            The class label of each row.
        **masks : array
            Per-row masks passed on to the statistic's ``chunk``.

        Returns
        -------
        S
            The statistic's state of the block.
        """
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
        if keys:
            return self.inner.chunk(x, label, **dict(zip(keys, masks, strict=True)))
        return self.inner.chunk(x, label)

    def merge(self, a: S, b: S) -> S:
        """Merge as the inner statistic does.

        Parameters
        ----------
        a, b : S
            The states to combine.

        Returns
        -------
        S
            The merged state.
        """
        return self.inner.merge(a, b)

    def finalize(self, state: S) -> R:
        """Finalize as the inner statistic does.

        Parameters
        ----------
        state : S
            The state of all the rows.

        Returns
        -------
        R
            The result.
        """
        return self.inner.finalize(state)
