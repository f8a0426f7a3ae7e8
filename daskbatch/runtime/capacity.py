"""What the workers have (this machine's memory and GPUs, a live client's workers, as :class:`Resources`), one BLAS (and numba) thread per dask thread while chunk tasks run side by side (:func:`limited`), and the one summary line a batch job's log ends a call with."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.util
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from daskbatch._common import plural
from daskbatch.planning.plan import Resources

if TYPE_CHECKING:
    from distributed import Client

__all__ = ['active_client', 'cuda_device_count', 'logged_run', 'limited', 'machine_memory_bytes', 'note_pass', 'parse_memory', 'peak_memory', 'process_peak_bytes', 'rechunk_method', 'resources_auto', 'resources_from_client', 'resources_from_machine']


@functools.cache
def machine_memory_bytes() -> int:
    """Memory this process may use, in bytes: the machine's, or less under a cgroup or rlimit."""
    # distributed.system's own reading (psutil, cgroups v1/v2, RLIMIT_RSS), loaded by itself: importing it
    # as distributed.system runs the distributed package's __init__ first, ~0.3 s of every in-process run.
    if "distributed" not in sys.modules:
        with contextlib.suppress(Exception):  # a distributed laid out otherwise: the plain import below
            found = importlib.util.find_spec("distributed")
            path = os.path.join(os.path.dirname(found.origin or ""), "system.py")  # type: ignore[union-attr]
            spec = importlib.util.spec_from_file_location("daskbatch._distributed_system", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            return int(module.MEMORY_LIMIT)
    from distributed.system import MEMORY_LIMIT  # lazy: distributed

    return int(MEMORY_LIMIT)


def cuda_device_count() -> int:
    """Count the CUDA devices visible to this process (0 without a GPU or without pynvml)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # no pynvml, no driver or no device: treat all alike as "no GPU"
        return 0


def _gpu_memory_bytes() -> int | None:
    """Read the free memory of this process's first visible GPU, via NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        if first.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        else:  # GPU-/MIG- UUIDs are allowed in CUDA_VISIBLE_DEVICES
            handle = pynvml.nvmlDeviceGetHandleByUUID(first)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.free)
    except Exception:
        return None


def parse_memory(value: int | float | str | None, *, total_bytes: int) -> int:
    """Convert a dask-cuda style memory spec to bytes."""
    from dask.utils import parse_bytes  # lazy: dask

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
                except ValueError:  # dask's parse error: the same text, less said
                    raise ValueError(
                        f"cannot read memory {text!r}: give bytes ('16GiB'), a fraction (0.5) or 'auto'"
                    ) from None
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
    """Find the resources of ``n_workers`` workers sharing this machine (no cluster needed)."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    host_total = machine_memory_bytes()
    host_per_worker = max(1, host_total // n_workers)
    if device == "gpu":
        gpu_total = _gpu_memory_bytes()
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
    # The CPUs this process may use (affinity, cgroup: a batch job's share), not the node's os.cpu_count().
    from dask.system import CPU_COUNT  # lazy: dask

    threads = threads_per_worker or max(1, CPU_COUNT // n_workers)
    mem = parse_memory(memory, total_bytes=host_per_worker)
    return Resources(mem, threads, n_workers, device="cpu")


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
    return _gpu_memory_bytes()


def resources_from_client(client: Client, *, device: str | None = None) -> Resources:
    """Find the resources of the workers a client sees (the most constrained worker decides)."""
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
    """Find the distributed client ``dask.compute`` would use now."""
    from dask.base import get_scheduler  # lazy: dask

    if local_scheduler() is not None:
        return None
    owner = getattr(get_scheduler(), "__self__", None)
    from distributed import Client  # lazy: distributed

    return owner if isinstance(owner, Client) else None


def local_scheduler() -> Any:
    """dask's threaded scheduler when nothing else is configured and no client can exist, else None."""
    # Without distributed imported there is no client; dask's own get_scheduler would import it to look
    # (about 0.3 s of every fresh process) before it falls back to the threaded scheduler.
    import dask  # lazy: dask

    if "distributed" in sys.modules or dask.config.get("scheduler", None) is not None:
        return None
    import dask.threaded  # lazy: dask

    return dask.threaded.get


def rechunk_method() -> str | None:
    """``"tasks"`` while no distributed client can exist and none is configured, else None (dask's own choice)."""
    # dask's rechunk imports distributed to look for a client (about 0.3 s of a fresh process's first describe);
    # without distributed imported there is none, and dask would choose "tasks".
    import dask  # lazy: dask

    return None if "distributed" in sys.modules or dask.config.get("array.rechunk.method", None) else "tasks"


def resources_auto(*, device: str | None = None) -> Resources:
    """Find the resources of the distributed client dask would compute on, else of this machine."""
    client = active_client()
    if client is not None:
        return resources_from_client(client, device=device)
    if device is None:
        device = "gpu" if cuda_device_count() and _gpu_memory_bytes() else "cpu"
    return resources_from_machine(
        n_workers=max(1, cuda_device_count()) if device == "gpu" else 1, device=device
    )


log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Run:
    name: str
    rows: int = 0
    features: int = 0
    passes: int = 0


_current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("daskbatch_run", default=None)


def note_pass(rows: int, features: int) -> None:
    """Count one finished pass over ``rows`` x ``features`` for the summary line of the call running now."""
    run = _current.get()
    if run is not None:
        run.passes += 1
        run.rows, run.features = max(run.rows, int(rows)), max(run.features, int(features))


@contextlib.contextmanager
def logged_run(name: str) -> Iterator[None]:
    """Log ``"<name>: R rows x F features in T s (...), N passes, peak M"`` once the API call within ends."""
    if _current.get() is not None:  # a call within another: the outer one logs
        yield
        return
    run = _Run(name)
    token = _current.set(run)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _current.reset(token)
    if log.isEnabledFor(logging.INFO):  # peak memory may ask the workers: only when it is shown
        log.info("%s", summary_line(run, time.perf_counter() - t0))


def summary_line(run: _Run, seconds: float) -> str:
    """Return the one line that sums up a call; its peak memory adds the largest worker's under a client."""
    from dask.utils import format_bytes  # lazy: dask

    rate = f" ({run.rows / seconds:,.0f} rows/s)" if seconds > 0 and run.rows else ""
    peak = peak_memory(active_client())
    memory = format_bytes(peak["process_bytes"]) if peak["process_bytes"] is not None else "unknown"
    if peak.get("workers_bytes"):
        memory += f"; workers {format_bytes(max(peak['workers_bytes'].values()))} (largest)"
    return f"{run.name}: {run.rows:,} rows x {run.features:,} features in {seconds:.1f} s{rate}, {plural(run.passes, 'pass', 'passes')}, peak {memory}"


def process_peak_bytes() -> int | None:
    """Read the largest resident set of this process so far (None where ``resource`` does not exist)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def peak_memory(client: Any, *, warn: bool = False) -> dict[str, Any]:
    """Read the peak resident memory of this process and, with a client, of each worker."""
    out: dict[str, Any] = {"process_bytes": process_peak_bytes()}
    if client is not None:
        try:
            peaks = client.run(process_peak_bytes).items()
        except Exception as exc:  # a worker gone or a closing client: the caller's line still gets written
            log.log(logging.WARNING if warn else logging.DEBUG, "could not read the workers' peak memory: %s", exc)
        else:
            out["workers_bytes"] = {str(k): int(v) for k, v in peaks if v is not None}
    return out


_lock = threading.Lock()
_inside = 0  # chunk tasks inside the limit now
_restore: Any = None  # threadpoolctl's limiter of the first task in, until the last leaves
_controller: Any = None  # (len(sys.modules) when scanned, threadpoolctl.ThreadpoolController)


def distributed_worker() -> Any:
    """The distributed worker running this thread's task, else None."""
    if "distributed" not in sys.modules:  # a worker has imported it (importing it here costs ~0.3 s)
        return None
    from distributed import get_worker  # lazy: distributed

    try:
        return get_worker()
    except ValueError:  # not inside a distributed worker
        return None


def _scheduler_threads() -> int:
    """Count the tasks the scheduler running this one may run at once in this process (1 if unknown)."""
    worker = distributed_worker()
    if worker is not None:
        # The worker's state holds it: Worker.nthreads was deprecated, then removed (getattr's default then
        # counted every worker as one thread, and chunk tasks ran BLAS with every core beside each other).
        return int(worker.state.nthreads)
    import dask.threaded  # lazy: dask

    # The threaded scheduler runs tasks on threads of its executors, the synchronous one on the caller's
    # thread, in none. A thread is matched to its executor by name ("<prefix>_<k>"): an executor's set of
    # threads is filled only after a new thread has started its first task.
    prefix = threading.current_thread().name.rpartition("_")[0]
    pools = [dask.threaded.default_pool]
    pools += [p for by_count in list(dask.threaded.pools.values()) for p in list(by_count.values())]
    for pool in pools:
        if pool is not None and prefix and prefix == getattr(pool, "_thread_name_prefix", None):
            return int(getattr(pool, "_max_workers", 1))
    return 1


@contextlib.contextmanager
def limited() -> Iterator[None]:
    """Run the body with one BLAS and one numba thread if other tasks may run beside it."""
    if _scheduler_threads() <= 1:
        yield
        return
    _enter_blas()
    numba_before = _set_numba_threads(1)
    try:
        yield
    finally:
        if numba_before is not None:
            _set_numba_threads(numba_before, restore=True)
        _leave_blas()


def _enter_blas() -> None:
    global _inside, _restore, _controller
    with _lock:
        if _inside == 0:
            from threadpoolctl import ThreadpoolController

            # Scanning the loaded libraries costs ~4 ms, so the scan is kept until
            # Python imports something new (which is how a BLAS such as SciPy's gets loaded).
            if _controller is None or _controller[0] != len(sys.modules):
                _controller = (len(sys.modules), ThreadpoolController())
            _restore = _controller[1].limit(limits=1, user_api="blas")
            _release_openblas()
        _inside += 1


def _leave_blas() -> None:
    global _inside, _restore
    with _lock:
        _inside -= 1
        if _inside == 0:
            _restore.restore_original_limits()
            _restore = None
            _release_openblas()


def _release_openblas() -> None:
    """Let any thread set OpenBLAS's limit next (a no-op before threadpoolctl 3.8, which had no owner)."""
    from threadpoolctl import OpenBLASController

    release = getattr(OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release()


def _set_numba_threads(n: int, restore: bool = False) -> int | None:
    """Set numba's threads for this thread; return the old count (None without a threading layer)."""
    import numba  # the chunk's kernels load it anyway  # lazy: numba

    try:
        before = numba.get_num_threads()
        numba.set_num_threads(n if restore else min(n, before))
    except Exception:  # no threading layer on this platform: nothing runs in parallel anyway
        return None
    return before
