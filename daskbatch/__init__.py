"""daskbatch: one-pass, mergeable per-feature statistics over chunked arrays with Dask.

>>> import daskbatch as db
>>> summary = db.describe("data.zarr", label="y")            # doctest: +SKIP
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("daskbatch")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

from daskbatch import config as _config  # noqa: F401  (loads defaults into dask.config)
from daskbatch.accumulator import Accumulator
from daskbatch.cluster import cluster
from daskbatch.dataset import Dataset, open_dataset, open_zarr
from daskbatch.describe import describe
from daskbatch.errors import (
    CheckpointMismatchError,
    DataError,
    DeviceUnavailableError,
    Interrupted,
    PlanError,
    RangeWarning,
)
from daskbatch.ingest import IngestReport, ingest
from daskbatch.planner import Plan, plan
from daskbatch.resources import Resources
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments, mutual_information
from daskbatch.summary import Summary, load_summary
from daskbatch.synth import synth

__all__ = [
    "Accumulator", "Bundle", "CheckpointMismatchError", "CoMoments", "DataError", "Dataset", "DeviceUnavailableError",
    "Histogram", "IngestReport", "Interrupted", "Moments", "Plan", "PlanError", "RangeWarning", "Resources", "Summary",
    "__version__",
    "cluster", "describe", "ingest", "load_summary", "mutual_information", "open_dataset", "open_zarr", "plan",
    "synth",
]
