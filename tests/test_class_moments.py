"""Per-class moments: the inherited law suite against exact rational oracles, and properties."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daskbatch.stats import ClassMoments, Moments
from daskbatch.stats._base import merge_all
from daskbatch.testing import (
    StatisticLaws,
    assert_results_close,
    labels_for,
    sample_arrays,
    split_points,
)

NAN = math.nan


def class_moments_reference(x: np.ndarray, y: np.ndarray, *, ddof: int = 1, n_classes: int | None = None) -> dict:
    """Exact count, mean, M2, variance and sum of the finite values of each (feature, class)."""
    k_all = n_classes if n_classes is not None else (int(y.max()) + 1 if y.size else 1)
    out = {name: np.full((x.shape[1], k_all), NAN) for name in ("count", "mean", "m2", "var", "sum")}
    for d, col in enumerate(x.T):
        for k in range(k_all):
            values = [Fraction(float(v)) for v in col[(y == k) & np.isfinite(col)]]
            n = len(values)
            out["count"][d, k] = n
            out["m2"][d, k] = 0.0
            out["sum"][d, k] = 0.0
            if n:
                mu = sum(values, Fraction(0)) / n
                m2 = sum(((v - mu) ** 2 for v in values), Fraction(0))
                out["mean"][d, k] = float(mu)
                out["m2"][d, k] = float(m2)
                out["sum"][d, k] = float(mu * n)
                if n - ddof > 0:
                    out["var"][d, k] = float(m2 / (n - ddof))
    return out


class TestClassMoments(StatisticLaws):
    uses_label = True

    def make(self, n_features: int) -> ClassMoments:
        return ClassMoments()

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        assert label is not None
        return class_moments_reference(x, label)


class TestClassMomentsFixedClassesDdof0(StatisticLaws):
    """A known number of classes (some never seen) and ddof=0."""

    uses_label = True

    def make(self, n_features: int) -> ClassMoments:
        return ClassMoments(ddof=0, n_classes=6)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        assert label is not None
        return class_moments_reference(x, label, ddof=0, n_classes=6)


@given(data=st.data())
def test_each_class_equals_moments_of_its_rows(data: st.DataObject) -> None:
    """Class k of the merged state is Moments over the rows labelled k (finite data)."""
    x = data.draw(sample_arrays(min_rows=1), label="x")
    y = data.draw(labels_for(x.shape[0], max_classes=5), label="y")
    cuts = data.draw(split_points(x.shape[0]), label="cuts")
    stat = ClassMoments()
    states = [stat.chunk(a, b) for a, b in zip(np.split(x, cuts), np.split(y, cuts), strict=True)]
    result = stat.finalize(merge_all(stat, states))
    assert result.count.shape == (x.shape[1], int(y.max()) + 1)
    for k in range(int(y.max()) + 1):
        rows = x[y == k]
        if not rows.shape[0]:
            np.testing.assert_array_equal(result.count[:, k], 0.0)
            continue
        m = Moments().finalize(Moments().chunk(rows))
        assert_results_close(
            {"count": result.count[:, k], "mean": result.mean[:, k], "var": result.var[:, k]},
            {"count": m.count, "mean": m.mean, "var": m.var}, rtol=1e-10, atol=1e-9,
        )


@given(data=st.data())
def test_classes_absent_from_chunks_and_row_order(data: st.DataObject) -> None:
    """Chunks that each hold one class (so K grows chunk by chunk) give the one-chunk result."""
    x = data.draw(sample_arrays(min_rows=2, nonfinite=True), label="x")
    y = data.draw(labels_for(x.shape[0], max_classes=4), label="y")
    stat = ClassMoments()
    order = np.argsort(-y, kind="stable")  # highest class first: the first chunk has the largest K
    by_class = [stat.chunk(x[order][y[order] == k], y[order][y[order] == k]) for k in np.unique(y)[::-1]]
    merged = stat.finalize(merge_all(stat, by_class))
    whole = stat.finalize(stat.chunk(x, y))
    assert_results_close(merged, whole, rtol=1e-10, atol=1e-9)


def test_constant_within_class_has_exact_zero_m2() -> None:
    x = np.array([[0.1, 3.0], [0.1, 3.0], [0.7, 3.0], [0.7, 3.0], [0.7, 3.0]])
    y = np.array([0, 0, 1, 1, 1])
    stat = ClassMoments()
    r = stat.finalize(stat.merge(stat.chunk(x[:3], y[:3]), stat.chunk(x[3:], y[3:])))
    np.testing.assert_array_equal(r.m2, 0.0)
    np.testing.assert_array_equal(r.mean, [[0.1, 0.7], [3.0, 3.0]])


def test_bad_labels_are_named() -> None:
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="found -1"):
        ClassMoments().chunk(x, np.array([0, -1, 1]))
    with pytest.raises(ValueError, match="label 3 is out of range for n_classes=2"):
        ClassMoments(n_classes=2).chunk(x, np.array([0, 3, 1]))
    with pytest.raises(ValueError, match="need the label"):
        ClassMoments().chunk(x)
    with pytest.raises(ValueError, match="n_classes must be a positive integer"):
        ClassMoments(n_classes=0)
