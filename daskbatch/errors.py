"""Exceptions that daskbatch raises on purpose."""

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
