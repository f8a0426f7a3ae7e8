"""One-pass, mergeable per-feature statistics over chunked arrays with Dask: daskbatch.

>>> import daskbatch as db
>>> summary = db.describe("data.zarr", label="y")            # doctest: +SKIP

``import daskbatch`` loads nothing heavy: each public name is imported on first
use (PEP 562), so a script, a CLI ``--help`` or ``import daskbatch.stats`` does
not pay for dask.array, pandas, xarray and zarr until it needs them. It does
load daskbatch's defaults into ``dask.config`` (:mod:`daskbatch.config`, which
needs only dask's core), so ``dask.config.get("daskbatch.split-every")`` works
at once.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from daskbatch import _moved

# First: daskbatch's defaults into dask.config (dask's core only); a malformed dask YAML file becomes one line here.
from daskbatch import config as _config  # noqa: F401
from daskbatch._version import __version__
from daskbatch.engine.sizeof import register_states

# Every statistic's state (a user's too) measured by its arrays in dask's memory accounting,
# whatever builds the graph: registered with the package, not with the engine that is loaded lazily.
register_states()
_moved.install()  # old module paths that moved stay importable, with a DeprecationWarning

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from daskbatch import steps
    from daskbatch.accumulator import Accumulator
    from daskbatch.compare import Drift, compare
    from daskbatch.describe import describe
    from daskbatch.engine.planner import plan
    from daskbatch.errors import (
        Cancelled,
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

#: Where each public name lives: imported by :func:`__getattr__` on first use.
_LAZY = {
    "steps": "daskbatch.steps",
    "Accumulator": "daskbatch.accumulator",
    "Drift": "daskbatch.compare", "compare": "daskbatch.compare",
    "describe": "daskbatch.describe",
    **dict.fromkeys(
        ("Cancelled", "CheckpointMismatchError", "DataError", "DeviceUnavailableError", "Interrupted", "PlanError", "RangeWarning"),
        "daskbatch.errors",
    ),
    "merge": "daskbatch.incremental",
    "Dataset": "daskbatch.io.dataset", "open_dataset": "daskbatch.io.dataset", "open_zarr": "daskbatch.io.dataset",
    "IngestReport": "daskbatch.io.ingest", "ingest": "daskbatch.io.ingest",
    "rank_rows": "daskbatch.io.synth", "synth": "daskbatch.io.synth",
    "BatchError": "daskbatch.map_batches", "map_batches": "daskbatch.map_batches",
    "PCA": "daskbatch.pca", "pca": "daskbatch.pca",
    "Resources": "daskbatch.planning.resources",
    "Plan": "daskbatch.planning.search",
    "plan": "daskbatch.engine.planner",
    "cluster": "daskbatch.runtime.cluster",
    "Selection": "daskbatch.select", "load_selection": "daskbatch.select", "select": "daskbatch.select",
    **dict.fromkeys(
        ("Bundle", "CoMoments", "Footprint", "Histogram", "Moments", "State", "mutual_information"), "daskbatch.stats"
    ),
    "Summary": "daskbatch.summary", "load_summary": "daskbatch.summary",
    "transform": "daskbatch.transform",
}

__all__ = [
    "PCA", "Accumulator", "BatchError", "Bundle", "Cancelled", "CheckpointMismatchError", "CoMoments", "DataError", "Dataset",
    "DeviceUnavailableError", "Drift", "Footprint", "Histogram", "IngestReport", "Interrupted", "Moments", "Plan",
    "PlanError", "RangeWarning", "Resources", "Selection", "State", "Summary", "__version__", "cluster", "compare",
    "describe", "ingest", "load_selection", "load_summary", "map_batches", "merge", "mutual_information",
    "open_dataset", "open_zarr", "pca", "plan", "rank_rows", "select", "steps", "synth", "transform",
]

#: Functions named like the module that defines them (``daskbatch.describe.describe``).
_SHADOWED = frozenset(n for n, where in _LAZY.items() if where == f"daskbatch.{n}" and n != "steps")


class _Package(types.ModuleType):
    """The package module: importing ``daskbatch.describe`` must not replace ``db.describe``, the function.

    Python's import system sets every imported submodule as an attribute of its
    package; for the functions named after their module that would turn
    ``db.describe`` into a module the first time anything imports
    ``daskbatch.describe``. The eager imports this replaces hid that by
    importing the function afterwards.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
    return sorted({*globals(), *_LAZY})
