"""Clusters in, :class:`~daskbatch.planning.plan.Resources` out."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from daskbatch.errors import DeviceUnavailableError, SubmitError
from daskbatch.runtime.capacity import cuda_device_count, resources_from_machine
from daskbatch.runtime.progress import in_jupyter

if TYPE_CHECKING:
    from distributed import Client

    from daskbatch.planning.plan import Plan, Resources

__all__ = ["KINDS", "cli_kind", "cluster", "cuda_cluster_options", "kernel_cache_dir", "planned_client", "kernel_compile_lock", "require_cuda", "resolve_kind", "say"]

#: Values of ``cluster(kind=...)`` and of the CLI's ``--cluster``.
KINDS = ("auto", "local", "cuda", "slurm", "pbs")

_HPC_HINT = "install the HPC extra: pip install 'daskbatch[hpc]' (dask-jobqueue)"
_GPU_HINT = (
    "install the GPU extra for your driver's CUDA major version (nvidia-smi shows it): "
    "pip install 'daskbatch[gpu-cu12]' or 'daskbatch[gpu-cu13]' (cupy, dask-cuda, rmm)"
)


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
        ``daskbatch.worker-timeout`` (then ``TimeoutError``). For ``"slurm"``/``"pbs"``
        without ``jobs=``, also how many workers to submit jobs for. Default: 1 when
        joining a scheduler; for ``"slurm"``/``"pbs"``, every worker of the jobs
        submitted (a plan made on fewer would be wrong); 0 for local clusters,
        which start with their workers.
    **kwargs
        Passed to the cluster class (``LocalCluster``, ``LocalCUDACluster``,
        ``SLURMCluster``, ``PBSCluster``) or, when connecting, to ``Client``.

    Yields
    ------
    distributed.Client

    Examples
    --------
    >>> import daskbatch as db  # doctest: +SKIP
    >>> from daskbatch.runtime.capacity import resources_from_client  # doctest: +SKIP
    >>> with db.cluster("local", n_workers=2, threads_per_worker=1) as client:  # doctest: +SKIP
    ...     resources = resources_from_client(client)  # what plans see
    """
    from distributed import Client  # lazy: distributed

    if address is not None and scheduler_file is not None:
        raise ValueError("give either address or scheduler_file, not both")
    if address is not None or scheduler_file is not None:
        sf = None if scheduler_file is None else _await_scheduler_file(os.fspath(scheduler_file))
        with Client(address, scheduler_file=sf, **kwargs) as client:
            _print_dashboard(client, "connected to")
            _wait_for_workers(client, 1 if wait_for_workers is None else wait_for_workers)
            yield client  # an external cluster: only our client is closed
        return
    kind = resolve_kind(kind)
    jobqueue = kind in ("slurm", "pbs")
    with _submit_errors() as refused:  # a local cluster submits no jobs: none is refused
        started = _start_jobqueue(kind, kwargs, wait_for_workers) if jobqueue else _start_cluster(kind, plan, kwargs)
        closing = contextlib.ExitStack()
        try:
            with Client(started) as client:
                try:
                    _print_dashboard(client, f"started a {kind} cluster at")
                    if wait_for_workers is None:
                        # Every worker of the jobs asked for: a plan made while some are still queued is wrong.
                        wait_for_workers = len(started.plan) if jobqueue else 0
                    _wait_for_workers(client, wait_for_workers, refused=refused)
                    yield client
                    if getattr(started, "processes", True):  # worker processes (a jobqueue's too) log on their own
                        with contextlib.suppress(Exception):  # a worker gone already: the work is done, close anyway
                            client.run(drop_close_noise)
                finally:
                    # From here on, through the client's close and the cluster's, in this process too.
                    closing.enter_context(_close_noise_dropped())
        finally:
            with closing:
                started.close()


@contextlib.contextmanager
def planned_client(kind: str, plan_for: Callable[[Resources], Plan] | None, *, gpu_memory: Any = "auto",
                   **kwargs: Any) -> Iterator[Client]:  # numpydoc ignore=PR01,YD01
    """Start or join :func:`cluster`; a ``"cuda"`` one's RMM pool holds ``plan_for``'s plan for this machine's GPUs."""
    if kind == "cuda" and plan_for is not None and not (kwargs.get("address") or kwargs.get("scheduler_file")):
        kwargs["plan"] = plan_for(resources_from_machine(n_workers=require_cuda(), device="gpu", memory=gpu_memory))
    with cluster(kind, **kwargs) as client:
        yield client


def _await_scheduler_file(path: str) -> str:
    """Wait for a scheduler file to appear, saying so, for at most ``daskbatch.scheduler-file-timeout``; the path."""
    # distributed's Client waits for a missing file without end and without a word.
    timeout, deadline = _deadline("scheduler-file-timeout")
    said = False
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                if "address" in json.load(f):  # a scheduler writes the file whole, but a copy may be half there
                    return path
        except (OSError, ValueError, TypeError):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no scheduler file at {path} after {timeout} (a scheduler started with --scheduler-file {path} "
                "writes it); check the path, start the scheduler, or raise daskbatch.scheduler-file-timeout"
            )
        if not said:
            say(f"waiting up to {timeout} for the scheduler file {path}")
            said = True
        time.sleep(0.1)


def _deadline(setting: str) -> tuple[Any, float]:
    """The timeout of the ``daskbatch.<setting>`` config and the ``time.monotonic()`` at which it runs out."""
    from dask.utils import parse_timedelta  # lazy: dask

    from daskbatch import config  # lazy: dask

    timeout = config.get(setting)
    return timeout, time.monotonic() + (parse_timedelta(timeout) or 0)


def _wait_for_workers(client: Client, n_workers: int, refused: list[str] | None = None) -> None:
    """Block until ``n_workers`` workers are connected, for at most ``daskbatch.worker-timeout``."""
    # ``refused`` collects the batch system's refusals to submit a job: the wait stops at the first.
    if n_workers < 1:
        return
    timeout, deadline = _deadline("worker-timeout")
    try:
        while True:
            if refused:
                raise SubmitError(refused[0])
            try:
                # In short steps, so that a refused job ends the wait at once.
                client.wait_for_workers(n_workers, timeout=max(0.01, min(1.0, deadline - time.monotonic())))
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
    except TimeoutError:  # our own short waits' timeout: this message says all
        have = len(client.scheduler_info(n_workers=-1)["workers"])
        raise TimeoutError(
            f"{have} of {n_workers} worker(s) joined the scheduler at {client.scheduler.address} "
            f"within {timeout}; start the workers (e.g. dask worker --scheduler-file ...) or raise "
            "the daskbatch.worker-timeout setting"
        ) from None


def require_cuda() -> int:  # numpydoc ignore=PR01,RT01
    """Count the visible CUDA devices, after checking that a ``"cuda"`` cluster can start."""
    if not _has_module("dask_cuda"):
        raise ImportError(f"cluster kind 'cuda' needs dask-cuda: {_GPU_HINT}")
    n = cuda_device_count()
    if n == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise DeviceUnavailableError(
            f"cluster kind 'cuda' needs a CUDA device, and none is visible{where}; "
            "use --cluster local (or auto) on this machine"
        )
    return n


def resolve_kind(kind: str) -> str:  # numpydoc ignore=PR01,RT01
    """Resolve the cluster kind ``cluster(kind)`` starts: ``"auto"`` becomes ``"cuda"`` or ``"local"``."""
    if kind not in KINDS:
        raise ValueError(f"unknown cluster kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind != "auto":
        return kind
    return "cuda" if cuda_device_count() and _has_module("dask_cuda") else "local"


def cli_kind(kind: str) -> str:  # numpydoc ignore=PR01,RT01
    """Resolve the CLI's ``--cluster``: as :func:`resolve_kind`, but ``"auto"`` without GPUs is ``"threads"``."""
    # Without GPUs the command runs in this process on dask's threads, which the numba kernels use fully:
    # a LocalCluster's worker processes would each import daskbatch and load the kernels again.
    resolved = resolve_kind(kind)
    return "threads" if kind == "auto" and resolved == "local" else resolved


def kernel_cache_dir() -> str:  # numpydoc ignore=RT01
    """The directory where numba caches daskbatch's CPU kernels (``NUMBA_CACHE_DIR``, else ``__pycache__``)."""
    from daskbatch.stats.kernels import _numba  # lazy: numba

    return _numba.cache_directory()


@contextlib.contextmanager
def kernel_compile_lock() -> Iterator[str]:  # numpydoc ignore=YD01
    """Hold an exclusive lock on numba's cache directory while this process compiles; yields the directory."""
    where = kernel_cache_dir()
    try:
        import fcntl

        os.makedirs(where, exist_ok=True)
        # The lock file under which one process compiles the kernels that others load.
        handle = open(os.path.join(where, "daskbatch-compile.lock"), "a")  # noqa: SIM115 - closed below
    except (ImportError, OSError):  # no lock to be had: compiling twice is slower, not wrong
        handle = None
    with handle or contextlib.nullcontext():  # closing the file releases the lock
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield where


def _start_jobqueue(kind: str, kwargs: dict[str, Any], wait_for_workers: int | None) -> Any:
    """A dask-jobqueue cluster of ``kind`` ("slurm" or "pbs") scaled to ``jobs`` jobs or ``wait_for_workers`` workers."""
    try:
        import dask_jobqueue  # lazy: dask_jobqueue
    except ImportError as exc:
        raise ImportError(f"cluster kind {kind!r} needs dask-jobqueue: {_HPC_HINT}") from exc
    opts = dict(kwargs)
    jobs = opts.pop("jobs", None)
    cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
    started = cls(**opts)
    try:
        if kind == "slurm":  # a job the partition can never run would pend forever
            _test_submit(started)
        if jobs is None and wait_for_workers:
            started.scale(n=int(wait_for_workers))  # workers; jobs as many as they need
        else:
            started.scale(jobs=1 if jobs is None else int(jobs))
    except BaseException:
        started.close()
        raise
    return started


def _test_submit(started: Any) -> None:
    """Ask ``sbatch --test-only`` whether the cluster's worker job can ever run; SubmitError if not."""
    import shutil
    import subprocess

    submit = started.job_cls.submit_command.split()[0]
    if shutil.which(submit) is None:
        raise SubmitError(f"cluster kind 'slurm' submits worker jobs with {submit}, which is not on PATH")
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
        f.write(started.job_script())
        f.flush()
        done = subprocess.run([submit, "--test-only", f.name], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        why = " ".join((done.stderr or done.stdout).split()) or f"exit code {done.returncode}"
        raise SubmitError(f"{submit} --test-only refuses the worker job ({why}); "
                          "ask for what the partition has: cluster(..., queue=, cores=, memory=, walltime=) "
                          "or dask's jobqueue.slurm config")


@contextlib.contextmanager
def _submit_errors() -> Iterator[list[str]]:
    """Collect the batch system's refusals to submit a job, one line each, instead of logged tracebacks."""
    # dask-jobqueue submits from a callback on the event loop: a failing ``sbatch``/``qsub`` is only logged
    # there (tornado, asyncio), with a traceback.
    refused: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None and record.args and isinstance(record.args, dict):
            exc = record.args.get("exception")
        text = str(exc) if exc is not None else ""
        if "Command exited with non-zero exit code" not in text:
            return True
        # dask-jobqueue's message: "...Command:\nsbatch FILE\nstdout:\n...\nstderr:\nWHY"
        command = text.split("Command:", 1)[-1].split("stdout:", 1)[0].split()
        why = " ".join(text.split("stderr:", 1)[-1].split()) or "no message"
        refused.append(f"{command[0] if command else 'the batch system'} failed to submit a worker job: {why}")
        return False

    loggers = [logging.getLogger(name) for name in ("tornado.application", "asyncio")]
    for lg in loggers:
        lg.addFilter(keep)
    try:
        yield refused
    finally:
        for lg in loggers:
            lg.removeFilter(keep)


class _CloseNoise(logging.Filter):
    """Drops the records distributed logs, with a traceback, about connections that the close itself broke."""

    # Worker.close closes its connections under a heartbeat still in flight, which then logs an ERROR
    # ("Failed to communicate with scheduler during heartbeat"); a batched stream caught mid-write by the close
    # logs "Batched Comm Closed" (INFO, after the cluster has put its log level back). Both are noise from the
    # close we asked for, shown as stderr in a notebook, a terminal or a job's log.
    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        return not record.getMessage().startswith(_CLOSE_NOISE[record.name])


#: The logger of each record :class:`_CloseNoise` drops, and how the record's message starts.
_CLOSE_NOISE = {
    "distributed.worker": "Failed to communicate with scheduler during heartbeat",
    "distributed.batched": "Batched Comm Closed",
}
_CLOSE_NOISE_FILTER = _CloseNoise()


def drop_close_noise() -> None:
    """Run in each worker process before the cluster closes it: its close logs no broken connection."""
    for name in _CLOSE_NOISE:
        logging.getLogger(name).addFilter(_CLOSE_NOISE_FILTER)


@contextlib.contextmanager
def _close_noise_dropped() -> Iterator[None]:
    """Within the block, this process logs no connection broken by a close (see :class:`_CloseNoise`)."""
    drop_close_noise()
    try:
        yield
    finally:
        for name in _CLOSE_NOISE:
            logging.getLogger(name).removeFilter(_CLOSE_NOISE_FILTER)


def _start_cluster(kind: str, plan: Plan | None, kwargs: dict[str, Any]) -> Any:
    """A started local or cuda cluster."""
    if kind == "local":
        from distributed import LocalCluster  # lazy: distributed

        return LocalCluster(**kwargs)
    require_cuda()
    from dask_cuda import LocalCUDACluster  # lazy: dask_cuda

    # Spilling to host stays on (dask-cuda's default).
    return LocalCUDACluster(**cuda_cluster_options(kwargs, plan))


def cuda_cluster_options(kwargs: dict[str, Any], plan: Plan | None = None) -> dict[str, Any]:  # numpydoc ignore=PR01,RT01
    """Keyword arguments for ``dask_cuda.LocalCUDACluster``: ``kwargs`` plus an RMM pool."""
    opts = dict(kwargs)
    try:
        import rmm  # noqa: F401  (only whether it imports matters here)  # lazy: rmm
    except ImportError:
        asked = sorted(k for k in opts if k.startswith("rmm_") and opts[k] not in (None, False))
        if asked:
            raise ImportError(f"{', '.join(asked)} needs rmm, which cannot be imported: {_GPU_HINT}") from None
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
    """Whether ``name`` can be imported."""
    return importlib.util.find_spec(name) is not None


def _print_dashboard(client: Client, verb: str) -> None:
    """One line: the scheduler and its dashboard link (a batch log keeps it too)."""
    try:
        link = client.dashboard_link
    except Exception:  # no dashboard (bokeh missing or disabled): nothing to show
        link = "(no dashboard)"
    say(f"{verb} {client.scheduler.address}; dashboard: {link}")


def say(text: str) -> None:  # numpydoc ignore=PR01
    """Log ``text`` where daskbatch's logging is set up, else print it (stdout in a notebook, else stderr)."""
    if logging.getLogger("daskbatch").handlers:  # not the root's: a handler for daskbatch's lines
        logging.getLogger(__name__).info("%s", text)
    else:
        # In a notebook, stderr reads as an error.
        print(f"daskbatch: {text}", file=sys.stdout if in_jupyter() else sys.stderr, flush=True)
