"""Batch jobs (``daskbatch run``): the job file (``schema``, ``spec``), the run (``run``), and here its report.

:func:`run_job` is loaded on first use, as it imports dask and zarr.
"""

from __future__ import annotations

import contextlib
import datetime
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from daskbatch._version import __version__
from daskbatch.jobs.schema import JobSpec

__all__ = [
    "MISSING_KEYS", "JobReport", "json_default", "json_safe", "memory_words", "now", "phase", "run_job", "versions",
]

#: Packages whose versions the report records (those absent are recorded as null).
PACKAGES = ("daskbatch", "dask", "distributed", "zarr", "numcodecs", "numpy", "numba", "scipy", "xarray",
            "pandas", "cupy", "dask-cuda", "dask-jobqueue")
MISSING_KEYS = ("missing_policy", "complete", "missing_chunks", "missing_chunk_keys", "label_missing_chunks",
                 "label_missing_chunk_keys", "rows_skipped", "skipped_rows", "absent_chunks",
                 "absent_fill_chunks", "absent_lost_chunks")


@dataclass
class JobReport:
    """What a job did: the numbers of its JSON report, and its final log line."""

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

    def summary_line(self) -> str:
        """Summarise the job in one line."""
        seconds = float(self.timings.get("total", 0.0))
        parts = [f"daskbatch run: {'done' if self.status == 'ok' else self.status} in {seconds:.1f} s"]
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
        """Give the JSON report's content."""
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
    """List the installed versions of daskbatch and its dependencies."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["daskbatch"] = __version__
    return out


def now() -> str:
    """Return the time now, UTC, in ISO 8601 to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _bytes(n: float | None) -> str:
    """A byte count in words, '-' when unknown."""
    from dask.utils import format_bytes  # lazy: dask

    return "-" if n is None else format_bytes(int(n))


def memory_words(peak: Mapping[str, Any]) -> str:
    """Put :func:`daskbatch.runtime.capacity.peak_memory`'s numbers in words for the log."""
    text = f"peak memory {_bytes(peak.get('process_bytes'))} (this process)"
    workers = peak.get("workers_bytes")
    if workers:
        text += f", {_bytes(max(workers.values()))} (largest of {len(workers)} worker(s))"
    return text


@contextlib.contextmanager
def phase(report: JobReport, name: str) -> Iterator[None]:
    """Time the block inside into ``report.timings[name]`` (seconds)."""
    t0 = time.perf_counter()
    yield
    report.timings[name] = round(time.perf_counter() - t0, 3)


def json_default(value: Any) -> Any:
    """A JSON value for what json cannot write (NumPy scalars and arrays, sets, tuples; else its str)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def json_safe(value: Any) -> Any:
    """Turn NaN and inf into strings, anywhere in ``value`` (strict JSON has neither)."""
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def __getattr__(name: str) -> Any:
    """Load :func:`run_job` on first use (PEP 562)."""
    if name == "run_job":
        from daskbatch.jobs.run import run_job  # lazy: dask, zarr

        return run_job
    raise AttributeError(f"module 'daskbatch.jobs' has no attribute {name!r}")
