"""How a run goes, apart from what it computes: :class:`RunOptions`, and where it runs when ``device="auto"``."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

from daskbatch import config
from daskbatch._common import GPU_INSTALL, Device, checked_device
from daskbatch.errors import GPUFallbackWarning
from daskbatch.planning.plan import Resources
from daskbatch.planning.search import DeviceChoice, choose_device
from daskbatch.runtime.capacity import resources_auto
from daskbatch.stats.kernels.preflight import check_gpu
from daskbatch.stats.numerics import to_numpy

__all__ = ["RunOptions", "auto_device", "configured_min_batch_bytes", "gpu_failure", "gpu_problem", "on_device", "resolve_device"]


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


log = logging.getLogger("daskbatch.devices")
KEY = "gpu-min-batch-bytes"
#: The problem, once this process has said that an explicit ``device="auto"`` found no working GPU (said once).
_told_no_gpu: list[str] = []


def configured_min_batch_bytes() -> int | None:  # numpydoc ignore=PR01,RT01
    """Read ``daskbatch.gpu-min-batch-bytes``: bytes, or None for ``auto`` (ValueError when neither)."""
    from dask.utils import parse_bytes  # lazy: dask

    value = config.get(KEY)
    problem = config.check_setting(KEY, value)  # the one test of the setting, as `daskbatch config` applies it
    if problem is not None:
        raise ValueError(f"daskbatch.{KEY} {problem}")
    return None if value == "auto" else parse_bytes(value) if isinstance(value, str) else int(value)


def gpu_problem() -> str | None:  # numpydoc ignore=PR01,RT01
    """Say why a batch cannot run on a GPU here: the preflight's first problem."""
    check = check_gpu()
    if not check.ok:
        return check.problem
    if check.simulated:  # the kernels ran on the CPU, pretending: there is no GPU to send batches to
        return "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): no GPU"
    return None


def auto_device(batch_bytes: int, *, on_gpu: bool = False, what: str = "batches", quiet: bool = False) -> DeviceChoice:  # numpydoc ignore=PR01,RT01
    """Choose where ``device="auto"`` runs ``what`` of ``batch_bytes`` each (``on_gpu``: no transfer), and log it."""
    min_bytes = configured_min_batch_bytes()  # a malformed setting is named even where there is no GPU
    if on_gpu:
        choice = DeviceChoice("gpu", "the blocks are already on the GPU")
    else:
        problem = gpu_problem()
        resources = None
        if problem is None and min_bytes is None:
            try:
                resources = resources_auto(device="gpu")
            except ValueError:  # the GPU's memory is unreadable (no pynvml): the threshold needs only the threads
                resources = Resources(memory_bytes=1, threads_per_worker=1, device="gpu")
        choice = choose_device(batch_bytes, resources, gpu_problem=problem, min_bytes=min_bytes)
    if not quiet:
        log.info("device='auto' runs %s on the %s: %s", what, choice.device.upper(), choice.reason)
    return choice


def resolve_device(  # numpydoc ignore=PR01,RT01
    device: Device, shape: tuple[int, int], itemsize: int, chunk_rows: int, *, on_gpu: bool = False,
) -> DeviceChoice:
    """Resolve describe's ``device`` for an array of ``shape``; for ``"auto"`` a chunk is as large as the planner aims for."""
    from dask.utils import parse_bytes  # lazy: dask

    if device != "auto":
        return DeviceChoice(device, f"device={device!r}")
    row_bytes = int(shape[1]) * int(itemsize)
    chunk = min(int(shape[0]) * row_bytes, max(int(chunk_rows) * row_bytes, parse_bytes(config.get("target-chunk-bytes"))))
    choice = auto_device(chunk, on_gpu=on_gpu, what="chunks")
    problem = None if on_gpu else gpu_problem()  # the preflight's answer, kept for the process
    # describe's device is "cpu" unless given (the CLI resolves its own "auto"), so this is the
    # user's request: said once, not at every call, and never where no device was asked for.
    if problem is not None and not _told_no_gpu:
        _told_no_gpu.append(problem)
        warnings.warn(f"device='auto' runs on the CPU: {problem}; for the GPU, {GPU_INSTALL}", GPUFallbackWarning,
                      stacklevel=1)
    return choice


def gpu_failure(exc: BaseException) -> str | None:  # numpydoc ignore=PR01,RT01
    """Say whether ``exc`` is the GPU failing (CuPy missing, out of memory, a CUDA error), in one line."""
    what = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ImportError) and "cupy" in str(exc).lower():
        return f"CuPy does not import ({what})"
    if isinstance(exc, MemoryError) or "OUT OF MEMORY" in str(exc).upper():  # CuPy's OutOfMemoryError is a MemoryError
        return f"out of memory ({what})"
    module = type(exc).__module__
    if module.split(".")[0] in ("cupy", "cupy_backends", "rmm") or module.startswith("numba.cuda"):
        return f"the GPU failed ({what})"
    return None


def on_device(block: Any, device: str) -> Any:  # numpydoc ignore=PR01,RT01
    """Move ``block`` where it is computed."""
    if device == "auto":
        return block
    if device == "gpu":
        import cupy  # lazy: cupy

        return cupy.asarray(block)
    return to_numpy(block)
