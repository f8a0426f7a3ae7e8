"""Accuracy against public reference data in the shared folder (never copied into the repository).

NIST StRD univariate (certified mean / sd), exact higher moments, the Longley
covariance and correlation, mutual-information cases and chunked
variance-merge cases; see ``<reference_dir>/README.md``. Accuracy is the LRE
(log relative error, McCullough 1998) judged against what float64 allows: the
LRE that the *exact* statistic of the float64-parsed data itself reaches.
"""

from __future__ import annotations

import functools
import json
import math
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path
from typing import Literal

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.stats import Moments, merge_all, mutual_information

NIST = (
    "PiDigits", "Lottery", "Lew", "Mavro", "Michelso", "NumAcc1", "NumAcc2", "NumAcc3", "NumAcc4",
)
#: The README's "binary64 ceiling sd" column: the best sd LRE any float64 program can reach.
README_SD_CEILING = {
    "PiDigits": 15.0, "Lottery": 15.0, "Lew": 15.0, "Mavro": 13.1, "Michelso": 13.8,
    "NumAcc1": 15.0, "NumAcc2": 15.0, "NumAcc3": 9.5, "NumAcc4": 8.3,
}


def lre(x: float | Decimal, c: str | Decimal | Fraction) -> float:
    """Log relative error of ``x`` against ``c`` (log absolute error when ``c`` is 0), in [0, 15]."""
    with localcontext() as ctx:
        ctx.prec = 60
        if isinstance(c, str) and "/" in c:
            c = Fraction(c)
        if isinstance(c, Fraction):
            c = Decimal(c.numerator) / Decimal(c.denominator)
        x, c = Decimal(x), Decimal(c)
        if not x.is_finite():
            return 0.0
        err = abs(x - c) if c == 0 else abs(x - c) / abs(c)
        return 15.0 if err == 0 else max(0.0, min(15.0, float(-err.log10())))


@functools.cache
def _json(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


@functools.cache
def exact_stats(folder: Path, name: str) -> dict[str, Decimal]:
    """Exact sd, g1, g2, G1, G2 of the dataset *after parsing to float64* (60-digit decimals)."""
    values = [Fraction(float(v)) for v in _json(folder, "nist_univariate.json")["datasets"][name]["values"]]
    n = len(values)
    mu = sum(values, Fraction(0)) / n
    dev = [v - mu for v in values]
    m2, m3, m4 = (sum((d**k for d in dev), Fraction(0)) / n for k in (2, 3, 4))
    with localcontext() as ctx:
        ctx.prec = 60

        def dec(f: Fraction) -> Decimal:
            return Decimal(f.numerator) / Decimal(f.denominator)

        out = {"sd": (dec(m2) * n / (n - 1)).sqrt()}
        out["g1"] = dec(m3) / dec(m2).sqrt() ** 3
        out["g2"] = dec(m4) / dec(m2) ** 2 - 3
        out["G1"] = out["g1"] * Decimal(n * (n - 1)).sqrt() / (n - 2)
        out["G2"] = ((n + 1) * out["g2"] + 6) * (n - 1) / ((n - 2) * (n - 3)) if n > 3 else None
    return out


def nist_values(folder: Path, name: str) -> np.ndarray:
    return np.asarray([float(v) for v in _json(folder, "nist_univariate.json")["datasets"][name]["values"]])


@pytest.mark.parametrize("chunk_rows", [7, 64, 10_000])
@pytest.mark.parametrize("name", NIST)
def test_nist_mean_and_sd_reach_the_float64_ceiling(reference_dir: Path, name: str, chunk_rows: int) -> None:
    x = nist_values(reference_dir, name)
    certified = _json(reference_dir, "nist_univariate.json")["datasets"][name]["certified"]
    ceiling = lre(exact_stats(reference_dir, name)["sd"], certified["std"])
    assert ceiling == pytest.approx(README_SD_CEILING[name], abs=0.1)  # the README's own figure
    rows = max(chunk_rows, x.size // 128)  # at most ~128 chunks keeps PiDigits quick
    s = db.describe(da.from_array(x[:, None], chunks=(rows, 1)), stats="moments")
    assert s.arrays.count[0] == x.size
    assert lre(s.arrays.mean[0], certified["mean"]) >= 14.0
    assert lre(s.arrays.std[0], certified["std"]) >= ceiling - 1.0


@pytest.mark.parametrize("name", NIST)
def test_nist_higher_moments(reference_dir: Path, name: str) -> None:
    """Skewness and kurtosis, biased and bias-corrected, against the exact derived values."""
    x = nist_values(reference_dir, name)
    expected = _json(reference_dir, "higher_moments_reference.json")["datasets"][name]
    exact = exact_stats(reference_dir, name)
    chunks = (64, 1)
    biased = db.describe(da.from_array(x[:, None], chunks=chunks), stats="moments")
    corrected = db.describe(da.from_array(x[:, None], chunks=chunks), stats=db.stats.Moments(bias=False))
    for key, got in (("g1", biased.arrays.skew[0]), ("g2", biased.arrays.kurtosis[0]),
                     ("G1", corrected.arrays.skew[0]), ("G2", corrected.arrays.kurtosis[0])):
        if expected[key] is None:  # G2 is undefined for n = 3
            assert np.isnan(got), key
            continue
        # Against the exact value of the float64 data: what the engine can be asked for
        # (absolute near zero, where NumAcc2-4's skewness is pure rounding of the parsed data).
        want = float(exact[key])
        assert abs(got - want) <= 1e-10 * max(1.0, abs(want)), key
        # Against the decimal data: within one digit of the ceiling parsing leaves.
        ceiling = lre(exact[key], expected[key])
        assert lre(got, expected[key]) >= min(ceiling, 15.0) - 1.0, key


def test_longley_covariance_and_correlation(reference_dir: Path) -> None:
    ref = _json(reference_dir, "longley_derived_cov_corr.json")
    table = np.genfromtxt(reference_dir / "longley.csv", delimiter=",", names=True)
    assert list(table.dtype.names) == ref["columns"]
    x = np.column_stack([table[c] for c in ref["columns"]])
    s = db.describe(da.from_array(x, chunks=(5, -1)), stats=("moments", "cov"), run=db.RunOptions(split_every=2))
    assert s.cov_count == 16
    for i in range(7):
        assert lre(s.arrays.mean[i], ref["mean"][i]) >= 14.0
        for j in range(7):
            assert lre(s.arrays.cov[i, j], ref["covariance_ddof1"][i][j]) >= 12.0, (i, j)
            assert lre(s.arrays.corr[i, j], ref["correlation"][i][j]) >= 12.0, (i, j)
    np.testing.assert_allclose(s.var, np.diag(s.cov), rtol=1e-13)


def _mi_cases(folder: Path, kind: str) -> list[dict]:
    return [c for c in _json(folder, "mutual_information_reference.json")["cases"] if c["kind"] == kind]


def _describe_mi(x: list[int], y: list[int], base: Literal["e", 2] = "e") -> float:
    """MI of integer data ``x`` with label ``y``, one histogram bin per integer value."""
    xs = np.asarray(x, dtype=np.float64)[:, None]
    lo, hi = xs.min() - 0.5, xs.max() + 0.5
    s = db.describe(da.from_array(xs, chunks=(4, 1)), np.asarray(y), stats=db.stats.MutualInformation(base=base),
                    bins=int(hi - lo), range=(lo, hi))
    return float(s.arrays.mi[0])


def test_mutual_information_from_labels(reference_dir: Path) -> None:
    cases = _mi_cases(reference_dir, "labels")
    assert len(cases) >= 3
    for case in cases:
        got = _describe_mi(case["x"], case["y"])
        want = case["expected"]["mutual_information"]
        assert abs(got - want) <= case["tolerance"]["mutual_information"], case["id"]
        bits = _describe_mi(case["x"], case["y"], base=2)
        assert bits == pytest.approx(got / math.log(2), rel=1e-14, abs=1e-300), case["id"]


def test_entropy_as_self_information(reference_dir: Path) -> None:
    """I(X; X) = H(X): the entropy cases through the MI path, labelling each sample by its own value."""
    for case in _mi_cases(reference_dir, "entropy_of_labels"):
        got = _describe_mi(case["x"], case["x"])
        assert abs(got - case["expected"]["entropy"]) <= case["tolerance"]["entropy"], case["id"]


def test_mutual_information_from_tables(reference_dir: Path) -> None:
    for case in _mi_cases(reference_dir, "joint_table"):  # Cover & Thomas 2.2.1, bits
        p = np.asarray([[float(Fraction(v)) for v in row] for row in case["joint"]])
        joint = np.rint(p.T * 32).astype(np.int64)[None, :, :]  # (feature, x bin, y class)
        got = float(mutual_information(joint, base=2)[0])
        assert abs(got - case["expected"]["mutual_information"]) <= case["tolerance"]["mutual_information"]
    for case in _mi_cases(reference_dir, "contingency"):  # large counts, int32-overflow guard
        joint = np.asarray(case["contingency"], dtype=np.int64)[None, :, :]
        got = float(mutual_information(joint)[0])
        want = case["expected"]["mutual_information"]
        assert abs(got - want) <= case["tolerance"]["mutual_information"], case["id"]


def _merge_cases(folder: Path) -> dict[str, dict]:
    return {c["id"]: c for c in _json(folder, "variance_merge_reference.json")["cases"]}


def _chunked_moments(chunks: list[list[str]], **kwargs: object):
    """Moments of the given chunks, each fed as its own chunk and merged left to right."""
    stat = Moments(**kwargs)
    states = [stat.chunk(np.asarray([float(v) for v in c])[:, None]) for c in chunks]
    return stat.finalize(merge_all(stat, states))


def _as_dask(chunks: list[list[str]]) -> da.Array:
    values = np.asarray([float(v) for c in chunks for v in c])[:, None]
    return da.from_array(values, chunks=(tuple(len(c) for c in chunks), (1,)))


def test_variance_merge_exact_cases(reference_dir: Path) -> None:
    cases = _merge_cases(reference_dir)
    for cid in ("arrow_var_stability_offset_1e8", "arrow_var_stability_offset_1e9",
                "arrow_var_stability_negative_offset_1e9"):
        chunks = cases[cid]["chunks"]
        want = float(Fraction(cases[cid]["expected"]["var_ddof1_binary64"]))
        assert _chunked_moments(chunks).var[0] == pytest.approx(want, rel=1e-15), cid
        # and one value per chunk, the hardest chunking
        singles = [[v] for v in chunks[0]]
        assert _chunked_moments(singles).var[0] == pytest.approx(want, rel=1e-15), cid
    case = cases["simple_statistics_combine_variances"]
    want = float(Fraction(case["expected"]["var_ddof0_binary64"]))
    assert _chunked_moments(case["chunks"], ddof=0).var[0] == pytest.approx(want, rel=1e-15)
    assert db.describe(_as_dask(case["chunks"]), stats=["moments", db.Moments(ddof=0)]).arrays.var[0] == pytest.approx(want, rel=1e-15)


def test_variance_merge_two_huge_values(reference_dir: Path) -> None:
    case = _merge_cases(reference_dir)["arrow_var_merge_stability_two_chunks"]
    got = _chunked_moments(case["chunks"]).var[0]
    assert got == pytest.approx(3872.0, rel=0.01)  # the exact variance of the float64 data
    assert db.describe(_as_dask(case["chunks"]), stats="moments").arrays.var[0] == pytest.approx(3872.0, rel=0.01)


def test_variance_merge_central_moments(reference_dir: Path) -> None:
    case = _merge_cases(reference_dir)["dask_test_moment_poorly_conditioned"]
    r = _chunked_moments(case["chunks"], ddof=0)
    m2 = r.var[0]
    expect = case["expected"]
    assert m2 == pytest.approx(float(Fraction(expect["central_moment_2_binary64"])), rel=1e-14)
    assert abs(r.skew[0] * m2**1.5) <= 1e-14  # central_moment_3 = 0
    m4 = (r.kurtosis[0] + 3.0) * m2 * m2
    assert m4 == pytest.approx(float(Fraction(expect["central_moment_4_binary64"])), rel=1e-13)


def test_variance_merge_numacc4_uneven_chunks(reference_dir: Path) -> None:
    case = _merge_cases(reference_dir)["nist_numacc4_uneven_chunks"]
    # (the case's note says the last chunk holds 334 values; the data hold 301, summing to n = 1001)
    sizes = [len(c) for c in case["chunks"]]
    assert sum(sizes) == 1001 and sizes[:6] == [1, 1, 98, 233, 1, 366]
    exact = Fraction(case["expected"]["var_ddof1_binary64"])
    for var in (
        _chunked_moments(case["chunks"]).var[0],
        db.describe(_as_dask(case["chunks"]), stats="moments", run=db.RunOptions(split_every=2)).arrays.var[0],
    ):
        assert lre(var, case["expected"]["var_ddof1"]) >= 7.0
        assert lre(var, exact) >= 13.0  # the float64 data's own variance, nearly to the last bit
