"""What one worker of a cluster offers a computation: a plain value the planner reads.

Pure (stdlib only): :mod:`daskbatch.runtime.cluster` builds a :class:`Resources` from a
live client, ``daskbatch plan`` builds one from command-line numbers, and the
planner never sees a client.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Resources", "format_bytes"]

_DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class Resources:  # numpydoc ignore=PR02
    """Memory and threads of one worker, and how many workers there are.

    Parameters
    ----------
    memory_bytes : int
        Host memory of one worker in bytes (its ``memory_limit``).
    threads_per_worker : int, default 1
        Tasks one worker runs at the same time; they share its memory.
    n_workers : int, default 1
        Number of workers (only the degree of parallelism depends on it).
    device_memory_bytes : int or None, default None
        GPU memory of one worker in bytes; when set, it is what tasks are planned against.
    device : {"cpu", "gpu"}, default "cpu"
        Where the chunk kernels run.
    """

    memory_bytes: int
    threads_per_worker: int = 1
    n_workers: int = 1
    device_memory_bytes: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        # Validate only; a frozen dataclass is never rewritten after construction.
        for name in ("memory_bytes", "threads_per_worker", "n_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Resources.{name} must be a positive int, got {value!r}")
        dev_mem = self.device_memory_bytes
        if dev_mem is not None and (isinstance(dev_mem, bool) or not isinstance(dev_mem, int) or dev_mem < 1):
            raise ValueError(f"Resources.device_memory_bytes must be a positive int or None, got {dev_mem!r}")
        if self.device not in _DEVICES:
            raise ValueError(f"Resources.device must be one of {_DEVICES}, got {self.device!r}")

    @property
    def planning_memory_bytes(self) -> int:
        """Give the memory that tasks are planned against: device memory when known, else host memory.

        Returns
        -------
        int
            Bytes.
        """
        return self.device_memory_bytes or self.memory_bytes

    @property
    def total_threads(self) -> int:
        """Count the tasks the whole cluster runs at once.

        Returns
        -------
        int
            Workers times threads per worker.
        """
        return self.threads_per_worker * self.n_workers

    def describe(self) -> str:
        """Describe the resources in one line.

        Returns
        -------
        str
            Such as ``2 workers x 4 threads, 16.00 GiB host memory per worker``.
        """
        workers = f"{self.n_workers} worker{'s' if self.n_workers != 1 else ''}"
        threads = f"{self.threads_per_worker} thread{'s' if self.threads_per_worker != 1 else ''}"
        text = f"{workers} x {threads}, {format_bytes(self.memory_bytes)} host memory per worker"
        if self.device_memory_bytes is not None:
            text += f", {format_bytes(self.device_memory_bytes)} GPU memory per worker"
        return f"{text} ({self.device})"


def format_bytes(n: int | float) -> str:
    """Format bytes with ``dask.utils.format_bytes``, imported on use so this layer stays free of dask.

    Parameters
    ----------
    n : int or float
        Bytes.

    Returns
    -------
    str
        Such as ``3.10 GiB``.
    """
    from dask.utils import format_bytes as dask_format_bytes  # lazy: dask

    return dask_format_bytes(int(n))
