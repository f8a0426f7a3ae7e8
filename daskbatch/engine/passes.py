"""Running one pass: a bundle of statistics over the row blocks of a feature matrix.

A pass is one tree reduction (:func:`daskbatch.engine.reduce.tree_reduce`),
computed on the active scheduler, or through a checkpoint directory
(:mod:`daskbatch.engine.checkpoint`) when one is given. Both give bitwise
identical results.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from daskbatch.engine.checkpoint import run as checkpointed
from daskbatch.engine.inputs import FeatureMatrix
from daskbatch.engine.reduce import TASK_PREFIXES, statistics_tag, task_prefixes, tree_reduce
from daskbatch.engine.staged import Staged
from daskbatch.runtime.capacity import active_client
from daskbatch.runtime.joblog import note_pass
from daskbatch.runtime.progress import Progress, ProgressCallback
from daskbatch.runtime.progress import compute as tracked_compute
from daskbatch.stats._base import Bundle, BundleLike, reads_label

log = logging.getLogger(__name__)

__all__ = ["PassRunner", "compute"]


def compute(graph: Any, progress: bool | str | ProgressCallback | Progress, title: str = "compute") -> Any:
    """Compute ``graph`` on the active scheduler (threads or a ``distributed`` client), with progress.

    Parameters
    ----------
    graph : dask collection
        What to compute.
    progress : bool, callable or Progress
        A :class:`~daskbatch.runtime.progress.Progress` to advance by the graph's
        chunk tasks (its blocks); True or False: a new one named ``title``,
        drawn when True (log lines either way); a callable: a new one that
        calls it with ``(done, total, title)``.
    title : str
        Label of a new Progress.

    Returns
    -------
    object
        The computed value.
    """
    if isinstance(progress, Progress):
        return tracked_compute(graph, progress, prefix=TASK_PREFIXES["chunk"])
    with Progress(title, **_progress_options(progress)) as bar:
        return tracked_compute(graph, bar, prefix=TASK_PREFIXES["chunk"])


def _progress_options(progress: bool | str | ProgressCallback) -> dict[str, Any]:
    """A Progress's ``show`` and ``callback`` for describe's ``progress`` argument (a bool, "dask" or a callable)."""
    if callable(progress):
        return {"show": False, "callback": progress}
    return {"show": progress}


@dataclass(frozen=True)
class PassRunner:  # numpydoc ignore=PR02
    """Runs passes over ``data`` with one fan-in, through ``checkpoint`` when it is given.

    Parameters
    ----------
    data : FeatureMatrix
        The blocks to reduce (already planned, rechunked and on their device).
    split_every : int
        Fan-in of every merge tree (resolved once by the caller).
    progress : bool or callable
        Draw a progress bar while computing (pass start and end are logged
        either way); a callable is called with ``(done, total, pass title)``.
    checkpoint : path, optional
        Checkpoint directory; None computes directly.
    force : bool
        Discard a checkpoint written for other data instead of refusing.
    passes : int
        Passes of the whole run, for the labels (``pass 1/2: moments+cov+sketch``).
    cancel : threading.Event, optional
        Set, it stops the pass at the next finished block (or checkpoint unit):
        :class:`~daskbatch.errors.Interrupted`, the checkpoint keeping what finished.
    """

    data: FeatureMatrix
    split_every: int
    progress: bool | str | ProgressCallback = False
    checkpoint: str | os.PathLike[str] | None = None
    force: bool = False
    passes: int = 1
    cancel: threading.Event | None = None
    #: Wall time of each pass run so far, in seconds (for provenance and batch-job reports).
    seconds: list[float] = field(default_factory=list)

    def __call__(self, bundle: Bundle, index: int = 1, *, finalize: bool = True) -> tuple[Any, ...]:
        """Results of every statistic of ``bundle`` (pass ``index`` of the run), as host NumPy arrays.

        With ``finalize=False``, their merged states instead (host NumPy):
        ``bundle.finalize`` of those gives the same results bit for bit on the CPU.
        """
        t0 = time.perf_counter()
        try:
            return self._run(bundle, index, finalize)
        finally:
            self.seconds.append(round(time.perf_counter() - t0, 6))

    def _run(self, bundle: Bundle, index: int, finalize: bool) -> tuple[Any, ...]:
        needs_label = any(reads_label(s) for s in bundle.stats)
        label = self.data.label if needs_label else None
        stat: BundleLike = bundle
        if self.data.stage_rows is not None:  # host blocks, staged to the GPU inside each chunk task
            stat = Staged(bundle, self.data.stage_rows)
        x = self.data.x
        t0 = time.perf_counter()
        title = f"pass {index}/{self.passes}: {'+'.join(s.name for s in bundle.stats)}"
        span_name = f"pass-{index}-{'-'.join(s.name for s in bundle.stats)}"
        with _span(span_name), Progress(title, int(x.numblocks[0]), rows=int(x.shape[0]), nbytes=int(x.nbytes),
                                        cancel=self.cancel, **_progress_options(self.progress)) as bar:
            if self.checkpoint is not None:
                # Looked up on the module at call time (tests wrap it to watch the lock).
                result = checkpointed.run_checkpointed(
                    stat, self.data, label, split_every=self.split_every, progress=bar,
                    directory=self.checkpoint, force=self.force, finalize=finalize,
                )
            else:
                tag = statistics_tag(bundle.stats)  # the dashboard names each pass's tasks apart
                graph = tree_reduce(stat, x, label, weights=self.data.weights, split_every=self.split_every,
                                    finalize=finalize, tag=tag,
                                    labels_checked=label is not None and self.data.label_checked)
                result = tracked_compute(graph, bar, prefix=task_prefixes(tag)["chunk"])
        note_pass(int(x.shape[0]), int(x.shape[1]))
        if log.isEnabledFor(logging.DEBUG):  # -v: how the pass was laid out, and where its time went
            log.debug(
                "%s: %d blocks of up to %s rows x %s features, merge fan-in %d, %s; %.2f s",
                title, int(x.numblocks[0]), f"{max(x.chunks[0]):,}", f"{x.shape[1]:,}", self.split_every,
                "through the checkpoint" if self.checkpoint is not None else "computed directly",
                time.perf_counter() - t0,
            )
        return result


@contextlib.contextmanager
def _span(name: str) -> Iterator[None]:
    """A ``distributed`` span per pass (inside describe's ``daskbatch-describe``): the dashboard tells the passes apart."""
    if active_client() is None:
        yield
        return
    from distributed import span  # lazy: distributed

    with span(name):
        yield
