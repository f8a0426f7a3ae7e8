"""The compiled tails read only the blocks that can hold an end's value, and keep bit for bit what the heaps kept.

(And the sketch's dyadic grid, whose row's bins are now found in one branch-free loop, counts as before.)

:func:`~daskbatch.stats.sketch_tails.tails_chunk` of a NumPy block bounds each column's
k least values by the k-th least of its coarse blocks' minima, then reads only the blocks
whose minimum lies below it (:mod:`daskbatch.stats.kernels._numba_sketch`'s ``tail_*``).
These tests hold it to a frozen copy of the kernel it replaced (every value offered to two
max-heaps in row order), on shapes that end on and beside every block boundary, sorted and
trending columns, ties, zeros of both signs, NaN and infinities, in every input dtype.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

from daskbatch.stats import sketch_tails
from daskbatch.stats.kernels import _numba_sketch, _sketch_table
from daskbatch.stats.kernels._numba import _finite, _load, _weight
from daskbatch.stats.kernels.path import float32_block
from daskbatch.stats.sketch_tails import tails_chunk

BLOCK = sketch_tails.TAIL_BLOCK_ROWS


@numba.njit(cache=False)
def _frozen_heap_replace(h: np.ndarray, j: int, v: float) -> None:
    """The replaced kernel's sift-down, as it was."""
    k = h.shape[1]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        if c + 1 < k and h[j, c + 1] > h[j, c]:
            c += 1
        if h[j, c] <= v:
            break
        h[j, i] = h[j, c]
        i = c
    h[j, i] = v


@numba.njit(cache=False)
def _frozen_tail_heaps(
    x: np.ndarray, low: np.ndarray, neg_high: np.ndarray
) -> None:
    """The replaced kernel (``tail_heaps``), as it was: every finite value offered to both heaps in row order."""
    rows, n_features = x.shape
    below, above = np.empty(n_features), np.empty(n_features)
    for j in range(n_features):
        below[j], above[j] = low[j, 0], -neg_high[j, 0]
    for i in range(rows):
        outside = False
        for j in range(n_features):
            v = _load(x[i, j])
            outside |= (v < below[j]) | (v > above[j])
        if not outside:
            continue
        for j in range(n_features):
            v = _load(x[i, j])
            if _finite(v):
                if v < low[j, 0]:
                    _frozen_heap_replace(low, j, v)
                    below[j] = low[j, 0]
                if -v < neg_high[j, 0]:
                    _frozen_heap_replace(neg_high, j, -v)
                    above[j] = -neg_high[j, 0]


def _frozen_tails(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``tails_chunk`` of a NumPy block before the change."""
    low, neg_high = np.full((x.shape[1], k), np.inf), np.full((x.shape[1], k), np.inf)
    _frozen_tail_heaps(float32_block(x), low, neg_high)
    low.sort(axis=1)
    neg_high.sort(axis=1)
    return low, -neg_high


def _column(kind: str, rows: int, rng: np.random.Generator) -> np.ndarray:
    """One column of ``rows`` values of the given kind (float64)."""
    if kind == "random":
        return rng.normal(1000.0, 10.0, rows)
    if kind == "ascending":
        return np.sort(rng.normal(0.0, 1.0, rows))
    if kind == "descending":
        return np.sort(rng.normal(0.0, 1.0, rows))[::-1]
    if kind == "trend":  # rising with noise: no block's values all below the next one's
        return np.arange(rows) * 0.01 + rng.normal(0.0, 1.0, rows)
    if kind == "equal":
        return np.full(rows, 7.25)
    if kind == "ties":  # few distinct values: many equal to a bound
        return rng.integers(-3, 4, rows).astype(np.float64)
    if kind == "signed zeros":  # 0.0 and -0.0 among the kept values (round(-0.3) is -0.0)
        return np.round(rng.normal(0.0, 0.6, rows))
    if kind == "zero inflated":
        return np.where(rng.random(rows) < 0.7, 0.0, rng.lognormal(0.0, 2.0, rows))
    # "special": NaN, ±inf and large spreads between finite values
    col = rng.lognormal(0.0, 3.0, rows) * rng.choice([-1.0, 1.0], rows)
    col[rng.random(rows) < 0.2] = np.nan
    col[rng.random(rows) < 0.05] = np.inf
    col[rng.random(rows) < 0.05] = -np.inf
    return col


KINDS = [
    "random",
    "ascending",
    "descending",
    "trend",
    "equal",
    "ties",
    "signed zeros",
    "zero inflated",
    "special",
]


def _block(rows: int, dtype: str, seed: int = 3) -> np.ndarray:
    """A (rows, len(KINDS)) block, one column of each kind, in ``dtype``."""
    rng = np.random.default_rng(seed)
    x = np.stack([_column(kind, rows, rng) for kind in KINDS], axis=1)
    if dtype == "int64":
        return np.nan_to_num(x, nan=0.0, posinf=2**62, neginf=-(2**62)).astype(np.int64)
    with np.errstate(over="ignore"):  # float16: the large values become inf, which the tails skip
        return np.ascontiguousarray(x.astype(dtype))


def _assert_bitwise(
    got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], what: str
) -> None:
    """Equal bit patterns (so 0.0 is not -0.0), shapes and dtypes."""
    for side, g, w in zip(("low", "high"), got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what} {side}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
        )
        bad = np.flatnonzero((g.view(np.int64) != w.view(np.int64)).any(axis=1))
        assert bad.size == 0, (
            f"{what} {side}: columns {[KINDS[j % len(KINDS)] for j in bad]} differ"
        )


# Around every boundary: one block, 2k coarse blocks of one block (k = 128), two blocks per coarse
# block, longer blocks.
ROWS = [
    1,
    BLOCK - 1,
    BLOCK,
    BLOCK + 1,
    63,
    64,
    65,
    128 * BLOCK - 1,
    128 * BLOCK + 1,
    256 * BLOCK,
    256 * BLOCK + 1,
    512 * BLOCK - 1,
    512 * BLOCK + BLOCK + 1,
    sketch_tails.TAIL_BLOCKS * BLOCK + 1,  # longer blocks: of BLOCK + 1 rows
]


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tails_are_the_heaps_bit_for_bit(rows: int, dtype: str) -> None:
    """Each end's 128 values, for every kind of column, as the heaps kept them."""
    x = _block(rows, dtype)
    _assert_bitwise(tails_chunk(x, 128), _frozen_tails(x, 128), f"{rows} rows {dtype}")


@pytest.mark.parametrize("dtype", ["int64", "float16", "int8"])
@pytest.mark.parametrize("k", [1, 3, 128])
def test_tails_of_other_dtypes_and_k(dtype: str, k: int) -> None:
    """Integers and float16 (read through its table), and other counts per end, as the heaps kept them."""
    for rows in (5, 8 * k * BLOCK + 3):
        x = (
            _block(rows, dtype)
            if dtype != "int8"
            else _block(rows, "int64").clip(-128, 127).astype(np.int8)
        )
        _assert_bitwise(tails_chunk(x, k), _frozen_tails(x, k), f"{rows} rows {dtype} k={k}")


def test_tails_of_a_block_without_rows_or_features() -> None:
    """No rows: every kept value is the empty mark; no features: no tails."""
    low, high = tails_chunk(np.empty((0, 3), dtype=np.float32), 128)
    assert (low == np.inf).all() and (high == -np.inf).all() and low.shape == (3, 128)
    low, high = tails_chunk(np.empty((10, 0)), 128)
    assert low.shape == high.shape == (0, 128)


@pytest.mark.parametrize("descending", [True, False])
def test_a_sorted_chunk_reads_k_blocks_of_values_not_every_row(descending: bool) -> None:
    """A sorted column no longer offers every row to a heap: its candidates are the k blocks that hold its ends."""
    rng = np.random.default_rng(5)
    ordered = np.sort(rng.normal(0.0, 1.0, (65_536, 64)).astype(np.float32), axis=0)
    if descending:
        ordered = np.ascontiguousarray(ordered[::-1])
    k = 128
    data = float32_block(ordered)
    block, _, bound, n_cand, _ = sketch_tails.tail_bounds(data, k)
    assert bound is not None
    # The heaps read all 65,536 rows of each column; the bounds leave at most k blocks' values (1/16 here).
    assert block == BLOCK and n_cand.max() <= k * BLOCK, (block, n_cand.max())
    assert n_cand.min() >= k - 1  # the k least lie below the bound, but for the ones equal to it
    low, high = tails_chunk(ordered, k)
    column = np.sort(ordered, axis=0).astype(np.float64)
    np.testing.assert_array_equal(low, column[:k].T)
    np.testing.assert_array_equal(high, column[::-1][:k].T)


def test_the_count_stores_the_candidates_a_second_read_would() -> None:
    """The usual chunk's candidates are stored while they are counted: those a second read stores, bit for bit."""
    rng = np.random.default_rng(11)
    x = (rng.normal(1000.0, 3.0, (65_536, 16)) * rng.uniform(0.01, 100.0, 16)).astype(np.float32)
    k = 128
    data = float32_block(x)
    block, fine, bound, n_cand, stored = sketch_tails.tail_bounds(data, k)
    assert bound is not None and k <= n_cand.max() <= stored.shape[1]  # fits: no second read
    again, counts = np.empty((n_cand.size, int(n_cand.max()))), np.zeros_like(n_cand)
    _numba_sketch.tail_candidates(data, block, fine, bound, again, counts)
    np.testing.assert_array_equal(counts, n_cand)
    for c, n in enumerate(n_cand):
        assert stored[c, :n].tobytes() == again[c, :n].tobytes()
    low, high = tails_chunk(x, k)
    column = np.sort(x, axis=0).astype(np.float64)
    np.testing.assert_array_equal(low, column[:k].T)
    np.testing.assert_array_equal(high, column[::-1][:k].T)


@numba.njit(cache=False)
def _frozen_grid_counts(x, weights, step, first, counts):  # noqa: ANN001, ANN202
    """The grid's loop before its row's bins were found in one branch-free loop, as it was."""
    rows, n_features = x.shape
    top = counts.shape[1] - 1
    scale = np.empty(n_features)
    for j in range(n_features):
        scale[j] = math.ldexp(1.0, -step[j]) if -1022 <= -step[j] <= 1023 else 0.0
    for i in range(rows):
        w = _weight(weights, i)
        for j in range(n_features):
            v = _load(x[i, j])
            if _finite(v):
                scaled = v * scale[j] if scale[j] != 0.0 else math.ldexp(v, -step[j])
                b = np.int64(math.floor(scaled)) - first[j]
                counts[j, min(max(b, 0), top)] += w


@pytest.mark.parametrize("scales", ["normal", "mixed"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_grid_counts_are_the_frozen_loops(scales: str, weighted: bool, dtype: str) -> None:
    """The grid's counts, with NaN, ±inf and values past the grid's ends, as the loop it replaced counted them."""
    rng = np.random.default_rng(8)
    x = _block(3000, dtype)
    n_features = x.shape[1]
    step = rng.integers(-30, 30, n_features)
    if scales == "mixed":  # 2**-step no normal float for some features: ldexp per value there
        step[::3] = np.array([1030, -1040, 1100])[: step[::3].size]
    first = rng.integers(-50, 50, n_features)
    w = rng.random(3000) if weighted else None
    for count_dtype in (np.int32, np.int64, np.float64):
        got = np.zeros((n_features, 300), dtype=count_dtype)
        want = np.zeros_like(got)
        data = float32_block(x)
        _sketch_table.grid_counts(data, w, step, first, got)
        _frozen_grid_counts(data, w, step, first, want)
        np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_grid_tail_blocks_are_grid_counts_and_tail_blocks(dtype: str) -> None:
    """The fused sweep gives the grid and the tails' block minima of the two loops, bit for bit (NaN, ±inf, ±0 too)."""
    from daskbatch.stats.kernels.path import float32_block
    from daskbatch.stats.sketch_distinct import _grid_steps
    from daskbatch.stats.sketch_tails import tail_layout

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5_000, 6)) * np.logspace(-2, 2, 6) + 3).astype(dtype)
    x[rng.random(x.shape) < 0.02] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    x[rng.random(x.shape) < 0.02] = -0.0
    finite = np.where(np.isfinite(x), x, np.nan).astype(np.float64)
    step, first = _grid_steps(np.nanmin(finite, 0), np.nanmax(finite, 0), 64)
    data = float32_block(x)
    want, got = np.zeros((6, 64), np.int32), np.zeros((6, 64), np.int32)
    blocks_want, blocks_got = tail_layout(5_000, 6, 8), tail_layout(5_000, 6, 8)
    _sketch_table.grid_counts(data, None, step, first, want)
    _numba_sketch.tail_blocks(data, *blocks_want)
    _sketch_table.grid_tail_blocks(data, step, first, got, *blocks_got)
    assert np.array_equal(want, got)
    for a, b in zip(blocks_want[2:], blocks_got[2:], strict=True):
        assert np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))


def test_sketch_chunk_reads_grid_and_tails_in_one_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unweighted float32 chunk's grid and tails' block minima come from one sweep of it, not two."""
    from daskbatch.stats.sketch import Sketch

    calls: list[str] = []
    for module, name in ((_sketch_table, "grid_counts"), (_numba_sketch, "tail_blocks"), (_sketch_table, "grid_tail_blocks")):
        loop = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _loop=loop, _name=name: (calls.append(_name), _loop(*a))[1])
    x = np.random.default_rng(3).standard_normal((20_000, 4)).astype(np.float32)
    state = Sketch().chunk(x)
    assert calls == ["grid_tail_blocks"]
    assert np.array_equal(state.tail_low[:, 0], x.min(axis=0).astype(np.float64))
    calls.clear()
    Sketch().chunk(x, weights=np.ones(x.shape[0]))  # weighted: no tails, the grid's own loop
    assert calls == ["grid_counts"]
