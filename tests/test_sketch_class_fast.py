"""The faster float32 sketch loop and class-moments loop change no bit.

The references are frozen copies of the loops as they were before
(:func:`~daskbatch.stats.kernels._sketch_table.sketch_counts_all_f32` with the
plain key table and :func:`~daskbatch.stats.kernels._numba_moments.class_moments_chunk`),
compiled here without numba's cache. Every output is compared as bytes, so a
single changed bit (a -0.0 for a 0.0 included) fails.

Sketch cases: several sketches (a fine and a coarse table, ``min_magnitude`` on
an entry boundary and inside an entry), the float32 patterns around every step
and entry start, around ``min_magnitude``, every NaN next to ±inf (the rows the
fast loop must key with the tests), zeros, subnormals, random bits, rows of only
ordinary values (the fast path), 0, 1 and many rows, 1 to 300 columns,
unweighted (int64 and int32 counts) and weighted, C, F and strided layouts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskbatch.stats import Sketch, kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

if kernels.available():
    import numba

    from daskbatch.stats.kernels import _sketch_table
    from daskbatch.stats.kernels._numba import _weight

    _EXP_MASK = 0x7F800000
    _INF32 = np.float32(np.inf)

    @numba.njit(error_model="numpy")
    def frozen_code_f32(u, table, shift, min_bits, n):  # noqa: ANN001, ANN201
        """The former _code_f32 (plain table)."""
        e = table[np.uint64(u) >> np.uint64(shift)]
        c = (e >> 32) + (np.int64(u) >= (e & 0xFFFFFFFF))
        mag = np.int64(u & 0x7FFFFFFF)
        c = c if mag >= min_bits else 2 * n + 1
        return 2 * n + 3 if mag > _EXP_MASK else c

    @numba.njit(error_model="numpy")
    def frozen_sketch_counts_all_f32(x, u, table, shift, min_bits, n, counts, offset, weights):  # noqa: ANN001, ANN201
        """The former sketch_counts_all_f32: key and count, then the int64 sign counts and extrema, per row."""
        rows, d = x.shape
        width = np.uint64(2 * n + 4)
        flat = counts.reshape(-1)
        fmin = np.full(d, np.inf, dtype=x.dtype)
        fmax = np.full(d, -np.inf, dtype=x.dtype)
        n_neg = np.zeros(d, dtype=np.int64)
        n_pos = np.zeros(d, dtype=np.int64)
        for i in range(rows):
            wi = _weight(weights, i)
            for j in range(d):
                c = frozen_code_f32(u[i, j], table, shift, min_bits, n)
                flat[np.uint64(j) * width + np.uint64(c)] += wi
            for j in range(d):
                mag = u[i, j] & 0x7FFFFFFF
                bucketed = (mag >= min_bits) & (mag < _EXP_MASK)
                neg = u[i, j] >> 31
                n_neg[j] += bucketed & (neg == 1)
                n_pos[j] += bucketed & (neg == 0)
                v = x[i, j]
                fin = abs(v) < _INF32
                fmin[j] = v if (fin & (v < fmin[j])) else fmin[j]
                fmax[j] = v if (fin & (v > fmax[j])) else fmax[j]
        for j in range(d):
            offset[j, 0] = 0 if n_neg[j] else n
            offset[j, 1] = 0 if n_pos[j] else n
        return fmin.astype(np.float64), fmax.astype(np.float64)


def _same_bits(a: tuple, b: tuple) -> None:
    assert len(a) == len(b)
    for p, q in zip(a, b, strict=True):
        p, q = np.asarray(p), np.asarray(q)
        assert p.dtype == q.dtype and p.shape == q.shape
        assert p.tobytes() == q.tobytes(), np.flatnonzero(p.reshape(-1).view(np.uint8) != q.reshape(-1).view(np.uint8))


# ------------------------------------------------------------------ sketch
SKETCHES = [
    Sketch(), Sketch(alpha=0.01, min_magnitude=1e-6, max_magnitude=1e6), Sketch(alpha=0.4, max_magnitude=1e300),
    Sketch(alpha=0.02, min_magnitude=0.5, max_magnitude=1e30),  # min_magnitude starts an entry: no rare magnitudes
    Sketch(alpha=0.005, min_magnitude=1e-37), Sketch(alpha=0.05, min_magnitude=3.0e-3, max_magnitude=1e4),
]


def _patterns(sk: Sketch, rng: np.random.Generator) -> np.ndarray:
    """float32 magnitude patterns at every edge of the table, and random ones (int64, no sign)."""
    k_min, k_max = sk.key_range
    table, shift = _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets)
    step = table[: table.size // 2] & 0xFFFFFFFF
    step = step[step != 0xFFFFFFFF]
    starts = np.arange(256 << (23 - shift), dtype=np.int64) << shift
    min_bits = _sketch_table.min_pattern(sk.min_magnitude)
    edges = [min_bits, min_bits & ~((1 << shift) - 1), _EXP_MASK, _EXP_MASK + (1 << shift), 0x7FFFFFFF]
    ends = [sk.max_magnitude, math.exp(k_min * sk.ln_gamma), math.exp(k_max * sk.ln_gamma), 1e-45, 1.2e-38]
    with np.errstate(over="ignore"):  # ends past float32 are +inf
        ends32 = np.array(ends, dtype=np.float32).view(np.uint32).astype(np.int64)
    near = np.concatenate([step, starts, np.array(edges, dtype=np.int64), ends32])[:, None] + np.arange(-2, 3)
    mag = np.concatenate([near.ravel(), np.arange(0, 4), rng.integers(0, 0x80000000, size=20_000)])
    return mag[(mag >= 0) & (mag <= 0x7FFFFFFF)]


def _sketch_chunks(sk: Sketch, d: int, rng: np.random.Generator) -> list[np.ndarray]:
    """float32 chunks of ``d`` columns: edge patterns of both signs, ordinary rows, few rows."""
    mag = _patterns(sk, rng)
    edgy = (mag | (rng.integers(0, 2, size=mag.size) << 31)).astype(np.uint32)
    edgy = np.concatenate([edgy, (mag | (1 << 31)).astype(np.uint32)])  # every edge negative too
    rows = max(1, edgy.size // d)
    edgy = np.resize(edgy, rows * d).view(np.float32).reshape(rows, d)
    # Ordinary values (the fast path, rows without a rare pattern), then a few edge rows among them.
    plain = (rng.lognormal(0.0, 3.0, size=(700, d)) * rng.choice([-1.0, 1.0], size=(700, d))).astype(np.float32)
    plain[::17, 0] = 0.0
    plain[::29, -1] = np.nan
    mixed = plain.copy()
    mixed[5::97] = edgy[: mixed[5::97].shape[0]]
    return [edgy, plain, mixed, plain[:1], edgy[:3], plain[:0]]


def _sketch_both(sk: Sketch, x: np.ndarray, weights: np.ndarray | None, count_dtype: str) -> tuple[tuple, tuple]:
    k_min, k_max = sk.key_range
    n = sk.n_buckets
    d = x.shape[1]
    dtype = count_dtype if weights is None else np.float64
    counts, offset = np.zeros((d, 2 * n + 4), dtype=dtype), np.empty((d, 2), dtype=np.int64)
    collapsed = np.empty((d, 2), dtype=np.uint8)
    got = _sketch_table.sketch_float32(x, sk.ln_gamma, sk.min_magnitude, k_min, k_max, n, n, counts, offset,
                                       collapsed, weights)
    assert got is not None
    table, shift = _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, n)
    counts_r, offset_r = np.zeros_like(counts), np.empty_like(offset)
    want = frozen_sketch_counts_all_f32(x, x.view(np.uint32), table, shift, _sketch_table.min_pattern(sk.min_magnitude),
                                        n, counts_r, offset_r, weights)
    return (counts, offset, *got), (counts_r, offset_r, *want)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # signalling NaN patterns
@pytest.mark.parametrize("d", [1, 7, 64, 257, 300])
@pytest.mark.parametrize("weighted", [False, True])
def test_sketch_bitwise_the_frozen_loop(d: int, weighted: bool) -> None:
    rng = np.random.default_rng(d + 1000 * weighted)
    for sk in SKETCHES:
        for x in _sketch_chunks(sk, d, rng):
            w = rng.uniform(0.1, 3.0, size=x.shape[0]) if weighted else None  # non-integer: the order of adds shows
            for count_dtype in ("int64",) if weighted else ("int64", "int32"):
                _same_bits(*_sketch_both(sk, x, w, count_dtype))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_sketch_layouts_bitwise_the_frozen_loop() -> None:
    rng = np.random.default_rng(5)
    sk = SKETCHES[0]
    x = _sketch_chunks(sk, 9, rng)[2]
    for y in (np.asfortranarray(x), x[::3], x[:, ::2]):
        _same_bits(*_sketch_both(sk, y, None, "int64"))


def test_sketch_rare_patterns_take_the_tested_keys() -> None:
    """Each rare pattern alone among ordinary values: a row that must be keyed with the tests."""
    rng = np.random.default_rng(3)
    for sk in SKETCHES:
        k_min, k_max = sk.key_range
        _, shift = _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets)
        min_bits = _sketch_table.min_pattern(sk.min_magnitude)
        rare = [0xFF800001, 0xFF800002, 0xFF800000 + (1 << shift) - 1, 0xFF800000 + (1 << shift), 0xFF800000,
                0x7F800001, 0x7F800000, 0xFFFFFFFF, 0xFFC00000]
        for p in range(max(min_bits - 3, 0), min_bits + 3):
            rare += [p, p | 0x80000000]
        lo = min_bits & ~((1 << shift) - 1)
        rare += [lo, lo | 0x80000000, lo + 1]
        x = rng.normal(size=(len(rare), 4)).astype(np.float32)
        x.view(np.uint32)[np.arange(len(rare)), np.arange(len(rare)) % 4] = np.array(rare, dtype=np.uint32)
        with np.errstate(invalid="ignore"):
            _same_bits(*_sketch_both(sk, x, None, "int64"))
            _same_bits(*_sketch_both(sk, x, rng.uniform(0.5, 2.0, size=x.shape[0]), "int64"))
