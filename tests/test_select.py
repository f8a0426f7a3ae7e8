"""Feature selection from a summary equals scikit-learn's selectors on the same in-memory data."""

from __future__ import annotations

import dataclasses
import warnings
from fractions import Fraction
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn import feature_selection as fs
from sklearn.pipeline import make_pipeline

import daskbatch as db
from daskbatch.cli import main
from daskbatch.planning.plan import Resources
from daskbatch.planning.search import plan_chunks
from daskbatch.selection import _chi2 as chi2
from daskbatch.selection import _f_classif as f_classif

STATS = ["moments", "cov", "mi", "class_moments"]


def sk(func, *args):  # noqa: ANN001, ANN202 - sklearn warns about constant features; we compare values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args)


def classification(rows: int = 600, seed: int = 0, n_classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Continuous features: informative ones, a duplicate (exact ties), a constant, class-constant."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, rows)
    x = rng.normal(size=(rows, 12)) * rng.uniform(0.5, 3, 12) + rng.uniform(-5, 5, 12)
    x[:, 0] += 0.8 * y
    x[:, 3] -= 0.3 * y
    x[:, 5] += 0.1 * (y == 1)
    x[:, 7] = x[:, 0]  # a duplicate: the same F bit for bit, a tie
    x[:, 9] = 4.0  # constant: F = p = NaN
    x[:, 10] = 1e3 + x[:, 10] * 1e-3  # small variance, large offset
    return x, y


def counts_data(rows: int = 500, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative counts (chi2's domain), some depending on the class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, rows)
    x = rng.poisson(2.0, size=(rows, 8)).astype(np.float64)
    x[:, 1] += rng.poisson(1.0 + y)
    x[:, 4] += 2 * (y == 2)
    x[:, 6] = x[:, 1]
    return x, y


def summarize(x: np.ndarray, y: np.ndarray, *, chunk: int = 97, by_class: bool = True) -> db.Summary:
    """Describe chunked data; sorted by class, most chunks miss most classes."""
    if by_class:
        order = np.argsort(y, kind="stable")
        x, y = x[order], y[order]
    return db.describe(da.from_array(x, chunks=(chunk, -1)), da.from_array(y, chunks=chunk), stats=STATS, run=db.RunOptions(plan=None))


@pytest.fixture(scope="module")
def clf() -> tuple[np.ndarray, np.ndarray, db.Summary]:
    x, y = classification()
    return x, y, summarize(x, y)


@pytest.fixture(scope="module")
def counts() -> tuple[np.ndarray, np.ndarray, db.Summary]:
    x, y = counts_data()
    return x, y, summarize(x, y)


# ------------------------------------------------------------------ scores


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_classes", [2, 5])
def test_f_equals_f_classif(seed: int, n_classes: int) -> None:
    x, y = classification(seed=seed, n_classes=n_classes)
    s = summarize(x, y, chunk=53)
    f, p = f_classif(s)
    f_ref, p_ref = sk(fs.f_classif, x, y)
    assert np.isnan(f[9]) and np.isnan(p[9]) and np.isnan(f_ref[9])  # the constant feature, as sklearn
    good = np.arange(x.shape[1]) != 10
    np.testing.assert_allclose(f[good], f_ref[good], rtol=1e-10, atol=0, equal_nan=True)
    # p underflows towards 0 for strong features: compare in relative terms where it is representable.
    np.testing.assert_allclose(p[good], p_ref[good], rtol=1e-10, atol=1e-300, equal_nan=True)
    assert f[0] == f[7]  # duplicated feature: an exact tie
    # Feature 10 (1e3 + 1e-3 noise): sklearn's sum(x**2) - sum(x)**2 / n cancels; ours stays near
    # the exact value (limited by class means stored as plain float64: |mean| / spread ~ 1e6).
    exact = exact_f(x[:, 10], y)
    assert abs(f[10] - exact) <= 1e-8 * exact < abs(f_ref[10] - exact)


def exact_f(col: np.ndarray, y: np.ndarray) -> float:
    """One-way ANOVA F in exact rational arithmetic."""
    groups = [[Fraction(float(v)) for v in col[y == k]] for k in np.unique(y)]
    n = sum(len(g) for g in groups)
    means = [sum(g, Fraction(0)) / len(g) for g in groups]
    grand = sum((m * len(g) for g, m in zip(groups, means, strict=True)), Fraction(0)) / n
    between = sum((len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True)), Fraction(0))
    within = sum((sum(((v - m) ** 2 for v in g), Fraction(0)) for g, m in zip(groups, means, strict=True)),
                 Fraction(0))
    return float((between / (len(groups) - 1)) / (within / (n - len(groups))))


def test_f_for_features_constant_within_each_class() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 200)
    x = np.stack([2.0 * y, rng.normal(size=200), np.zeros(200)], axis=1)
    f, p = f_classif(summarize(x, y, chunk=31))
    f_ref, p_ref = sk(fs.f_classif, x, y)
    np.testing.assert_array_equal(f[[0, 2]], f_ref[[0, 2]])  # inf (no within-class spread) and NaN
    np.testing.assert_array_equal(p[[0, 2]], p_ref[[0, 2]])
    assert f[0] == np.inf and p[0] == 0.0


def test_chi2_equals_sklearn(counts) -> None:  # noqa: ANN001
    x, y, s = counts
    c, p = chi2(s)
    c_ref, p_ref = fs.chi2(x, y)
    np.testing.assert_allclose(c, c_ref, rtol=1e-10, atol=0)
    np.testing.assert_allclose(p, p_ref, rtol=1e-10, atol=1e-300)


def test_chi2_names_negative_features(clf) -> None:  # noqa: ANN001
    _, _, s = clf
    with pytest.raises(ValueError, match=r"chi2 needs non-negative features; negative values in f0 \(min -"):
        db.select(s, score="chi2")


def test_missing_statistics_are_named() -> None:
    x, y = classification(rows=100)
    s = db.describe(x, y, stats=["moments"], run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="needs per-class moments: describe.*class_moments"):
        db.select(s, score="f")
    with pytest.raises(ValueError, match="score 'mi' needs the joint histograms"):
        db.select(s, score="mi")
    with pytest.raises(ValueError, match="max_corr and mrmr need correlations"):
        db.select(s, score="variance", max_corr=0.9)
    s = db.describe(x, y, stats=STATS, run=db.RunOptions(plan=None))
    with pytest.raises(ValueError, match="mode 'fdr' needs p-values; score 'mi' has none"):
        db.select(s, score="mi", mode="fdr")
    with pytest.raises(ValueError, match="k must be a non-negative integer or 'all', got -1"):
        db.select(s, param=-1)
    with pytest.raises(ValueError, match="score 'mrmr' .* use mode 'k' or 'percentile'"):
        db.select(s, score="mrmr", mode="fpr")
    with pytest.raises(ValueError, match="percentile must be in"):
        db.select(s, mode="percentile", param=120)


# ---------------------------------------------------------- equal to sklearn


def _both(name: str, data) -> tuple[np.ndarray, np.ndarray, db.Summary, object]:  # noqa: ANN001
    x, y, s = data
    return x, y, s, {"f": fs.f_classif, "chi2": fs.chi2}[name]


@pytest.mark.parametrize("score", ["f", "chi2"])
@pytest.mark.parametrize("k", [0, 1, 3, 6, 7, "all"])
def test_k_equals_select_k_best(score: str, k, clf, counts) -> None:  # noqa: ANN001
    x, y, s, func = _both(score, clf if score == "f" else counts)
    got = db.select(s, score=score, mode="k", param=k)
    want = sk(fs.SelectKBest(func, k=k).fit, x, y).get_support()
    np.testing.assert_array_equal(got.selected, want)


def test_ties_break_as_select_k_best(clf) -> None:  # noqa: ANN001
    x, y, s = clf
    f = db.select(s, param="all").score
    k = int((f > f[0]).sum()) + 1  # room for only one of the tied pair f0 / f7
    got = db.select(s, param=k)
    want = sk(fs.SelectKBest(fs.f_classif, k=k).fit, x, y).get_support()
    np.testing.assert_array_equal(got.selected, want)
    assert got.selected[7] and not got.selected[0]  # the later of equal scores wins, as sklearn
    assert got.reason[0] == f"not in top k={k}"
    assert got.rank[7] == k and got.rank[0] == k + 1


@pytest.mark.parametrize("score", ["f", "chi2"])
@pytest.mark.parametrize("percentile", [0, 10, 25, 50, 62.5, 100])
def test_percentile_equals_select_percentile(score: str, percentile: float, clf, counts) -> None:  # noqa: ANN001
    x, y, s, func = _both(score, clf if score == "f" else counts)
    got = db.select(s, score=score, mode="percentile", param=percentile)
    want = sk(fs.SelectPercentile(func, percentile=percentile).fit, x, y).get_support()
    np.testing.assert_array_equal(got.selected, want)


@pytest.mark.parametrize("score", ["f", "chi2"])
@pytest.mark.parametrize(("mode", "selector"), [("fpr", fs.SelectFpr), ("fdr", fs.SelectFdr), ("fwe", fs.SelectFwe)])
@pytest.mark.parametrize("alpha", [1e-6, 0.01, 0.05, 0.5, 1.0])
def test_p_modes_equal_sklearn(score: str, mode: str, selector, alpha: float, clf, counts) -> None:  # noqa: ANN001
    x, y, s, func = _both(score, clf if score == "f" else counts)
    got = db.select(s, score=score, mode=mode, param=alpha)
    want = sk(selector(func, alpha=alpha).fit, x, y).get_support()
    np.testing.assert_array_equal(got.selected, want)
    dropped = np.flatnonzero(~got.selected)
    assert all(got.reason[i].startswith("p=") for i in dropped)
    assert all(got.reason[i] == "" for i in got.indices)


@pytest.mark.parametrize("threshold", [0.0, 0.5, 1.0, 4.0])
def test_min_variance_equals_variance_threshold(threshold: float, clf) -> None:  # noqa: ANN001
    x, y, s = clf
    got = db.select(s, score="variance", param="all", min_variance=threshold)
    want = fs.VarianceThreshold(threshold).fit(x).get_support()
    np.testing.assert_array_equal(got.selected, want)
    assert got.reason[9] == f"variance 0 not above min_variance {threshold:g}"


def test_variance_score_uses_ddof0(clf) -> None:  # noqa: ANN001
    x, _, s = clf
    np.testing.assert_allclose(db.select(s, score="variance", param="all").score, x.var(axis=0), rtol=1e-12, atol=1e-15)
    assert s.provenance["ddof"] == 1  # the summary's own variance divides by n - 1


def test_min_variance_then_k_equals_a_pipeline(clf) -> None:  # noqa: ANN001
    x, y, s = clf
    got = db.select(s, score="f", mode="k", param=4, min_variance=1.0)
    pipe = sk(make_pipeline(fs.VarianceThreshold(1.0), fs.SelectKBest(fs.f_classif, k=4)).fit, x, y)
    first = pipe[0].get_support()
    want = np.zeros_like(first)
    want[np.flatnonzero(first)[pipe[1].get_support()]] = True
    np.testing.assert_array_equal(got.selected, want)


def test_min_variance_then_fdr_counts_only_survivors(clf) -> None:  # noqa: ANN001
    x, y, s = clf
    got = db.select(s, score="f", mode="fdr", param=0.2, min_variance=1.0)
    keep = fs.VarianceThreshold(1.0).fit(x).get_support()
    inner = sk(fs.SelectFdr(fs.f_classif, alpha=0.2).fit, x[:, keep], y).get_support()
    want = np.zeros_like(keep)
    want[np.flatnonzero(keep)[inner]] = True
    np.testing.assert_array_equal(got.selected, want)


# ---------------------------------------------------------- correlation, mRMR


def correlated() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    low, high = rng.integers(0, 2, 2000), rng.integers(0, 2, 2000)
    y = 2 * high + low  # two independent bits of the class
    a = rng.normal(size=2000) + 3.0 * low
    x = np.stack([
        a + 0.05 * rng.normal(size=2000),  # f0: a near copy of f1, a little less relevant
        a,  # f1: knows the low bit
        rng.normal(size=2000) + 3.0 * high,  # f2: knows the high bit, uncorrelated with f0/f1/f4
        rng.normal(size=2000),  # f3: noise
        -a + 0.01 * rng.normal(size=2000),  # f4: anti-correlated near copy
    ], axis=1)
    return x, y


def test_max_corr_keeps_the_more_relevant() -> None:
    x, y = correlated()
    s = summarize(x, y, by_class=False)
    got = db.select(s, score="f", param="all", max_corr=0.9)
    f = sk(fs.f_classif, x, y)[0]
    best = int(np.argmax(f[[0, 1, 4]]))
    kept = [0, 1, 4][best]
    assert got.selected.tolist() == [i in (kept, 2, 3) for i in range(5)]
    for i in {0, 1, 4} - {kept}:
        r = abs(np.corrcoef(x[:, i], x[:, kept])[0, 1])
        assert got.reason[i] == f"|corr| {r:.2f} with f{kept} (more relevant)"


def test_mrmr_avoids_redundant_copies() -> None:
    x, y = correlated()
    s = summarize(x, y, by_class=False)
    by_mi = db.select(s, score="mi", param=2)
    assert set(by_mi.indices) <= {0, 1, 4}  # plain MI takes two copies of the same signal
    got = db.select(s, score="mrmr", param=2)
    assert 2 in got.indices and len(set(got.indices) & {0, 1, 4}) == 1
    first = int(np.argmax(s.mi))
    assert got.rank[first] == 1 and got.score[first] == pytest.approx(s.arrays.mi[first])
    second = int(np.flatnonzero(got.rank == 2)[0])
    assert got.score[second] == pytest.approx(s.arrays.mi[second] - abs(s.arrays.corr[second, first]))
    assert sorted(got.rank.tolist()) == [1, 2, 3, 4, 5]
    assert got.reason[3] == "not among the 2 picked by mRMR"


def test_tiled_correlations_give_the_same_selection(tmp_path: Path) -> None:
    x, y = correlated()
    x = np.concatenate([x, np.random.default_rng(2).normal(size=(x.shape[0], 7))], axis=1)
    plan = _tiling_plan(x.shape)
    tiled = db.describe(x, y, stats=STATS, run=db.RunOptions(plan=plan, cov_out=tmp_path / "cov.zarr"))
    assert tiled.corr is None and tiled.provenance["tiled_cov"]["tile"] < x.shape[1]
    whole = db.describe(x, y, stats=STATS, run=db.RunOptions(plan=None))
    for kw in ({"score": "f", "param": "all", "max_corr": 0.9}, {"score": "mrmr", "param": 4}):
        a, b = db.select(tiled, **kw), db.select(whole, **kw)
        np.testing.assert_array_equal(a.selected, b.selected)
        assert a.reason == b.reason


def _tiling_plan(shape: tuple[int, int]):  # noqa: ANN202
    """A plan that computes the covariance in tiles of 5 features (as a tight budget would)."""
    plan = plan_chunks(shape, 8, (500, shape[1]), Resources(2**30), stats=("moments", "cov"), split_every=2,
                       memory_fraction=1.0, reserved_bytes=0)
    return dataclasses.replace(plan, feature_tile=5)


# ------------------------------------------------------------------ storage


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_save_and_load_round_trip(tmp_path: Path, suffix: str, clf) -> None:  # noqa: ANN001
    _, _, s = clf
    names = tuple(f"feat, {i}" if i % 3 else f"g{i}" for i in range(s.n_features))  # commas survive
    s = dataclasses.replace(s, feature_names=names)
    for sel in (db.select(s, score="f", mode="fdr", param=0.05, min_variance=0.5),
                db.select(s, score="mi", param=3, max_corr=0.5)):
        back = db.load_selection(sel.save(tmp_path / f"sel{suffix}"))
        assert back.feature_names == sel.feature_names and back.reason == sel.reason
        np.testing.assert_array_equal(back.score, sel.score)  # NaN included, bit for bit
        if sel.pvalue is None:
            assert back.pvalue is None
        else:
            np.testing.assert_array_equal(back.pvalue, sel.pvalue)
        np.testing.assert_array_equal(back.rank, sel.rank)
        np.testing.assert_array_equal(back.selected, sel.selected)
        assert (back.score_name, back.mode, back.param, back.min_variance, back.max_corr) == (
            sel.score_name, sel.mode, sel.param, sel.min_variance, sel.max_corr)
    df = sel.to_dataframe()
    assert list(df.columns) == ["score", "rank", "selected", "reason"] and df.index.name == "feature"
    assert sel.selected_names == tuple(names[i] for i in sel.indices)


@pytest.mark.parametrize("content", ["{not json", '{"feature_names": ["a"]}', b"\xff\xfe\x00binary", "folder"])
def test_loading_what_is_not_a_selection_says_so_in_one_line(tmp_path: Path, content) -> None:  # noqa: ANN001
    path = tmp_path / "sel.json"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match="is not a saved selection") as info:
        db.load_selection(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_cli_select_writes_the_api_selection(tmp_path: Path, counts) -> None:  # noqa: ANN001
    _, _, s = counts
    s.save(tmp_path / "s.zarr")
    out = tmp_path / "sel.csv"
    r = CliRunner().invoke(main, ["select", str(tmp_path / "s.zarr"), "--score", "chi2", "--k", "3",
                                  "--min-variance", "0.1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 of 8 features selected by chi2 (k=3)" in r.output
    want = db.select(s, score="chi2", param=3, min_variance=0.1)
    got = db.load_selection(out)
    np.testing.assert_array_equal(got.selected, want.selected)
    assert got.reason == want.reason
    r = CliRunner().invoke(main, ["select", str(tmp_path / "s.zarr"), "--fdr", "0.1", "--fwe", "0.1"])
    assert r.exit_code == 2 and "give one of" in r.output
    r = CliRunner().invoke(main, ["select", str(tmp_path / "s.zarr"), "--score", "f", "--fdr", "0.1"])
    assert r.exit_code == 0 and "by f (fdr=0.1)" in r.output
