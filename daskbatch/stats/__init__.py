"""Mergeable statistics: each has ``chunk(x, label) -> state``, ``merge(a, b) -> state``, ``finalize(state)``.

They are written once against the array API (NumPy, CuPy, array_api_strict)
and never import dask, zarr or cupy.
"""

from daskbatch.stats._base import Bundle, State, Statistic, merge_all, register_state
from daskbatch.stats.class_moments import ClassMoments, ClassMomentsResult, ClassMomentsState
from daskbatch.stats.comoments import CoMoments, CoMomentsResult, CoMomentsState
from daskbatch.stats.declaration import Declaration, Footprint
from daskbatch.stats.histogram import Histogram, HistogramResult, HistogramState
from daskbatch.stats.moments import Moments, MomentsResult, MomentsState
from daskbatch.stats.quantile import SketchResult, histogram_quantile
from daskbatch.stats.registry import STATISTICS
from daskbatch.stats.sketch import Sketch, SketchState
from daskbatch.stats.target import MutualInformation, mutual_information

__all__ = [
    "STATISTICS", "Declaration", "Footprint", "State", "Bundle", "ClassMoments", "ClassMomentsResult", "ClassMomentsState", "CoMoments",
    "CoMomentsResult", "CoMomentsState", "Histogram",
    "HistogramResult", "HistogramState", "Moments", "MomentsResult", "MomentsState", "MutualInformation", "Sketch",
    "SketchResult", "SketchState", "Statistic",
    "histogram_quantile", "merge_all", "mutual_information", "register_state",
]
