"""The report of a batch job (:func:`daskbatch.jobs.run_job`): its numbers, JSON file and log words.

Versions, the effective job, the plan, counts, missing or skipped chunks,
per-phase timings, peak memory and the outputs, written atomically; the same
numbers give the job's final log line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from daskbatch._version import __version__
from daskbatch.jobs.schema import JobSpec
from daskbatch.runtime.joblog import peak_memory

__all__ = [
    "MISSING_KEYS", "JobReport", "flatten", "json_safe", "memory_words", "now", "peak_memory", "phase", "versions", "write_json_atomic",
]

#: Packages whose versions the report records (those absent are recorded as null).
PACKAGES = ("daskbatch", "dask", "distributed", "zarr", "numcodecs", "numpy", "numba", "scipy", "xarray",
            "pandas", "cupy", "dask-cuda", "dask-jobqueue")
MISSING_KEYS = ("missing_policy", "complete", "missing_chunks", "missing_chunk_keys", "label_missing_chunks",
                 "label_missing_chunk_keys", "rows_skipped", "skipped_rows", "absent_chunks",
                 "absent_fill_chunks", "absent_lost_chunks")


@dataclass
class JobReport:
    """What a job did: the numbers of its JSON report, and its final log line.

    Attributes
    ----------
    job : JobSpec
        The effective job (defaults, config and file merged).
    source : str
        The job file (or "job" for a mapping).
    status : {"ok", "failed", "plan_error", "interrupted", "bad_input"}
    error : str or None
        The one-line error of a job that did not finish.
    plan : Plan or None
    rows, features : int
        Shape of the input (rows in the store, features of ``x``).
    selected : int or None
        Features the selection kept (None without a selection).
    output_features : int or None
        Columns of the transform store.
    timings : dict of str to float
        Seconds per phase (open, cluster, plan, describe, write summary, select,
        transform, total); ``describe_passes`` lists each pass of describe.
    peak_memory : dict
        ``process_bytes`` (this process's ru_maxrss) and, on a cluster,
        ``workers_bytes`` (each worker's ru_maxrss by address).
    missing : dict
        The input's missing or skipped chunks (from the summary's provenance).
    outputs : dict of str to str
        Path of every output written (summary, selection, transform, report).
    started, finished : str
        ISO times (UTC).
    """

    job: JobSpec
    source: str
    status: str = "ok"
    error: str | None = None
    plan: Any = None
    rows: int | None = None
    features: int | None = None
    selected: int | None = None
    output_features: int | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    peak_memory: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    started: str = ""
    finished: str = ""

    @property
    def seconds(self) -> float:
        """Measure the wall time of the whole job.

        Returns
        -------
        float
            Seconds.
        """
        return float(self.timings.get("total", 0.0))

    def summary_line(self) -> str:
        """Summarise the job in one line.

        Returns
        -------
        str
            Such as ``daskbatch run: done in 12.3 s; 1,000,000 rows x 64 features; selected 10; wrote z.zarr``.
        """
        parts = [f"daskbatch run: {'done' if self.status == 'ok' else self.status} in {self.seconds:.1f} s"]
        if self.rows is not None and self.features is not None:
            parts.append(f"{self.rows:,} rows x {self.features:,} features")
        if self.selected is not None:
            parts.append(f"selected {self.selected:,}")
        wrote = [p for k, p in self.outputs.items() if k != "report"]
        if wrote:
            parts.append("wrote " + ", ".join(wrote))
        if "report" in self.outputs:
            parts.append(f"report {self.outputs['report']}")
        if self.error:
            parts.append(self.error)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Give the JSON report's content.

        Returns
        -------
        dict
            JSON-able.
        """
        return {
            "status": self.status,
            "error": self.error,
            "job_file": self.source,
            "started": self.started,
            "finished": self.finished,
            "versions": versions(),
            "python": sys.version.split()[0],
            "job": self.job.to_dict(),
            "plan": None if self.plan is None else self.plan.to_dict(),
            "counts": {"rows": self.rows, "features": self.features, "selected": self.selected,
                       "output_features": self.output_features},
            "missing": self.missing,
            "timings": self.timings,
            "peak_memory": self.peak_memory,
            "outputs": self.outputs,
        }


def versions() -> dict[str, str | None]:
    """List the installed versions of daskbatch and its dependencies.

    Returns
    -------
    dict of str to str or None
        Version by package (None when not installed).
    """
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["daskbatch"] = __version__
    return out


# ------------------------------------------------------------------ helpers


def now() -> str:
    """Return the time now, UTC, in ISO 8601 to the second.

    Returns
    -------
    str
        E.g. ``"2026-11-26T05:40:52+00:00"``.
    """
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _bytes(n: float | None) -> str:
    from dask.utils import format_bytes  # lazy: dask

    return "-" if n is None else format_bytes(int(n))


def memory_words(peak: Mapping[str, Any]) -> str:
    """Put :func:`daskbatch.runtime.joblog.peak_memory`'s numbers in words for the log.

    Parameters
    ----------
    peak : mapping
        What :func:`peak_memory` returned.

    Returns
    -------
    str
        E.g. ``"peak memory 412.00 MiB (this process), 1.20 GiB (largest of 4 worker(s))"``.
    """
    text = f"peak memory {_bytes(peak.get('process_bytes'))} (this process)"
    workers = peak.get("workers_bytes")
    if workers:
        text += f", {_bytes(max(workers.values()))} (largest of {len(workers)} worker(s))"
    return text


@contextlib.contextmanager
def phase(report: JobReport, name: str) -> Iterator[None]:
    """Time the block inside into ``report.timings[name]`` (seconds).

    Parameters
    ----------
    report : JobReport
        The job's report.
    name : str
        The phase's name.

    Yields
    ------
    None
        While the phase runs.
    """
    t0 = time.perf_counter()
    yield
    report.timings[name] = round(time.perf_counter() - t0, 3)


def flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"daskbatch": {"split-every": 16}}`` -> ``{"daskbatch.split-every": 16}``.

    ``dask.config.set`` replaces the whole value at a key, so a nested mapping
    would wipe the other settings of its section.

    Parameters
    ----------
    settings : mapping
        Nested settings.
    prefix : str, default ""
        Prepended to every key (the path so far).

    Returns
    -------
    dict
        Dotted keys to values.
    """
    out: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def write_json_atomic(path: str, payload: Mapping[str, Any]) -> None:
    """Write JSON to a temporary file beside ``path``, then ``os.replace``: readers never see half a report.

    Parameters
    ----------
    path : str
        The report's path.
    payload : mapping
        What to write (NumPy values are converted).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".json.tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2, default=_json_default, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def json_safe(value: Any) -> Any:
    """Turn NaN and inf into strings, anywhere in ``value`` (strict JSON has neither).

    Parameters
    ----------
    value : object
        A number, or a dict or list of them.

    Returns
    -------
    object
        The same structure, JSON-safe.
    """
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value

