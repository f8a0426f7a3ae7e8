"""Which dask settings a job file's ``dask:`` mapping may change without ``--allow-dask-config``.

dask's config is not inert data: ``distributed.scheduler.preload`` and
``distributed.worker.preload`` import or run Python, plugins load code,
``distributed.logging`` builds objects from dotted names, ``distributed.nanny.environ``
sets ``LD_PRELOAD``, and dask-jobqueue's ``job-script-prologue`` or ``python``
end up in a shell script. A job file is often copied from elsewhere, so only
settings that tune numbers, sizes, times and paths are accepted by default;
everything else names its key and asks for ``--allow-dask-config``.

:func:`check_dask_settings` is the one check: ``describe --config`` and the
job files of ``daskbatch run`` both call it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["SAFE_DASK_SETTINGS", "UnsafeDaskSetting", "check_dask_settings", "flatten"]

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


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Walk the leaves of a nested mapping.

    Parameters
    ----------
    mapping : mapping
        Nested settings.
    prefix : str, default ""
        Prepended to every key.

    Yields
    ------
    tuple of (str, object)
        ``(dotted key, value)`` for every leaf.
    """
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def _refused_setting(key: str, value: Any) -> str | None:
    """Why ``key: value`` may not be set from a job file without ``--allow-dask-config`` (None if it may)."""
    canonical = key.replace("_", "-")
    if any(fragment in canonical.lower() for fragment in _CODE_LOADING):
        return "loads or runs code"
    if canonical.startswith("daskbatch."):
        return None  # daskbatch's own settings are numbers and sizes (daskbatch.yaml)
    if canonical not in SAFE_DASK_SETTINGS:
        return "is not on daskbatch's list of settings a job file may change"
    if canonical.startswith("jobqueue.") and isinstance(value, str) and ("\n" in value or "\r" in value):
        return "holds a line break, which would add lines to the batch job script"
    if isinstance(value, (Mapping, list, tuple)):
        return f"must be a single value, not a {type(value).__name__}"
    return None


def check_dask_settings(settings: Mapping[str, Any], source: str, *, allow: bool = False) -> None:
    """Refuse a ``dask:`` mapping holding a setting that a file may not change without ``--allow-dask-config``.

    Parameters
    ----------
    settings : mapping
        The nested ``dask:`` mapping of a file.
    source : str
        The file, for the message.
    allow : bool, default False
        ``--allow-dask-config``: accept every setting.

    Raises
    ------
    UnsafeDaskSetting
        One line naming the file and the first refused key.
    """
    if allow:
        return
    for key, value in flatten(settings):
        why = _refused_setting(key, value)
        if why is not None:
            raise UnsafeDaskSetting(
                f"{source}: dask setting {key} {why}; pass --allow-dask-config if you trust this file "
                "(or set it in dask's own config)"
            )
