"""Running one pass: a bundle of statistics over the row blocks of a feature matrix.

A pass is one tree reduction (:func:`daskbatch.engine.reduce.tree_reduce`),
computed on the active scheduler, or through a checkpoint directory
(:mod:`daskbatch.engine.checkpoint`) when one is given. Both give bitwise
identical results.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import dask

from daskbatch.engine.inputs import FeatureMatrix
from daskbatch.engine.reduce import tree_reduce
from daskbatch.stats._base import Bundle, BundleLike

__all__ = ["PassRunner", "compute"]


def compute(graph: Any, progress: bool) -> Any:
    """Compute ``graph`` on the active scheduler, with a progress bar when asked.

    Under a ``distributed`` client the computation goes through the client (its
    progress bar, or widget in Jupyter); otherwise through dask's local scheduler.

    Parameters
    ----------
    graph : dask collection
        What to compute.
    progress : bool
        Show a progress bar.

    Returns
    -------
    object
        The computed value.
    """
    if not progress:
        return dask.compute(graph)[0]
    from daskbatch.runtime.cluster import active_client

    client = active_client()
    if client is None:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return dask.compute(graph)[0]
    from distributed import progress as dist_progress

    future = client.compute(graph)
    dist_progress(future)
    return future.result()


@dataclass(frozen=True)
class PassRunner:  # numpydoc ignore=PR02
    """Runs passes over ``data`` with one fan-in, through ``checkpoint`` when it is given.

    Parameters
    ----------
    data : FeatureMatrix
        The blocks to reduce (already planned, rechunked and on their device).
    split_every : int
        Fan-in of every merge tree (resolved once by the caller).
    progress : bool
        Show progress while computing.
    checkpoint : path, optional
        Checkpoint directory; None computes directly.
    force : bool
        Discard a checkpoint written for other data instead of refusing.
    """

    data: FeatureMatrix
    split_every: int
    progress: bool = False
    checkpoint: str | os.PathLike[str] | None = None
    force: bool = False
    #: Wall time of each pass run so far, in seconds (for provenance and batch-job reports).
    seconds: list[float] = field(default_factory=list)

    def __call__(self, bundle: Bundle, *, finalize: bool = True) -> tuple[Any, ...]:
        """Finalized results of every statistic of ``bundle``, as host NumPy arrays.

        With ``finalize=False``, their merged states instead (host NumPy):
        ``bundle.finalize`` of those gives the same results bit for bit on the CPU.
        """
        t0 = time.perf_counter()
        try:
            return self._run(bundle, finalize)
        finally:
            self.seconds.append(round(time.perf_counter() - t0, 6))

    def _run(self, bundle: Bundle, finalize: bool) -> tuple[Any, ...]:
        needs_label = any(getattr(s, "by_label", False) for s in bundle.stats)
        label = self.data.label if needs_label else None
        stat: BundleLike = bundle
        if self.data.stage_rows is not None:  # host blocks, staged to the GPU inside each chunk task
            from daskbatch.engine.staged import Staged

            stat = Staged(bundle, self.data.stage_rows)
        if self.checkpoint is not None:
            # Looked up on the module at call time (tests wrap it to watch the lock).
            from daskbatch.engine.checkpoint import run as checkpointed

            return checkpointed.run_checkpointed(
                stat, self.data, label, split_every=self.split_every, progress=self.progress,
                directory=self.checkpoint, force=self.force, finalize=finalize,
            )
        graph = tree_reduce(stat, self.data.x, label, split_every=self.split_every, finalize=finalize)
        return compute(graph, self.progress)
