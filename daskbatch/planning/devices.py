"""Where ``device="auto"`` runs a batch: the GPU when it passed the preflight and the batch pays for its copy.

Pure (stdlib only), like the rest of the planner: the caller finds out whether
the GPU works (:func:`daskbatch.stats.kernels.preflight.check_gpu`) and what a
worker offers (a :class:`~daskbatch.planning.resources.Resources`); this module
turns those and the batch's size into a decision and the reason for it.

The cost model is deliberately coarse.  A batch of ``B`` bytes costs the CPU
``B / CPU_BYTES_PER_S`` on one thread.  On the GPU it costs a fixed
``GPU_BATCH_OVERHEAD_S`` (allocation, launches, the synchronising copy back)
plus the round trip over the host-to-device link, which the
``threads_per_worker`` tasks of one worker share; the GPU's own compute time is
taken as negligible.  The GPU pays from the ``B`` where the two costs meet;
when the link alone is slower than the CPU it never pays.  Functions much
heavier than streaming arithmetic pay earlier: set
``daskbatch.gpu-min-batch-bytes`` (bytes) to override the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskbatch.planning.resources import Resources, format_bytes

__all__ = ["CPU_BYTES_PER_S", "GPU_BATCH_OVERHEAD_S", "HOST_TO_DEVICE_BYTES_PER_S", "DeviceChoice", "choose_device",
           "gpu_min_batch_bytes"]

#: What one core streams through a vectorised float64 expression (a few NumPy passes over the batch).
CPU_BYTES_PER_S = 1.0e9
#: Pageable host memory to the GPU over PCIe 4 x16, as measured rather than as advertised.
HOST_TO_DEVICE_BYTES_PER_S = 12.0e9
#: Per-batch cost of the GPU that does not shrink with the batch: allocation, kernel launches, synchronisation.
GPU_BATCH_OVERHEAD_S = 2.0e-3


def gpu_min_batch_bytes(resources: Resources) -> int | None:
    """Give the smallest batch (input bytes) for which the GPU beats one CPU thread, by the module's cost model.

    Parameters
    ----------
    resources : Resources
        One worker: its ``threads_per_worker`` tasks share the link to the GPU.

    Returns
    -------
    int or None
        Bytes; None when the GPU never pays (the round trip alone is slower than the CPU).

    Examples
    --------
    >>> from daskbatch.planning.resources import Resources
    >>> gpu_min_batch_bytes(Resources(2**30, threads_per_worker=1))
    2400000
    >>> gpu_min_batch_bytes(Resources(2**30, threads_per_worker=16)) is None
    True
    """
    # The output is assumed as large as the input: it crosses the link once each way.
    link_s_per_byte = 2 * resources.threads_per_worker / HOST_TO_DEVICE_BYTES_PER_S
    saved_s_per_byte = 1 / CPU_BYTES_PER_S - link_s_per_byte
    if saved_s_per_byte <= 0:
        return None
    return int(round(GPU_BATCH_OVERHEAD_S / saved_s_per_byte))


@dataclass(frozen=True)
class DeviceChoice:
    """Where ``device="auto"`` runs the batches, and why (one line, for the log and the provenance).

    Attributes
    ----------
    device : {"cpu", "gpu"}
        The device chosen.
    reason : str
        Why, in one line.
    """

    device: str
    reason: str


def choose_device(
    batch_bytes: int, resources: Resources | None, *, gpu_problem: str | None, min_bytes: int | None = None
) -> DeviceChoice:
    """Choose the GPU when it works and a batch of ``batch_bytes`` pays for its transfer, else the CPU.

    Parameters
    ----------
    batch_bytes : int
        Input bytes of one batch.
    resources : Resources or None
        One worker, for the planner's threshold (unused when ``min_bytes`` is given or the GPU does not work).
    gpu_problem : str or None
        What the GPU preflight found missing; None when the GPU works.
    min_bytes : int, optional
        The threshold to use instead of the planner's (``daskbatch.gpu-min-batch-bytes``).

    Returns
    -------
    DeviceChoice
        The device and the reason.

    Examples
    --------
    >>> choose_device(10**9, None, gpu_problem="no CUDA driver").device
    'cpu'
    >>> choose_device(10**9, None, gpu_problem=None, min_bytes=2**20).device
    'gpu'
    """
    if gpu_problem is not None:
        return DeviceChoice("cpu", f"the GPU preflight failed: {gpu_problem}")
    batch = format_bytes(batch_bytes)
    if min_bytes is None:
        if resources is None:
            raise ValueError("choose_device needs resources (or min_bytes) when the GPU works")
        min_bytes = gpu_min_batch_bytes(resources)
        if min_bytes is None:
            return DeviceChoice("cpu", (
                f"the GPU never pays for its transfer with {resources.threads_per_worker} threads sharing its link "
                "(set daskbatch.gpu-min-batch-bytes to choose it)"
            ))
        source = "planned"
    else:
        source = "daskbatch.gpu-min-batch-bytes"
    if batch_bytes >= min_bytes:
        return DeviceChoice("gpu", f"batches of {batch} reach the {source} threshold of {format_bytes(min_bytes)}")
    return DeviceChoice("cpu", f"batches of {batch} are below the {source} threshold of {format_bytes(min_bytes)}")
