"""What a run may change around it: the dask settings a job file may set without ``--allow-dask-config``, and one BLAS (and numba) thread per dask thread while chunk tasks run side by side."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from daskbatch._common import short_repr

__all__ = ['SAFE_DASK_SETTINGS', 'UnsafeDaskSetting', 'check_dask_settings', 'flatten', 'limited']


_JOBQUEUE_COMMON = (
    "cores", "memory", "processes", "walltime", "queue", "account", "name",
    "interface", "local-directory", "death-timeout",
)

#: Dotted dask config keys a job file may set (``_`` and ``-`` are the same, as in dask).
SAFE_DASK_SETTINGS = frozenset(
    {
        "temporary-directory", "scheduler", "num-workers", "tokenize.ensure-deterministic",
        "array.chunk-size", "array.rechunk.method", "array.rechunk.threshold",
        "array.slicing.split-large-chunks", "optimization.fuse.active",
        "dataframe.convert-string", "dataframe.shuffle.method",
        "distributed.worker.memory.target", "distributed.worker.memory.spill",
        "distributed.worker.memory.pause", "distributed.worker.memory.terminate",
        "distributed.worker.memory.max-spill", "distributed.worker.memory.spill-compression",
        "distributed.worker.lifetime.duration", "distributed.worker.lifetime.stagger",
        "distributed.worker.lifetime.restart",
        "distributed.comm.timeouts.connect", "distributed.comm.timeouts.tcp",
        "distributed.comm.retry.count", "distributed.comm.retry.delay.min",
        "distributed.comm.retry.delay.max", "distributed.comm.compression",
        "distributed.scheduler.work-stealing", "distributed.scheduler.work-stealing-interval",
        "distributed.scheduler.allowed-failures", "distributed.scheduler.worker-saturation",
        "distributed.scheduler.idle-timeout", "distributed.scheduler.worker-ttl",
        "distributed.deploy.lost-worker-timeout",
        *(f"jobqueue.slurm.{k}" for k in (*_JOBQUEUE_COMMON, "job-cpu", "job-mem")),
        *(f"jobqueue.pbs.{k}" for k in (*_JOBQUEUE_COMMON, "resource-spec")),
    }
)


class UnsafeDaskSetting(ValueError):
    """A job file's ``dask:`` mapping sets something that may run code; the message names the key."""


#: Key fragments that load or run code wherever they appear.
_CODE_LOADING = ("preload", "plugin")

#: A name the batch script's shell and the scheduler take as it is (job name: ``#SBATCH -J``).
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: Characters a shell takes literally (a queue ``gpu,long``, an interface ``ib0``, a PBS ``select=1:ncpus=4``).
_SHELL_WORD = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")
#: A time limit as SLURM and PBS write it (``01:00:00``, ``1-12:00:00``) or minutes.
_WALLTIME = re.compile(r"[0-9]+([:-][0-9]+)*")
#: A size or a duration without spaces (``16G``, ``60s``).
_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?[A-Za-z]*")
#: An environment variable the batch shell expands in a path (``$TMPDIR``, ``${SCRATCH}``): it runs nothing.
_VARIABLE = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _positive_int(value: Any) -> bool:
    """Whether ``value`` is an integer of at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _matches(pattern: re.Pattern[str], numbers: bool = False) -> Any:
    """A test for a string that ``pattern`` matches whole (or, with ``numbers``, a non-negative number)."""
    def test(value: Any) -> bool:
        if numbers and isinstance(value, int | float) and not isinstance(value, bool):
            return value >= 0
        return isinstance(value, str) and pattern.fullmatch(value) is not None
    return test


def _byte_size(value: Any) -> bool:
    """Whether ``value`` is a byte size dask-jobqueue parses (it writes the script's number itself)."""
    from dask.utils import parse_bytes  # lazy: dask

    try:
        return _positive_int(value) or (isinstance(value, str) and parse_bytes(value) > 0)
    except (TypeError, ValueError):
        return False


#: The jobqueue settings a file may set, each reaching the batch job script: a test of the value and it in words.
_JOBQUEUE_VALUES: dict[str, tuple[Any, str]] = {
    "cores": (_positive_int, "an integer of at least 1"),
    "processes": (_positive_int, "an integer of at least 1"),
    "job-cpu": (_positive_int, "an integer of at least 1"),
    "memory": (_byte_size, "a byte size such as 16GiB"),
    "job-mem": (_matches(_AMOUNT, numbers=True), "a size such as 16G"),
    "walltime": (_matches(_WALLTIME, numbers=True), "a time such as 01:00:00 or 1-12:00:00"),
    "death-timeout": (_matches(_AMOUNT, numbers=True), "seconds or a duration such as 60s"),
    "name": (_matches(_NAME), "a name of letters, digits, '_', '.' and '-'"),
    "queue": (_matches(_SHELL_WORD), "a name of letters, digits and _ . , : @ % + = / -"),
    "account": (_matches(_SHELL_WORD), "a name of letters, digits and _ . , : @ % + = / -"),
    "interface": (_matches(_SHELL_WORD), "a network interface name such as ib0"),
    "resource-spec": (_matches(_SHELL_WORD), "a resource list such as select=1:ncpus=4:mem=8GB"),
    "local-directory": (lambda v: isinstance(v, str) and v != "", "a path"),
}
_JOBQUEUE_PATHS = frozenset({"local-directory"})


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Walk the leaves of a nested mapping."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


#: What a refusal of a setting off the list (or one that runs code) advises.
_TRUST = "; pass --allow-dask-config if you trust this file (or set it in dask's own config)"


def _refused_setting(key: str, value: Any) -> str | None:
    """Why ``key: value`` may not be set from a job file without ``--allow-dask-config`` (None if it may)."""
    canonical = key.replace("_", "-")
    if any(fragment in canonical.lower() for fragment in _CODE_LOADING):
        return "loads or runs code" + _TRUST
    if canonical.startswith("daskbatch.job."):
        return None  # the job's own keys: the schema of daskbatch/jobs checks them
    if canonical.startswith("daskbatch."):
        from daskbatch.config import check_setting  # lazy: dask

        return check_setting(canonical.removeprefix("daskbatch."), value)
    if canonical.startswith("jobqueue.") and canonical not in SAFE_DASK_SETTINGS:
        return ("is written into the batch job script as shell text, which a file may not set: set it in your "
                "own dask config or in Python (db.cluster('slurm', ...)), or pass --allow-dask-config if you "
                "trust this file")
    if canonical not in SAFE_DASK_SETTINGS:
        return "is not on daskbatch's list of settings a job file may change" + _TRUST
    if isinstance(value, (Mapping, list, tuple)):
        return f"must be a single value, not a {type(value).__name__}"
    if canonical.startswith("jobqueue."):
        return _refused_script_value(canonical.rsplit(".", 1)[-1], value)
    return None


def _refused_script_value(name: str, value: Any) -> str | None:
    """Why a jobqueue value cannot go into the batch job script (None if it can, quoted where it needs it)."""
    if value is None:
        return None  # dask-jobqueue's default
    test, words = _JOBQUEUE_VALUES[name]
    if not test(value) or (isinstance(value, str) and any(ord(c) < 32 or c == "\x7f" for c in value)):
        return f"must be {words} (it goes into the batch job script), got {short_repr(value)}"
    if name in _JOBQUEUE_PATHS and "$" in value:
        if "$" in _VARIABLE.sub("", value):
            return (f"is a path with a '$' that is no $VARIABLE, which the batch script's shell would run "
                    f"({short_repr(value)})")
        if not _SHELL_WORD.fullmatch(_VARIABLE.sub("x", value)):
            return (f"is a path with a $VARIABLE and characters that need quoting, which would stop the "
                    f"variable's expansion ({short_repr(value)}): use letters, digits and _ . , : @ % + = / -")
    return None


def _script_value(name: str, value: Any) -> Any:
    """A checked path as the batch script must hold it: quoted, unless it is literal text and $VARIABLEs."""
    if name not in _JOBQUEUE_PATHS or not isinstance(value, str):
        return value
    if _SHELL_WORD.fullmatch(_VARIABLE.sub("x", value)):
        return value  # nothing to quote, and $TMPDIR stays the node's own
    return shlex.quote(value)  # dask-jobqueue writes it unquoted after --local-directory


def _quoted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each jobqueue path quoted for the batch script's shell."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out[key] = _quoted(value)
        else:
            out[key] = _script_value(str(key).replace("_", "-"), value)
    return out


def check_dask_settings(settings: Mapping[str, Any], source: str, *, allow: bool = False) -> dict[str, Any]:
    """Check a file's dask settings, and give them as they are applied."""
    if allow:
        return dict(settings)
    for key, value in flatten(settings):
        why = _refused_setting(key, value)
        if why is not None:
            shown = key if len(key) <= 80 else key[:77] + "..."  # a key from a file may be megabytes long
            raise UnsafeDaskSetting(f"{source}: dask setting {shown} {why}")
    return _quoted(settings)


_lock = threading.Lock()
_inside = 0  # chunk tasks inside the limit now
_restore: Any = None  # threadpoolctl's limiter of the first task in, until the last leaves
_controller: Any = None  # (len(sys.modules) when scanned, threadpoolctl.ThreadpoolController)


def _scheduler_threads() -> int:
    """Count the tasks the scheduler running this one may run at once in this process (1 if unknown)."""
    try:
        from distributed import get_worker  # lazy: distributed

        return int(getattr(get_worker(), "nthreads", 1))
    except (ImportError, ValueError):  # not inside a distributed worker
        pass
    import dask.threaded  # lazy: dask

    # The threaded scheduler runs tasks on threads of its executors; the
    # synchronous one on the caller's thread, which is in none. A thread is
    # matched to its executor by name ("<prefix>_<k>"): the executor's set of
    # threads is filled only after a new thread has started its first task.
    # (_thread_name_prefix and _max_workers are ThreadPoolExecutor's own fields; dask reads the latter too.)
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
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # a dependency, but a missing one must not stop the statistics
                _restore = None
            else:
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
        if _inside == 0 and _restore is not None:
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
    """Set numba's threads for this thread; return the old count (None without numba or a threading layer)."""
    try:
        import numba  # a dependency; the chunk's kernels load it anyway  # lazy: numba
    except ImportError:
        return None
    try:
        before = numba.get_num_threads()
        numba.set_num_threads(n if restore else min(n, before))
    except Exception:  # no threading layer on this platform: nothing runs in parallel anyway
        return None
    return before
