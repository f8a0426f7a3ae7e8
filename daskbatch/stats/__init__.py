"""Mergeable statistics: each has ``chunk(x, label) -> state``, ``merge(a, b) -> state``, ``finalize(state)``.

They are written once against the array API (NumPy, CuPy, array_api_strict)
and never import dask, zarr or cupy.
"""

from daskbatch.stats import class_moments, comoments, histogram, moments, sketch_windows
from daskbatch.stats._base import Bundle, State, Statistic, merge_all
from daskbatch.stats.class_moments import ClassMoments, ClassMomentsResult, ClassMomentsState
from daskbatch.stats.comoments import CoMoments, CoMomentsResult, CoMomentsState
from daskbatch.stats.footprint import Footprint
from daskbatch.stats.histogram import Histogram, HistogramResult, HistogramState
from daskbatch.stats.moments import Moments, MomentsResult, MomentsState
from daskbatch.stats.mutual_info import MutualInformation, mutual_information
from daskbatch.stats.quantile import histogram_quantile
from daskbatch.stats.sketch import Sketch, SketchResult, SketchState
from daskbatch.stats.state_registry import register_state

#: CLI / API names of the statistics ``describe`` can compute ("mi" is counted as the histogram by label;
#: "sketch" the quantile sketch, also computed whenever histogram ranges are found from the data).
STATISTICS: dict[str, type] = {
    "moments": Moments, "cov": CoMoments, "hist": Histogram, "mi": MutualInformation, "class_moments": ClassMoments,
    "sketch": Sketch,
}

#: What each statistic holds in memory, by name (the planner's memory model adds these up).
FOOTPRINTS: dict[str, Footprint] = {
    f.name: f
    for f in (moments.FOOTPRINT, comoments.FOOTPRINT, histogram.FOOTPRINT, histogram.MI_FOOTPRINT,
              class_moments.FOOTPRINT, sketch_windows.FOOTPRINT)
}

__all__ = [
    "FOOTPRINTS", "STATISTICS", "Footprint", "State", "Bundle", "ClassMoments", "ClassMomentsResult", "ClassMomentsState", "CoMoments",
    "CoMomentsResult", "CoMomentsState", "Histogram",
    "HistogramResult", "HistogramState", "Moments", "MomentsResult", "MomentsState", "MutualInformation", "Sketch",
    "SketchResult", "SketchState", "Statistic",
    "histogram_quantile", "merge_all", "mutual_information", "register_state",
]
