"""A constant feature of any finite size is described and binned.

A constant column got the range (v - 0.5, v + 0.5), which is (v, v) from
|v| >= 2**53 (9e15): describe failed with "histogram range of feature 0 must be
finite with lo < hi", a range the user never gave. The range now widens with
the value's float64 resolution.
"""

from __future__ import annotations

import numpy as np
import pytest

import daskbatch as db


@pytest.mark.parametrize(
    "value", [9e15, -9e15, 2.0**53 + 2, 1e20, -1e300, np.finfo(np.float64).max, -np.finfo(np.float64).max],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_constant_feature_is_counted_in_one_bin(value: float, dtype: type) -> None:
    if abs(value) > float(np.finfo(dtype).max):
        pytest.skip(f"{value} is not a {np.dtype(dtype).name}")
    v = np.asarray(value, dtype=dtype)
    rng = np.random.default_rng(0)
    x = np.column_stack([np.full(500, v, dtype=dtype), rng.normal(size=500).astype(dtype)])
    s = db.describe(x, stats=("moments", "hist"), bins=16, run=db.RunOptions(plan=None))
    v64 = float(v)
    assert s.arrays.min[0] == s.arrays.max[0] == v64
    assert s.arrays.mean[0] == v64 and s.arrays.std[0] == 0.0
    counts, edges = s.arrays.hist_counts[0], s.arrays.hist_edges[0]
    assert counts.sum() == 500 and s.arrays.underflow[0] == 0 and s.arrays.overflow[0] == 0
    assert np.count_nonzero(counts) == 1  # every row in the same bin ...
    b = int(np.flatnonzero(counts)[0])
    assert edges[b] <= v64 <= edges[b + 1]  # ... the one holding the value
    assert np.all(np.diff(edges) > 0)  # distinct edges, not a collapsed range
    assert abs(s.quantile(0.5).iloc[0] - v64) <= edges[b + 1] - edges[b]


def test_small_constants_keep_numpys_range_beside_a_huge_one() -> None:
    x = np.column_stack([np.full(10, 3.0), np.full(10, 9e15)])
    s = db.describe(x, stats=("moments", "hist"), bins=4, run=db.RunOptions(plan=None))
    np.testing.assert_array_equal(s.arrays.hist_edges[0], np.histogram_bin_edges([3.0], bins=4))
    assert s.arrays.hist_counts[1].sum() == 10 and s.arrays.hist_edges[1][0] < 9e15 < s.arrays.hist_edges[1][-1]
