"""How a run goes, apart from what it computes: one value that :func:`daskbatch.describe` takes as ``run=``."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

from daskbatch._arguments import checked_device
from daskbatch._typing import Device

__all__ = ["RunOptions"]


@dataclasses.dataclass(frozen=True)
class RunOptions:  # numpydoc ignore=PR02
    """How :func:`daskbatch.describe` runs: where, in what layout, resumable or not, with what feedback.

    None of ``plan``, ``checkpoint``, ``device``, ``progress``, ``cache``,
    ``split_every``, ``cov_out`` and ``cancel`` changes a result (a
    checkpointed, cached, planned or GPU run gives the summary a plain one
    gives, bitwise on the CPU); the statistics and their parameters are
    ``describe``'s own arguments.

    Parameters
    ----------
    plan : "auto", Plan, Resources or None, default "auto"
        How to chunk and reduce. ``"auto"`` plans from the live cluster's
        workers (or this machine) with :func:`daskbatch.plan`, rechunks to its
        chunk rows and uses its ``split_every``; a :class:`~daskbatch.Resources`
        plans for that budget; a :class:`~daskbatch.Plan` is used as given;
        None keeps the input's chunks. A plan that cannot fit raises
        :class:`~daskbatch.PlanError` before anything is computed.
    checkpoint : path, optional
        Directory for merged partial states of completed block ranges. A
        re-run with the same inputs computes only what is missing and returns
        a result bitwise identical to an uninterrupted run.
    force : bool, default False
        Discard a checkpoint that belongs to other inputs instead of refusing.
    device : {"auto", "cpu", "gpu"}, default "cpu"
        ``"auto"``: the GPU when it passes the preflight and a chunk has at
        least ``daskbatch.gpu-min-batch-bytes``, else the CPU (logged, and
        ``provenance["device"]``). ``"gpu"`` moves each block to the GPU once
        (CuPy) and computes and merges states there. Blocks that already are
        CuPy arrays stay on the GPU either way. How host blocks travel is
        ``daskbatch.gpu-transfer``: ``"block"`` (a copy task per block) or
        ``"staged"`` (each chunk task copies its block in parts through pinned
        buffers, overlapping the copy of one part with the reduction of the previous).
    progress : bool, "dask" or callable, default False
        Show a progress bar per pass: a widget in Jupyter, a labelled line on
        stderr in a terminal, nothing otherwise (the passes' start, end and
        throughput are logged at INFO either way, and a line every 10 s where
        no bar is drawn). ``"dask"``: dask's own displays instead,
        :func:`distributed.progress` on each pass's futures under a
        ``distributed`` client, :class:`dask.diagnostics.ProgressBar` under the
        local schedulers. A callable is called as ``progress(done, total,
        phase)`` after every finished block, in the calling thread.
    cache : bool or "auto", default "auto"
        When two passes are needed (no ``range``), keep the decoded chunks in
        memory (``persist``) so that each is read and decoded once; peak
        memory then grows with the data (distributed spills to disk when they
        do not fit). ``"auto"`` caches a store's chunks on the CPU when the plan
        says they take at most ``daskbatch.cache-fraction`` (default 0.25) of
        the workers' memory, and never with a checkpoint (a resumed run reads
        only what is missing) or ``plan=None``. The results are bitwise the
        same either way.
    split_every : int, optional
        Fan-in of the merge tree (``daskbatch.split-every``, default 8).
    cov_out : path, optional
        Where the tiled covariance goes when the plan tiles it (a D × D
        co-moment state too large for one worker): a Zarr group with ``cov``
        and ``corr`` written tile by tile by the workers. Default: a new
        temporary directory, named in ``summary.provenance["tiled_cov"]``.
    cancel : threading.Event, optional
        Set from another thread, it stops the run at the next finished block:
        :class:`~daskbatch.Cancelled` (an ``Exception``). With ``checkpoint``
        the finished blocks are kept and the same call resumes.
    like : Summary, optional
        Count histograms on this summary's bin edges (its ranges, bins, class
        values and target bins), for :func:`daskbatch.compare`.
    feature_names : sequence of str, optional
        Names of the features (else the store's, else ``f0, f1, ...``).
    missing : {"auto", "raise", "skip", "fill"}, default "auto"
        Chunks absent from a store (see :func:`daskbatch.open_dataset`).

    Examples
    --------
    >>> import daskbatch as db
    >>> db.RunOptions(device="cpu", plan=None).split_every is None
    True
    """

    plan: Any = "auto"
    checkpoint: str | os.PathLike[str] | None = None
    force: bool = False
    device: Device = "cpu"
    progress: bool | Literal["dask"] | Callable[[int, int | None, str], Any] = False
    cache: bool | Literal["auto"] = "auto"
    split_every: int | None = None
    cov_out: str | os.PathLike[str] | None = None
    cancel: threading.Event | None = None
    like: Any = None
    feature_names: Sequence[str] | None = None
    missing: Literal["auto", "raise", "skip", "fill"] = "auto"

    def __post_init__(self) -> None:
        checked_device(self.device)
        if not isinstance(self.cache, bool) and self.cache != "auto":
            raise ValueError(f"cache must be True, False or 'auto', got {self.cache!r}")
