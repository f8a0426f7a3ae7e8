"""Batch jobs (``daskbatch run``): the job file's schema, the run, and its report.

- :mod:`daskbatch.jobs.spec`: the job file, every key with a default and a doc, read and checked.
- :mod:`daskbatch.jobs.run`: :func:`run_job` describes, selects, transforms and reports.
- :mod:`daskbatch.jobs.report`: the report's numbers, its JSON file and its log words.

``from daskbatch.jobs import run_job`` loads the run (dask, zarr) on first use only,
so the CLI's ``--help`` and the schema stay light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobReport", "run_job"]


def __getattr__(name: str) -> Any:
    """Load :func:`run_job` and :class:`JobReport` on first use (PEP 562)."""
    if name == "run_job":
        from daskbatch.jobs.run import run_job

        return run_job
    if name == "JobReport":
        from daskbatch.jobs.report import JobReport

        return JobReport
    raise AttributeError(f"module 'daskbatch.jobs' has no attribute {name!r}")
