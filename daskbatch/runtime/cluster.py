"""Clusters in, :class:`~daskbatch.planning.resources.Resources` out.

* :func:`cluster` starts (or connects to) a cluster and yields a
  ``distributed.Client``: a local CPU cluster, one CUDA worker per GPU
  (dask-cuda), a SLURM/PBS cluster (dask-jobqueue), or an existing scheduler
  by address or scheduler file (batch jobs, dask-mpi).
* :func:`resources_from_client`, :func:`resources_from_machine` and
  :func:`resources_auto` turn a running cluster, or this machine, into the
  plain value the planner reads; the planner never sees a client.

distributed is imported inside functions and dask-cuda, dask-jobqueue,
rmm and pynvml only where needed, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from daskbatch.planning.resources import Resources

if TYPE_CHECKING:
    from distributed import Client

    from daskbatch.planning.search import Plan

__all__ = [
    "KINDS",
    "cluster",
    "cuda_cluster_options",
    "cuda_device_count",
    "gpu_memory_bytes",
    "machine_memory_bytes",
    "parse_memory",
    "require_cuda",
    "resolve_kind",
    "resources_auto",
    "resources_from_client",
    "resources_from_machine",
]

#: Values of ``cluster(kind=...)`` and of the CLI's ``--cluster``.
KINDS = ("auto", "local", "cuda", "slurm", "pbs")

_HPC_HINT = "install the HPC extra: pip install 'daskbatch[hpc]' (dask-jobqueue)"
_GPU_HINT = (
    "install the GPU extra for your driver's CUDA major version (nvidia-smi shows it): "
    "pip install 'daskbatch[gpu-cu12]' or 'daskbatch[gpu-cu13]' (cupy, dask-cuda, rmm)"
)


# ---------------------------------------------------------------- this machine


def machine_memory_bytes() -> int:
    """Memory this process may use, in bytes: the machine's, or less under a cgroup or rlimit.

    This is Dask's own figure (``distributed.system.MEMORY_LIMIT``), so that a
    batch job or container with a memory limit plans within it, not within
    the whole node's memory.

    Returns
    -------
    int
        Bytes.
    """
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT)


def cuda_device_count() -> int:
    """Count the CUDA devices visible to this process (0 without a GPU or without pynvml).

    Returns
    -------
    int
        The number of devices.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # no pynvml, no driver or no device: treat all alike as "no GPU"
        return 0


def gpu_memory_bytes(*, free: bool = True) -> int | None:
    """Read the free (or total) memory of this process's first visible GPU, via NVML.

    Parameters
    ----------
    free : bool, default True
        Free memory; False for the total.

    Returns
    -------
    int or None
        Bytes, None if unknown.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        if first.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        else:  # GPU-/MIG- UUIDs are allowed in CUDA_VISIBLE_DEVICES
            handle = pynvml.nvmlDeviceGetHandleByUUID(first)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.free if free else info.total)
    except Exception:
        return None


def parse_memory(value: int | float | str | None, *, total_bytes: int) -> int:
    """Convert a dask-cuda style memory spec to bytes.

    Parameters
    ----------
    value : int, float, str or None
        ``int``: bytes; ``float`` in (0, 1] (or a string such as ``"0.5"``): a
        fraction of ``total_bytes``; ``str``: a size such as ``"16GiB"``;
        ``"auto"`` or None: ``total_bytes``.
    total_bytes : int
        What a fraction and ``"auto"`` refer to.

    Returns
    -------
    int
        Bytes, at least 1.
    """
    from dask.utils import parse_bytes

    if isinstance(value, bool):
        raise ValueError(f"memory must be bytes, a fraction or 'auto', got {value!r}")
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return int(total_bytes)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            value = int(text)
        else:
            try:
                value = float(text)  # "0.5" is a fraction, as in dask-cuda; "1e9" is bytes
                value = int(value) if value > 1 else value
            except ValueError:
                try:
                    value = int(parse_bytes(text))
                except ValueError as exc:
                    raise ValueError(
                        f"cannot read memory {text!r}: give bytes ('16GiB'), a fraction (0.5) or 'auto'"
                    ) from exc
    if isinstance(value, float):
        if not 0 < value <= 1:
            raise ValueError(f"a memory fraction must be in (0, 1], got {value}")
        return max(1, int(total_bytes * value))
    if int(value) < 1:
        raise ValueError(f"memory must be positive, got {value!r}")
    return int(value)


def resources_from_machine(
    *,
    n_workers: int = 1,
    threads_per_worker: int | None = None,
    memory: int | float | str | None = "auto",
    device: str = "cpu",
) -> Resources:
    """Find the resources of ``n_workers`` workers sharing this machine (no cluster needed).

    Parameters
    ----------
    n_workers : int, default 1
        Workers that will share the machine.
    threads_per_worker : int, optional
        Default: CPU cores / workers on CPU, 1 on GPU.
    memory : int, float, str or None, default "auto"
        Per-worker memory (GPU memory with ``device="gpu"``); fractions and
        ``"auto"`` split the machine's total (the GPU's free memory) between workers.
    device : {"cpu", "gpu"}
        Where the kernels run.

    Returns
    -------
    Resources
        Each worker's share of the machine.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    host_total = machine_memory_bytes()
    host_per_worker = max(1, host_total // n_workers)
    if device == "gpu":
        gpu_total = gpu_memory_bytes()
        needs_probe = memory is None or isinstance(memory, float) or (
            isinstance(memory, str) and (memory.strip().lower() == "auto" or "." in memory)
        )
        if gpu_total is None and needs_probe:
            raise ValueError(
                "cannot read this machine's GPU memory (no pynvml or no GPU); pass --memory "
                "as bytes, e.g. --memory 16GiB"
            )
        dev = parse_memory(memory, total_bytes=gpu_total or 1)
        return Resources(
            host_per_worker, threads_per_worker or 1, n_workers, device_memory_bytes=dev, device="gpu"
        )
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // n_workers)
    mem = parse_memory(memory, total_bytes=host_per_worker)
    return Resources(mem, threads, n_workers, device="cpu")


# ---------------------------------------------------------------- a running cluster


def _probe_device_memory(dask_worker: Any, device: str | None) -> int | None:
    """Device memory for one worker (runs on the worker): dask-cuda's limit, else NVML free."""
    data = dask_worker.data
    # dask-cuda's DeviceHostFile keeps the spill limit in a zict.Buffer; ProxifyHostFile in its manager.
    limit = getattr(getattr(data, "device_buffer", None), "n", None)
    if not limit:
        limit = getattr(getattr(data, "manager", None), "_device_memory_limit", None)
    plugins = getattr(dask_worker, "plugins", {}).values()
    is_cuda = type(data).__module__.startswith("dask_cuda") or any(
        type(p).__module__.startswith("dask_cuda") for p in plugins
    )
    if device == "cpu" or (device is None and not is_cuda and not limit):
        return None
    if limit and not math.isinf(limit):
        return int(limit)
    return gpu_memory_bytes()


def resources_from_client(client: Client, *, device: str | None = None) -> Resources:
    """Find the resources of the workers a client sees (the most constrained worker decides).

    Parameters
    ----------
    client : distributed.Client
        A connected client.
    device : {"cpu", "gpu"} or None
        None: GPU when the workers are dask-cuda workers.

    Returns
    -------
    Resources
        Smallest ``memory_limit`` (machine memory where a worker has no limit),
        largest ``nthreads``, number of workers, and device memory from
        dask-cuda's ``device_memory_limit`` or NVML.
    """
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        raise ValueError(
            f"the cluster at {client.scheduler.address} has no workers yet; start workers "
            "(or call client.wait_for_workers) before planning, or pass --memory"
        )
    limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
    memory = min(limits) if all(limits) else min([m for m in limits if m] or [machine_memory_bytes()])
    threads = max(int(w["nthreads"]) for w in workers.values())
    probes = client.run(_probe_device_memory, device=device)
    dev = [v for v in probes.values() if v]
    if device == "gpu" and not dev:
        raise ValueError("device='gpu' but no worker reports GPU memory (no dask-cuda, no pynvml)")
    return Resources(
        memory_bytes=memory,
        threads_per_worker=threads,
        n_workers=len(workers),
        device_memory_bytes=min(dev) if dev else None,
        device="gpu" if dev else "cpu",
    )


def active_client() -> Any:
    """Find the distributed client ``dask.compute`` would use now.

    This honours ``dask.config.set(scheduler=...)``: with a client alive but the
    threaded scheduler chosen, work runs (and is planned) on the threads.

    Returns
    -------
    distributed.Client or None
        The client, or None.
    """
    from dask.base import get_scheduler

    owner = getattr(get_scheduler(), "__self__", None)
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    return owner if isinstance(owner, Client) else None


def resources_auto(*, device: str | None = None) -> Resources:
    """Find the resources of the distributed client dask would compute on, else of this machine.

    Parameters
    ----------
    device : {"cpu", "gpu"}, optional
        Where the kernels run; by default as the workers suggest.

    Returns
    -------
    Resources
        The workers' (or this machine's) resources.
    """
    client = active_client()
    if client is not None:
        return resources_from_client(client, device=device)
    if device is None:
        device = "gpu" if cuda_device_count() and gpu_memory_bytes() else "cpu"
    return resources_from_machine(
        n_workers=max(1, cuda_device_count()) if device == "gpu" else 1, device=device
    )


# ---------------------------------------------------------------- starting clusters


@contextlib.contextmanager
def cluster(
    kind: str = "auto",
    *,
    address: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    plan: Plan | None = None,
    wait_for_workers: int | None = None,
    **kwargs: Any,
) -> Iterator[Client]:
    """Start or connect to a Dask cluster and yield a client; closing closes what was started.

    Parameters
    ----------
    kind : {"auto", "local", "cuda", "slurm", "pbs"}, default "auto"
        ``"auto"``: one dask-cuda worker per GPU when CUDA devices and dask-cuda
        are present, else a ``distributed.LocalCluster``. ``"slurm"``/``"pbs"``:
        dask-jobqueue (``jobs=N`` picks how many jobs to scale to, default 1).
        Ignored when ``address`` or ``scheduler_file`` is given.
    address : str, optional
        Connect to a running scheduler (not closed on exit).
    scheduler_file : path, optional
        Connect through a scheduler file (``dask scheduler --scheduler-file``,
        dask-mpi); not closed on exit.
    plan : Plan, optional
        For ``"cuda"``: sizes the RMM pool from the plan unless ``rmm_pool_size`` is given.
    wait_for_workers : int, optional
        Yield only once this many workers are connected, waiting at most
        ``daskbatch.worker-timeout`` (then ``TimeoutError``). Default: 1 when
        joining a scheduler or starting ``"slurm"``/``"pbs"`` jobs, whose workers
        arrive on their own time (a batch job's ``dask worker``, a queued job);
        0 for local clusters, which start with their workers.
    **kwargs
        Passed to the cluster class (``LocalCluster``, ``LocalCUDACluster``,
        ``SLURMCluster``, ``PBSCluster``) or, when connecting, to ``Client``.

    Yields
    ------
    distributed.Client

    Examples
    --------
    >>> import daskbatch as db  # doctest: +SKIP
    >>> from daskbatch.runtime.cluster import resources_from_client  # doctest: +SKIP
    >>> with db.cluster("local", n_workers=2, threads_per_worker=1) as client:  # doctest: +SKIP
    ...     resources = resources_from_client(client)  # what plans see
    """
    from distributed import Client

    if address is not None and scheduler_file is not None:
        raise ValueError("give either address or scheduler_file, not both")
    if address is not None or scheduler_file is not None:
        sf = os.fspath(scheduler_file) if scheduler_file is not None else None
        with Client(address, scheduler_file=sf, **kwargs) as client:
            _print_dashboard(client, "connected to")
            _wait_for_workers(client, 1 if wait_for_workers is None else wait_for_workers)
            yield client  # an external cluster: only our client is closed
        return
    kind = resolve_kind(kind)
    started = _start_cluster(kind, plan, kwargs)
    if wait_for_workers is None:
        wait_for_workers = 1 if kind in ("slurm", "pbs") else 0
    try:
        with Client(started) as client:
            _print_dashboard(client, f"started a {kind} cluster at")
            _wait_for_workers(client, wait_for_workers)
            yield client
    finally:
        started.close()


def _wait_for_workers(client: Client, n_workers: int) -> None:
    """Block until ``n_workers`` workers are connected, for at most ``daskbatch.worker-timeout``."""
    if n_workers < 1:
        return
    import dask.config

    timeout = dask.config.get("daskbatch.worker-timeout", "10 minutes")
    try:
        client.wait_for_workers(n_workers, timeout=timeout)
    except TimeoutError as exc:
        have = len(client.scheduler_info(n_workers=-1)["workers"])
        raise TimeoutError(
            f"{have} of {n_workers} worker(s) joined the scheduler at {client.scheduler.address} "
            f"within {timeout}; start the workers (e.g. dask worker --scheduler-file ...) or raise "
            "the daskbatch.worker-timeout setting"
        ) from exc


def require_cuda() -> int:
    """Count the visible CUDA devices, after checking that a ``"cuda"`` cluster can start.

    Returns
    -------
    int
        The number of devices (at least 1).

    Raises
    ------
    ImportError
        dask-cuda is not installed (the message names the extra to install).
    DeviceUnavailableError
        No CUDA device is visible to this process.
    """
    if not _has_module("dask_cuda"):
        raise ImportError(f"cluster kind 'cuda' needs dask-cuda: {_GPU_HINT}")
    n = cuda_device_count()
    if n == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        from daskbatch.errors import DeviceUnavailableError

        raise DeviceUnavailableError(
            f"cluster kind 'cuda' needs a CUDA device, and none is visible{where}; "
            "use --cluster local (or auto) on this machine"
        )
    return n


def resolve_kind(kind: str) -> str:
    """Resolve the cluster kind ``cluster(kind)`` starts: ``"auto"`` becomes ``"cuda"`` or ``"local"``.

    ``"auto"`` is ``"cuda"`` when CUDA devices are visible and dask-cuda is
    installed, else ``"local"``; other kinds are returned as they are.

    Parameters
    ----------
    kind : str
        The requested kind.

    Returns
    -------
    str
        The kind to start.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown cluster kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind != "auto":
        return kind
    return "cuda" if cuda_device_count() and _has_module("dask_cuda") else "local"


def _start_cluster(kind: str, plan: Plan | None, kwargs: dict[str, Any]) -> Any:
    """A started cluster object of ``kind`` (one of :data:`KINDS` other than ``"auto"``)."""
    if kind == "local":
        from distributed import LocalCluster

        return LocalCluster(**kwargs)
    if kind == "cuda":
        require_cuda()
        from dask_cuda import LocalCUDACluster

        # Spilling to host stays on (dask-cuda's default).
        return LocalCUDACluster(**cuda_cluster_options(kwargs, plan))
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise ImportError(f"cluster kind {kind!r} needs dask-jobqueue: {_HPC_HINT}") from exc
    opts = dict(kwargs)
    jobs = int(opts.pop("jobs", 1))
    cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
    started = cls(**opts)
    started.scale(jobs=jobs)
    return started


def cuda_cluster_options(kwargs: dict[str, Any], plan: Plan | None = None) -> dict[str, Any]:
    """Keyword arguments for ``dask_cuda.LocalCUDACluster``: ``kwargs`` plus an RMM pool.

    With rmm importable, each worker gets an RMM pool (sized from ``plan``
    unless ``kwargs`` has ``rmm_pool_size``) and CuPy allocates from it. Without
    rmm, the workers use CuPy's own allocator: no pool, and a one-line note on
    stderr says so.

    Parameters
    ----------
    kwargs : dict
        The caller's options for ``LocalCUDACluster``; not modified.
    plan : Plan, optional
        Sizes the pool (:attr:`Plan.rmm_pool_bytes`).

    Returns
    -------
    dict
        The options to pass.

    Raises
    ------
    ImportError
        ``kwargs`` asks for an RMM option but rmm cannot be imported.
    """
    opts = dict(kwargs)
    try:
        import rmm  # noqa: F401  (only whether it imports matters here)
    except ImportError:
        asked = sorted(k for k in opts if k.startswith("rmm_") and opts[k] not in (None, False))
        if asked:
            raise ImportError(f"{', '.join(asked)} needs rmm, which cannot be imported: {_GPU_HINT}") from None
        import sys

        print(
            "daskbatch: rmm is not installed, so the GPU workers have no RMM pool "
            f"(CuPy's own allocator); {_GPU_HINT}",
            file=sys.stderr, flush=True,
        )
        return opts
    if plan is not None and "rmm_pool_size" not in opts:
        opts["rmm_pool_size"] = plan.rmm_pool_bytes
    opts.setdefault("rmm_allocator_external_lib_list", ["cupy"])  # CuPy allocates from RMM
    return opts


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _print_dashboard(client: Client, verb: str) -> None:
    """One line: the scheduler and its dashboard link (a batch log keeps it too).

    A log line where daskbatch's logging is set up (the CLI: timestamped, and
    gone with ``--quiet``), else printed on stderr (a script, a notebook).
    """
    import logging
    import sys

    try:
        link = client.dashboard_link
    except Exception:  # no dashboard (bokeh missing or disabled): nothing to show
        link = "(no dashboard)"
    log = logging.getLogger(__name__)
    if logging.getLogger("daskbatch").handlers:  # not the root's: a handler for daskbatch's lines
        log.info("%s %s; dashboard: %s", verb, client.scheduler.address, link)
    else:
        print(f"daskbatch: {verb} {client.scheduler.address}; dashboard: {link}", file=sys.stderr, flush=True)
