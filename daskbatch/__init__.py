"""One-pass, mergeable per-feature statistics over chunked arrays with Dask: daskbatch.

>>> import daskbatch as db
>>> summary = db.describe("data.zarr", label="y")            # doctest: +SKIP

``import daskbatch`` loads nothing heavy: each public name is imported on first
use (PEP 562), so a script, a CLI ``--help`` or ``import daskbatch.stats`` does
not pay for dask, pandas, xarray and zarr until it needs them. Whenever dask
is loaded, daskbatch's defaults are in ``dask.config``, so
``dask.config.get("daskbatch.split-every")`` works at once
(:mod:`daskbatch._dask_setup`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from daskbatch import _dask_setup

# daskbatch's defaults in dask.config and its states in dask's memory accounting (a user's too),
# whatever builds the graph, from the first `import dask` on: not here, so `import daskbatch.stats` loads no dask.
_dask_setup.install()

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from daskbatch._version import __version__
    from daskbatch.accumulator import Accumulator
    from daskbatch.batches import BatchError, map_batches
    from daskbatch.describing import describe
    from daskbatch.engine.planner import plan
    from daskbatch.engine.run_options import RunOptions
    from daskbatch.errors import (
        Cancelled,
        CheckpointMismatchError,
        DataError,
        DeviceUnavailableError,
        GPUUnavailableError,
        Interrupted,
        PlanError,
        RangeWarning,
    )
    from daskbatch.incremental import merge, update
    from daskbatch.io.dataset import Dataset, open_dataset, open_zarr
    from daskbatch.io.ingest import IngestReport, ingest
    from daskbatch.io.synth import rank_rows, synth
    from daskbatch.io.tables import Table, open_table
    from daskbatch.planning.plan import Plan, Resources
    from daskbatch.runtime.cluster import cluster
    from daskbatch.selection import Selection, load_selection, select
    from daskbatch.stats import (
        Bundle,
        CoMoments,
        Footprint,
        Histogram,
        Moments,
        State,
        mutual_information,
        register_state,
    )
    from daskbatch.stats.registry import register_statistic
    from daskbatch.summary import Summary, load_summary
    from daskbatch.summary.compare import Drift, compare
    from daskbatch.transforms import steps, transform
    from daskbatch.transforms.pca import PCA, pca

#: Where each public name lives: imported by :func:`__getattr__` on first use.
_LAZY = {
    "__version__": "daskbatch._version",  # importlib.metadata alone is ~40 % of a bare `import daskbatch`
    "steps": "daskbatch.transforms.steps",
    "Accumulator": "daskbatch.accumulator",
    "Drift": "daskbatch.summary.compare", "compare": "daskbatch.summary.compare",
    "describe": "daskbatch.describing", "merge": "daskbatch.incremental", "update": "daskbatch.incremental",
    "RunOptions": "daskbatch.engine.run_options",
    **dict.fromkeys(
        ("Cancelled", "CheckpointMismatchError", "DataError", "DeviceUnavailableError", "GPUUnavailableError",
         "Interrupted", "PlanError", "RangeWarning"),
        "daskbatch.errors",
    ),
    "Dataset": "daskbatch.io.dataset", "open_dataset": "daskbatch.io.dataset", "open_zarr": "daskbatch.io.dataset",
    "IngestReport": "daskbatch.io.ingest", "ingest": "daskbatch.io.ingest",
    "Table": "daskbatch.io.tables", "open_table": "daskbatch.io.tables",
    "rank_rows": "daskbatch.io.synth", "synth": "daskbatch.io.synth",
    "BatchError": "daskbatch.batches", "map_batches": "daskbatch.batches",
    "PCA": "daskbatch.transforms.pca", "pca": "daskbatch.transforms.pca",
    "Resources": "daskbatch.planning.plan",
    "Plan": "daskbatch.planning.plan",
    "plan": "daskbatch.engine.planner",
    "cluster": "daskbatch.runtime.cluster",
    "Selection": "daskbatch.selection", "load_selection": "daskbatch.selection", "select": "daskbatch.selection",
    **dict.fromkeys(
        ("Bundle", "CoMoments", "Footprint", "Histogram", "Moments", "State", "mutual_information", "register_state"),
        "daskbatch.stats",
    ),
    "register_statistic": "daskbatch.stats.registry",
    "Summary": "daskbatch.summary", "load_summary": "daskbatch.summary",
    "transform": "daskbatch.transforms",
}

__all__ = [
    "PCA", "Accumulator", "BatchError", "Bundle", "Cancelled", "CheckpointMismatchError", "CoMoments", "DataError", "Dataset",
    "DeviceUnavailableError", "Drift", "Footprint", "GPUUnavailableError", "Histogram", "IngestReport", "Interrupted", "Moments", "Plan",
    "PlanError", "RangeWarning", "Resources", "RunOptions", "Selection", "State", "Summary", "Table", "__version__", "cluster", "compare",
    "describe", "ingest", "load_selection", "load_summary", "map_batches", "merge", "mutual_information",
    "open_dataset", "open_table", "open_zarr", "pca", "plan", "rank_rows", "register_state", "register_statistic", "select", "steps", "synth", "transform", "update",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562) and keep it in the module's namespace."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'daskbatch' has no attribute {name!r}")
    module = importlib.import_module(where)
    # "steps" is the module itself; everything else is an attribute of its module.
    value = module if name == "steps" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The public names only: tab completion should not offer ``sys``, ``importlib`` or ``annotations``.
    return sorted({*__all__, "__version__"})
