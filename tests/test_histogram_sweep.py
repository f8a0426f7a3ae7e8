"""The second pass's two histograms count each block in one sweep of its values, to the same bits.

:class:`daskbatch.stats.histogram.SweptBundle` hands the histograms of a bundle to one compiled loop
(``_numba_histogram._count_rows``, counted here through a wrapper that calls it) and must give every
statistic the state its own ``chunk`` gives: on NaN, ±inf, values on and beside every edge, beyond the
ranges, ranges the guarded loop needs, labels through ``classes``, and weights with zeros among them.
"""

from __future__ import annotations

import pathlib
from typing import Any

import dask
import numpy as np
import pytest

import daskbatch as db
from daskbatch.stats import Bundle, Histogram, Moments, kernels
from daskbatch.stats.histogram import QuantileHistogram, SweptBundle

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

from tests.test_histogram_fast import RANGES, _chunk  # noqa: E402 - after the skip: it needs numba


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The grids of each run of the compiled histogram loop, as they happen."""
    from daskbatch.stats.kernels import _numba_histogram

    loop = _numba_histogram._count_rows
    seen: list[int] = []

    def counted(*args: Any) -> Any:
        seen.append(args[2].shape[0])  # lo: (grids, features)
        return loop(*args)

    monkeypatch.setattr(_numba_histogram, "_count_rows", counted)
    return seen


def _bits(state: Any) -> np.ndarray:
    """The counts of a histogram state as int64 bits (float64 sums of weights compared bit for bit)."""
    return np.asarray(state.counts).view(np.int64)


def _statistics(d: int, lo: np.ndarray, hi: np.ndarray, guarded: bool) -> tuple[Any, ...]:
    """A histogram by label through ``classes``, a fine one on other ranges, and moments riding along."""
    # The fine grid on ranges shifted by a third of their width; with ``guarded`` one feature's range
    # overflows the scale, so that both grids take the loop for any range.
    fine_lo, fine_hi = lo + (hi - lo) / 3, hi + (hi - lo) / 3
    finite = np.isfinite(fine_lo) & np.isfinite(fine_hi) & (fine_lo < fine_hi)
    fine_lo, fine_hi = np.where(finite, fine_lo, -1.0), np.where(finite, fine_hi, 2.0)
    if guarded:
        fine_lo[0], fine_hi[0] = -1.7e308, 1.7e308
    hist = Histogram(bins=9, lo=tuple(lo), hi=tuple(hi), by_label=True, classes=(2, 5, 11))
    fine = QuantileHistogram(bins=257, lo=tuple(fine_lo), hi=tuple(fine_hi))
    return hist, Moments(), fine


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("guarded", [False, True])
def test_one_sweep_gives_each_histogram_its_own_counts(sweeps: list[int], dtype: str, weighted: bool,
                                                       guarded: bool) -> None:
    x, lo, hi = _chunk(7, 9, 3000, seed=4, ranges=[r for r in RANGES if np.isfinite(r[1] - r[0])])
    with np.errstate(over="ignore"):  # float32: the values beyond its range become ±inf
        x = np.ascontiguousarray(x.astype(dtype))
    rng = np.random.default_rng(5)
    label = rng.choice(np.array([2, 5, 11]), x.shape[0])
    weights = rng.uniform(0.0, 4.0, x.shape[0]) * (rng.random(x.shape[0]) > 0.2) if weighted else None
    stats = _statistics(x.shape[1], lo, hi, guarded)
    with np.errstate(all="ignore"):
        alone = Bundle(stats).chunk(x, label, weights=weights)
        assert sweeps == [1, 1]  # each histogram its own sweep
        swept = SweptBundle(stats).chunk(x, label, weights=weights)
    assert sweeps == [1, 1, 2]  # then one for both
    for stat, a, b in zip(stats, alone, swept, strict=True):
        assert type(a) is type(b), stat.name
        if isinstance(stat, Histogram):
            assert a.counts.dtype == b.counts.dtype == (np.float64 if weighted else np.int64)
            np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=stat.name)
        else:
            for name in vars(a):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert int(np.asarray(swept[0].counts).sum() > 0) and int(np.asarray(swept[2].counts)[:, 0].sum() > 0)


def test_no_sweep_to_share_takes_the_plain_bundle(sweeps: list[int]) -> None:
    x, lo, hi = _chunk(5, 9, 500, seed=2, ranges=[(0.0, 1.0), (-3.5, -1.25)])
    hist, _, fine = _statistics(5, lo, hi, guarded=False)
    label = np.full(x.shape[0], 5)
    with np.errstate(all="ignore"):
        lone = SweptBundle((fine, Moments())).chunk(x, label)  # one histogram: nothing to share
        assert sweeps == [1]
        with dask.config.set({"daskbatch.kernels": False}):  # the array-API code counts each alone
            off = SweptBundle((hist, fine)).chunk(x, label)
        assert sweeps == [1]
        on = SweptBundle((hist, fine)).chunk(x, label)
    assert sweeps == [1, 2]
    np.testing.assert_array_equal(_bits(lone[0]), _bits(on[1]))
    for a, b in zip(off, on, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    # Empty blocks and blocks whose every weight is zero: each histogram's empty state.
    empty = SweptBundle((hist, fine)).chunk(x[:0], label[:0])
    assert [np.asarray(s.counts).shape for s in empty] == [(5, 12, 3), (5, 260, 1)] and sweeps == [1, 2]
    zero = SweptBundle((hist, fine)).chunk(x, label, weights=np.zeros(x.shape[0]))
    assert all(not np.asarray(s.counts).any() and s.counts.dtype == np.float64 for s in zero)


def test_one_grid_and_two_take_one_compiled_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    from daskbatch.stats.kernels import _numba_histogram

    # The cold first call compiles the loop once (kernels.ahead compiles it from a lone histogram):
    # sweeping two grids must call it with the same argument types, not a specialization of its own.
    loop = _numba_histogram._count_rows
    types: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_numba_histogram, "_count_rows",
                        lambda *args: (types.append(tuple(map(numba.typeof, args))), loop(*args))[1])
    x, lo, hi = _chunk(4, 9, 300, seed=6, ranges=[(0.0, 1.0), (-1.0, 1.0)])
    hist, _, fine = _statistics(4, lo, hi, guarded=False)
    label = np.full(x.shape[0], 11)
    with np.errstate(all="ignore"):
        x = x.astype(np.float32)
        fine.chunk(x)
        SweptBundle((hist, fine)).chunk(x, label)
    assert len(types) == 2 and types[0] == types[1], types


def test_two_histograms_by_label_do_not_share_a_sweep(sweeps: list[int]) -> None:
    x, lo, hi = _chunk(4, 9, 400, seed=3, ranges=[(0.0, 1.0)])
    label = np.random.default_rng(1).choice(np.array([2, 5, 11]), x.shape[0])
    by_value = Histogram(bins=9, lo=tuple(lo), hi=tuple(hi), by_label=True, classes=(2, 5, 11))
    by_cut = Histogram(bins=5, lo=tuple(lo), hi=tuple(hi), by_label=True, target_cuts=(4.0,))  # other class codes
    with np.errstate(all="ignore"):
        swept = SweptBundle((by_value, by_cut)).chunk(x, label)
        assert sweeps == [1, 1]  # the sweep reads one class code a row: the second counts alone
        alone = [by_value.chunk(x, label), by_cut.chunk(x, label)]
    for a, b in zip(alone, swept, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("source", ["store", "from_zarr"])
def test_describe_counts_both_histograms_of_a_block_in_one_sweep(tmp_path: pathlib.Path, sweeps: list[int],
                                                                 source: str) -> None:
    import dask.array as da

    store = tmp_path / "data.zarr"
    db.synth(6000, 5, classes=4, path=store, chunk_rows=1000)
    if source == "store":
        summary = db.describe(db.open_dataset(store, label="y"), stats=("moments", "hist", "mi"), bins=16)
    else:
        summary = db.describe(da.from_zarr(str(store), component="X"), label=da.from_zarr(str(store), component="y"),
                              stats=("moments", "hist", "mi"), bins=16)
    blocks = summary.provenance["n_chunks"]
    # Pass 2 holds the histogram by label and the quantile histogram: each block swept once, for both.
    assert sweeps == [2] * blocks, (sweeps, blocks)
    assert summary.arrays.hist_counts.sum() > 0 and summary.arrays.quantile_counts.sum() == 6000 * 5
