"""PCA from a summary's covariance equals sklearn's PCA(svd_solver="full") on the same data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import array_api_strict
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from sklearn.decomposition import PCA as SkPCA

import daskbatch as db
from daskbatch.planning.plan import Resources
from daskbatch.planning.search import plan_chunks


def data(rows: int = 700, d: int = 9, seed: int = 0) -> np.ndarray:
    """Correlated features with distinct variances, offsets and one constant column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, d)) @ (rng.normal(size=(d, d)) * np.linspace(3, 0.2, d)) + rng.uniform(-50, 50, d)
    x[:, 4] = 7.0
    return x


def assert_matches_sklearn(p: db.PCA, x: np.ndarray, k: int) -> None:
    ref = SkPCA(k, svd_solver="full").fit(x)
    scale = ref.explained_variance_[0]
    np.testing.assert_allclose(p.explained_variance_, ref.explained_variance_, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(p.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-9, atol=1e-13)
    # A zero eigenvalue (the constant feature) comes back as ~1e-16 * the largest: its square root
    # is ~1e-8 of the largest singular value (the covariance squares the condition number).
    np.testing.assert_allclose(p.singular_values_, ref.singular_values_, rtol=1e-9, atol=1e-7 * ref.singular_values_[0])
    np.testing.assert_allclose(p.mean_, ref.mean_, rtol=1e-13, atol=1e-12)
    # Same sign convention as sklearn's svd_flip: the components agree entry by entry.
    np.testing.assert_allclose(p.components_, ref.components_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(p.transform(x), ref.transform(x), rtol=0, atol=1e-7 * np.sqrt(scale))


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("method", ["eigh", "eigsh"])
def test_pca_equals_sklearn(ddof: int, method: str) -> None:
    x = data()
    s = db.describe(da.from_array(x, chunks=(101, -1)), stats=["moments", "cov", db.Moments(ddof=ddof)], run=db.RunOptions(plan=None))
    for k in (1, 3, 8):
        p = db.pca(s, k, method=method)
        assert p.method == method and p.n_components_ == k and p.components_.shape == (k, x.shape[1])
        assert_matches_sklearn(p, x, k)
    if method == "eigh":
        assert_matches_sklearn(db.pca(s, 9), x, 9)  # every component: ratios sum to 1
        assert db.pca(s, 9).explained_variance_ratio_.sum() == pytest.approx(1.0, abs=1e-12)


def test_tiled_covariance_uses_lanczos(tmp_path: Path) -> None:
    x = data(rows=500, d=23, seed=3)
    plan = plan_chunks(x.shape, 8, (100, x.shape[1]), Resources(2**30), stats=("moments", "cov"),
                       split_every=2, memory_fraction=1.0, reserved_bytes=0)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=dataclasses.replace(plan, feature_tile=6), cov_out=tmp_path / "cov.zarr"))
    assert s.cov is None and s.provenance["tiled_cov"]["tile"] == 6
    p = db.pca(s, 4)
    assert p.method == "eigsh" and p.n_samples_ == 500
    assert_matches_sklearn(p, x, 4)
    with pytest.raises(ValueError, match="covariance is tiled"):
        db.pca(s, 4, method="eigh")


def test_transform_takes_any_array_api_block() -> None:
    x = data(rows=200)
    p = db.pca(db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None)), 3)
    block = array_api_strict.asarray(x[50:80].astype(np.float32))
    got = p.transform(block)
    assert type(got) is type(block) and got.dtype == array_api_strict.float64
    np.testing.assert_allclose(np.asarray(got), (x[50:80].astype(np.float32) - p.mean_) @ p.components_.T, rtol=1e-12)
    with pytest.raises(ValueError, match=r"expected \(rows, 9\)"):
        p.transform(x[:, :4])


def test_bad_requests_are_named() -> None:
    x = data(rows=50)
    s = db.describe(x, stats=["moments"], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="pca needs the covariance"):
        db.pca(s, 2)
    s = db.describe(x, stats=["moments", "cov"], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match=r"n_components must be an integer in \[1, 9\]"):
        db.pca(s, 10)
    with pytest.raises(ValueError, match=r"\[1, 8\] for method 'eigsh'"):
        db.pca(s, 9, method="eigsh")


def test_fitted_attributes_end_in_an_underscore_and_tabulate() -> None:
    # scikit-learn's convention (issue 34): components_, explained_variance_, ...; the old names are gone.
    rng = np.random.default_rng(5)
    x = pd.DataFrame(rng.normal(size=(400, 3)) @ rng.normal(size=(3, 3)), columns=["a", "b", "c"])
    p = db.pca(db.describe(x, stats=("moments", "cov")), 2)
    for old in ("components", "explained_variance", "explained_variance_ratio", "singular_values", "mean",
                "n_samples", "scale", "n_components"):
        assert not hasattr(p, old) and hasattr(p, old + "_"), old
    table = p.to_dataframe()
    assert list(table.index) == ["pc1", "pc2"] and table.index.name == "component"
    np.testing.assert_array_equal(table["explained_variance_ratio"], p.explained_variance_ratio_)
    np.testing.assert_array_equal(table.loc["pc2", ["a", "b", "c"]].to_numpy(dtype=float), p.components_[1])
