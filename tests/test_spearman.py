"""Spearman rank correlation: within its stated bound of scipy.stats.spearmanr, exact on discrete data (issue 36)."""

from __future__ import annotations

import json
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import scipy.stats
import zarr

import daskbatch as db


def _mixed(rows: int, seed: int = 0) -> np.ndarray:
    """Correlated features of many shapes: normal, lognormal, far from zero, rounded, Poisson, Cauchy, uniform."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(rows, 4))
    return np.column_stack([
        z[:, 0], 0.5 * z[:, 0] + z[:, 1], np.exp(z[:, 2] + z[:, 0]), 1e6 + z[:, 3] + 0.3 * z[:, 1],
        np.round(2 * z[:, 1]), rng.poisson(3, rows) + (z[:, 0] > 1), rng.standard_cauchy(rows) + 3 * z[:, 2],
        rng.uniform(size=rows) + 0.2 * z[:, 3],
    ])


def _check(s: db.Summary, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The computed correlation is within its bound of scipy's; return the error and the bound."""
    got, bound = np.asarray(s.spearman), np.asarray(s.spearman_bound)
    error = np.abs(got - scipy.stats.spearmanr(x).statistic)
    assert np.all(error <= bound + 1e-12), f"error {error.max():.3g} outside its bound where {np.argwhere(error > bound)}"
    return error, bound


@pytest.mark.parametrize("chunks", [1, 7])
def test_within_its_bound_of_spearmanr(chunks: int) -> None:
    x = _mixed(30_000)
    s = db.describe(da.from_array(x, chunks=(-(-len(x) // chunks), -1)), stats=("moments", "spearman"))
    error, bound = _check(s, x)
    assert bound.max() < 0.02  # a bound that says something: 2 % of the correlation's range at worst
    assert error.max() < 1e-3
    discrete = [4, 5]  # rounded and Poisson: every distinct value kept, so the ranks are exact
    assert np.all(bound[np.ix_(discrete, discrete)] == 0)
    assert np.allclose(np.diagonal(np.asarray(s.spearman)), 1.0) and np.all(np.diagonal(bound) == 0)


@pytest.mark.filterwarnings("ignore::daskbatch.errors.SuspectValueWarning")  # s4's floor of 2: real, and flagged
def test_on_a_real_dataset() -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    x = sklearn_datasets.load_diabetes(scaled=False).data
    error, bound = _check(db.describe(x, stats=("spearman",)), x)
    assert bound.max() < 0.02


def test_ties_nan_rows_and_infinities() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5_000, 3))
    x[::7, 0] = 2.0  # a heavy tie in a continuous feature
    x[:50, 1] = np.inf
    x[50:80, 2] = -np.inf
    _check(db.describe(x, stats=("spearman",)), x)
    y = x.copy()
    y[::11, 1] = np.nan  # complete rows: the rows with a NaN leave the co-moments, not the ranks
    s = db.describe(y, stats=("spearman",))
    complete = y[~np.isnan(y).any(axis=1)]
    assert np.isfinite(np.asarray(s.spearman)).all()
    # ranks among each feature's own values, correlated over the complete rows: near scipy's on those rows
    assert np.abs(np.asarray(s.spearman) - scipy.stats.spearmanr(complete).statistic).max() < 0.01


def test_a_store_saved_loaded_and_at_the_cli(tmp_path: pytest.TempPathFactory) -> None:
    x = _mixed(6_000, seed=5).astype(np.float32)
    store = str(tmp_path / "x.zarr")
    zarr.create_array(store, shape=x.shape, chunks=(1_000, x.shape[1]), dtype="float32")[:] = x
    s = db.describe(store, stats=("moments", "spearman"))
    _check(s, x.astype(np.float64))
    s.save(str(tmp_path / "s.zarr"))
    loaded = db.load_summary(str(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(np.asarray(loaded.spearman), np.asarray(s.spearman))
    assert "spearman_bound" in s.to_xarray()
    out = subprocess.run([sys.executable, "-m", "daskbatch", "describe", store, "--stats", "spearman",
                          "--cluster", "threads", "--json", "-"], capture_output=True, text=True, check=True)
    np.testing.assert_allclose(np.asarray(json.loads(out.stdout)["spearman"], dtype=float), np.asarray(s.spearman),
                               rtol=0, atol=1e-12)


def test_merge_leaves_it_out_and_says_so() -> None:
    x = _mixed(4_000, seed=2)
    a, b = (db.describe(part, stats=("moments", "spearman")) for part in (x[:2_500], x[2_500:]))
    with pytest.warns(UserWarning, match="'spearman' is left out of the merged summary"):
        merged = db.merge(a, b)
    assert "spearman" not in merged.results and "spearman" not in merged.provenance["stats"]


def test_weights_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="spearman with sample weights is not implemented"):
        db.describe(np.ones((10, 2)), stats=("spearman",), weights=np.ones(10))
