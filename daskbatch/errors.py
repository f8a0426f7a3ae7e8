"""Exceptions that daskbatch raises on purpose, and how to tell a scheduler lost mid-run from the rest."""

from __future__ import annotations


class PlanError(ValueError):
    """A computation cannot fit the memory budget; the message names the number to change."""


class DataError(ValueError):
    """The data cannot be read as asked: a missing array or chunk, a corrupt chunk, a bad shape."""


class CheckpointMismatchError(ValueError):
    """A checkpoint belongs to a different input or statistics spec."""


class DeviceUnavailableError(RuntimeError):
    """A GPU was asked for (a ``"cuda"`` cluster) but this machine shows none."""


class GPUUnavailableError(DeviceUnavailableError, ImportError):
    """``device="gpu"`` was asked for, but CuPy does not import or sees no CUDA device.

    Raised the same way by every function that takes ``device=``; its message
    names the install line. Also an :class:`ImportError`, as a missing optional
    dependency is, so code written against either keeps working.
    """


class Interrupted(BaseException):
    """A run was stopped (SIGTERM at a walltime); its checkpoint holds what finished.

    A ``BaseException``, like ``KeyboardInterrupt``: the signal arrives wherever
    the main thread happens to be, often inside a library's ``except Exception``
    fallback (dask's tokenize tries pickle, then cloudpickle, then gives up
    quietly), which must not swallow it.
    """

    #: Raised where the signal landed, outside the block runner: its message cannot say what was kept.
    unaccounted = False


class Cancelled(Exception):
    """A run stopped because its ``cancel`` event was set; what finished is kept.

    An ``Exception``, so ``except Exception`` in a caller's loop handles it.
    Blocks already checkpointed (``describe(..., run=RunOptions(checkpoint=...))``) or written
    (``transform``, ``map_batches(out=...)``, ``ingest``) stay, and the same
    call resumes from them. A signal (SIGTERM at a walltime, Ctrl-C) raises
    :class:`Interrupted` instead.
    """


class RangeWarning(UserWarning):
    """More than a small fraction of some feature's values fell outside its histogram range.

    Those values are still counted (underflow/overflow), but histograms, mutual
    information and histogram quantiles of the feature see them only as two
    lumps; ``Summary.out_of_range_fraction`` gives the fraction per feature.
    """


class RebinnedWarning(UserWarning):
    """``compare`` read one summary's cells on the other's bin edges from its quantile sketch: PSI, JS and χ² are approximate.

    ``Drift.rebin_error`` bounds the error of every cumulative probability read that way.
    """


class OverflowWarning(UserWarning):
    """Some features' sums of squared deviations overflow float64: their variance is inf, as NumPy's.

    It takes values ~1e154 or more from the mean, often a sentinel (such as
    1e300) standing for missing values; the message names the features and
    their extremes.
    """


class CompleteRowsWarning(UserWarning):
    """The complete-rows covariance left out more than 10 % of the rows, or every row (a feature all NaN).

    ``CoMoments(rows="pairwise")`` (``--cov pairwise``) uses each pair's own rows instead.
    """


class SuspectValueWarning(UserWarning):
    """A feature's minimum or maximum is repeated far more often than its neighbours: perhaps a sentinel (−999).

    It is counted as data; ``Summary.suspect_values`` lists such values.
    """


class LockHeldError(OSError):
    """Another live run holds the lock of a checkpoint directory or an ingest output (the holder is named)."""


class DiskFullError(OSError):
    """A disk or quota filled up while daskbatch wrote (ENOSPC, EDQUOT): not bad input; the message names the path and the bytes it needed."""


class GPUKernelsWarning(UserWarning):
    """GPU work runs on the array-API path instead of daskbatch's GPU kernels: the same answers, several times slower."""


class GPUFallbackWarning(UserWarning):
    """Work meant for the GPU ran on the CPU (CuPy missing, the GPU out of memory or failing); said once per call."""


class SubmitError(OSError):
    """The batch system refused a worker job (``sbatch``/``qsub`` failed); the message is its own."""


class BatchError(RuntimeError):
    """``map_batches``'s function failed on a batch; the message names its rows (chained to the original error)."""


class FlaggedRowsWarning(UserWarning):
    """``map_batches(on_error="flag")`` flagged rows that failed; their output is NaN."""


class MissingChunksWarning(UserWarning):
    """Chunks are absent from the store and ``open_dataset(missing=...)`` skipped their rows or filled them."""


class IncompleteStoreWarning(UserWarning):
    """The store was written by an ingest that has not finished."""


def is_lost_scheduler(exc: BaseException, *, connecting: bool = True) -> bool:
    """Tell the errors a client raises when its scheduler (or every worker) goes away during a compute.

    Parameters
    ----------
    exc : BaseException
        What the computation raised.
    connecting : bool
        Whether the client had connected: then an ``OSError`` raised in distributed's comm layer or RPC
        core is the scheduler's loss too (before that, it is a wrong address).

    Returns
    -------
    bool
        True when ``exc`` says the scheduler (or the connection to it, or every worker) was lost.
    """
    # Imported here: ``import daskbatch`` loads this module and need not load asyncio.
    import asyncio
    import concurrent.futures

    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return True
    try:
        from distributed.comm.core import CommClosedError  # lazy: distributed
        from distributed.scheduler import NoWorkerError  # lazy: distributed
    except ImportError:  # distributed is optional for --cluster threads
        return False
    if isinstance(exc, (CommClosedError, NoWorkerError)):  # NoWorkerError: every worker gone past no-workers-timeout
        return True
    if not (connecting and isinstance(exc, OSError)):
        return False
    # An OSError is the scheduler's loss when its innermost frame is in distributed's comm layer or RPC core.
    tb, module = exc.__traceback__, ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return module.startswith(("distributed.comm", "distributed.core"))


def describe_lost(exc: BaseException) -> str:
    """Give a short, one-line account of ``exc`` (distributed's messages span lines).

    Parameters
    ----------
    exc : BaseException
        The error to account for.

    Returns
    -------
    str
        ``"TypeName: message"`` on one line (the type name alone when the message is empty).
    """
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def what_was_lost(exc: BaseException) -> str:
    """Name what :func:`is_lost_scheduler` found gone: every worker, or the scheduler.

    Parameters
    ----------
    exc : BaseException
        An error :func:`is_lost_scheduler` accepts.

    Returns
    -------
    str
        ``"the workers"`` for distributed's ``NoWorkerError``, else ``"the scheduler"``.
    """
    return "the workers" if type(exc).__name__ == "NoWorkerError" else "the scheduler"
