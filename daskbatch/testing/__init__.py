"""Conformance laws for mergeable statistics, and the hypothesis strategies they draw from.

Subclass :class:`StatisticLaws` in a test module, implement ``make`` and
``reference``, and every law below runs for that statistic on every backend
of the ``xp`` fixture (the pattern of zarr's ``StoreTests``)::

    class TestMoments(StatisticLaws):
        def make(self, n_features):
            return Moments()

        def reference(self, x, label=None):
            return {"mean": ..., "var": ...}

Needs ``hypothesis`` (a test dependency) and an ``xp`` fixture that returns an
array-API namespace. For your own statistic, :func:`check_statistic` runs the
same laws from one call in a test::

    def test_my_statistic_obeys_the_laws():
        daskbatch.testing.check_statistic(L1Norm(), lambda x, label=None: np.nansum(np.abs(x), axis=0))
"""

from __future__ import annotations

try:  # the law suite runs under pytest with hypothesis: test tools, not dependencies of daskbatch
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
except ImportError:
    raise ImportError("daskbatch.testing needs pytest and hypothesis: pip install 'daskbatch[test]'") from None

from daskbatch.testing.assertions import assert_results_close, assert_states_equal
from daskbatch.testing.check import check_statistic
from daskbatch.testing.laws import LAWS, StatisticLaws
from daskbatch.testing.strategies import (
    chunk_sizes,
    labels_for,
    merge_tree,
    sample_arrays,
    split_points,
)

__all__ = [
    "LAWS",
    "StatisticLaws",
    "check_statistic",
    "assert_results_close",
    "assert_states_equal",
    "chunk_sizes",
    "labels_for",
    "merge_tree",
    "sample_arrays",
    "split_points",
]
