"""Scaling and imputation steps against their scikit-learn counterparts on sklearn's bundled data."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.impute import SimpleImputer
from sklearn.preprocessing import MinMaxScaler, QuantileTransformer, RobustScaler, StandardScaler

import daskbatch as db

# diabetes's s4 (f7) holds 28 of its 442 values at its minimum: named (SuspectValueWarning, tested in
# test_pairwise_cov.py), counted as data; not what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning")

@pytest.fixture(scope="module", params=["breast_cancer", "diabetes"])
def real(request: pytest.FixtureRequest) -> np.ndarray:
    loader = {"breast_cancer": load_breast_cancer, "diabetes": load_diabetes}[request.param]
    return loader().data.astype(np.float64)


def _transformed(x: np.ndarray, step, tmp_path: Path, rows: int) -> np.ndarray:
    tmp_path.mkdir(parents=True, exist_ok=True)
    report = db.transform(da.from_array(x, chunks=(rows, -1)), [step], out=tmp_path / f"out-{rows}.zarr")
    return np.asarray(db.open_dataset(report.path).x)


@pytest.mark.parametrize("rows", [10_000, 97])
def test_standardize_equals_standard_scaler_by_default(real: np.ndarray, rows: int, tmp_path: Path) -> None:
    s = db.describe(da.from_array(real, chunks=(rows, -1)), stats=("moments",))  # ddof=1 summary
    ours = _transformed(real, db.steps.standardize(s), tmp_path, rows)
    np.testing.assert_allclose(ours, StandardScaler().fit_transform(real), rtol=1e-10, atol=1e-12)
    own = db.steps.standardize(s, ddof=None)  # the summary's own std (ddof=1)
    np.testing.assert_allclose(own.std, real.std(axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("rows", [10_000, 97])
@pytest.mark.parametrize("feature_range", [(0.0, 1.0), (-1.0, 3.0)])
def test_minmax_equals_minmax_scaler(real: np.ndarray, rows: int, feature_range, tmp_path: Path) -> None:
    x = np.column_stack([real, np.full(len(real), 4.0)])  # a constant feature maps to the range's low end
    s = db.describe(da.from_array(x, chunks=(rows, -1)), stats=("moments",))
    ours = _transformed(x, db.steps.minmax(s, feature_range), tmp_path, rows)
    np.testing.assert_allclose(ours, MinMaxScaler(feature_range).fit_transform(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [10_000, 97])
def test_robust_scaler_within_quantile_accuracy(real: np.ndarray, rows: int, tmp_path: Path) -> None:
    s = db.describe(da.from_array(real, chunks=(rows, -1)))
    step = db.steps.robust(s)
    ref = RobustScaler().fit(real)
    # The summary's quantiles are within 1 % of the IQR of the exact ones (README "Numbers you can
    # trust"), read at the exact rank as numpy's "inverted_cdf"; RobustScaler interpolates linearly
    # between neighbouring values, which on a few hundred rows differs by up to one value's gap.
    q25, q50, q75 = np.percentile(real, [25, 50, 75], axis=0, method="inverted_cdf")
    iqr = q75 - q25
    assert np.all(np.abs(step.center - q50) <= 0.01 * iqr)
    assert np.all(np.abs(step.scale - iqr) <= 0.02 * iqr)
    gap = np.max(np.abs(np.percentile(real, [25, 50, 75], axis=0, method="linear")
                        - np.stack([q25, q50, q75])), axis=0)
    assert np.all(np.abs(step.center - ref.center_) <= 0.01 * iqr + gap)
    ours, exact = _transformed(real, step, tmp_path, rows), ref.transform(real)
    bound = (0.01 * iqr + gap) / ref.scale_ + (0.02 * iqr + 2 * gap) / ref.scale_ * np.abs(exact)
    assert np.all(np.abs(ours - exact) <= bound + 1e-12)


@pytest.mark.parametrize("rows", [10_000, 97])
def test_quantile_transform_uniform_within_rank_accuracy(real: np.ndarray, rows: int, tmp_path: Path) -> None:
    s = db.describe(da.from_array(real, chunks=(rows, -1)))
    ours = _transformed(real, db.steps.quantile_transform(s, n_quantiles=200), tmp_path, rows)
    exact = QuantileTransformer(n_quantiles=200).fit_transform(real)
    assert ours.min() >= 0 and ours.max() <= 1
    tol = 0.01 + 1.0 / len(real)  # the quantiles' rank bound, plus one sample of the reference's interpolation
    for j in range(real.shape[1]):
        col = np.sort(real[:, j])
        below = np.searchsorted(col, real[:, j], side="left") / len(col)  # F(x-)
        upto = np.searchsorted(col, real[:, j], side="right") / len(col)  # F(x)
        # Every output is a value of the feature's CDF: within the jump of its value, ties included.
        assert np.all((ours[:, j] >= below - tol) & (ours[:, j] <= upto + tol)), j
        if np.max(upto - below) < 0.01:  # no value repeated in 1 % of the rows: sklearn's value itself
            assert np.max(np.abs(ours[:, j] - exact[:, j])) <= tol, j
        order = np.argsort(real[:, j], kind="stable")
        assert np.all(np.diff(ours[order, j]) >= -1e-12)  # monotone in the input


def test_quantile_transform_normal(real: np.ndarray, tmp_path: Path) -> None:
    s = db.describe(real)
    ours = _transformed(real, db.steps.quantile_transform(s, output="normal", n_quantiles=200), tmp_path, 100)
    exact = QuantileTransformer(n_quantiles=200, output_distribution="normal").fit_transform(real)
    assert np.isfinite(ours).all() and np.abs(ours).max() <= 5.2  # clipped as scikit-learn's bound
    for j in range(real.shape[1]):
        col = np.sort(real[:, j])
        ties = np.max(np.unique(col, return_counts=True)[1]) / len(col)
        central = np.abs(exact[:, j]) < 2.0
        if ties < 0.01:
            assert np.max(np.abs(ours[central, j] - exact[central, j])) < 0.1, j


def test_log1p_and_impute(tmp_path: Path) -> None:
    x = load_diabetes().data + 1.0
    x[::17, 3] = np.nan
    x[5::23, 0] = np.nan
    np.testing.assert_array_equal(_transformed(x, db.steps.log1p(), tmp_path / "log", 64), np.log1p(x))
    s = db.describe(da.from_array(x, chunks=(64, -1)))
    mean = _transformed(x, db.steps.impute(s, "mean"), tmp_path / "mean", 64)
    np.testing.assert_allclose(mean, SimpleImputer(strategy="mean").fit_transform(x), rtol=1e-12)
    median = db.steps.impute(s, "median")
    kept = [x[~np.isnan(x[:, j]), j] for j in range(x.shape[1])]
    exact = np.array([np.percentile(v, 50, method="inverted_cdf") for v in kept])
    iqr = np.array([np.subtract(*np.percentile(v, [75, 25], method="inverted_cdf")) for v in kept])
    assert np.all(np.abs(median.values - exact) <= 0.01 * iqr)


def test_bad_step_arguments_are_one_line_errors() -> None:
    s = db.describe(load_diabetes().data)
    for call, message in [
        (lambda: db.steps.minmax(s, (1, 0)), "low < high"),
        (lambda: db.steps.robust(s, (75, 25)), "0 <= low < high <= 100"),
        (lambda: db.steps.quantile_transform(s, output="gaussian"), "'uniform' or 'normal'"),
        (lambda: db.steps.quantile_transform(s, n_quantiles=1), "integer >= 2"),
        (lambda: db.steps.impute(s, "mode"), "'mean' or 'median'"),
    ]:
        with pytest.raises(ValueError, match=message):
            call()


def test_steps_after_a_select_pick_their_features_by_name() -> None:
    x = load_diabetes().data
    s = db.describe(x)
    keep = [7, 2, 5]
    names = tuple(s.feature_names[i] for i in keep)
    for step in (db.steps.minmax(s), db.steps.robust(s), db.steps.quantile_transform(s, n_quantiles=50),
                 db.steps.impute(s), db.steps.standardize(s)):
        bound, out = db.steps.bind_all([db.steps.select(keep), step], s.feature_names)
        assert out == names
        np.testing.assert_array_equal(db.steps.apply_all(bound, x), step.apply(x)[:, keep])
    with pytest.raises(ValueError, match=r"minmax: the summary has no statistics for 1 input feature\(s\): zz"):
        db.steps.minmax(s).bind(("zz",))
