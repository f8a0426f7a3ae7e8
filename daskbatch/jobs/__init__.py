"""Batch jobs (``daskbatch run``): the job file's schema, the run, and its report."""

from __future__ import annotations

from typing import Any

from daskbatch.jobs.report import JobReport

__all__ = ["JobReport", "run_job"]


def __getattr__(name: str) -> Any:
    """Load :func:`run_job` (and the other names of the former module ``daskbatch.jobs``) on first use (PEP 562)."""
    # Plain imports, not importlib by name, so that the layering test sees them.
    if name in ("run_job", "check_job_outputs"):
        from daskbatch.jobs import run  # lazy: dask, zarr

        return getattr(run, name)
    if name == "needed_stats":
        from daskbatch.jobs._stages import needed_stats  # lazy: dask, zarr

        return needed_stats
    raise AttributeError(f"module 'daskbatch.jobs' has no attribute {name!r}")
