"""The compiled sketch kernel keys values from the float's bits; its states must be the reference's, bit for bit.

:func:`~daskbatch.stats.kernels._numba_sketch.sketch_counts` takes ``log|v|`` from a
short series (:func:`~daskbatch.stats.kernels._numba_sketch.fast_log`) and keys again,
with the reference expression, every value whose fast log lies near a bucket
boundary. These tests hold it to the array-API reference of
:class:`~daskbatch.stats.Sketch` (``daskbatch.kernels`` off, NumPy's log) and to
the log-per-value kernel, on the values that are hardest to key: the bucket
boundaries ``gamma**k`` and their neighbours in float32 and float64, the ends of
the magnitude range, subnormals, ±inf, NaN, zeros and negatives.
"""

from __future__ import annotations

import math

import dask.config
import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskbatch.stats import Sketch
from daskbatch.stats.kernels import _numba_sketch, _sketch_table
from daskbatch.stats.kernels.path import float32_block
from daskbatch.stats.sketch_tails import tails_chunk
from daskbatch.testing import assert_states_equal

TINY = float(np.finfo(np.float64).smallest_normal)


@numba.njit(cache=False)
def _fast_logs(a: np.ndarray) -> np.ndarray:
    out = np.empty_like(a)
    for i in range(a.size):
        out[i] = _numba_sketch.fast_log(a[i])
    return out


def compiled_and_reference(sk: Sketch, x: np.ndarray) -> None:
    """The kernel's state equals the array-API reference's and the log-per-value kernel's."""
    with dask.config.set({"daskbatch.kernels": True}):
        fast = sk.chunk(x)
    with dask.config.set({"daskbatch.kernels": False}):
        reference = sk.chunk(x)
    assert_states_equal(fast, reference)
    k_min, k_max = sk.key_range
    counts = np.zeros_like(np.asarray(fast.counts))
    offset = np.empty_like(np.asarray(fast.offset))
    collapsed = np.empty(offset.shape, dtype=np.uint8)
    data = float32_block(x)  # as the wrapper hands chunks to the kernels
    fmin, fmax = _numba_sketch.sketch_counts_log(
        data, sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets, sk.buckets_kept, counts, offset, collapsed,
        None,
    )
    np.testing.assert_array_equal(np.asarray(fast.counts), counts, strict=True)
    np.testing.assert_array_equal(np.asarray(fast.offset), offset, strict=True)
    np.testing.assert_array_equal(np.asarray(fast.fmin), fmin, strict=True)


def to32(x: np.ndarray) -> np.ndarray:
    """``x`` as float32; magnitudes beyond its range become ±inf, as a cast does (without the warning)."""
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def boundary_values(sk: Sketch, keys: np.ndarray) -> np.ndarray:
    """``gamma**k`` for ``keys``, its float64 neighbours (±2 ulps) and its float32 roundings (±1 ulp)."""
    g = np.exp(keys * sk.ln_gamma)
    g = g[np.isfinite(g) & (g > 0)]
    near64 = [g]
    down, up = g.copy(), g.copy()
    for _ in range(2):
        down, up = np.nextafter(down, 0.0), np.nextafter(up, np.inf)
        near64 += [down, up]
    f32max = float(np.finfo(np.float32).max)
    g32 = g[(g >= float(np.finfo(np.float32).smallest_subnormal)) & (g <= f32max)].astype(np.float32)
    near32 = [g32, np.nextafter(g32, np.float32(0)), np.nextafter(g32, np.float32(np.inf))]
    return np.concatenate(near64 + [v.astype(np.float64) for v in near32])


def test_fast_log_within_its_bound() -> None:
    """The error bound the band rests on holds: random normal floats, every float32 mantissa, the worst ``t``."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0x0010000000000000, 0x7FF0000000000000, size=1_000_000, dtype=np.int64)
    mantissas = (np.arange(2**23, dtype=np.int64) << 29) | 0x3FF0000000000000  # all of [1, 2) in float32
    sqrt2 = np.full(4, math.sqrt(2.0))
    worst = np.concatenate([np.nextafter(sqrt2, 0.0), sqrt2, np.nextafter(sqrt2, 3.0), [1 / math.sqrt(2.0)]])
    for a in (bits.view(np.float64), mantissas.view(np.float64), worst * 2.0**-1000, worst * 2.0**1000, worst):
        err = np.abs(_fast_logs(a) - np.log(a))
        assert err.max() <= _numba_sketch.FAST_LOG_ERROR, err.max()
    assert _numba_sketch.SKETCH_NEAR >= 10 * _numba_sketch.FAST_LOG_ERROR


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_bucket_boundary_of_the_default_sketch(dtype: type) -> None:
    """``gamma**k`` and its neighbours for every key, both signs, in one chunk: the hardest values there are."""
    sk = Sketch()
    k_min, k_max = sk.key_range
    values = boundary_values(sk, np.arange(k_min - 2, k_max + 3, dtype=np.float64))
    x = to32(values) if dtype == np.float32 else values
    x = np.concatenate([x, -x])
    x = x[: x.size - x.size % 8].reshape(-1, 8)
    # The data must reach the fallback: plenty of fast logs lie in the band around a boundary.
    a = np.abs(x.astype(np.float64)).ravel()
    a = a[(a >= sk.min_magnitude) & np.isfinite(a)]
    q = _fast_logs(a) / sk.ln_gamma
    assert np.sum(np.abs(q - np.rint(q)) < _numba_sketch.SKETCH_NEAR / sk.ln_gamma) > 1000
    compiled_and_reference(sk, x)


def test_the_ends_of_the_magnitude_range_and_nonfinite() -> None:
    sk = Sketch(alpha=0.01, min_magnitude=1e-6, max_magnitude=1e6)
    k_min, k_max = sk.key_range
    top, bottom = math.exp((k_max - 1) * sk.ln_gamma), math.exp(k_min * sk.ln_gamma)  # overflow and first bucket
    ends = [sk.min_magnitude, sk.max_magnitude, top, bottom]
    around = [np.nextafter(v, d) for v in ends for d in (0.0, np.inf)]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, TINY, 5e-324, 1e300, -1e300, 2.0**-1030]
    col = np.array(ends + around + special)
    x = np.stack([col, -col, col[::-1]], axis=1)
    compiled_and_reference(sk, x)
    compiled_and_reference(sk, to32(x))


def test_wide_rows_with_several_boundary_values() -> None:
    """Rows of 300 features, many near a boundary: the fix-up pass of a row keys each of them."""
    sk = Sketch()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 300)) * 10.0
    g = boundary_values(sk, rng.integers(-2000, 2000, size=400).astype(np.float64))
    rows, cols = rng.integers(0, 40, size=g.size), rng.integers(0, 300, size=g.size)
    x[rows, cols] = g * rng.choice([-1.0, 1.0], size=g.size)
    compiled_and_reference(sk, x)
    compiled_and_reference(sk, to32(x))


def test_a_subnormal_min_magnitude_takes_the_log_per_value_kernel() -> None:
    sk = Sketch(min_magnitude=1e-310, max_magnitude=1e10)
    x = np.array([[1e-310], [3e-309], [TINY], [5e-324], [-2e-309], [1.0], [0.0]])
    compiled_and_reference(sk, x)


def test_windowed_sketch_across_its_window() -> None:
    """Describe's windowed sketch on rows whose magnitudes span 10**-8 to 10**12 (more than its window):
    the kernel's windows move and collapse row by row, and still equal the reference's."""
    from daskbatch.stats.sketch import WINDOW

    sk = Sketch(window=WINDOW)
    rng = np.random.default_rng(5)
    x = 10.0 ** rng.uniform(-8, 12, size=(300, 6)) * rng.choice([-1.0, 1.0], size=(300, 6))
    x[:, 0] = np.abs(x[:, 0])  # one feature with no negative window
    x[:150, 1] = rng.standard_normal(150)  # a window that fits at first, then collapses
    compiled_and_reference(sk, x)
    compiled_and_reference(sk, x[::-1].copy())  # the other way round: collapsed from the largest first
    assert int(np.asarray(sk.chunk(x).offset)[2, 1]) > sk.n_buckets // 2  # the positive window did collapse


# ------------------------------------------------------------------ property
SKETCHES = st.builds(
    Sketch,
    alpha=st.sampled_from([0.005, 0.02, 0.1, 0.4]),
    min_magnitude=st.sampled_from([1e-30, 1e-6, 0.5, TINY, 1e-310]),
    max_magnitude=st.sampled_from([1e6, 1e30, 1e300]),
    # Windows narrower than the drawn run of 32 keys collapse, move and grow within a chunk.
    window=st.sampled_from([None, 2, 7, 33, 2048]),
).filter(lambda s: s.min_magnitude < s.max_magnitude)


@st.composite
def adversarial(draw: st.DrawFn, sk: Sketch, dtype: type) -> np.ndarray:
    """A chunk whose values are drawn from bucket boundaries and their neighbours, range ends and specials."""
    rows = draw(st.integers(1, 30))
    cols = draw(st.integers(1, 5))
    k_min, k_max = sk.key_range
    # A run of 32 keys (about a third of boundaries are ones the fast log alone would get wrong).
    keys = draw(st.integers(k_min - 2, k_max + 2)) + np.arange(-16.0, 16.0)
    pool = [*boundary_values(sk, keys), sk.min_magnitude, sk.max_magnitude, np.nextafter(sk.min_magnitude, 0.0)]
    pool += [0.0, np.inf, np.nan, 1.0, TINY, 5e-324, 2.0**-1040, 1e308]
    width = 32 if dtype == np.float32 else 64
    # Three in four values from the pool: boundaries are what the fast key can get wrong.
    hard = st.sampled_from(pool)
    element = st.one_of(
        hard, hard, hard, st.floats(width=width, allow_nan=True, allow_infinity=True, allow_subnormal=True)
    )
    sign = st.sampled_from([-1.0, 1.0])
    values = draw(st.lists(st.tuples(element, sign), min_size=rows * cols, max_size=rows * cols))
    x = np.array([v * s for v, s in values], dtype=np.float64).reshape(rows, cols)
    # And every boundary value of the drawn keys, both signs, in rows below (in a drawn order).
    extra = np.concatenate([boundary_values(sk, keys), -boundary_values(sk, keys)])
    extra = np.resize(extra[draw(st.permutations(range(extra.size)))], (-(-extra.size // cols), cols))
    x = np.concatenate([x, extra])
    return to32(x) if dtype == np.float32 else x


@given(data=st.data(), sk=SKETCHES, dtype=st.sampled_from([np.float64, np.float32]))
def test_kernel_equals_reference_bitwise(data: st.DataObject, sk: Sketch, dtype: type) -> None:
    compiled_and_reference(sk, data.draw(adversarial(sk, dtype), label="x"))


@given(
    x=st.one_of(
        hnp.arrays(np.float16, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)),
        hnp.arrays(np.int64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)),
        hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)),
        hnp.arrays(np.bool_, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)),
    )
)
def test_other_dtypes_equal_reference_bitwise(x: np.ndarray) -> None:
    compiled_and_reference(Sketch(), x)


# ------------------------------------------------------------------ float32 key table
@numba.njit(cache=False)
def _table_codes(u: np.ndarray, table: np.ndarray, shift: int, min_bits: int, n: int) -> np.ndarray:
    out = np.empty(u.size, dtype=np.int64)
    for i in range(u.size):
        out[i] = _sketch_table._code_f32(u[i], table, shift, min_bits, n)
    return out


@numba.njit(cache=False)
def _reference_codes(v: np.ndarray, ln_gamma: float, min_magnitude: float, lo: float, hi: float, n: int) -> np.ndarray:
    out = np.empty(v.size, dtype=np.int64)
    for i in range(v.size):
        a = abs(v[i])
        bucketed = (a >= min_magnitude) & (a < np.inf)
        key = _numba_sketch._sketch_key(a if bucketed else 1.0, ln_gamma, lo, hi)
        out[i] = _numba_sketch._sketch_code(v[i], key, bucketed, n)
    return out


TABLE_SKETCHES = [
    Sketch(), Sketch(alpha=0.01, min_magnitude=1e-6, max_magnitude=1e6), Sketch(alpha=0.4, max_magnitude=1e300),
    Sketch(alpha=0.02, min_magnitude=0.5, max_magnitude=1e30), Sketch(alpha=0.005, min_magnitude=1e-37),
]


def table_patterns(sk: Sketch, rng: np.random.Generator) -> np.ndarray:
    """float32 patterns that test a table: ±2 ulps around every step and sub-interval start, range ends, random ones."""
    k_min, k_max = sk.key_range
    table, shift = _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets)
    step = table[: table.size // 2] & 0xFFFFFFFF
    step = step[step != 0xFFFFFFFF]
    assert step.size > 10
    starts = np.arange(255 << (23 - shift), dtype=np.int64) << shift
    near = np.concatenate([step, starts])[:, None] + np.arange(-2, 3)
    near = near[(near >= 0) & (near <= 0x7FFFFFFF)]
    ends = [sk.min_magnitude, sk.max_magnitude, math.exp(k_min * sk.ln_gamma), math.exp((k_max - 1) * sk.ln_gamma),
            math.exp(k_max * sk.ln_gamma), np.finfo(np.float32).max, TINY]
    ends32 = to32(np.array(ends)).view(np.uint32).astype(np.int64)[:, None] + np.arange(-2, 3)
    special = np.array([0.0, np.inf, np.nan, 1.0, float(np.finfo(np.float32).smallest_subnormal),
                        float(np.finfo(np.float32).smallest_normal)], dtype=np.float32).view(np.uint32)
    mag = np.concatenate([near, ends32.ravel().clip(0, 0x7FFFFFFF), special.astype(np.int64),
                          rng.integers(0, 0x80000000, size=100_000)])  # random: subnormals, NaNs and all
    sign = rng.integers(0, 2, size=mag.size) << 31  # both signs, mixed within features
    return (mag | sign).astype(np.uint32)


@pytest.mark.parametrize("sk", TABLE_SKETCHES, ids=lambda s: f"{s.alpha}-{s.min_magnitude}-{s.max_magnitude}")
def test_float32_table_codes_every_pattern_as_the_reference(sk: Sketch) -> None:
    """Each value's code from the table equals the reference expression's: around every step, the ends, random bits."""
    k_min, k_max = sk.key_range
    u = table_patterns(sk, np.random.default_rng(11))
    table, shift = _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets)
    got = _table_codes(u, table, shift, _sketch_table.min_pattern(sk.min_magnitude), sk.n_buckets)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        v = u.view(np.float32).astype(np.float64)
    want = _reference_codes(v, sk.ln_gamma, sk.min_magnitude, float(k_min), float(k_max), sk.n_buckets)
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # signalling NaN patterns
@pytest.mark.parametrize("d", [1, 7, 64, 257])
@pytest.mark.parametrize("window", [None, 7, 2048])
def test_float32_table_kernels_equal_reference_bitwise(d: int, window: int | None) -> None:
    """The table's loops (every bucket kept, and windowed) give the reference's states, at several widths."""
    for sk in TABLE_SKETCHES[:3]:
        sk = Sketch(alpha=sk.alpha, min_magnitude=sk.min_magnitude, max_magnitude=sk.max_magnitude, window=window)
        u = table_patterns(sk, np.random.default_rng(d))
        x = u[: u.size - u.size % d].view(np.float32).reshape(-1, d)
        compiled_and_reference(sk, x)
        compiled_and_reference(sk, x[:5])  # a few rows: empty windows, features without finite values


def test_float32_table_only_where_one_step_per_entry() -> None:
    """Subnormal float32 bucketed, or gamma too close to 1: no table (the log-based loops key those)."""
    for sk in (Sketch(min_magnitude=1e-40), Sketch(alpha=1e-5, min_magnitude=1e-3, max_magnitude=1e3)):
        k_min, k_max = sk.key_range
        assert _sketch_table.float32_table(sk.ln_gamma, sk.min_magnitude, k_min, k_max, sk.n_buckets) is None
        x = np.array([[1e-39, -2e-40], [1.0, 3.5], [0.0, -np.inf]], dtype=np.float32)
        compiled_and_reference(sk, x)


@pytest.mark.parametrize("window", [None, 7, 2048])
def test_float32_table_kernels_weighted_equal_reference(window: int | None) -> None:
    # Weighted float32 chunks run the table loops too: with integer weights every sum is exact, so the
    # weighted counts equal the array-API path's bit for bit (and repeated rows' counts).
    rng = np.random.default_rng(11)
    x = (rng.lognormal(0.0, 6.0, size=(3000, 9)) * rng.choice([-1.0, 1.0], size=(3000, 9))).astype(np.float32)
    x[::101, 3] = np.nan
    x[::53, 4] = 0.0
    x[7, 5] = np.inf
    w = rng.integers(1, 5, size=3000).astype(np.float64)
    sk = Sketch(window=window)
    with dask.config.set({"daskbatch.kernels": True}):
        fast = sk.chunk(x, None, weights=w)
    with dask.config.set({"daskbatch.kernels": False}):
        reference = sk.chunk(x, None, weights=w)
    assert_states_equal(fast, reference)
    repeated = sk.chunk(np.repeat(x, w.astype(np.int64), axis=0))
    np.testing.assert_array_equal(np.asarray(fast.counts), np.asarray(repeated.counts).astype(np.float64))


def test_grid_counts_bin_as_ldexp_does_at_every_scale() -> None:
    """The dyadic grid's kernel multiplies by 2**-step where that is a normal float, else calls ldexp: same bins."""
    from daskbatch.stats.sketch_distinct import _grid_steps

    rng = np.random.default_rng(5)
    bins = 2048
    columns = [
        rng.normal(1000.0, 0.01, 500),  # issue 33's narrow spreads: fine steps (2**-20)
        rng.normal(0.0, 1e300, 500),  # steps near 2**1000
        rng.uniform(0.0, 5e-310, 500),  # subnormals: 2**-step is no normal float, ldexp itself
        rng.uniform(-4e-308, 4e-308, 500),  # around the smallest normal
    ]
    x = np.stack(columns, axis=1)
    step, first = _grid_steps(np.nanmin(x, 0), np.nanmax(x, 0), bins)
    # Every bin boundary in reach and its two neighbours: the values a wrong product would bin apart.
    edges = np.ldexp((first[None, :] + rng.integers(0, bins, (300, x.shape[1]))).astype(np.float64), step[None, :])
    x = np.concatenate([x, edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    x = np.clip(x, np.nanmin(columns, 1), np.nanmax(columns, 1))  # inside each column's range
    step, first = _grid_steps(x.min(0), x.max(0), bins)
    assert (np.abs(step) > 1022).any() and (np.abs(step) < 1022).any()
    counts = np.zeros((x.shape[1], bins), dtype=np.int64)
    data = float32_block(x)
    _sketch_table.grid_counts(data, None, step, first, counts)
    want = np.clip(np.floor(np.ldexp(x, -step[None, :])).astype(np.int64) - first[None, :], 0, bins - 1)
    for j in range(x.shape[1]):
        np.testing.assert_array_equal(counts[j], np.bincount(want[:, j], minlength=bins), err_msg=f"column {j}")


@pytest.mark.parametrize("order", ["random", "ascending", "descending"])
def test_tails_keep_the_k_extreme_finite_values(order: str) -> None:
    """The tails' kernels read only the blocks that can hold an end's value: what they keep is still each end's k values."""
    rng = np.random.default_rng(9)
    x = rng.normal(1000.0, np.logspace(-2, 2, 6), (3000, 6))
    x[rng.random(x.shape) < 0.02] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    if order != "random":
        x = np.sort(x, axis=0)[:: 1 if order == "ascending" else -1]
    k = 128
    low, high = tails_chunk(np.ascontiguousarray(x.astype(np.float32)), k)
    for j in range(6):
        finite = np.sort(x[:, j][np.isfinite(x[:, j])].astype(np.float32).astype(np.float64))
        np.testing.assert_array_equal(low[j], finite[:k])
        np.testing.assert_array_equal(high[j], finite[::-1][:k])


@pytest.mark.parametrize("namespace", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("dtypes", [("float64", "float64"), ("float32", "float64")])
def test_a_merge_of_marked_features_is_the_sorting_merges_bit_for_bit(namespace: str, dtypes: tuple[str, str]) -> None:
    """States marked in every feature merge without a sort, to the values, counts and marks the sort gives."""
    from daskbatch.stats.sketch_distinct import merge_distinct

    xp = pytest.importorskip(namespace)
    k, rng = 8, np.random.default_rng(7)

    def state(n_features: int, dtype: str, held: list[int]) -> tuple:
        values = np.sort(rng.normal(size=(n_features, k)), axis=1).astype(dtype)
        counts = rng.integers(1, 5, size=(n_features, k)).astype(np.float64)
        return xp.asarray(values), xp.asarray(counts), xp.asarray(np.array(held, dtype=np.int64))

    # Three features marked on one side or both (held k + 1); a fourth, live on both, takes the sorting merge.
    a, b = state(4, dtypes[0], [k + 1, 3, k + 1, 2]), state(4, dtypes[1], [2, k + 1, k + 1, 3])
    sorted_merge = merge_distinct(a, b, k)
    fast = merge_distinct(tuple(s[:3, ...] for s in a), tuple(s[:3, ...] for s in b), k)
    for got, want in zip(fast, sorted_merge, strict=True):
        assert got.dtype == want.dtype
        assert np.asarray(got).tobytes() == np.asarray(want[:3, ...]).tobytes()
    assert np.asarray(sorted_merge[2]).tolist() == [k + 1, k + 1, k + 1, 5]  # the live one: 2 + 3 values


def test_distinct_values_of_features_that_stop_at_different_rows() -> None:
    """Each feature's distinct values and counts are np.unique's while it has at most k, whichever others stop counting first."""
    from daskbatch.stats.sketch_distinct import compiled_distinct

    k, rows = 8, 3000
    rng = np.random.default_rng(12)
    # 20 features, so two blocks of the compiled loop: features with 3..12 values, which pass k at
    # different rows (or never), continuous ones that pass it at once, NaN, ±inf and both zeros.
    x = np.stack([rng.integers(0, 3 + j % 10, rows).astype(np.float64) if j % 3 else rng.standard_normal(rows)
                  for j in range(20)], axis=1)
    x[::5, 1], x[::7, 2], x[::11, 4] = np.nan, np.inf, -0.0
    weights = rng.random(rows)
    for w in (None, weights):
        values, counts, held = compiled_distinct(x, k, w)
        for j in range(x.shape[1]):
            finite = np.isfinite(x[:, j])
            kept, where = np.unique(x[finite, j] + 0.0, return_inverse=True)
            if kept.size > k:
                assert held[j] == k + 1, j
                continue
            expected = np.bincount(where, weights=None if w is None else w[finite], minlength=kept.size)
            assert held[j] == kept.size, j
            np.testing.assert_array_equal(values[j, : kept.size], kept)
            np.testing.assert_allclose(counts[j, : kept.size], expected, rtol=1e-12)
