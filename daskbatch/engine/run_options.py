"""How a run goes, apart from what it computes: one value that :func:`daskbatch.describe` takes as ``run=``."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from typing import Any, Literal

from daskbatch._arguments import checked_device
from daskbatch._typing import Device
from daskbatch._warnings import warn
from daskbatch.stats import Moments, MutualInformation
from daskbatch.stats.spec import DEFAULT_STATS, normalize_stats, statistic_items

__all__ = ["MOVED_TO_RUN", "MOVED_TO_STATS", "RunOptions", "moved_keywords", "new_spelling"]

#: describe's keywords that moved into ``run=RunOptions(...)`` (kept, warning, for one release).
MOVED_TO_RUN = ("plan", "force", "cache", "split_every", "cov_out", "cancel")
#: describe's keywords that moved onto a statistic: keyword -> (statistic class, its field).
MOVED_TO_STATS: dict[str, tuple[type, str]] = {
    "bias": (Moments, "bias"), "nan_policy": (Moments, "nan_policy"), "mi_base": (MutualInformation, "base"),
    "miller_madow": (MutualInformation, "miller_madow"), "target_bins": (MutualInformation, "target_bins"),
}


@dataclasses.dataclass(frozen=True)
class RunOptions:  # numpydoc ignore=PR02
    """How :func:`daskbatch.describe` runs: where, in what layout, resumable or not, with what feedback.

    None of these changes a result (a checkpointed, cached, planned or GPU run
    gives the summary a plain one gives, bitwise on the CPU); the statistics and
    their parameters are ``describe``'s own arguments.

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

    def __post_init__(self) -> None:
        checked_device(self.device)
        if not isinstance(self.cache, bool) and self.cache != "auto":
            raise ValueError(f"cache must be True, False or 'auto', got {self.cache!r}")

    @classmethod
    def from_keywords(cls, run: RunOptions | None, **keywords: Any) -> RunOptions:
        """Take ``run``, or build one from ``describe``'s keywords; a keyword fills a field ``run`` leaves at its default.

        Parameters
        ----------
        run : RunOptions or None
            The value the caller gave.
        **keywords
            The run keywords of ``describe`` (``device=``, ``plan=``, ...).

        Returns
        -------
        RunOptions
            The options of the run.

        Raises
        ------
        ValueError
            A keyword and ``run`` give two different values.
        """
        # None stands for "not given" (describe's device and progress shortcuts), except for plan, where it means no plan.
        keywords = {k: v for k, v in keywords.items() if v is not None or k == "plan"}
        if run is None:
            return cls(**keywords)
        if not isinstance(run, RunOptions):
            raise TypeError(f"run must be a daskbatch.RunOptions, got {type(run).__name__}")
        defaults = cls()
        given = keywords  # a keyword given with the default's value is given too: device="cpu" beside run's "gpu"
        # A keyword fills a field that run leaves at its default; two different values are an error.
        for key, value in given.items():
            mine = getattr(run, key)
            if mine is not getattr(defaults, key) and mine != getattr(defaults, key) and mine != value:
                raise ValueError(f"give {key}= in run=RunOptions(...) or as a keyword, not both")
        return dataclasses.replace(run, **given) if given else run


def moved_keywords(moved: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split describe's moved keywords into statistic shortcuts and run options, each with a DeprecationWarning.

    Parameters
    ----------
    moved : dict
        The keywords ``describe`` does not name.

    Returns
    -------
    shortcuts : dict
        Statistic parameters by their field name (``base`` for ``mi_base``).
    run : dict
        Fields of :class:`RunOptions`.

    Raises
    ------
    TypeError
        A keyword that ``describe`` never took.
    """
    shortcuts: dict[str, Any] = {}
    run: dict[str, Any] = {}
    for key, value in moved.items():
        if key in MOVED_TO_RUN:
            new = f"run=db.RunOptions({key}=...)"
            run[key] = value
        elif key in MOVED_TO_STATS:
            cls, field = MOVED_TO_STATS[key]
            new = f"stats=[..., db.stats.{cls.__name__}({field}=...)]"
            shortcuts[field] = value
        else:
            raise TypeError(f"describe() got an unexpected keyword argument {key!r}")
        warn(DeprecationWarning(f"describe({key}=...) is deprecated and goes in the next release: use {new}"))
    return shortcuts, run


def new_spelling(keywords: dict[str, Any]) -> dict[str, Any]:
    """Re-spell describe's keyword arguments: the moved ones into ``run=`` and statistic objects, without a warning.

    For the callers that build describe's arguments from settings (the CLI, job
    files, ``update``): run keywords (and ``device``, ``checkpoint``,
    ``progress``) become one :class:`RunOptions`; ``bias``/``nan_policy`` a
    :class:`~daskbatch.stats.Moments`, and with ``"mi"`` asked for,
    ``mi_base``/``miller_madow``/``target_bins`` a
    :class:`~daskbatch.stats.MutualInformation` (without it they change nothing).

    Parameters
    ----------
    keywords : dict
        Keyword arguments of :func:`daskbatch.describe`, old spelling allowed.

    Returns
    -------
    dict
        The same arguments in the new spelling.
    """
    kept = dict(keywords)
    run = {k: kept.pop(k) for k in (*MOVED_TO_RUN, "device", "checkpoint", "progress") if k in kept}
    if run:
        kept["run"] = RunOptions.from_keywords(kept.pop("run", None), **run)
    fields: dict[type, dict[str, Any]] = {}
    for key in [k for k in kept if k in MOVED_TO_STATS]:
        cls, field = MOVED_TO_STATS[key]
        fields.setdefault(cls, {})[field] = kept.pop(key)
    stats = kept.get("stats", DEFAULT_STATS)
    if MutualInformation in fields and MutualInformation.name not in normalize_stats(stats):
        del fields[MutualInformation]
    if fields:
        kept["stats"] = [*statistic_items(stats), *(cls(**values) for cls, values in fields.items())]
    return kept
