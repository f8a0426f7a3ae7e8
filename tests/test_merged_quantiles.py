"""Quantiles of merged and updated summaries stay within the spread on data far from zero.

The parts' quantile histograms have ranges of their own and cannot be added;
the histograms share the parts' ranges (``like=``), so they narrow the sketch
instead. Without them the sketch alone is within 0.5 % of |v|: at 1013 ± 5
that is about 5, the whole spread.
"""

from __future__ import annotations

import numpy as np
import pytest

import daskbatch as db

QS = np.array([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(16)
    x = np.column_stack([1013 + 5 * rng.standard_normal(30_000), 290 + rng.standard_normal(30_000),
                         rng.standard_normal(30_000), -1e6 + rng.standard_normal(30_000)])
    return x


def _error_in_iqr(summary: db.Summary, x: np.ndarray) -> float:
    """The largest quantile error over QS and the features, in units of each feature's IQR."""
    got = summary.quantile(QS).to_numpy()
    exact = np.quantile(x, QS, axis=0, method="inverted_cdf").T
    iqr = np.subtract(*np.quantile(x, [0.75, 0.25], axis=0))
    return float(np.max(np.abs(got - exact) / iqr[:, None]))


def test_merge_of_parts_described_like_the_first(data: np.ndarray) -> None:
    first = db.describe(data[:10_000], stats=("moments", "hist"))
    parts = [first, *(db.describe(data[a : a + 10_000], stats=("moments", "hist"), run=db.RunOptions(like=first))
                      for a in (10_000, 20_000))]
    assert all("sketch" in p.provenance["stats"] for p in parts)  # like= keeps what merge needs
    merged = parts[0]
    for part in parts[1:]:
        merged = db.merge(merged, part)
    assert merged.quantile_counts is None  # the parts' quantile histograms do not add up
    assert _error_in_iqr(merged, data) <= 0.01
    assert _error_in_iqr(merged, data) < _error_in_iqr_of_sketch(merged, data) / 5


def _error_in_iqr_of_sketch(summary: db.Summary, x: np.ndarray) -> float:
    got = summary.quantile(QS, method="sketch").to_numpy()
    exact = np.quantile(x, QS, axis=0, method="inverted_cdf").T
    iqr = np.subtract(*np.quantile(x, [0.75, 0.25], axis=0))
    return float(np.max(np.abs(got - exact) / iqr[:, None]))


def test_update_keeps_quantiles_within_the_spread(data: np.ndarray) -> None:
    first = db.describe(data[:15_000], stats=("moments", "hist"))
    updated = db.update(first, data[15_000:])
    assert _error_in_iqr(updated, data) <= 0.01
