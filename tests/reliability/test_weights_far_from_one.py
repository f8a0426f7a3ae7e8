"""Issue "Every door locked", item 7: very large (or very small) valid weights gave NaN means and zero stds.

``describe(x, weights=np.full(1000, 1e306))`` summed the weights to inf: means came
out NaN and stds 0 (constant features to a selection), with only NumPy's
RuntimeWarnings. All-subnormal weights gave a mean 10% off and a sketch out of
bounds. Weights are frequency weights, so their sum is a result (``weight_sum``,
``W - ddof``): a block whose weights reach ``2**960`` (or whose positive weights are
all below ``2**-960``) is now refused in one line naming the chunk and the row, with
the power of two that brings them in range without changing any statistic but the
weight sums; weights within the range, however far apart, give what they gave.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import daskbatch as db
from daskbatch.cli import main

ROWS = 1_000
STATS = ("moments", "cov", "hist", "sketch")


@pytest.fixture()
def x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(ROWS, 3))


def results(s: db.Summary) -> tuple[np.ndarray, ...]:
    return s.mean, s.std, s.skew, s.kurtosis, np.asarray(s.cov), s.quantile(0.5).to_numpy()


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        (
            1e306,
            r"has weight 1e\+306 at row 0, of 2\*\*960 or more, .*: multiply every weight by 2\*\*-504 ",
        ),
        (
            1e-306,
            r"has no weight above 1e-306 \(row 0\) but zeros, below 2\*\*-960, .*: multiply every weight by 2\*\*505 ",
        ),
        (
            5e-324,
            r"has no weight above 4.94e-324 \(row 0\) but zeros, .*: multiply every weight by 2\*\*562 ",
        ),
    ],
)
def test_weights_beyond_float64_sums_are_refused(
    x: np.ndarray, weight: float, message: str
) -> None:
    with pytest.raises(
        ValueError, match=rf"^weights: chunk 0 \(rows 0..{ROWS - 1:,}\) {message}"
    ) as err:
        db.describe(x, weights=np.full(ROWS, weight), stats=STATS)
    assert "\n" not in str(err.value)


def same(got: db.Summary, want: db.Summary) -> None:
    """Every statistic equal: bitwise but the covariance, whose sums weight by sqrt(w) (within 1e-14)."""
    for a, b in zip(results(got), results(want), strict=True):
        if a.ndim == 2:
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ddof", [0, 1])
def test_the_suggested_power_of_two_changes_no_statistic(x: np.ndarray, ddof: int) -> None:
    # A power of two scales every weighted sum exactly, and keeps W - ddof on its side of the weight
    # sum when W stays far from 1 (here W is 2**600 * 1000 and 2**96 * 1000, or 2**-700 * 1000 and
    # 2**-188 * 1000: ddof=1 gives NaN variances in both, as frequency weights summing below 1 must).
    for exponent, shift in ((600, -504), (-700, 512)):
        got = db.describe(x, weights=np.full(ROWS, 2.0**exponent), stats=[*STATS, db.Moments(ddof=ddof)])
        scaled = db.describe(
            x, weights=np.full(ROWS, 2.0 ** (exponent + shift)), stats=[*STATS, db.Moments(ddof=ddof)]
        )
        same(got, scaled)
        np.testing.assert_array_equal(got.weight_sum, scaled.weight_sum * 2.0**-shift)
        assert np.isnan(got.std).all() == (ddof == 1 and exponent < 0)


@pytest.mark.parametrize("exponent", [-959, -600, 512, 959])
def test_weights_within_range_give_what_unit_weights_give(x: np.ndarray, exponent: int) -> None:
    reference = db.describe(x, weights=np.ones(ROWS), stats=[*STATS, db.Moments(ddof=0)])
    got = db.describe(x, weights=np.full(ROWS, 2.0**exponent), stats=[*STATS, db.Moments(ddof=0)])
    same(got, reference)
    np.testing.assert_array_equal(got.weight_sum, np.full(3, ROWS * 2.0**exponent))


def test_merging_states_of_far_apart_weight_scales(x: np.ndarray) -> None:
    # Chunks of 2**900 and of 2**-900 weights merge: the light ones count for nothing.
    import dask.array as da

    chunked = da.from_array(x, chunks=(100, 3))
    weights = np.where(np.arange(ROWS) < ROWS // 2, 2.0**900, 2.0**-900)
    got = db.describe(chunked, weights=weights, stats=[*STATS, db.Moments(ddof=0)])
    heavy = db.describe(x[: ROWS // 2], stats=[*STATS, db.Moments(ddof=0)])
    np.testing.assert_allclose(got.mean, heavy.mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got.std, heavy.std, rtol=1e-13)
    # The heavy half alone has few enough distinct values to answer exactly; with the light half the
    # sketch answers, within its relative accuracy (alpha = 0.005) of that exact value.
    np.testing.assert_allclose(got.quantile(0.5), heavy.quantile(0.5), rtol=0.006)  # 0.5 %, one value of rank off
    np.testing.assert_allclose(np.asarray(got.cov), np.asarray(heavy.cov), rtol=1e-13, atol=1e-15)
    groups = np.arange(ROWS) % 2
    by_group = db.describe(chunked, groups=groups, weights=weights, stats=["moments", db.Moments(ddof=0)])
    heavy = db.describe(x[: ROWS // 2], groups=groups[: ROWS // 2], stats=["moments", db.Moments(ddof=0)])
    np.testing.assert_allclose(by_group.group_mean, heavy.group_mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(by_group.group_var, heavy.group_var, rtol=1e-13)
    # One heavy row among light ones in the same chunk is (all but) everything.
    weights = np.full(ROWS, 2.0**-900)
    weights[7] = 2.0**959
    np.testing.assert_array_equal(db.describe(x, weights=weights, stats=("moments",)).mean, x[7])
    # Tiny weights beside ordinary ones in the same chunk are accepted and count for nothing.
    mixed = np.where(np.arange(ROWS) < ROWS // 2, 1e-306, 1.0)
    got = db.describe(x, weights=mixed, stats=("moments",))
    np.testing.assert_allclose(got.mean, x[ROWS // 2 :].mean(axis=0), rtol=1e-13)


def test_cli_refuses_huge_stored_weights_in_one_line(tmp_path: pathlib.Path, x: np.ndarray) -> None:
    root = zarr.open_group(str(tmp_path / "w.zarr"), mode="w", zarr_format=3)
    root.create_array("X", data=x, chunks=(100, 3))
    weights = np.ones(ROWS)
    weights[345] = 1e306
    root.create_array("w", data=weights, chunks=(100,))
    out = tmp_path / "summary.zarr"
    args = [
        "describe",
        str(tmp_path / "w.zarr"),
        "--weights",
        "w",
        "--stats",
        "moments",
        "--no-progress",
        "--cluster",
        "threads",
        "--out",
        str(out),
    ]
    cli = CliRunner().invoke(main, args)
    assert cli.exit_code == 2, cli.output
    errors = [ln for ln in cli.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert "has weight 1e+306 at row 345, of 2**960 or more" in errors[0]
    assert errors[0].startswith(f"error: weights array 'w' in '{tmp_path / 'w.zarr'}': chunk ")
    assert not out.exists()


def test_bias_corrections_of_huge_weight_sums_are_one(x: np.ndarray) -> None:
    # (n - 2) * (n - 3) overflowed for weight sums past 2**512: kurtosis came out 0 or NaN.
    from daskbatch.stats.moments import Moments

    w = np.full(ROWS, 2.0**900)
    states = [Moments().chunk(x[i : i + 100], weights=w[i : i + 100]) for i in range(0, ROWS, 100)]
    merged = states[0]
    for s in states[1:]:
        merged = Moments().merge(merged, s)
    unbiased, biased = Moments(bias=False).finalize(merged), Moments().finalize(merged)
    reference = db.describe(x, stats=("moments",))
    np.testing.assert_allclose(biased.skew, reference.skew, rtol=1e-12)
    np.testing.assert_array_equal(unbiased.skew, biased.skew)
    np.testing.assert_array_equal(unbiased.kurtosis, biased.kurtosis)


@pytest.mark.parametrize("stat_name", ["comoments", "tiled"])
def test_covariance_merges_of_huge_weight_sums(x: np.ndarray, stat_name: str) -> None:
    # a.n * b.n overflowed past weight sums of 2**512: the merged co-moments were inf or NaN.
    from daskbatch.stats.comoments import CoMoments
    from daskbatch.stats.tiled import CrossCoMoments

    stat = CoMoments() if stat_name == "comoments" else CrossCoMoments(split=1)
    scale = 2.0**900
    parts = [stat.chunk(x[i : i + 250], weights=np.full(250, scale)) for i in range(0, ROWS, 250)]
    merged = parts[0]
    for part in parts[1:]:
        merged = stat.merge(merged, part)
    want = np.cov(x, rowvar=False, ddof=0) * ROWS
    want = want if stat_name == "comoments" else want[:1, 1:]
    np.testing.assert_allclose(np.asarray(merged.c) / scale, want, rtol=1e-12)


def test_accumulator_refuses_the_same_weights_and_merges_far_apart_batches(x: np.ndarray) -> None:
    acc = db.Accumulator(stats=("moments",))
    with pytest.raises(
        ValueError, match=r"^batch 0's weights: has weight 1e\+306 at row 0, of 2\*\*960 or more"
    ):
        acc.update(x, w=np.full(ROWS, 1e306))
    for lo in range(0, ROWS, 250):  # a batch of 2**900 weights, then 2**-900, 2**900, 2**-900
        acc.update(x[lo : lo + 250], w=np.full(250, 2.0 ** (900 if lo % 500 == 0 else -900)))
    heavy = np.concatenate([x[:250], x[500:750]])
    np.testing.assert_allclose(acc.summary().mean, heavy.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(acc.summary().std, heavy.std(axis=0), rtol=1e-13)  # W - 1 is W
