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
from daskbatch.describe import describe
from daskbatch.errors import CheckpointMismatchError, DataError, PlanError
from daskbatch.stats import Bundle, CoMoments, Histogram, Moments, mutual_information
from daskbatch.summary import Summary, load_summary

__all__ = [
    "Accumulator", "Bundle", "CheckpointMismatchError", "CoMoments", "DataError", "Histogram", "Moments",
    "PlanError", "Summary", "__version__", "describe", "load_summary", "mutual_information",
]
