"""One-pass, mergeable per-feature statistics over chunked arrays with Dask: daskbatch.

>>> import daskbatch as db
>>> summary = db.describe("data.zarr", label="y")            # doctest: +SKIP
"""

from __future__ import annotations

from daskbatch import config as _config  # noqa: F401  (loads defaults into dask.config)
from daskbatch import steps
from daskbatch._version import __version__
from daskbatch.accumulator import Accumulator
from daskbatch.compare import Drift, compare
from daskbatch.describe import describe
from daskbatch.errors import (
    CheckpointMismatchError,
    DataError,
    DeviceUnavailableError,
    Interrupted,
    PlanError,
    RangeWarning,
)
from daskbatch.incremental import merge
from daskbatch.io.dataset import Dataset, open_dataset, open_zarr
from daskbatch.io.ingest import IngestReport, ingest
from daskbatch.io.synth import rank_rows, synth
from daskbatch.map_batches import BatchError, map_batches
from daskbatch.pca import PCA, pca
from daskbatch.planning.resources import Resources
from daskbatch.planning.search import Plan
from daskbatch.plans import plan
from daskbatch.runtime.cluster import cluster
from daskbatch.select import Selection, load_selection, select
from daskbatch.stats import (
    Bundle,
    CoMoments,
    Footprint,
    Histogram,
    Moments,
    State,
    mutual_information,
)
from daskbatch.summary import Summary, load_summary
from daskbatch.transform import transform

__all__ = [
    "Accumulator", "BatchError", "Bundle", "CheckpointMismatchError", "CoMoments", "Drift", "compare", "DataError", "Dataset",
    "DeviceUnavailableError", "Footprint", "Histogram", "IngestReport", "Interrupted", "Moments", "PCA", "Plan", "PlanError",
    "RangeWarning", "Resources", "Selection", "State", "Summary", "__version__", "cluster", "describe", "ingest",
    "load_selection", "load_summary", "map_batches", "merge", "mutual_information", "open_dataset", "open_zarr", "pca",
    "plan", "rank_rows", "select", "steps", "synth", "transform",
]
