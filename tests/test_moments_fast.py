"""The moment loops' fast blocks (no finite test where a block has no NaN or infinity) change no bit.

The reference is a frozen copy of the loops as they were before the fast blocks (one
masked loop per pass), compiled here without numba's cache; the states must be equal
bit for bit on every branch: clean blocks, a few non-finite columns in a block, NaN in
every column (the masked blocks and the retry after them), ±inf, an all-NaN and a
constant column, sums that overflow with finite terms, signed zeros at the extremes,
0, 1 and 257 columns, 0 and 1 rows, float16/float32/float64/int64 input, weights, and
F-ordered and strided chunks.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskbatch.stats import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

if kernels.available():
    import numba

    from daskbatch.stats.kernels import _numba_moments as fast
    from daskbatch.stats.kernels._numba import BLOCK, _finite, _fourth_power, _load, _weight
    from daskbatch.stats.kernels.path import float32_block

    @numba.njit(cache=True)  # compiled once per dtype and layout, as the kernels are
    def frozen_moments(x, weights):  # noqa: ANN001, ANN201
        """The former moments_chunk: one masked loop per pass."""
        rows, d = x.shape
        shift = np.zeros(d)
        for j in range(d):
            for i in range(rows):
                v = _load(x[i, j])
                if _finite(v):
                    shift[j] = v
                    break
        count = np.zeros(d, dtype=np.int64)
        nan = np.zeros(d, dtype=np.int64)
        posinf = np.zeros(d, dtype=np.int64)
        fmin = np.full(d, np.inf)
        fmax = np.full(d, -np.inf)
        wsum = np.zeros(d)
        total = np.zeros(d)
        wpart = np.zeros(d)
        part = np.zeros(d)
        for i0 in range(0, rows, BLOCK):
            part[:] = 0.0
            wpart[:] = 0.0
            for i in range(i0, min(i0 + BLOCK, rows)):
                wi = _weight(weights, i)
                for j in range(d):
                    v = _load(x[i, j])
                    fin = _finite(v)
                    part[j] += wi * (v - shift[j]) if fin else 0.0
                    wpart[j] += wi if fin else 0.0
                    count[j] += fin
                    nan[j] += v != v
                    posinf[j] += v == np.inf
                    fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
                    fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
            for j in range(d):
                total[j] += part[j]
                wsum[j] += wpart[j]
        approx_mean = np.empty(d)
        for j in range(d):
            approx_mean[j] = total[j] / wsum[j] if wsum[j] > 0 else 0.0
        s1, s2, s3, s4 = np.zeros(d), np.zeros(d), np.zeros(d), np.zeros(d)
        p1, p2, p3, p4 = np.zeros(d), np.zeros(d), np.zeros(d), np.zeros(d)
        for i0 in range(0, rows, BLOCK):
            p1[:] = 0.0
            p2[:] = 0.0
            p3[:] = 0.0
            p4[:] = 0.0
            for i in range(i0, min(i0 + BLOCK, rows)):
                wi = _weight(weights, i)
                for j in range(d):
                    v = _load(x[i, j])
                    dev = ((v - shift[j]) - approx_mean[j]) if _finite(v) else 0.0
                    wdev = wi * dev
                    p1[j] += wdev
                    p2[j] += wdev * dev
                    p3[j] += wdev * dev * dev
                    p4[j] += _fourth_power(weights, wdev, dev)
            for j in range(d):
                s1[j] += p1[j]
                s2[j] += p2[j]
                s3[j] += p3[j]
                s4[j] += p4[j]
        return count, wsum, shift, approx_mean, s1, s2, s3, s4, fmin, fmax, nan, posinf

    @numba.njit(cache=True)  # compiled once per dtype and layout, as the kernels are
    def frozen_class_moments(x, codes, count, shift, total, s1, s2, weights):  # noqa: ANN001, ANN201
        """The former class_moments_chunk: one masked running sum per pass."""
        rows, d = x.shape
        n_classes = count.shape[0]
        found = np.zeros((n_classes, d), dtype=np.bool_)
        for i in range(rows):
            k = codes[i]
            for j in range(d):
                v = _load(x[i, j])
                if not found[k, j] and _finite(v):
                    found[k, j] = True
                    shift[k, j] = v
        for i in range(rows):
            k = codes[i]
            wi = _weight(weights, i)
            for j in range(d):
                v = _load(x[i, j])
                fin = _finite(v)
                total[k, j] += (v - shift[k, j]) * wi if fin else 0.0
                count[k, j] += fin * wi
        mean = np.empty((n_classes, d))
        for k in range(n_classes):
            for j in range(d):
                c = count[k, j]
                mean[k, j] = total[k, j] / (c if c > 0 else 1)
        for i in range(rows):
            k = codes[i]
            wi = _weight(weights, i)
            for j in range(d):
                v = _load(x[i, j])
                dev = ((v - shift[k, j]) - mean[k, j]) if _finite(v) else 0.0
                s1[k, j] += dev * wi
                s2[k, j] += dev * dev * wi


def _chunk(case: str, dtype: str) -> np.ndarray:
    """A chunk that takes one branch of the fast blocks."""
    rng = np.random.default_rng(7)
    rows, cols = {"one_col": (700, 1), "wide": (300, 257), "one_row": (1, 6), "no_rows": (0, 6), "no_cols": (300, 0),
                  "dense_nan": (BLOCK * 24, 9)}.get(case, (1000, 9))
    x = rng.gamma(2.0, 3.0, size=(rows, cols)) + 100.0 * np.arange(cols)
    if case == "few_bad":  # a non-finite value in one or two columns of some blocks: those columns again
        x[5, 0], x[300, 2], x[301, 2], x[777, 3], x[999, 0] = np.nan, np.inf, -np.inf, np.nan, np.inf
    elif case == "many_bad":  # more than a quarter of the columns: the whole block masked, then the retry
        x[BLOCK + 3, :5] = np.nan
        x[2 * BLOCK + 1, 3] = -np.inf
    elif case == "dense_nan":  # NaN in every column of the first 20 blocks, then clean blocks
        x[: 20 * BLOCK : 17] = np.nan
    elif case == "special":  # all-NaN and constant columns, infinities, the first finite value later on
        x[:, 4] = np.nan
        x[:, 5] = 3.25
        x[0, 6] = np.nan
        x[10, 7], x[11, 7] = np.inf, -np.inf
        x[:, 8] = np.where(rng.random(rows) < 0.5, -0.0, 0.0)  # signed zeros: which one min/max keep
    elif case == "overflow":  # finite terms whose sum overflows: taken for non-finite, summed masked
        x[:, 1] = np.where(rng.random(rows) < 0.5, 1.7e308, -1.7e308)
        x[:, 2] = 1.7e308
    if np.dtype(dtype).kind == "i":
        x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0, copy=False)
        x = np.clip(x, -1e15, 1e15)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


CASES = ["clean", "few_bad", "many_bad", "dense_nan", "special", "overflow", "one_col", "wide", "one_row",
         "no_rows", "no_cols"]


# Every case on float32 with and without weights; the other dtypes (each one more
# compilation of both loops) on the cases where the load matters.
COMBOS = [(c, "float32", w) for c in CASES for w in (False, True)] + [
    (c, t, False) for c in ("few_bad", "special", "one_row") for t in ("float64", "float16")
] + [("overflow", "float64", False), ("overflow", "float64", True)]


def _layouts(x: np.ndarray, weighted: bool) -> list[np.ndarray]:
    """The chunk in C order, and in F order and strided (other compilations) for unweighted float32."""
    out = [x]
    if x.size and x.dtype == np.float32 and not weighted:  # each layout compiles both loops again: CI time
        out.append(np.asfortranarray(x))
        out.append(np.repeat(x, 2, axis=1)[:, ::2])  # strided: neither C nor F order
    return out


def _equal(a: tuple, b: tuple) -> None:
    for i, (u, v) in enumerate(zip(a, b, strict=True)):
        assert u.dtype == v.dtype, i
        assert u.tobytes() == v.tobytes(), f"field {i}"  # bit for bit: NaN payloads and signed zeros too


@pytest.mark.parametrize(("case", "dtype", "weighted"), COMBOS)
def test_moments_bitwise_the_frozen_loop(case: str, dtype: str, weighted: bool) -> None:
    x0 = _chunk(case, dtype)
    w = np.random.default_rng(1).uniform(0.25, 4.0, x0.shape[0]) if weighted else None
    for x in _layouts(x0, weighted):
        _equal(fast.moments_chunk(float32_block(x), w), frozen_moments(float32_block(x), w))


@pytest.mark.parametrize(("case", "dtype", "weighted"), COMBOS)
def test_class_moments_bitwise_the_frozen_loop(case: str, dtype: str, weighted: bool) -> None:
    x0 = _chunk(case, dtype)
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, x0.shape[0]).astype(np.int64)
    w = rng.uniform(0.25, 4.0, x0.shape[0]) if weighted else None
    k, d = 3, x0.shape[1]
    for x in _layouts(x0, weighted):
        states = []
        for loop in (fast.class_moments_chunk, frozen_class_moments):
            fields = [np.zeros((k, d), dtype=np.float64 if weighted else np.int64)]
            fields += [np.zeros((k, d)) for _ in range(4)]
            loop(float32_block(x), codes, *fields, w)
            states.append(tuple(fields))
        _equal(*states)


def test_fast_blocks_against_numpy() -> None:
    """The states' meaning, to rounding, against float64 NumPy on a chunk with NaN and infinities."""
    x = _chunk("few_bad", "float64")
    count, wsum, shift, approx_mean, s1, s2, *_, fmin, fmax, nan, posinf = fast.moments_chunk(x, None)
    finite = np.isfinite(x)
    np.testing.assert_array_equal(count, finite.sum(0))
    np.testing.assert_array_equal(wsum, count.astype(np.float64))
    np.testing.assert_array_equal(nan, np.isnan(x).sum(0))
    np.testing.assert_array_equal(posinf, (x == np.inf).sum(0))
    masked = np.where(finite, x, np.nan)
    np.testing.assert_array_equal(fmin, np.nanmin(masked, 0))
    np.testing.assert_array_equal(fmax, np.nanmax(masked, 0))
    mean = np.nanmean(masked, 0)
    np.testing.assert_allclose(shift + approx_mean + s1 / count, mean, rtol=1e-13)
    var = s2 / count - (s1 / count) ** 2
    np.testing.assert_allclose(var, np.nanvar(masked, 0), rtol=1e-12)


def test_blocks_take_the_fast_path_again_after_masked_ones() -> None:
    """Clean blocks are found clean (the fast path runs), also after a run of masked blocks."""
    # NaN in every column of the first 2 R + 4 blocks (R = _RETRY): the tries at blocks 0, R
    # and 2 R fail, the one at 3 R succeeds, and so do all after it.
    r = fast._RETRY
    x = np.random.default_rng(3).gamma(2.0, 3.0, size=((3 * r + 8) * BLOCK, 9)).astype(np.float32)
    x[: (2 * r + 4) * BLOCK : 17] = np.nan
    expected = np.arange(3 * r + 8) >= 3 * r
    clean = fast._pass1(x, None, np.zeros(x.shape[1]))[-1]
    np.testing.assert_array_equal(clean, expected)
    k, d = 3, x.shape[1]
    codes = np.random.default_rng(2).integers(0, k, x.shape[0]).astype(np.int64)
    count, total, shift = np.zeros((k, d), dtype=np.int64), np.zeros((k, d)), np.zeros((k, d))
    np.testing.assert_array_equal(fast._class_pass1_blocks(x, None, codes, count, shift, total), expected)
    few = fast._pass1(_chunk("few_bad", "float32"), None, np.zeros(9))[-1]
    np.testing.assert_array_equal(np.flatnonzero(~few), [0, 2, 6, 7])  # rows 5; 300, 301; 777; 999


@pytest.mark.parametrize("case", ["early", "late class", "NaN in a first row", "absent class", "int64"])
def test_class_shifts_from_the_first_rows_are_the_scans(case: str) -> None:
    # Taken from each class's first row only where the scan would find the same values; else the scan runs.
    rng = np.random.default_rng(3)
    x = rng.normal(1000, 5, size=(3 * fast._HEAD_ROWS, 5))
    x = x.astype(np.int64) if case == "int64" else x.astype(np.float32)
    codes = rng.integers(0, 4, x.shape[0])
    if case == "late class":  # class 3 first comes after the head
        codes[codes == 3] = 2
        codes[fast._HEAD_ROWS + 7] = 3
    if case == "NaN in a first row":
        x[np.argmax(codes == 1), 2] = np.nan
    if case == "absent class":
        codes[codes == 3] = 0
    scanned, taken = np.zeros((4, 5)), np.zeros((4, 5))
    fast._class_shift(x, codes, scanned, np.zeros((4, 5), dtype=np.bool_), np.full(4, 5, dtype=np.int64))
    took = fast._classes_first_rows(x, codes, taken)
    assert took is (case in ("early", "int64"))
    if took:
        np.testing.assert_array_equal(taken, scanned, strict=True)
    else:
        assert not taken.any()  # left as it was, for the scan
