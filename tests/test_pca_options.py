"""PCA options users expect (whiten, inverse_transform, a variance fraction, the correlation matrix) against sklearn."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_wine
from sklearn.decomposition import PCA as SkPCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import daskbatch as db


@pytest.fixture(scope="module", params=["wine", "diabetes"])
def real(request: pytest.FixtureRequest) -> np.ndarray:
    loader = {"wine": load_wine, "diabetes": load_diabetes}[request.param]
    return loader().data.astype(np.float64)


def _summary(x: np.ndarray, rows: int) -> db.Summary:
    return db.describe(da.from_array(x, chunks=(rows, -1)), stats=["moments", "cov"], run=db.RunOptions(plan=None))


def _scores_close(ours: np.ndarray, ref: np.ndarray) -> None:
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("rows", [1000, 37])
def test_whiten_and_inverse_transform_equal_sklearn(real: np.ndarray, rows: int) -> None:
    s = _summary(real, rows)
    for whiten in (False, True):
        ours = db.pca(s, 4, whiten=whiten)
        ref = SkPCA(4, whiten=whiten, svd_solver="full").fit(real)
        _scores_close(ours.transform(real), ref.transform(real))
        z = ref.transform(real)
        _scores_close(ours.inverse_transform(z), ref.inverse_transform(z))
    if whiten:
        np.testing.assert_allclose(np.std(ours.transform(real), axis=0, ddof=1), 1.0, rtol=1e-9)


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.95, 0.999])
def test_variance_fraction_picks_sklearns_count(real: np.ndarray, fraction: float) -> None:
    ours = db.pca(_summary(real, 50), fraction)
    ref = SkPCA(fraction, svd_solver="full").fit(real)
    assert ours.n_components_ == ref.n_components_
    np.testing.assert_allclose(ours.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-9)


@pytest.mark.parametrize("rows", [1000, 29])
def test_correlation_pca_equals_standard_scaler_then_pca(real: np.ndarray, rows: int) -> None:
    ours = db.pca(_summary(real, rows), 5, correlation=True)
    ref = make_pipeline(StandardScaler(), SkPCA(5, svd_solver="full")).fit(real)
    sk = ref.named_steps["pca"]
    np.testing.assert_allclose(ours.explained_variance_, sk.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(ours.scale_, ref.named_steps["standardscaler"].scale_, rtol=1e-12)
    _scores_close(ours.transform(real), ref.transform(real))
    z = ref.transform(real)
    _scores_close(ours.inverse_transform(z), ref.inverse_transform(z))


def test_bad_options_are_one_line_errors() -> None:
    x = load_wine().data
    s = _summary(x, 100)
    with pytest.raises(ValueError, match=r"fraction of the variance must lie in \(0, 1\), got 1.5"):
        db.pca(s, 1.5)
    with pytest.raises(ValueError, match="needs the whole spectrum: method='eigh'"):
        db.pca(s, 0.9, method="eigsh")
    flat = np.column_stack([x, np.full(len(x), 3.0)])
    with pytest.raises(ValueError, match=r"constant feature\(s\) \['f13'\]"):
        db.pca(_summary(flat, 100), 2, correlation=True)


def test_project_step_records_whiten_and_scale(tmp_path) -> None:
    x = load_wine().data
    s = _summary(x, 60)
    plain, white = db.steps.project(db.pca(s, 3)), db.steps.project(db.pca(s, 3, whiten=True))
    assert plain.describe()["sha256"] != white.describe()["sha256"] and white.describe()["whiten"] is True
    out = db.transform(da.from_array(x, chunks=(60, -1)), [white], out=tmp_path / "z.zarr")
    ref = SkPCA(3, whiten=True, svd_solver="full").fit(x)
    _scores_close(np.asarray(db.open_dataset(out.path).x), ref.transform(x))
