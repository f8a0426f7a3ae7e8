"""The passes over the data: :class:`PassRunner` and the one graph builder, :func:`tree_reduce`.

Each pass is a ``split_every``-ary tree reduction of a bundle of statistics over the row blocks, built and computed
here, on the active scheduler or through a checkpoint (the same bits). The tree's shape and merge order depend only
on the number of blocks and ``split_every``, so results are bitwise identical from run to run and between one worker
and many. Task keys: ``db-chunk``, ``db-merge``, ``db-result`` (:mod:`daskbatch.engine.reduce`: what runs in them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import dask
import dask.array as da
import numpy as np
from array_api_compat import is_cupy_array
from dask.base import tokenize
from dask.core import flatten
from dask.delayed import Delayed

from daskbatch.config import resolve_split_every
from daskbatch.engine import checkpoint as checkpointed
from daskbatch.engine.inputs import FeatureMatrix
from daskbatch.engine.reduce import (
    TASK_PREFIXES,
    Staged,
    chunk_task,
    host_result,
    joined,
    statistics_tag,
    task_prefixes,
    to_host,
)
from daskbatch.runtime.capacity import active_client, note_pass, rechunk_method
from daskbatch.runtime.progress import Progress, ProgressCallback
from daskbatch.runtime.progress import compute as tracked_compute
from daskbatch.runtime.runlock import pass_started
from daskbatch.stats import CoMoments, Sketch
from daskbatch.stats._base import Bundle, BundleLike, Statistic, merge_all, reads_label, shown_names
from daskbatch.stats.kernels.ahead import helping as compile_helping
from daskbatch.stats.registry import Kept

S = TypeVar("S")
R = TypeVar("R")

log = logging.getLogger(__name__)

__all__ = ["PassRunner", "compute", "tree_reduce"]


def compute(graph: Any, progress: bool | str | ProgressCallback | Progress, title: str = "compute") -> Any:
    """Compute ``graph`` on the active scheduler with progress: a Progress advanced by its chunk tasks, or a new one."""
    if isinstance(progress, Progress):
        return tracked_compute(graph, progress, prefix=TASK_PREFIXES["chunk"])
    with Progress(title, progress=progress) as bar:
        return tracked_compute(graph, bar, prefix=TASK_PREFIXES["chunk"])


@dataclass(frozen=True)
class PassRunner:
    """Runs passes over ``data`` (planned, rechunked, on its device) with one fan-in, through ``checkpoint`` if given."""

    # progress: a bar (True), log lines only (False) or a callable(done, total, pass title); passes: of the whole
    # run, for the titles ("pass 1/2: moments+cov+sketch"); cancel: stops at the next finished block (or checkpoint
    # unit), the checkpoint keeping what finished; keep_blocks: keep the decoded blocks (and the label's and
    # weights') in memory after the first pass, so later passes do not read them again (a local scheduler's first
    # pass returns the blocks it read, distributed persists them as it starts; never with a checkpoint).

    data: FeatureMatrix
    split_every: int
    progress: bool | str | ProgressCallback = False
    checkpoint: str | os.PathLike[str] | None = None
    force: bool = False
    passes: int = 1
    cancel: threading.Event | None = None
    keep_blocks: bool = False
    #: Wall time of each pass run so far, in seconds (for provenance and batch-job reports).
    seconds: list[float] = field(default_factory=list)
    #: The blocks kept in memory by the first pass (``keep_blocks``), once it has run.
    _kept: list[FeatureMatrix] = field(default_factory=list, repr=False)

    @property
    def blocks(self) -> FeatureMatrix:
        """The data the next pass reads: the kept blocks once the first pass kept them, else ``data``."""
        return self._kept[-1] if self._kept else self.data

    def run(
        self, first: Bundle, second: Callable[[dict[str, Any], dict[str, Kept]], Bundle | None]
    ) -> tuple[dict[str, Kept], dict[str, Any], FeatureMatrix]:
        """Run ``first``, then the bundle ``second`` makes of its results: merged states and host results by name."""
        with _span("daskbatch-describe"):  # one span per describe call: the dashboard groups its tasks
            kept = _kept_by_name(first, self(first, finalize=False))
            results = to_host({name: k.statistic.finalize(k.state) for name, k in kept.items()})
            then = second(results, kept)
            if then is not None:
                more = _kept_by_name(then, self(then, 2, finalize=False))
                kept.update(more)
                results.update(to_host({name: k.statistic.finalize(k.state) for name, k in more.items()}))
        return kept, results, self.blocks

    def __call__(self, bundle: Bundle, index: int = 1, *, finalize: bool = True) -> tuple[Any, ...]:
        """Results of every statistic of ``bundle`` (pass ``index``) on the host; merged states with ``finalize=False``."""
        t0 = time.perf_counter()
        try:
            return self._run(bundle, index, finalize)
        finally:
            self.seconds.append(round(time.perf_counter() - t0, 6))

    def _run(self, bundle: Bundle, index: int, finalize: bool) -> tuple[Any, ...]:
        keep = self.keep_blocks and not self._kept and self.checkpoint is None
        local = active_client() is None
        if keep and not local:  # persist returns at once: the pass's tasks wait on the blocks being read
            self._kept.append(_persisted(self.data))
        data = self.blocks
        needs_label = any(reads_label(s) for s in bundle.stats)
        label = data.label if needs_label else None
        x = data.x
        pass_started()  # an error from here on may leave reads in flight: the CLI then exits at once
        t0 = time.perf_counter()
        title = f"pass {index}/{self.passes}: {'+'.join(shown_names(bundle.stats))}"
        span_name = f"pass-{index}-{'-'.join(shown_names(bundle.stats))}"
        with _span(span_name):
            # The graph is built inside the pass's span (its tasks carry it), before the bar starts, in one go.
            stat: BundleLike = bundle
            if data.stage_rows is not None:  # host blocks, staged to the GPU inside each chunk task
                stat = Staged(bundle, data.stage_rows)
            tag = statistics_tag(bundle.stats)  # the dashboard names each pass's tasks apart
            prefix = task_prefixes(tag)["chunk"]
            graph = None if self.checkpoint is not None else tree_reduce(
                stat, x, label, weights=data.weights, split_every=self.split_every, finalize=finalize, tag=tag,
                labels_checked=label is not None and data.label_checked,
            )
            with Progress(title, int(x.numblocks[0]), rows=int(x.shape[0]), nbytes=int(x.nbytes),
                          cancel=self.cancel, progress=self.progress) as bar:
                if self.checkpoint is not None:
                    # Looked up on the module at call time (tests wrap it to watch the lock).
                    result = checkpointed.run_checkpointed(
                        stat, data, label, tree=tree_reduce, split_every=self.split_every, progress=bar,
                        directory=self.checkpoint, force=self.force, finalize=finalize,
                    )
                elif keep and local:
                    rows = _row_aligned(data)
                    result, blocks = tracked_compute(graph, bar, prefix=prefix,
                                                     along=[a.to_delayed().ravel().tolist() for a in rows])
                    self._kept.append(_with_blocks(data, rows, blocks))
                else:
                    result = tracked_compute(graph, bar, prefix=prefix)
        note_pass(int(x.shape[0]), int(x.shape[1]))
        if log.isEnabledFor(logging.DEBUG):  # -v: how the pass was laid out, and where its time went
            log.debug(
                "%s: %d blocks of up to %s rows x %s features, merge fan-in %d, %s; %.2f s",
                title, int(x.numblocks[0]), f"{max(x.chunks[0]):,}", f"{x.shape[1]:,}", self.split_every,
                "through the checkpoint" if self.checkpoint is not None else "computed directly",
                time.perf_counter() - t0,
            )
        return result


def _kept_by_name(bundle: Bundle, states: tuple[Any, ...]) -> dict[str, Kept]:
    """Each statistic of ``bundle`` with its merged state, by name (an int32-counting sketch as ``Sketch()``, int64)."""
    kept = {}
    for stat, state in zip(bundle.stats, states, strict=True):
        if type(stat) is Sketch and stat.window is None and stat.count_dtype == "int32":
            # The int32 counts only spared the passes' memory traffic: summaries, their merges and
            # updates keep the default sketch's int64 counts, whatever counted them.
            counts = state.counts
            state = dataclasses.replace(state, counts=counts.astype(np.int64) if counts.dtype == np.int32 else counts)
            stat = dataclasses.replace(stat, count_dtype="int64")
        kept[stat.name] = Kept(stat, state)
    return kept


def _persisted(data: FeatureMatrix) -> FeatureMatrix:
    """``data`` with its blocks, label and weights persisted (``distributed``: at once, loading on the workers)."""
    x, label, weights = dask.persist(data.x, data.label, data.weights)
    return dataclasses.replace(data, x=x, label=label, weights=weights)


def _row_aligned(data: FeatureMatrix) -> list[Any]:
    """``x``, then the label and weights (those given) in the row blocks of ``x``, as a pass's chunk tasks read them."""
    # The same rechunk as tree_reduce's (same names): computed beside the pass, their blocks are the pass's own.
    rows = [data.x]
    rows += [r.rechunk((data.x.chunks[0],), method=rechunk_method()) for r in (data.label, data.weights) if r is not None]
    return rows


def _with_blocks(data: FeatureMatrix, rows: list[Any], blocks: list[list[Any]]) -> FeatureMatrix:
    """``data`` whose arrays hold ``blocks`` in memory, as ``dask.persist`` rebuilds them (same names and chunks)."""
    def rebuilt(array: Any, values: list[Any]) -> Any:
        rebuild, args = array.__dask_postpersist__()
        return rebuild(dict(zip(flatten(array.__dask_keys__()), values, strict=True)), *args)

    arrays = iter(rebuilt(a, b) for a, b in zip(rows, blocks, strict=True))
    x = next(arrays)
    label = next(arrays) if data.label is not None else None
    weights = next(arrays) if data.weights is not None else None
    return dataclasses.replace(data, x=x, label=label, weights=weights)


@contextlib.contextmanager
def _span(name: str) -> Iterator[None]:
    """A ``distributed`` span named ``name`` (a describe's, a pass's inside it), none without a client."""
    if active_client() is None:
        yield
        return
    from distributed import span  # lazy: distributed

    with span(name):
        yield


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
    parts = _block_parts(stat, x) if complete is None and weights is None else None
    if parts is None:
        chunk = functools.partial(chunk_task, stat, labels_checked)
        states = [
            dask.delayed(chunk)(
                xb, lb, dask_key_name=(chunk_name, i),
                **({} if cb is None else {"complete": cb}), **({} if wb is None else {"weights": wb}),
            )
            for i, (xb, lb, cb, wb) in enumerate(
                zip(x_blocks, label_blocks, complete_blocks, weight_blocks, strict=True)
            )
        ]
    else:  # each block's statistics in two tasks; the chunk task (the one progress counts) joins their states
        assert isinstance(stat, Bundle)
        part_chunks = [functools.partial(chunk_task, Bundle(tuple(stat.stats[k] for k in part)), labels_checked,
                                         whole=stat) for part in parts]
        join = functools.partial(joined, parts)
        states = [
            dask.delayed(join)(
                *(dask.delayed(c)(xb, lb, dask_key_name=(f"{prefixes['part']}-{token}", i, j))
                  for j, c in enumerate(part_chunks)),
                dask_key_name=(chunk_name, i),
            )
            for i, (xb, lb) in enumerate(zip(x_blocks, label_blocks, strict=True))
        ]
    merge = functools.partial(merge_all, stat)
    level = 0
    while len(states) > 1:
        states = [
            dask.delayed(merge)(states[i : i + fan_in], dask_key_name=(f"{prefixes['merge']}-{token}", level, j))
            for j, i in enumerate(range(0, len(states), fan_in))
        ]
        level += 1
    result = functools.partial(host_result, stat.finalize if finalize else None)
    return dask.delayed(result)(states[0], dask_key_name=f"{prefixes['result']}-{token}")


def _block_parts(stat: Any, x: da.Array) -> list[list[int]] | None:
    """The co-moments apart from the bundle's other statistics, by position (None: one task a block)."""
    # Two tasks a block let two threads share its work: with few blocks a thread (about 30 ms of 0.4 s at
    # 1,000,000 x 64 in 4 blocks on 2 threads) would otherwise idle while the last block's one task runs.
    # Each statistic reads the block on its own anyway, and the states are the same bit for bit. In this
    # process only: a distributed worker would fetch a block that another worker read.
    # Not while a cold cache's helper compiles: it compiles the later statistics' kernels while this process
    # compiles the first ones, one statistic after another (a block's two tasks would compile them in another order).
    if (type(stat) is not Bundle or active_client() is not None or is_cupy_array(getattr(x, "_meta", None))
            or compile_helping()):
        return None
    product = [k for k, s in enumerate(stat.stats) if isinstance(s, CoMoments)]
    rest = [k for k in range(len(stat.stats)) if k not in product]
    return [product, rest] if product and rest else None


def _row_blocks(rows: da.Array | None, x: da.Array, n_blocks: int) -> list[Delayed] | list[None]:
    """The delayed blocks of a per-row array aligned to the row blocks of ``x`` (Nones if absent)."""
    if rows is None:
        return [None] * n_blocks
    return list(rows.rechunk((x.chunks[0],), method=rechunk_method()).to_delayed().ravel())
