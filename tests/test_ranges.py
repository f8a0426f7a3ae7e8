"""Histogram ranges found from the data: robust to stray values, flagged when a given range misses the data."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.cli.describe_cmd import parse_range
from daskbatch.stats.ranges import TAIL, WIDEN

ROWS = 50_000


@pytest.fixture(scope="module")
def labelled() -> tuple[np.ndarray, np.ndarray]:
    """Feature 0 depends on a 3-class label; features 1-3 are noise of other shapes."""
    rng = np.random.default_rng(2024)
    y = rng.integers(0, 3, ROWS)
    x = np.column_stack([
        rng.normal(size=ROWS) + 0.8 * y,
        rng.lognormal(0.0, 1.0, ROWS),
        rng.standard_t(3, ROWS),
        rng.uniform(-1.0, 1.0, ROWS),
    ])
    return x, y


def test_a_single_extreme_value_changes_no_mi_and_no_median(labelled: tuple[np.ndarray, np.ndarray]) -> None:
    """The issue's case: one value of 1e9 once took feature 0's MI from 0.18 to 0 and its median to 7.8e6."""
    x, y = labelled
    clean = db.describe(da.from_array(x, chunks=(7_000, -1)), y)
    stray = x.copy()
    stray[12_345, 0] = 1e9
    hit = db.describe(da.from_array(stray, chunks=(7_000, -1)), y)
    assert clean.arrays.mi[0] > 0.1
    np.testing.assert_allclose(hit.mi, clean.mi, rtol=0.02)
    alpha = hit.provenance["sketch"]["alpha"]
    exact = np.quantile(x, 0.5, axis=0, method="inverted_cdf")
    np.testing.assert_allclose(hit.quantile(0.5), exact, rtol=alpha)
    np.testing.assert_allclose(clean.quantile(0.5), exact, rtol=alpha)
    # The stray value is kept, in the overflow count, and the maximum is still exact.
    assert hit.arrays.overflow[0] >= 1 and hit.arrays.max[0] == 1e9
    assert hit.arrays.hist_counts[0].sum() + hit.arrays.underflow[0] + hit.arrays.overflow[0] == ROWS
    # Nearly every bin is used, where min/max ranges put all but one value into one bin.
    assert np.count_nonzero(hit.arrays.hist_counts[0]) >= 60
    old = db.describe(stray, y, range="minmax")
    assert np.count_nonzero(old.arrays.hist_counts[0]) == 2 and old.arrays.mi[0] < 0.01


def test_found_ranges_span_the_tail_quantiles_widened(labelled: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = labelled
    s = db.describe(x, y, stats=("hist",))
    q = np.quantile(x, [TAIL, 1 - TAIL], axis=0, method="inverted_cdf")
    span = q[1] - q[0]
    lo = np.maximum(q[0] - WIDEN * span, x.min(axis=0))
    hi = np.minimum(q[1] + WIDEN * span, x.max(axis=0))
    alpha = s.provenance["sketch"]["alpha"]
    # Each tail quantile is within alpha of the exact one, and is widened by that bound
    # (alpha / (1 - alpha) of it) before the WIDEN of the span: 4 alpha covers both.
    tol = 4 * alpha * np.abs(q).max(axis=0)
    assert np.all(np.abs(s.arrays.hist_edges[:, 0] - lo) <= tol) and np.all(np.abs(s.arrays.hist_edges[:, -1] - hi) <= tol)
    # Uniform: clipped to the bulk, whose outer sketch buckets end within a factor gamma of the extrema.
    gamma = (1 + alpha) / (1 - alpha)
    x3 = x[:, 3]
    assert x3.min() * gamma <= s.arrays.hist_edges[3, 0] <= x3.min() and x3.max() <= s.arrays.hist_edges[3, -1] <= x3.max() * gamma
    assert np.all(s.out_of_range_fraction < 2 * TAIL + 0.001)
    assert s.provenance["range"] == "quantiles" and s.provenance["out_of_range"] == []


def test_minmax_keeps_the_extrema_and_nearly_constant_features_fall_back_to_them() -> None:
    x = np.zeros((5_000, 3))
    x[:3, 0] = [4.0, -2.0, 1.0]  # 99.94 % zeros: the tail quantiles span nothing
    x[:, 1] = np.arange(5_000.0)
    x[:, 2] = 7.5  # constant: numpy's (v - 0.5, v + 0.5)
    for range_ in (None, "minmax"):
        s = db.describe(x, stats="hist", bins=8, range=range_)
        np.testing.assert_array_equal(s.arrays.hist_edges[0], np.linspace(-2.0, 4.0, 9))
        np.testing.assert_array_equal(s.arrays.hist_edges[2], np.linspace(7.0, 8.0, 9))
    s = db.describe(x, stats="hist", bins=8, range="minmax")
    np.testing.assert_array_equal(s.arrays.hist_edges[1], np.linspace(0.0, 4_999.0, 9))
    assert s.provenance["range"] == "minmax" and "sketch" not in s.provenance["stats"]
    with pytest.raises(ValueError, match="'minmax' or None; got 'quantiles'"):
        db.describe(x, stats="hist", range="quantiles")


def test_a_range_that_misses_unscaled_data_warns_and_is_flagged() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4_000, 4)) * [1.0, 50.0, 3.0, 1e3] + [0.0, 0.0, 1e2, 0.0]
    with pytest.warns(db.RangeWarning, match=r"3 of 4 feature\(s\) have more than 1% .*f1 .*f2 .*f3"):
        s = db.describe(x, stats="hist", range=(-5.0, 5.0))
    assert s.provenance["out_of_range"] == ["f1", "f2", "f3"]
    assert s.arrays.out_of_range_fraction[0] < 0.01 and s.arrays.out_of_range_fraction[2] == 1.0
    expected = (np.sum(x < -5.0, axis=0) + np.sum(x > 5.0, axis=0)) / 4_000
    np.testing.assert_array_equal(s.out_of_range_fraction, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db.describe(x, stats="hist")  # ranges from the data: nothing to flag


def test_summary_quantiles_from_the_sketch_survive_save_and_load(tmp_path) -> None:
    rng = np.random.default_rng(3)
    x = np.column_stack([
        rng.lognormal(0.0, 2.5, 20_000),
        rng.pareto(1.2, 20_000),
        np.where(rng.random(20_000) < 0.3, 0.0, rng.standard_cauchy(20_000)),
    ])
    s = db.describe(da.from_array(x, chunks=(3_000, -1)), stats=("moments", "sketch"))
    assert s.hist_counts is None and s.sketch_counts is not None
    qs = np.linspace(0.01, 0.99, 25)
    exact = np.quantile(x, qs, axis=0, method="inverted_cdf").T
    np.testing.assert_allclose(s.quantile(qs), exact, rtol=0.01)
    back = db.load_summary(s.save(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(back.quantile(qs), s.quantile(qs))
    assert back.provenance["sketch"] == s.provenance["sketch"]
    assert list(back.to_dataframe()["50%"]) == list(s.quantile(0.5))
    with pytest.raises(ValueError, match="from histograms"):
        s.quantile(0.5, method="histogram")
    both = db.describe(x, stats=("hist",))
    assert not np.array_equal(both.quantile(qs, method="histogram"), both.quantile(qs))
    with pytest.raises(ValueError, match="method must be"):
        both.quantile(0.5, method="exact")


def test_cli_range_accepts_minmax() -> None:
    assert parse_range("minmax") == "minmax" and parse_range("-5:5") == (-5.0, 5.0) and parse_range(None) is None


def test_wide_data_without_room_for_the_sketch_fall_back_to_min_max_ranges(tmp_path) -> None:
    """2,000 features: not even the narrowest windowed sketch (4 kB a feature) fits a 576 MiB worker; describe,
    plan_describe and `daskbatch plan` take ranges from min and max, the last resort, instead of refusing."""
    from click.testing import CliRunner

    from daskbatch.cli import main
    from daskbatch.engine.planner import plan_describe
    from daskbatch.errors import PlanError

    x = np.random.default_rng(0).standard_normal((1000, 2000)).astype("float32")
    small = db.Resources(576 * 2**20)
    with pytest.raises(PlanError, match="sketch"):  # asked for explicitly, it is refused with a hint
        db.describe(x, stats=("moments", "hist", "sketch"), run=db.RunOptions(plan=small))
    with pytest.warns(db.RangeWarning, match=r"min and max, the last resort \(.*\): the quantile sketch .* does not fit"):
        s = db.describe(x, stats=("moments", "hist"), run=db.RunOptions(plan=small))
    assert s.provenance["range"] == "minmax" and "sketch" not in s.provenance["stats"]
    np.testing.assert_array_equal(s.hist_counts.sum(axis=1), 1000)
    assert "sketch" not in plan_describe(x, stats=("moments", "hist"), resources=small).stats
    db.synth(tmp_path / "wide.zarr", rows=1000, features=2000)
    out = CliRunner().invoke(main, ["plan", str(tmp_path / "wide.zarr"), "--memory", "600MiB", "--threads", "1"])
    assert out.exit_code == 0, out.output
    assert "the quantile sketch does not fit" in out.output and "the last resort" in out.output


def test_wide_data_keep_robust_ranges_with_a_windowed_sketch(tmp_path) -> None:
    """5,000 features on a 2 GiB worker: the whole sketch (221 kB a feature) does not fit, its window
    of 2,048 buckets per sign (33 kB) does, so describe keeps robust ranges instead of min and max."""
    import dask.array as da
    from click.testing import CliRunner

    from daskbatch.cli import main
    from daskbatch.engine.planner import plan_describe
    from daskbatch.planning.search import sketch_in_plan
    from daskbatch.stats import Sketch
    from daskbatch.stats.sketch import WINDOW
    from daskbatch.stats.sketch_windows import FOOTPRINT

    worker = db.Resources(2 * 2**30, threads_per_worker=1)
    wide = da.zeros((1_000_000, 5_000), chunks=(2_000, 5_000))
    plan = plan_describe(wide, resources=worker)
    assert sketch_in_plan(plan.stats)[1] == (WINDOW, "int64", Sketch.alpha) and "sketch" not in plan.stats
    # The sketch of every bucket: a merge task's two inputs and two results alone exceed the budget.
    assert 4 * FOOTPRINT.state(5_000, 64, None, None) > plan.budget_bytes
    assert sketch_in_plan(plan_describe(wide, stats=("moments", "sketch"), resources=worker).stats)[1] is not None
    # Run on 1,000 x 600 with room for a windowed sketch only: a stray value is detached, as on narrow data.
    x = np.random.default_rng(1).standard_normal((1000, 600))
    x[10, 3] = 1e9
    with warnings.catch_warnings():
        warnings.simplefilter("error", db.RangeWarning)
        s = db.describe(x, stats=("moments", "hist"), run=db.RunOptions(plan=db.Resources(768 * 2**20, threads_per_worker=1)))
    assert s.provenance["range"] != "minmax" and s.provenance["sketch"]["window"] == WINDOW
    assert s.arrays.overflow[3] == 1 and np.count_nonzero(s.arrays.hist_counts[3]) >= 30
    exact = np.quantile(x[:, 5], [0.25, 0.5, 0.75], method="inverted_cdf")
    np.testing.assert_allclose([s.quantile(q).iloc[5] for q in (0.25, 0.5, 0.75)], exact, rtol=0.01)
    db.synth(tmp_path / "wide.zarr", rows=1000, features=2000)
    out = CliRunner().invoke(main, ["plan", str(tmp_path / "wide.zarr"), "--memory", "768MiB", "--threads", "1"])
    assert out.exit_code == 0, out.output
    assert "a window of 1,024 buckets per sign in int32 (9.8 kB a feature, quantiles within 1.00%)" in out.output  # with its grid


@pytest.mark.parametrize("weight", [None, 2.0])
def test_out_of_range_share_weighs_as_the_histogram(weight) -> None:
    """With sample weights the share outside the range is of the values' weight, as the histogram counts it."""
    x = np.random.default_rng(3).normal(size=(200, 2))
    x[:20, 0] = np.inf  # 10 %: outside every range
    x[:3, 1] = 50.0  # 1.5 % outside the range given
    x[3:5, 1] = np.nan  # left out of the share
    w = None if weight is None else np.full(200, weight)
    with pytest.warns(db.errors.RangeWarning, match=r"^2 of 2 feature\(s\) .* range: f0 \(10.0%\), f1 \(1.5%\);"):
        s = db.describe(x, weights=w, range=(-10, 10), stats=("moments", "hist"))
    np.testing.assert_allclose(s.arrays.out_of_range_fraction, [20 / 200, 3 / 198], rtol=1e-12)
    assert s.provenance["out_of_range"] == ["f0", "f1"]
