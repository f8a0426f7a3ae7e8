"""Pairwise-complete covariance, the complete-rows covariance's warning, and suspect (sentinel) values.

Issue "Trust on real data, round 2", items 5 and 6: one all-NaN column made every
covariance NaN without a word, 10 % NaN per feature left 12 % of the rows to the
covariance, and a −999 inside a feature's range was counted as data unremarked.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import array_api_strict
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main
from daskbatch.errors import CompleteRowsWarning, SuspectValueWarning
from daskbatch.stats import CoMoments

PAIRWISE = CoMoments(rows="pairwise")


def _with_nan(rows: int, features: int, fraction: float, *, offset: float = 0.0, seed: int = 0) -> np.ndarray:
    """Correlated normal data with ``fraction`` of each feature's values NaN, at random."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)) @ rng.normal(size=(features, features)) * 0.5 + offset
    x[rng.random(x.shape) < fraction] = np.nan
    return x


def _quiet_describe(x: object, **kwargs: object) -> db.Summary:
    """describe, with the complete-rows and suspect-value warnings (tested on their own) let through."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompleteRowsWarning)
        warnings.simplefilter("ignore", SuspectValueWarning)
        return db.describe(x, **kwargs)


def test_pairwise_equals_pandas_with_ten_percent_nan() -> None:
    """cov and corr of describe(CoMoments(rows='pairwise')) over dask chunks are pandas' to 1e-12."""
    x = _with_nan(20_000, 20, 0.10)
    s = db.describe(da.from_array(x, chunks=(1_500, 20)), stats=["moments", PAIRWISE])
    frame = pd.DataFrame(x)
    expected_cov, expected_corr = frame.cov().to_numpy(), frame.corr().to_numpy()
    np.testing.assert_allclose(s.cov, expected_cov, rtol=0, atol=1e-12 * np.abs(expected_cov).max())
    np.testing.assert_allclose(s.corr, expected_corr, rtol=0, atol=1e-12)
    mask = np.isfinite(x).astype(np.float64)
    assert s.cov_count == int((mask.T @ mask).min()) and s.provenance["cov_rows"] == "pairwise"
    np.testing.assert_allclose(s.mean, np.nanmean(x, axis=0), rtol=1e-13)


def test_pairwise_counts_and_merge_law() -> None:
    """Pair counts are mᵀm; any chunking and merge order gives one chunk's result; an empty chunk changes nothing."""
    x = _with_nan(3_000, 6, 0.2, seed=3)
    st = PAIRWISE
    whole = st.finalize(st.chunk(x))
    mask = np.isfinite(x).astype(np.float64)
    np.testing.assert_array_equal(whole.pair_counts, mask.T @ mask)
    rng = np.random.default_rng(0)
    for _ in range(5):
        cuts = np.sort(rng.choice(np.arange(1, len(x)), size=rng.integers(1, 6), replace=False))
        states = [st.chunk(part) for part in np.split(x, cuts)] + [st.chunk(x[:0])]
        rng.shuffle(states)
        left = states[0]
        for state in states[1:]:
            left = st.merge(left, state)
        right = states[-1]
        for state in states[-2::-1]:
            right = st.merge(state, right)
        for merged in (left, right):
            result = st.finalize(merged)
            np.testing.assert_array_equal(result.pair_counts, whole.pair_counts)
            np.testing.assert_allclose(result.cov, whole.cov, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(result.corr, whole.corr, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(result.mean, whole.mean, rtol=1e-12, atol=1e-14)


def test_pairwise_overflowing_variance_is_inf_as_complete_rows() -> None:
    """A feature whose squares overflow float64 has variance +inf (not NaN), its correlations NaN, as rows='complete'."""
    x = np.array([[1e200, 1.0], [-1e200, 2.0], [1e200, 4.0], [np.nan, 3.0]])
    pairwise, complete = PAIRWISE.finalize(PAIRWISE.chunk(x)), CoMoments().finalize(CoMoments().chunk(x))
    assert pairwise.cov[0, 0] == complete.cov[0, 0] == np.inf
    assert np.isnan(pairwise.corr[0, 1]) and pairwise.corr[1, 1] == 1.0
    near_max = np.column_stack([np.full(40, 1e307), np.arange(40.0)])  # its sum overflows, its mean does not
    near_max[3, 1] = np.nan
    result = PAIRWISE.finalize(PAIRWISE.chunk(near_max))
    np.testing.assert_allclose(result.mean, [1e307, np.nanmean(near_max[:, 1])], rtol=1e-15)
    assert result.cov[0, 0] == 0.0 and result.cov[0, 1] == 0.0


def test_pairwise_far_from_zero_is_exact_to_rounding() -> None:
    """1e8 + N(0, 1): within 1e-12 of the covariance of the exactly re-centred values (pandas on x - 1e8)."""
    x = _with_nan(20_000, 8, 0.10, offset=1e8, seed=5)
    st = PAIRWISE
    parts = np.array_split(x, 9)
    state = st.chunk(parts[0])
    for part in parts[1:]:
        state = st.merge(state, st.chunk(part))
    result = st.finalize(state)
    exact = pd.DataFrame(x - 1e8)  # Sterbenz: the same values, centred without rounding
    np.testing.assert_allclose(result.cov, exact.cov().to_numpy(), rtol=0,
                               atol=1e-12 * np.abs(exact.cov().to_numpy()).max())
    np.testing.assert_allclose(result.corr, exact.corr().to_numpy(), rtol=0, atol=1e-12)


def test_pairwise_through_the_array_api() -> None:
    """The pairwise state needs nothing beyond the array API standard (so CuPy too): array_api_strict agrees."""
    x = _with_nan(500, 4, 0.15, seed=9)
    xs = array_api_strict.asarray(x)
    st = PAIRWISE
    strict = st.finalize(st.merge(st.chunk(xs[:200, :]), st.chunk(xs[200:, :])))
    plain = st.finalize(st.merge(st.chunk(x[:200]), st.chunk(x[200:])))
    np.testing.assert_allclose(np.asarray(strict.cov), plain.cov, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(strict.corr), plain.corr, rtol=1e-14)


def test_one_all_nan_column() -> None:
    """Item 5: the default warns, naming the column and the option; pairwise gives pandas' corr(f0, f2)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10_000, 3))
    x[:, 1] = np.nan
    with pytest.warns(CompleteRowsWarning, match=r"only the 0 of 10,000 rows .*no finite value in f1.*rows='pairwise'"):
        complete = db.describe(x, stats="moments,cov")
    assert complete.cov_count == 0 and np.isnan(complete.arrays.corr).all()
    assert "no finite value in f1" in repr(complete) and "--cov pairwise" in repr(complete)
    pairwise = db.describe(x, stats=["moments", PAIRWISE])
    expected = pd.DataFrame(x).corr().to_numpy()
    np.testing.assert_allclose(pairwise.arrays.corr[[0, 0, 2], [0, 2, 2]], expected[[0, 0, 2], [0, 2, 2]], atol=1e-12)
    assert np.isnan(pairwise.arrays.corr[1]).all() and np.isnan(pairwise.arrays.corr[:, 1]).all()


def test_complete_rows_dropping_many_rows_warn_and_few_do_not() -> None:
    """10 % NaN in each of 20 features leaves ~12 % of the rows: said; 1 % NaN in one feature: nothing said."""
    x = _with_nan(20_000, 20, 0.10, seed=1)
    complete = int(np.isfinite(x).all(axis=1).sum())
    with pytest.warns(CompleteRowsWarning, match=rf"only the {complete:,} of 20,000 rows"):
        s = db.describe(x, stats="moments,cov")
    assert f"only the {complete:,} of 20,000 rows" in repr(s)
    y = _with_nan(20_000, 3, 0.0, seed=2)
    y[:200, 0] = np.nan
    s = db.describe(y, stats="moments,cov")  # filterwarnings=error: any warning fails
    assert "rows finite in every feature" not in repr(s)


def test_sentinel_inside_the_range_is_named() -> None:
    """Item 6: −999 in 5 % of a feature whose clean values reach ~−715, and 0 in 3 % of a positive one: named."""
    rng = np.random.default_rng(1)
    n = 100_000
    x = np.column_stack([rng.normal(0, 180, size=n), rng.normal(size=n), rng.lognormal(size=n)])
    x[rng.choice(n, 5_000, replace=False), 0] = -999.0
    x[rng.choice(n, 3_000, replace=False), 2] = 0.0
    with pytest.warns(SuspectValueWarning, match=r"f0 -999 \(the min\): 5,000 values.*f2 0 \(the min\): 3,000"):
        s = db.describe(x, stats="moments,hist")
    found = {(v.feature, v.value, v.side) for v in s.suspect_values}
    assert found == {("f0", -999.0, "min"), ("f2", 0.0, "min")}
    assert "-999 repeated?" in repr(s) and s.arrays.min[0] == -999.0  # reported, not removed


@pytest.mark.parametrize("kind", ["normal", "exponential", "uniform", "poisson", "binary", "skewed", "far"])
def test_no_suspect_values_in_clean_data(kind: str) -> None:
    """Ordinary distributions, with their own piles at an edge, are not called sentinels.

    "skewed" (lognormal, sigma 2.5) puts 90 % of its values in a histogram's first bin: the sketch's
    buckets, 0.5 % wide, see no pile there. "far": 1e8 + N(0, 1), a bucket or two for all the values.
    """
    rng = np.random.default_rng(4)
    n = 50_000
    x = {
        "normal": lambda: rng.normal(size=(n, 2)),
        "exponential": lambda: rng.exponential(size=(n, 2)),
        "uniform": lambda: rng.uniform(size=(n, 2)),
        "poisson": lambda: rng.poisson(3.0, size=(n, 2)).astype(np.float64),
        "binary": lambda: (rng.random(size=(n, 2)) < 0.05).astype(np.float64),
        "skewed": lambda: rng.lognormal(0.0, 2.5, size=(n, 2)),
        "far": lambda: 1e8 + rng.normal(size=(n, 2)),
    }[kind]()
    s = db.describe(x, stats="moments,hist")  # filterwarnings=error: any warning fails
    assert s.suspect_values == () and "repeated?" not in repr(s)
    assert db.describe(x, stats="moments,sketch").suspect_values == ()


def test_suspect_values_need_the_sketch() -> None:
    """With range= given no sketch is counted: suspect values are not judged (None), not said to be absent."""
    x = np.random.default_rng(5).normal(size=(1_000, 2))
    x[:100, 0] = -999.0
    assert db.describe(x, stats="moments").suspect_values is None
    assert db.describe(x, stats="moments,hist", range=(-1000, 10)).suspect_values is None


def test_cli_cov_pairwise(tmp_path: pathlib.Path) -> None:
    """--cov pairwise on a real store gives pandas' pairwise corr; without cov in --stats it is refused, exit 2."""
    x = _with_nan(2_000, 4, 0.1, seed=6)
    x[:, 2] = np.nan
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    root.create_array("X", data=x, chunks=(256, 4))
    js = tmp_path / "s.json"
    argv = ["describe", str(tmp_path / "d.zarr"), "--stats", "moments,cov", "--no-progress", "--cluster", "threads"]
    result = CliRunner().invoke(main, [*argv, "--cov", "pairwise", "--json", str(js)])
    assert result.exit_code == 0, result.output
    corr = np.array(json.loads(js.read_text())["corr"], dtype=np.float64)
    np.testing.assert_allclose(corr, pd.DataFrame(x).corr().to_numpy(), atol=1e-12)
    assert "pairwise: each pair's own rows" in result.output
    refused = CliRunner().invoke(main, [*argv[:2], "--stats", "moments", "--cov", "pairwise", "--cluster", "threads"])
    assert refused.exit_code == 2
    assert refused.output.strip() == "error: --cov pairwise needs cov among --stats (got moments)"


def test_bad_pairwise_requests_are_refused_in_one_line() -> None:
    """An unknown rows value: one line (weights and tiles: tests/test_pairwise_tiled.py)."""
    with pytest.raises(ValueError, match=r"^CoMoments\(rows='pair'\): rows must be one of"):
        CoMoments(rows="pair")


def test_pairwise_merge_update_and_save_load_equal_pandas(tmp_path: pathlib.Path) -> None:
    """The pairwise state is kept with the summary: merge, update and a saved summary's update are pandas' to 1e-12."""
    x = _with_nan(20_000, 8, 0.10, offset=100.0, seed=10)
    cut = 7_000
    first = _quiet_describe(da.from_array(x[:cut], chunks=(1_500, 8)), stats=["moments", PAIRWISE])
    second = _quiet_describe(x[cut:], stats=["moments", PAIRWISE])
    first.save(tmp_path / "first.zarr")
    frame = pd.DataFrame(x)
    expected_cov, expected_corr = frame.cov().to_numpy(), frame.corr().to_numpy()
    mask = np.isfinite(x).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SuspectValueWarning)
        summaries = {
            "merge": db.merge(first, second),
            "update": db.update(first, x[cut:]),
            "loaded and updated": db.update(db.load_summary(tmp_path / "first.zarr"), x[cut:]),
        }
    for how, s in summaries.items():
        np.testing.assert_allclose(s.cov, expected_cov, rtol=0, atol=1e-12 * np.abs(expected_cov).max(), err_msg=how)
        np.testing.assert_allclose(s.corr, expected_corr, rtol=0, atol=1e-12, err_msg=how)
        assert s.cov_count == int((mask.T @ mask).min()) and s.provenance["cov_rows"] == "pairwise", how


def test_the_accumulator_keeps_the_pairwise_request() -> None:
    """Accumulator(stats=[..., CoMoments(rows="pairwise")]) streams the pairwise covariance, not the complete rows'."""
    x = _with_nan(3_000, 5, 0.1, seed=12)
    acc = db.Accumulator(stats=["moments", PAIRWISE])
    for part in np.array_split(x, 4):
        acc.update(part)
    s = acc.summary()
    np.testing.assert_allclose(s.corr, pd.DataFrame(x).corr().to_numpy(), atol=1e-12)
    assert s.provenance["cov_rows"] == "pairwise"
