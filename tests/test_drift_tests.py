"""Drift you can test (issue 36): KS with its error bound and p-value, chi2, Wasserstein-1, BH, compare without like=.

Every number is checked against scipy on the raw data the summaries were made from.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.stats

import daskbatch as db
from daskbatch.errors import RebinnedWarning

# New data reach outside the reference's ranges: that is drift, reported as out_of_range_change.
pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.RangeWarning")

DISTRIBUTIONS = (
    "normal",
    "normal at 100",
    "cauchy",
    "lognormal",
    "pareto",
    "poisson",
    "integers",
    "exponential",
    "uniform",
    "rounded normal",
)


def _draw(rng: np.random.Generator, n: int, shift: float) -> np.ndarray:
    """(n, 10): light and heavy tails (Cauchy, lognormal, Pareto), discrete ones, each moved by ``shift``."""
    return np.stack(
        [
            rng.normal(shift, 1.0, n),
            rng.normal(100.0 + shift, 1.0, n),
            rng.standard_cauchy(n) + shift,
            rng.lognormal(shift, 1.5, n),
            (rng.pareto(1.5, n) + 1.0) * (1.0 + shift),
            rng.poisson(3.0 + shift, n).astype(np.float64),
            rng.integers(0, 2000, n).astype(np.float64) + 100 * shift,
            rng.exponential(1.0 + shift, n),
            rng.uniform(shift, 1.0, n),
            np.round(rng.normal(shift, 1.0, n), 1),
        ],
        axis=1,
    )


@pytest.fixture(scope="module")
def samples() -> tuple[np.ndarray, np.ndarray, db.Summary]:
    """A reference sample, a shifted new one, and the reference's summary."""
    rng = np.random.default_rng(1)
    reference, new = _draw(rng, 20_000, 0.0), _draw(rng, 15_000, 0.1)
    return reference, new, db.describe(reference, run=db.RunOptions(feature_names=DISTRIBUTIONS))


@pytest.mark.parametrize("like", [True, False], ids=["like", "own-bins"])
def test_ks_within_its_bound_and_wasserstein_within_1pct(samples, like: bool) -> None:
    reference, new, ref = samples
    options = db.RunOptions(feature_names=DISTRIBUTIONS, like=ref if like else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drift = db.compare(ref, db.describe(new, run=options))
    assert any(issubclass(w.category, RebinnedWarning) for w in caught) is not like
    t = drift.to_dataframe()
    for j, name in enumerate(DISTRIBUTIONS):
        exact = scipy.stats.ks_2samp(reference[:, j], new[:, j])
        ks, bound = t["ks"].iloc[j], t["ks_error"].iloc[j]
        assert abs(ks - exact.statistic) <= bound + 1e-12, name
        assert t["ks_lower"].iloc[j] <= exact.statistic <= t["ks_upper"].iloc[j] + 1e-12, name
        assert bound <= 0.015, (
            name
        )  # a bound worth having: far under the 16-bin one of the histograms alone
        effective = len(reference) * len(new) / (len(reference) + len(new))
        assert t["ks_pvalue"].iloc[j] == pytest.approx(
            scipy.stats.kstwobign.sf(ks * np.sqrt(effective)), rel=1e-9
        )
        distance = scipy.stats.wasserstein_distance(reference[:, j], new[:, j])
        assert t["wasserstein"].iloc[j] == pytest.approx(distance, rel=0.01), name
    # Few distinct values (Poisson, rounded): every value is kept, so KS and Wasserstein are exact.
    for name in ("poisson", "rounded normal"):
        assert t.loc[name, "ks_error"] == 0


def test_compiled_sweep_equals_numpy(samples) -> None:
    # KS and Wasserstein come from a numba sweep; with the kernels switched off, from NumPy: the same.
    import dask

    reference, new, ref = samples
    later = db.describe(new, run=db.RunOptions(feature_names=DISTRIBUTIONS))
    columns = ["ks", "ks_lower", "ks_upper", "ks_pvalue", "wasserstein", "psi", "chi2"]
    with pytest.warns(RebinnedWarning):
        compiled = db.compare(ref, later).to_dataframe()[columns]
    with dask.config.set({"daskbatch.kernels": False}), pytest.warns(RebinnedWarning):
        plain = db.compare(ref, later).to_dataframe()[columns]
    np.testing.assert_allclose(compiled.to_numpy(), plain.to_numpy(), rtol=1e-12, atol=1e-15)


def test_chi2_matches_scipy_on_the_shared_bins(samples) -> None:
    reference, new, ref = samples
    drift = db.compare(
        ref, db.describe(new, run=db.RunOptions(feature_names=DISTRIBUTIONS, like=ref))
    )
    t = drift.to_dataframe()
    assert drift.rebin_error is None
    for j, name in enumerate(DISTRIBUTIONS):
        edges = ref.arrays.hist_edges[j]
        table = np.array(
            [
                [
                    np.sum(x[:, j] < edges[0]),
                    *np.histogram(x[:, j], bins=edges)[0],
                    np.sum(x[:, j] > edges[-1]),
                ]
                for x in (reference, new)
            ]
        )
        table = table[:, table.sum(axis=0) > 0]  # cells empty in both carry nothing
        stat, p, dof, _ = scipy.stats.chi2_contingency(table, correction=False)
        assert t["chi2"].iloc[j] == pytest.approx(stat, rel=1e-9), name
        assert t["chi2_pvalue"].iloc[j] == pytest.approx(p, rel=1e-6, abs=1e-300), name
        assert t["chi2_dof"].iloc[j] == dof


@pytest.mark.parametrize("rows", [400, 5_000])
def test_pvalues_are_calibrated_without_drift(rows: int) -> None:
    # 200 pairs without drift: 200 features of one reference and one new sample of the same law.
    # 400 rows keep every distinct value (exact KS); 5,000 rows read the sketch (KS within its bound).
    rng = np.random.default_rng(20)
    pairs = 200
    ref = db.describe(rng.normal(size=(rows, pairs)))
    drift = db.compare(
        ref, db.describe(rng.normal(size=(rows, pairs)), run=db.RunOptions(like=ref))
    )
    t = drift.to_dataframe()
    assert 0.03 <= float(np.mean(t["ks_pvalue"] < 0.05)) <= 0.07
    assert 0.03 <= float(np.mean(t["chi2_pvalue"] < 0.05)) <= 0.07


def test_drifted_share_with_benjamini_hochberg() -> None:
    rng = np.random.default_rng(5)
    reference = rng.normal(size=(3_000, 40))
    new = rng.normal(size=(3_000, 40))
    new[:, :10] += 0.3  # ten features drift
    ref = db.describe(reference)
    drift = db.compare(ref, db.describe(new, run=db.RunOptions(like=ref)))
    flagged = drift.drifted(alpha=0.05, test="ks")
    adjusted = scipy.stats.false_discovery_control(drift.to_dataframe()["ks_pvalue"], method="bh")
    np.testing.assert_array_equal(flagged.to_numpy(), adjusted <= 0.05)
    np.testing.assert_allclose(flagged.attrs["adjusted"], adjusted)
    assert flagged.iloc[:10].all() and flagged.mean() == flagged.sum() / 40
    # As scipy's p-values on the raw data decide, wherever they are not at the threshold (the KS
    # statistic here is within ks_error, about 0.001, of scipy's: p-values near 0.05 may cross it).
    raw = np.array([scipy.stats.ks_2samp(reference[:, j], new[:, j]).pvalue for j in range(40)])
    raw_adjusted = scipy.stats.false_discovery_control(raw, method="bh")
    clear = np.abs(np.log(raw_adjusted / 0.05)) > np.log(1.5)
    np.testing.assert_array_equal(flagged.to_numpy()[clear], (raw_adjusted <= 0.05)[clear])
    assert drift.drifted(0.05, "chi2").iloc[:10].all()
    line = f"drifted at 5 % (Benjamini-Hochberg): KS {flagged.sum()}, chi2 {drift.drifted(0.05, 'chi2').sum()} of 40"
    assert line in repr(drift)
    with pytest.raises(ValueError, match="test must be one of 'ks', 'chi2'; got 'psi'"):
        drift.drifted(test="psi")
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\); got 5"):
        drift.drifted(alpha=5)


def test_compare_without_like_rebins_and_says_so() -> None:
    rng = np.random.default_rng(8)
    reference, new = rng.normal(size=(20_000, 4)), rng.normal(0.2, 1.1, size=(20_000, 4))
    ref = db.describe(reference)
    shared = db.compare(ref, db.describe(new, run=db.RunOptions(like=ref))).to_dataframe()
    with pytest.warns(
        RebinnedWarning, match=r"new summary's cells were read on the reference summary's bin edges"
    ):
        drift = db.compare(ref, db.describe(new))
    t = drift.to_dataframe()
    assert drift.rebin_error is not None and (drift.rebin_error < 0.005).all()
    np.testing.assert_allclose(t["psi"], shared["psi"], rtol=0.05)
    assert np.all(np.abs(t["ks"] - shared["ks"]) <= t["ks_error"] + shared["ks_error"] + 1e-12)
    # And the other way round: a reference without histograms is rebinned onto the new one's edges.
    with pytest.warns(RebinnedWarning, match="the reference summary's cells"):
        back = db.compare(db.describe(reference, stats=("moments", "sketch")), db.describe(new))
    assert np.isfinite(back.to_dataframe()["psi"]).all()


def test_top_ranks_pvalues_smallest_first() -> None:
    rng = np.random.default_rng(6)
    reference, new = rng.normal(size=(4_000, 12)), rng.normal(size=(4_000, 12))
    new[:, [2, 7, 9]] += 0.4  # three features drift
    ref = db.describe(reference)
    drift = db.compare(ref, db.describe(new, run=db.RunOptions(like=ref)))
    for by in ("ks_pvalue", "chi2_pvalue"):
        assert set(drift.top(3, by=by).index) == {"f2", "f7", "f9"}, by
    assert set(drift.top(3, by="ks").index) == {"f2", "f7", "f9"}


@pytest.mark.filterwarnings("ignore::daskbatch.errors.CompleteRowsWarning")
def test_a_feature_without_values_gives_nan_and_no_runtime_warning() -> None:
    x = np.random.default_rng(4).normal(size=(300, 2))
    x[:, 1] = np.nan  # no value at all in the second feature, on both sides
    ref = db.describe(x)
    t = db.compare(ref, db.describe(x + 0.5, run=db.RunOptions(like=ref))).to_dataframe()
    assert np.isnan(
        t.loc["f1", ["ks", "ks_pvalue", "chi2", "chi2_pvalue", "wasserstein", "psi"]]
    ).all()
    assert np.isfinite(
        t.loc["f0", ["ks", "ks_pvalue", "chi2", "chi2_pvalue", "wasserstein", "psi"]]
    ).all()
