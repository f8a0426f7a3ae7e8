"""The GPU kernels (daskbatch/kernels/_cuda.py) agree with the array-API reference path.

Two ways to run them:

* on any machine, under numba's CUDA simulator: the ``sim`` tests below run
  in a subprocess started with ``NUMBA_ENABLE_CUDASIM=1`` (the simulator must
  be chosen before ``numba.cuda`` is first imported, so the main test process
  is left alone); they feed NumPy chunks through ``cuda.to_device`` on small
  arrays (the simulator runs every GPU thread as a Python thread);
* on a CUDA machine (``@pytest.mark.gpu``): CuPy chunks through the statistics'
  own ``chunk()``, which routes them to the kernels, against NumPy chunks on
  the CPU path.

Moments and co-moments agree to 1e-12 relative, histogram counts and the
NaN/±inf counts exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import dask.config
import numpy as np
import pytest

from daskbatch.stats import CoMoments, CoMomentsState, Histogram, Moments, kernels

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sim = pytest.mark.skipif(not SIMULATED, reason="runs in the simulator subprocess")
MOMENT_FIELDS = ("n", "shift", "mean", "m2", "m3", "m4", "fmin", "fmax", "nan_count", "posinf_count", "neginf_count")
EXACT = ("n", "shift", "fmin", "fmax", "nan_count", "posinf_count", "neginf_count")


def host(a):  # noqa: ANN001, ANN201
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def reference(stat, x, y=None, weights=None):  # noqa: ANN001, ANN201
    """``stat.chunk`` on the array-API path (NumPy)."""
    with dask.config.set({"daskbatch.kernels": False}):
        return stat.chunk(x, y) if weights is None else stat.chunk(x, y, weights=weights)


def assert_moments(got, ref, rtol: float = 1e-12) -> None:  # noqa: ANN001
    for i, f in enumerate(MOMENT_FIELDS):
        g = host(got[i] if isinstance(got, tuple) else getattr(got, f))
        r = np.asarray(getattr(ref, f))
        assert g.dtype == np.float64, f
        if f in EXACT:
            np.testing.assert_array_equal(g, r, err_msg=f)
        else:
            scale = np.max(np.abs(r), initial=0.0)
            np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * scale, err_msg=f)


def assert_weighted_moments(got, ref, rtol: float = 1e-12) -> None:  # noqa: ANN001
    """A weighted state: ``rows`` and the counts exactly, the weight sum and moments to ``rtol``."""
    rows, *fields = got
    np.testing.assert_array_equal(host(rows), np.asarray(ref.rows))
    np.testing.assert_allclose(host(fields[0]), np.asarray(ref.n), rtol=rtol)
    assert_moments((np.asarray(ref.n), *fields[1:]), ref, rtol)


def assert_comoments(got, ref, rtol: float = 1e-12) -> None:  # noqa: ANN001
    """The GPU's fields against the CPU's: the upper triangle of ``c`` (zeros below), and the finalized results."""
    n, shift, mean, c, *rows = (host(v) for v in got)
    if rows:  # weighted: n is the weight sum, rows the number of complete rows
        assert float(rows[0]) == float(ref.rows)
        np.testing.assert_allclose(n, ref.n, rtol=rtol)
        n = np.asarray(ref.n)
    assert float(n) == float(ref.n)
    np.testing.assert_array_equal(shift, ref.shift)
    np.testing.assert_allclose(mean, ref.mean, rtol=rtol, atol=rtol * np.max(np.abs(ref.mean), initial=0.0))
    scale = np.max(np.abs(ref.c), initial=0.0)
    np.testing.assert_allclose(np.triu(c), np.triu(ref.c), rtol=rtol, atol=rtol * scale)
    np.testing.assert_array_equal(np.tril(c, -1), 0.0)  # the state's lower triangle: never written, mirrored at finalize
    got_result, ref_result = CoMoments().finalize(CoMomentsState(n, shift, mean, c)), CoMoments().finalize(ref)
    np.testing.assert_allclose(got_result.cov, ref_result.cov, rtol=rtol, atol=rtol * scale)
    np.testing.assert_array_equal(got_result.cov, got_result.cov.T)
    np.testing.assert_allclose(got_result.corr, ref_result.corr, rtol=rtol, atol=rtol)


def chunk(dtype: str = "float32", rows: int = 50, cols: int = 4, seed: int = 0, nonfinite: bool = True) -> np.ndarray:
    """Skewed, offset values; with NaN, ±inf, a column whose first finite value comes late."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random((rows, cols)) < 0.3
    base = rng.gamma(2.0, 3.0, size=(rows, cols)) + 100 + np.arange(cols)
    if np.dtype(dtype).kind in "iu":
        return np.round(base * 10).astype(dtype)
    x = base.astype(dtype)
    if nonfinite:
        x[3, 0] = np.nan
        x[7, 1] = np.inf
        x[8, 1] = -np.inf
        x[9, 2] = np.inf
        x[:20, 3] = np.nan  # the reference value comes from a later group of rows
    return x


def hist_for(x: np.ndarray, bins: int = 7, by_label: bool = False) -> Histogram:
    finite = np.where(np.isfinite(x), x, np.nan).astype(np.float64)
    lo, hi = np.nanmin(finite, axis=0), np.nanmax(finite, axis=0)
    # A range inside the data: under- and overflow, values on the edges.
    return Histogram(bins, tuple(lo + 1.0), tuple(np.maximum(hi - 2.0, lo + 2.0)), by_label=by_label)


# --- under the simulator ----------------------------------------------------------------------


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("rows_per_group", [None, 8])
def test_sim_moments(dtype: str, rows_per_group: int | None) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    assert_moments(_gpu.moments(cuda.to_device(x), rows_per_group=rows_per_group), reference(Moments(), x))


@sim
def test_sim_moments_edge_chunks() -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk()
    x[:, 1] = np.nan  # no finite value at all
    x[:, 2] = 7.0  # constant
    for part in (x, x[:1], x[5:9]):
        assert_moments(_gpu.moments(cuda.to_device(np.ascontiguousarray(part)), rows_per_group=3),
                       reference(Moments(), part))


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("block_rows", [None, 16])
def test_sim_comoments(dtype: str, block_rows: int | None) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    got = _gpu.comoments(cuda.to_device(x), rows_per_group=8, block_rows=block_rows)
    assert_comoments(got, reference(CoMoments(), x))


@sim
def test_sim_comoments_without_complete_rows() -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk()
    x[:, 0] = np.nan
    got = _gpu.comoments(cuda.to_device(x), rows_per_group=8)
    assert_comoments(got, reference(CoMoments(), x))


def _crossing_shapes(d: int, block_rows: int, rows_range: range) -> list[int]:
    """Row counts whose centring blocks split into more groups than the whole chunk does."""
    from daskbatch.stats.kernels import _gpu

    found = []
    for rows in rows_range:
        chunk_groups = _gpu.row_groups(rows, d)[1]
        blocks = {min(block_rows, rows - s) for s in range(0, rows, block_rows)}
        if max(_gpu.row_groups(kb, d)[1] for kb in blocks) > chunk_groups:
            found.append(rows)
    return found


def _scale_card_down(monkeypatch: pytest.MonkeyPatch, d: int) -> int:
    """Scale the buffer constants down for ``d`` features: a card whose share holds 16 rows, 2 rows a group, 8 groups aimed at."""
    from daskbatch.stats.kernels import _gpu

    card = 16 * 8 * d * _gpu.CENTRE_SHARE
    monkeypatch.setattr(_gpu, "MIN_GROUP_ROWS", 2)
    monkeypatch.setattr(_gpu, "TARGET_THREADS", 8 * d)
    monkeypatch.setattr(_gpu._SimBackend, "device_bytes", lambda self: card)
    return card


@sim
def test_sim_comoments_blocks_with_more_groups_than_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group buffer holds a centring block's groups when a block has more than the chunk (issue 18, 1).

    The buffer constants are scaled down so that the shapes stay small enough
    for the simulator: a card whose share holds 16 rows of 3 features, 2 rows
    a group at least, 8 groups aimed at.
    """
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    d = 3
    card = _scale_card_down(monkeypatch, d)
    crossing = _crossing_shapes(d, 16, range(17, 120))
    assert len(crossing) >= 3, crossing  # the shapes below do cross the old buffer's end
    for rows in crossing[:3] + [crossing[-1]]:
        x = chunk("float32", rows=rows, cols=d + 1, seed=rows)[:, 1:].copy()  # NaN/inf rows, 3 features
        assert _gpu.centring_blocks(rows, d, device_bytes=card)[1] > _gpu.row_groups(rows, d)[1]
        got = _gpu.comoments(cuda.to_device(x))
        assert_comoments(got, reference(CoMoments(), x))


@sim
def test_sim_comoments_one_syrk_per_chunk_where_the_card_share_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The centring buffer holds the whole chunk (one SYRK) when it fits the card's share, else share-sized blocks.

    The card is scaled down (its share holds 12 rows of 4 features) and the
    chunks cross every multiple of the buffer: one row under, on, one over.
    """
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    d, share_rows = 4, 12
    card = share_rows * 8 * d * _gpu.CENTRE_SHARE
    syrks: list[int] = []
    gram = _gpu._SimBackend.gram

    def counted(self, dev, c) -> None:  # noqa: ANN001
        syrks.append(dev.shape[0])
        gram(self, dev, c)

    monkeypatch.setattr(_gpu._SimBackend, "gram", counted)
    monkeypatch.setattr(_gpu._SimBackend, "device_bytes", lambda self: card)
    for rows in (1, 11, 12, 13, 23, 24, 25, 37):
        syrks.clear()
        x = chunk("float64", rows=max(rows, 21), cols=d, seed=rows)[-rows:].copy()
        assert_comoments(_gpu.comoments(cuda.to_device(x), rows_per_group=5), reference(CoMoments(), x))
        assert syrks == [min(share_rows, rows - s) for s in range(0, rows, share_rows)], (rows, syrks)
    monkeypatch.setattr(_gpu._SimBackend, "device_bytes", lambda self: None)  # unknown card: the whole chunk
    syrks.clear()
    x = chunk("float32", rows=37, cols=d, seed=3)
    assert_comoments(_gpu.comoments(cuda.to_device(x)), reference(CoMoments(), x))
    assert syrks == [37]


@sim
def test_sim_zero_feature_chunks_match_the_cpu() -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = np.zeros((20, 0), dtype=np.float32)
    assert_moments(_gpu.moments(cuda.to_device(x)), reference(Moments(), x))
    assert_comoments(_gpu.comoments(cuda.to_device(x)), reference(CoMoments(), x))
    h = Histogram(5, (), ())
    got = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins)
    np.testing.assert_array_equal(got, reference(h, x).counts)


def test_centring_blocks_cover_the_issue_shapes() -> None:
    """At the real constants, the shapes of issue 18 finding 1 get a group buffer for their blocks' groups."""
    from daskbatch.stats.kernels import _gpu

    old_buffer = 256 * 2**20  # the centring buffer when the issue was written
    for rows, d in [(250_000, 512), (1_000_000, 128), (8_193, 4_096)]:
        chunk_groups = _gpu.row_groups(rows, d)[1]
        block_rows, groups = _gpu.centring_blocks(rows, d, block_rows=old_buffer // (8 * d))
        assert block_rows < rows
        assert groups > chunk_groups, (rows, d)  # a buffer of chunk_groups rows was written past its end
        for start in range(0, rows, block_rows):
            assert _gpu.row_groups(min(block_rows, rows - start), d)[1] <= groups
    card = 16 * 10**9  # today's buffer (a share of the card) crosses too, at other shapes
    block_rows = _gpu.centring_rows(10**9, 512, card)
    crossing = _crossing_shapes(512, block_rows, range(block_rows + 1, 4 * block_rows, 997))
    assert crossing
    for rows in crossing[:5]:
        assert _gpu.centring_blocks(rows, 512, device_bytes=card)[1] > _gpu.row_groups(rows, 512)[1]


def test_launch_silences_only_the_low_occupancy_warning() -> None:
    """numba-cuda warns on grids under 128 blocks; pytest (filterwarnings = error) would fail every small launch."""
    import warnings

    from daskbatch.stats.kernels import _gpu

    categories = _gpu._occupancy_warnings()
    assert categories, "numba's NumbaPerformanceWarning not found"
    for category in categories:
        _gpu.launch(lambda c=category: warnings.warn(
            c("Grid size 40 will likely result in GPU under-utilization due to low occupancy."), stacklevel=1))
        with pytest.raises(category, match="host array"):
            _gpu.launch(lambda c=category: warnings.warn(c("a host array was copied"), stacklevel=1))
    with pytest.raises(UserWarning):
        _gpu.launch(lambda: warnings.warn("Grid size 40 will likely result in GPU under-utilization", stacklevel=1))
    with pytest.warns(UserWarning, match="after"):  # the filters are back as they were
        warnings.warn("after", stacklevel=1)


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("shared_bytes", [None, 0])  # privatised counts / global atomics
@pytest.mark.parametrize("by_label", [False, True])
def test_sim_histogram(dtype: str, shared_bytes: int | None, by_label: bool) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    h = hist_for(x, by_label=by_label)
    y = np.random.default_rng(1).integers(0, 3, size=x.shape[0])
    ref = reference(h, x, y if by_label else None)
    labels = cuda.to_device(y.astype(np.int64)) if by_label else None
    options = {} if shared_bytes is None else {"shared_bytes": shared_bytes}
    got = _gpu.histogram(x=cuda.to_device(x), lo=h.lo, hi=h.hi, bins=h.bins, labels=labels,
                         n_classes=3 if by_label else 1, **options)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref.counts)
    assert got.sum() == x.size


@sim
@pytest.mark.parametrize("shared_bytes", [None, 0])  # privatised counts / global atomics
def test_sim_histogram_never_writes_a_class_outside_the_table(shared_bytes: int | None) -> None:
    """A class code outside 0..K-1 (trusted labels that were wrong) leaves its row uncounted instead of writing past the table."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk("float64")
    h = hist_for(x, by_label=True)
    y = np.random.default_rng(2).integers(0, 3, size=x.shape[0])
    codes = y.copy()
    codes[[2, 11, 30, 49]] = [-1, 3, 2**40, -(2**40)]
    keep = (codes >= 0) & (codes < 3)
    options = {} if shared_bytes is None else {"shared_bytes": shared_bytes}
    got = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins, labels=cuda.to_device(codes), n_classes=3, **options)
    np.testing.assert_array_equal(got, reference(h, np.ascontiguousarray(x[keep]), y[keep]).counts)
    assert got.sum() == keep.sum() * x.shape[1]


@sim
def test_sim_histogram_on_the_edges() -> None:
    """Values exactly on every bin edge (the scaled index is one off there) count as numpy.histogram counts them."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    h = Histogram(10, (0.1, -3.0), (0.7, 1e-3))
    edges = np.asarray(h.edges(np)).T  # (bins + 1, 2)
    x = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    got = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins)
    np.testing.assert_array_equal(got, reference(h, x).counts)
    for j in range(2):
        inside = x[:, j][(x[:, j] >= h.lo[j]) & (x[:, j] <= h.hi[j])]
        np.testing.assert_array_equal(got[j, 1:-2, 0], np.histogram(inside, bins=h.bins, range=(h.lo[j], h.hi[j]))[0])


# --- weighted rows, under the simulator -----------------------------------------------------------


def weights_for(rows: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    """Positive float64 weights spread over two decades, or small integers (a row repeated that often)."""
    rng = np.random.default_rng(seed)
    if integer:
        return rng.integers(1, 4, size=rows).astype(np.float64)
    return np.exp(rng.uniform(-2.3, 2.3, size=rows))


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("rows_per_group", [None, 8])
def test_sim_weighted_moments(dtype: str, rows_per_group: int | None) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    w = weights_for(x.shape[0])
    got = _gpu.moments(cuda.to_device(x), rows_per_group=rows_per_group, weights=cuda.to_device(w))
    assert_weighted_moments(got, reference(Moments(), x, weights=w))


@sim
def test_sim_weighted_kernels_through_the_dispatch() -> None:
    """kernels.weighted_* hand a block on the numba-cuda path to the GPU kernels (float32 weights are cast)."""
    from numba import cuda

    from daskbatch.stats.kernels.path import KernelPath

    x = chunk("float64")
    w = weights_for(x.shape[0], seed=3)
    on_gpu = KernelPath("numba-cuda", "a device block")
    dx, dw = cuda.to_device(x), cuda.to_device(w.astype(np.float32))
    w32 = w.astype(np.float32).astype(np.float64)
    assert_weighted_moments(kernels.weighted_moments(dx, dw, on_gpu), reference(Moments(), x, weights=w32))
    assert_comoments(kernels.weighted_comoments(dx, dw, on_gpu), reference(CoMoments(), x, weights=w32))
    h = hist_for(x)
    got = kernels.weighted_histogram(dx, h.lo, h.hi, h.bins, None, 1, dw, on_gpu)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference(h, x, weights=w32).counts, rtol=1e-12)


@sim
def test_sim_weighted_edge_chunks() -> None:
    """No finite value, a constant column, one row, featureless: as the array-API path."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk()
    x[:, 1] = np.nan
    x[:, 2] = 7.0
    w = weights_for(x.shape[0], seed=1)
    for rows in (slice(None), slice(0, 1), slice(5, 9)):
        part, wp = np.ascontiguousarray(x[rows]), np.ascontiguousarray(w[rows])
        ref = reference(Moments(), part, weights=wp)
        assert_weighted_moments(_gpu.moments(cuda.to_device(part), rows_per_group=3, weights=cuda.to_device(wp)), ref)
        got = _gpu.comoments(cuda.to_device(part), rows_per_group=3, weights=cuda.to_device(wp))
        assert_comoments(got, reference(CoMoments(), part, weights=wp))
    empty = np.zeros((20, 0), dtype=np.float32)
    we = weights_for(20, seed=2)
    assert_weighted_moments(_gpu.moments(cuda.to_device(empty), weights=cuda.to_device(we)),
                            reference(Moments(), empty, weights=we))
    assert_comoments(_gpu.comoments(cuda.to_device(empty), weights=cuda.to_device(we)),
                     reference(CoMoments(), empty, weights=we))
    h = Histogram(5, (), ())
    got = _gpu.histogram(cuda.to_device(empty), h.lo, h.hi, h.bins, weights=cuda.to_device(we))
    assert got.dtype == np.float64 and got.shape == (0, 8, 1)


@sim
@pytest.mark.parametrize("weighted", [False, True])
def test_sim_chunks_without_rows_launch_nothing(weighted: bool) -> None:
    """0 rows: the CPU kernels' empty states, and no launch (a grid of 0 blocks, which a device refuses)."""
    from numba import cuda

    from daskbatch.stats import ClassMoments
    from daskbatch.stats.kernels import _gpu

    empty = np.zeros((0, 5), dtype=np.float32)
    w = np.zeros(0) if weighted else None

    def dev(a):  # noqa: ANN001, ANN202
        return None if a is None else cuda.to_device(a)

    got = _gpu.moments(dev(empty), weights=dev(w))
    if weighted:
        assert_weighted_moments(got, reference(Moments(), empty, weights=w))
    else:
        assert_moments(got, reference(Moments(), empty))
    assert_comoments(_gpu.comoments(dev(empty), weights=dev(w)), reference(CoMoments(), empty, weights=w))
    got = _gpu.class_moments(dev(empty), cuda.to_device(np.zeros(0, dtype=np.int64)), 3, dev(w))
    assert_class_moments(got, reference(ClassMoments(n_classes=3), empty, np.zeros(0, dtype=np.int64), weights=w), weighted)


@sim
@pytest.mark.parametrize("weighted", [False, True])
def test_sim_overflowing_variance_stays_infinite(weighted: bool) -> None:
    """A 1e300 sentinel: m2, m4 and the co-moments' diagonal +inf as on the CPU (not the 0 of fmax, or inf - inf)."""
    from numba import cuda

    from daskbatch.stats import ClassMoments
    from daskbatch.stats.kernels import _gpu

    x = np.random.default_rng(3).normal(size=(70, 3))
    x[9, 0] = 1e300
    y = np.arange(70, dtype=np.int64) % 2
    w = weights_for(70, seed=5) if weighted else None
    # The simulator's threads do NumPy scalar arithmetic, whose overflow warnings no errstate here reaches.
    with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = reference(Moments(), x, weights=w)
        got = _gpu.moments(cuda.to_device(x), rows_per_group=8, weights=None if w is None else cuda.to_device(w))
        ref_class = reference(ClassMoments(n_classes=2), x, y, weights=w)
        got_class = _gpu.class_moments(cuda.to_device(x), cuda.to_device(y), 2,
                                                     None if w is None else cuda.to_device(w), rows_per_group=8)
        c = host(_gpu.comoments(cuda.to_device(x), rows_per_group=8, weights=None if w is None else cuda.to_device(w))[3])
        c_ref = np.asarray(reference(CoMoments(), x, weights=w).c)
    assert np.isposinf(c[0, 0]) and np.isposinf(c_ref[0, 0])  # the co-moments' diagonal: the variance's +inf
    np.testing.assert_allclose(np.triu(c)[1:, 1:], np.triu(c_ref)[1:, 1:], rtol=1e-12, atol=1e-12 * np.max(np.abs(c_ref[1:, 1:])))
    fields = got[1:] if weighted else got
    assert np.isposinf(host(fields[3])[0]) and np.isposinf(host(fields[5])[0])  # m2, m4
    assert np.isposinf(host(got_class[3])[0, 1])  # the sentinel's class
    # Each field to 1e-12 of the ordinary features' scale: inf equals inf, NaN (m3 of the sentinel's feature) NaN.
    for name, g in [*zip(MOMENT_FIELDS, fields, strict=True), *zip(("n", "shift", "mean", "m2"), got_class, strict=True)]:
        r = np.asarray(getattr(ref if np.ndim(g) == 1 else ref_class, name))  # (D,), or (D, K) by class
        np.testing.assert_allclose(host(g), r, rtol=1e-12, atol=1e-12 * np.max(np.abs(r[1:]), initial=0.0), err_msg=name)


@sim
def test_sim_backend_refuses_the_launches_a_device_refuses() -> None:
    """The simulator runs a grid of 0 blocks as nothing at all; the backend refuses it, as a GPU does."""
    from numba import cuda

    from daskbatch.stats.kernels import _cuda_moments, _gpu

    be = _gpu._backend(cuda.to_device(np.zeros((1, 1))))
    with pytest.raises(ValueError, match=r"kernel moments_finish: .*empty dimension"):
        be.launch(_cuda_moments.moments_finish, 0, 1)


def test_launch_shapes_a_device_refuses() -> None:
    from daskbatch.stats.kernels._gpu import MAX_BLOCK_THREADS, MAX_GRID_Y, check_launch_shape

    def kernel() -> None: ...

    check_launch_shape(kernel, (3, MAX_GRID_Y), (MAX_BLOCK_THREADS, 1))  # the largest allowed
    check_launch_shape(kernel, 5, 128)
    for grid, block, problem in [((0, 3), (128, 1), "empty dimension"), (1, 0, "empty dimension"),
                                 ((1, MAX_GRID_Y + 1), (32, 1), "taller"), ((1, 1, MAX_GRID_Y + 1), 1, "taller"),
                                 (1, (MAX_BLOCK_THREADS + 1,), "threads"), (1, (64, 32), "threads")]:
        with pytest.raises(ValueError, match=rf"^kernel kernel: .*{problem}"):
            check_launch_shape(kernel, grid, block)


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("block_rows", [None, 16])
def test_sim_weighted_comoments(dtype: str, block_rows: int | None) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    w = weights_for(x.shape[0], seed=4)
    got = _gpu.comoments(cuda.to_device(x), rows_per_group=8, block_rows=block_rows, weights=cuda.to_device(w))
    assert len(got) == 5
    assert_comoments(got, reference(CoMoments(), x, weights=w))


@sim
def test_sim_weighted_comoments_across_centring_blocks_and_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scaled-down card of the unweighted tests: blocks with more groups than the chunk, every buffer boundary."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    d = 3
    card = _scale_card_down(monkeypatch, d)
    crossing = _crossing_shapes(d, 16, range(17, 120))
    assert all(_gpu.centring_blocks(r, d, device_bytes=card)[1] > _gpu.row_groups(r, d)[1] for r in crossing)
    for rows in [15, 16, 17, 31, 32, 33, *crossing[:2], crossing[-1]]:
        x = chunk("float32", rows=max(rows, 21), cols=d + 1, seed=rows)[-rows:, 1:].copy()
        w = weights_for(rows, seed=rows)
        got = _gpu.comoments(cuda.to_device(x), weights=cuda.to_device(w))
        assert_comoments(got, reference(CoMoments(), x, weights=w))
        assert_weighted_moments(_gpu.moments(cuda.to_device(x), weights=cuda.to_device(w)),
                                reference(Moments(), x, weights=w))


@sim
def test_sim_integer_weights_equal_repeated_rows() -> None:
    """A row of weight k is the row k times: moments, co-moments and histograms by label on the GPU kernels."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk("float64", rows=60)
    w = weights_for(x.shape[0], seed=5, integer=True)
    y = np.random.default_rng(6).integers(0, 3, size=x.shape[0])
    rep = np.ascontiguousarray(np.repeat(x, w.astype(np.int64), axis=0))
    rep_y = np.repeat(y, w.astype(np.int64))
    dx, dw = cuda.to_device(x), cuda.to_device(w)
    plain = _gpu.moments(cuda.to_device(rep), rows_per_group=8)
    weighted = _gpu.moments(dx, rows_per_group=8, weights=dw)
    np.testing.assert_array_equal(weighted[0] + 0 * weighted[1], np.isfinite(x).sum(axis=0))
    np.testing.assert_array_equal(weighted[1], plain[0])  # the weight sum is the repeated count
    for i in (1, 6, 7):  # shift, fmin, fmax
        np.testing.assert_array_equal(weighted[1 + i], plain[i])
    for i in (2, 3, 4, 5):  # mean, m2, m3, m4
        np.testing.assert_allclose(weighted[1 + i], plain[i], rtol=1e-12, atol=1e-12 * np.max(np.abs(plain[i])))
    cw = _gpu.comoments(dx, rows_per_group=8, weights=dw)
    cp = _gpu.comoments(cuda.to_device(rep), rows_per_group=8)
    assert float(cw[0]) == float(cp[0])
    np.testing.assert_allclose(cw[3], cp[3], rtol=1e-12, atol=1e-12 * np.max(np.abs(cp[3])))
    h = hist_for(x, by_label=True)
    for shared_bytes in (h.n_slots * 3 * 8 * 4, 0):  # float64 counters in shared memory / global atomics
        got = _gpu.histogram(dx, h.lo, h.hi, h.bins, cuda.to_device(y.astype(np.int64)), 3, shared_bytes, weights=dw)
        want = _gpu.histogram(cuda.to_device(rep), h.lo, h.hi, h.bins, cuda.to_device(rep_y.astype(np.int64)), 3,
                              shared_bytes)
        np.testing.assert_array_equal(got, want.astype(np.float64))


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("shared_bytes", [None, 4 * 10 * 3 * 4, 0])  # float64 tile / uint32-only room: global / global
@pytest.mark.parametrize("by_label", [False, True])
def test_sim_weighted_histogram(dtype: str, shared_bytes: int | None, by_label: bool) -> None:
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    h = hist_for(x, by_label=by_label)
    k = 3 if by_label else 1
    y = np.random.default_rng(1).integers(0, 3, size=x.shape[0])
    w = weights_for(x.shape[0], seed=7)
    w[[4, 10]] = 0.0  # a zero weight counts nothing
    ref = reference(h, x, y if by_label else None, weights=w)
    labels = cuda.to_device(y.astype(np.int64)) if by_label else None
    options = {} if shared_bytes is None else {"shared_bytes": shared_bytes}
    room = _gpu.SHARED_BYTES if shared_bytes is None else shared_bytes
    layout = _gpu.histogram_layout(x.shape[0], x.shape[1], h.bins, k, room, counter_bytes=8)
    if shared_bytes is None:
        assert layout is not None  # the float64 counters fit: the privatised kernel runs
    elif by_label and shared_bytes:  # room for a tile of uint32 counts, not of float64 sums
        assert layout is None and _gpu.histogram_layout(x.shape[0], x.shape[1], h.bins, k, shared_bytes) is not None
    got = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins, labels, k, weights=cuda.to_device(w), **options)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref.counts, rtol=1e-12)
    np.testing.assert_allclose(got.sum(), w.sum() * x.shape[1], rtol=1e-12)
    unweighted = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins, labels, k, **options)
    np.testing.assert_array_equal(unweighted, reference(h, x, y if by_label else None).counts)


@sim
@pytest.mark.parametrize("weighted", [False, True])
def test_sim_histogram_across_tiles_and_row_blocks(monkeypatch: pytest.MonkeyPatch, weighted: bool) -> None:
    """10 features in tiles of 4 (the last one short), 61 rows in blocks of 8 (the last one short), by label."""
    from numba import cuda

    from daskbatch.stats.kernels import _gpu

    monkeypatch.setattr(_gpu, "HIST_MIN_BLOCK_ROWS", 8)
    monkeypatch.setattr(_gpu, "HIST_THREADS", 12)
    x = chunk("float32", rows=61, cols=10, seed=9)
    y = np.random.default_rng(9).integers(0, 2, size=x.shape[0])
    h = hist_for(x, bins=5, by_label=True)
    counter = 8 if weighted else 4
    room = 4 * h.n_slots * 2 * counter  # a tile of 4 features' counters
    assert _gpu.histogram_layout(61, 10, h.bins, 2, room, counter) == (4, 3, 8)
    w = weights_for(x.shape[0], seed=9) if weighted else None
    got = _gpu.histogram(cuda.to_device(x), h.lo, h.hi, h.bins, cuda.to_device(y.astype(np.int64)), 2, room,
                         weights=None if w is None else cuda.to_device(w))
    ref = reference(h, x, y, weights=w).counts
    if weighted:
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    else:
        np.testing.assert_array_equal(got, ref)


def assert_class_moments(got, ref, weighted: bool, rtol: float = 1e-12) -> None:  # noqa: ANN001
    """The GPU's (n, shift, mean, m2) against the array-API state: n (unweighted) and shift exactly."""
    for name, g in zip(("n", "shift", "mean", "m2"), got, strict=True):
        g, r = host(g), np.asarray(getattr(ref, name))
        assert g.shape == r.shape and g.dtype == np.float64, name
        if name == "shift" or (name == "n" and not weighted):
            np.testing.assert_array_equal(g, r, err_msg=name)
        else:
            np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * np.max(np.abs(r), initial=0.0), err_msg=name)


@sim
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("rows_per_group", [None, 7])
@pytest.mark.parametrize("weighted", [False, True])
def test_sim_class_moments(dtype: str, rows_per_group: int | None, weighted: bool) -> None:
    """Per-class moments (a class absent from the chunk, one whose values are all NaN in a column), with and without weights."""
    from numba import cuda

    from daskbatch.stats import ClassMoments
    from daskbatch.stats.kernels import _gpu

    x = chunk(dtype)
    y = np.random.default_rng(2).integers(0, 3, size=x.shape[0])  # class 3 of 4 never occurs
    if dtype.startswith("float"):
        x[y == 1, 0] = np.nan
    w = weights_for(x.shape[0], seed=12) if weighted else None
    got = _gpu.class_moments(cuda.to_device(x), cuda.to_device(y.astype(np.int64)), 4,
                                           None if w is None else cuda.to_device(w), rows_per_group=rows_per_group)
    assert_class_moments(got, reference(ClassMoments(n_classes=4), x, y, weights=w), weighted)


@sim
def test_sim_class_moments_more_classes_than_grid_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folds whose classes outnumber the grid's rows take several classes per row (MAX_GRID_Y scaled down to 2)."""
    from numba import cuda

    from daskbatch.stats import ClassMoments
    from daskbatch.stats.kernels import _gpu

    # the fold, the row groups and the launch-shape check read the same (scaled-down) limit
    monkeypatch.setattr(_gpu, "MAX_GRID_Y", 2)
    monkeypatch.setattr(_gpu, "MAX_GRID_Y", 2)
    x = chunk("float64", rows=40)
    y = np.random.default_rng(3).integers(0, 5, size=x.shape[0])
    w = weights_for(x.shape[0], seed=13, integer=True)
    got = _gpu.class_moments(cuda.to_device(x), cuda.to_device(y.astype(np.int64)), 5, cuda.to_device(w))
    assert_class_moments(got, reference(ClassMoments(n_classes=5), x, y, weights=w), weighted=True)
    rep = np.repeat(np.arange(x.shape[0]), w.astype(np.int64))  # integer weights: the rows repeated
    plain = _gpu.class_moments(cuda.to_device(np.ascontiguousarray(x[rep])),
                                             cuda.to_device(y[rep].astype(np.int64)), 5)
    np.testing.assert_array_equal(got[0], plain[0])
    for g, p in zip(got[1:], plain[1:], strict=True):
        np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-12 * np.max(np.abs(p)))


@pytest.mark.skipif(SIMULATED, reason="this is the test that starts the simulator")
def test_kernels_under_the_cuda_simulator() -> None:
    pytest.importorskip("numba.cuda")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_sim_", __file__],
        capture_output=True, text=True, env=env, cwd=root, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, result.stdout[-2000:]


def test_kernel_path_follows_the_array_and_the_setting() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    assert kernels.kernel_path(x).kind == ("numba-cpu" if kernels.available() else "array-api-numpy")
    assert kernels.kernel_path(x[:, 0]).kind == "array-api-numpy"
    with dask.config.set({"daskbatch.kernels": False}):
        assert kernels.kernel_path(x).kind == "array-api-numpy"
        assert kernels.route(x) is None


def test_route_names_the_compiled_kernels_or_none() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    assert kernels.route(x) == ("numba-cpu" if kernels.available() else None)
    assert kernels.route(x[:, 0]) is None  # 1-D: the array-API code


# --- on a CUDA device with CuPy ---------------------------------------------------------------

gpu = pytest.mark.gpu


#: The shape and seed of the chunk of the ``gpu`` tests: many row groups and histogram blocks.
BIG = {"rows": 60_000, "cols": 37, "seed": 4}
#: Classes of the ``gpu`` histogram tests at 64 bins: with 4 every feature tile fits in shared memory;
#: with these, not even 4 features' counters (uint32 counts; float64 weight sums) fit, so the counts
#: go to global memory. Checked without a GPU by test_gpu_tests_take_both_histogram_layouts.
NO_TILE_CLASSES = 50
NO_TILE_CLASSES_WEIGHTED = 40


@pytest.fixture(scope="module")
def big() -> tuple[np.ndarray, np.ndarray]:
    """A chunk large enough for many row groups and histogram blocks."""
    x = chunk("float32", **BIG)
    y = np.random.default_rng(5).integers(0, 4, size=x.shape[0]).astype(np.int32)
    return x, y


def big_as(big: tuple[np.ndarray, np.ndarray], dtype: str) -> np.ndarray:
    """The ``gpu`` tests' chunk as ``dtype``: bool a threshold on it, integers built as such (NaN does not cast)."""
    if dtype == "bool":
        return big[0] > 104
    if np.dtype(dtype).kind in "iu":
        return chunk(dtype, **BIG)
    return big[0].astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_gpu_tests_make_their_chunks_without_warnings(big: tuple[np.ndarray, np.ndarray], dtype: str) -> None:
    """What the ``gpu`` tests feed CuPy is valid data of each dtype (a warning here fails them before any kernel)."""
    x = big_as(big, dtype)
    assert x.dtype == np.dtype(dtype) and x.shape == (BIG["rows"], BIG["cols"])


def test_gpu_tests_take_both_histogram_layouts() -> None:
    """The ``gpu`` histogram tests run the shared-memory kernel and the global one, counts and weight sums."""
    from daskbatch.stats.kernels import _gpu

    shape = (BIG["rows"], BIG["cols"])
    assert _gpu.histogram_layout(*shape, 64, 4) is not None
    assert _gpu.histogram_layout(*shape, 64, NO_TILE_CLASSES) is None
    assert _gpu.histogram_layout(*shape, 64, 4, counter_bytes=8) is not None
    assert _gpu.histogram_layout(*shape, 64, NO_TILE_CLASSES_WEIGHTED, counter_bytes=8) is None


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_gpu_moments_equal_cpu(big: tuple[np.ndarray, np.ndarray], dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    x = big_as(big, dtype)
    d = cupy.asarray(x)
    assert kernels.kernel_path(d).kind == "numba-cuda" and kernels.route(d) == "numba-cuda"
    state = Moments().chunk(d)
    assert isinstance(state.mean, cupy.ndarray)
    assert_moments(state, reference(Moments(), x))


@gpu
@pytest.mark.parametrize("block_rows", [None, 7_000])
def test_gpu_comoments_equal_cpu(big: tuple[np.ndarray, np.ndarray], block_rows: int | None) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    x = big[0]
    got = _gpu.comoments(cupy.asarray(x), block_rows=block_rows)
    assert isinstance(got[3], cupy.ndarray)
    assert_comoments(got, reference(CoMoments(), x))
    state = CoMoments().chunk(cupy.asarray(x))  # through the dispatch
    assert_comoments((state.n, state.shift, state.mean, state.c), reference(CoMoments(), x))


@gpu
@pytest.mark.parametrize("n_classes", [4, NO_TILE_CLASSES])
def test_gpu_histogram_bitwise_equal_cpu(big: tuple[np.ndarray, np.ndarray], n_classes: int) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    x = big[0]
    y = np.random.default_rng(6).integers(0, n_classes, size=x.shape[0]).astype(np.int32)
    h = hist_for(x, bins=64, by_label=True)
    assert (_gpu.histogram_layout(x.shape[0], x.shape[1], 64, n_classes) is None) == (n_classes == NO_TILE_CLASSES)
    state = h.chunk(cupy.asarray(x), cupy.asarray(y))
    np.testing.assert_array_equal(state.counts.get(), reference(h, x, y).counts)
    plain = hist_for(x, bins=64)
    np.testing.assert_array_equal(plain.chunk(cupy.asarray(x)).counts.get(), reference(plain, x).counts)


@gpu
def test_gpu_kernels_run_on_cupys_current_stream(big: tuple[np.ndarray, np.ndarray]) -> None:
    cupy = pytest.importorskip("cupy")
    x = big[0]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        d = cupy.asarray(x)
        state = Moments().chunk(d)
        mean = state.mean * 1.0  # CuPy work after the kernels on the same stream
    stream.synchronize()
    assert_moments(state, reference(Moments(), x))
    np.testing.assert_array_equal(mean.get(), host(state.mean))


@gpu
def test_gpu_comoments_past_the_centring_buffer_equal_cpu() -> None:
    """250,000 x 512 float32: centring blocks of 65,536 rows split into more groups than the chunk (issue 18, 1)."""
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    rows, d, block_rows = 250_000, 512, 65_536  # the blocks of the 256 MiB buffer the issue found this with
    assert _gpu.centring_blocks(rows, d, block_rows=block_rows)[1] > _gpu.row_groups(rows, d)[1]
    x = chunk("float32", rows=rows, cols=d, seed=7)
    ref = reference(CoMoments(), x)
    assert_comoments(_gpu.comoments(cupy.asarray(x), block_rows=block_rows), ref, rtol=1e-11)
    state = CoMoments().chunk(cupy.asarray(x))  # the default buffer: one block, one SYRK
    assert _gpu.centring_blocks(rows, d)[0] == rows
    assert_comoments((state.n, state.shift, state.mean, state.c), ref, rtol=1e-11)


@gpu
def test_gpu_centring_buffer_follows_the_card(big: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    """One SYRK for the whole chunk on a real card; share-sized blocks on a card scaled down to 7,001 rows."""
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    x = big[0]
    ref = reference(CoMoments(), x)
    assert _gpu._Backend().device_bytes() == cupy.cuda.Device().mem_info[1]
    syrks: list[int] = []
    gram = _gpu._Backend.gram

    def counted(self, dev, c) -> None:  # noqa: ANN001
        syrks.append(dev.shape[0])
        gram(self, dev, c)

    monkeypatch.setattr(_gpu._Backend, "gram", counted)
    assert_comoments(_gpu.comoments(cupy.asarray(x)), ref)
    assert syrks == [x.shape[0]]
    syrks.clear()
    monkeypatch.setattr(_gpu, "_card_bytes", lambda device: 7_001 * 8 * x.shape[1] * _gpu.CENTRE_SHARE)
    assert_comoments(_gpu.comoments(cupy.asarray(x)), ref)
    assert syrks == [min(7_001, x.shape[0] - s) for s in range(0, x.shape[0], 7_001)]


@gpu
def test_gpu_fortran_ordered_and_featureless_blocks_equal_cpu(big: tuple[np.ndarray, np.ndarray]) -> None:
    cupy = pytest.importorskip("cupy")
    x = big[0]
    f = cupy.asfortranarray(cupy.asarray(x))
    assert_moments(Moments().chunk(f), reference(Moments(), x))
    state = CoMoments().chunk(f)
    assert_comoments((state.n, state.shift, state.mean, state.c), reference(CoMoments(), x))
    empty = np.zeros((100, 0), dtype=np.float32)
    assert_moments(Moments().chunk(cupy.asarray(empty)), reference(Moments(), empty))


@gpu
def test_gpu_histogram_ranges_go_to_the_device_once(big: tuple[np.ndarray, np.ndarray]) -> None:
    """The ranges are copied once per content, not per chunk (a pageable copy waits); evictions keep counts right."""
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    x = big[0]
    d = cupy.asarray(x)
    h = hist_for(x, bins=16)
    first = h.chunk(d).counts.get()
    kept = dict(_gpu._CONSTANTS)
    np.testing.assert_array_equal(h.chunk(d).counts.get(), first)
    assert _gpu._CONSTANTS.keys() == kept.keys()
    for k in range(_gpu._CONSTANTS_KEPT + 3):
        hk = Histogram(16, tuple(np.asarray(h.lo) - k), h.hi)
        np.testing.assert_array_equal(hk.chunk(d).counts.get(), reference(hk, x).counts)
    assert len(_gpu._CONSTANTS) == _gpu._CONSTANTS_KEPT
    np.testing.assert_array_equal(h.chunk(d).counts.get(), first)


def _spin(cupy, seconds: float) -> None:  # noqa: ANN001
    """Queue a one-thread kernel that keeps the current stream busy for ``seconds`` (by the GPU's global timer)."""
    kernel = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long ns) {
    long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
""", "spin")
    kernel((1,), (1,), (np.int64(seconds * 1e9),))


@gpu
def test_gpu_chunk_tasks_never_wait_for_the_device(big: tuple[np.ndarray, np.ndarray]) -> None:
    """A chunk task (moments, co-moments, histograms by label, device or staged host blocks) queues and returns.

    A kernel that spins for 10 s is queued first on the task's stream; had the
    task synchronised the host anywhere (a label check, the stager's end),
    it could not return before the spin ends. The states then equal the CPU's.
    """
    cupy = pytest.importorskip("cupy")
    from daskbatch.engine.reduce import Staged
    from daskbatch.stats import Bundle
    from daskbatch.stats.classes import labels_checked

    x, y = big
    classes = (0, 1, 2, 3)
    mi = Histogram(16, hist_for(x).lo, hist_for(x).hi, by_label=True, classes=classes)
    bundle = Bundle((Moments(), CoMoments(), hist_for(x, bins=16), mi))
    staged = Staged(bundle, 20_000)  # three parts through the double buffer
    dx, dy = cupy.asarray(x), cupy.asarray(y)
    with labels_checked():  # as describe's chunk tasks run, its labels checked on the host
        bundle.chunk(dx, dy)  # compiled, ranges on the device, stager buffers made
        staged.chunk(x, y)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    for run in (lambda: bundle.chunk(dx, dy), lambda: staged.chunk(x, y)):
        with stream, labels_checked():
            _spin(cupy, 10.0)
            state = run()
            busy = not stream.done
        stream.synchronize()
        assert busy, "the chunk task waited for the device"
        assert_moments(state[0], reference(Moments(), x))
        assert_comoments((state[1].n, state[1].shift, state[1].mean, state[1].c), reference(CoMoments(), x))
        np.testing.assert_array_equal(state[3].counts.get(), reference(mi, x, y).counts)


@sim
def test_sim_comoment_states_merge_with_cpu_states_and_save_mirrored(tmp_path: Path) -> None:
    """A GPU state (upper triangle, zeros below) merges with CPU states in any order; finalize and saving mirror it."""
    import functools

    import zarr
    from numba import cuda

    from daskbatch.io.state_codec import read_states, write_states
    from daskbatch.stats.kernels import _gpu
    from daskbatch.stats.registry import Kept

    x = chunk("float64", rows=60)
    parts = [np.ascontiguousarray(p) for p in (x[:25], x[25:40], x[40:])]
    stat = CoMoments()
    cpu = [reference(stat, p) for p in parts]
    on_gpu = CoMomentsState(*_gpu.comoments(cuda.to_device(parts[1]), rows_per_group=4))
    assert np.all(np.tril(on_gpu.c, -1) == 0) and np.any(np.triu(on_gpu.c, 1) != 0)
    want = stat.finalize(functools.reduce(stat.merge, cpu))
    scale = np.max(np.abs(want.cov))
    for states in ([cpu[0], on_gpu, cpu[2]], [on_gpu, cpu[2], cpu[0]]):
        merged = functools.reduce(stat.merge, states)
        got = stat.finalize(merged)
        np.testing.assert_allclose(got.cov, want.cov, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_array_equal(got.cov, got.cov.T)
    saved = merged.canonical()
    np.testing.assert_array_equal(saved.c, saved.c.T)
    np.testing.assert_array_equal(np.triu(saved.c), np.triu(merged.c))
    store = str(tmp_path / "s.zarr")
    zarr.open_group(store, mode="w")
    write_states(store, {"cov": Kept(stat, merged)}, results="r")
    back = read_states(store, "r")["cov"].state
    np.testing.assert_array_equal(back.c, saved.c)  # on disk the matrix is the full one


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_gpu_weighted_moments_take_the_kernels_and_equal_cpu(big: tuple[np.ndarray, np.ndarray], dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.moments import WeightedMomentsState

    x = big_as(big, dtype)
    w = weights_for(x.shape[0], seed=8)
    d = cupy.asarray(x)
    assert kernels.kernel_path(d, Moments(), weighted=True).kind == "numba-cuda"
    state = Moments().chunk(d, weights=cupy.asarray(w))
    assert isinstance(state, WeightedMomentsState) and isinstance(state.mean, cupy.ndarray)
    assert_weighted_moments((state.rows, state.n, *(getattr(state, f) for f in MOMENT_FIELDS[1:])),
                            reference(Moments(), x, weights=w))


@gpu
@pytest.mark.parametrize("block_rows", [None, 7_000])
def test_gpu_weighted_comoments_equal_cpu(big: tuple[np.ndarray, np.ndarray], block_rows: int | None) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats.kernels import _gpu

    x = big[0]
    w = weights_for(x.shape[0], seed=9)
    ref = reference(CoMoments(), x, weights=w)
    got = _gpu.comoments(cupy.asarray(x), block_rows=block_rows, weights=cupy.asarray(w))
    assert isinstance(got[3], cupy.ndarray)
    assert_comoments(got, ref)
    state = CoMoments().chunk(cupy.asarray(x), weights=cupy.asarray(w))  # through the dispatch
    assert_comoments((state.n, state.shift, state.mean, state.c, state.rows), ref)


@gpu
@pytest.mark.parametrize("n_classes", [4, NO_TILE_CLASSES_WEIGHTED])
def test_gpu_weighted_histogram_equal_cpu(big: tuple[np.ndarray, np.ndarray], n_classes: int) -> None:
    """Integer weights: float64 sums exact in any order, so bitwise; other weights to 1e-12 (atomics add in any order)."""
    cupy = pytest.importorskip("cupy")

    x = big[0]
    y = np.random.default_rng(6).integers(0, n_classes, size=x.shape[0]).astype(np.int32)
    h = hist_for(x, bins=64, by_label=True)
    assert kernels.kernel_path(cupy.asarray(x), h, weighted=True).kind == "numba-cuda"
    for integer in (True, False):
        w = weights_for(x.shape[0], seed=10, integer=integer)
        got = h.chunk(cupy.asarray(x), cupy.asarray(y), weights=cupy.asarray(w)).counts.get()
        want = reference(h, x, y, weights=w).counts
        if integer:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12)


@gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_gpu_class_moments_take_the_kernels_and_equal_cpu(big: tuple[np.ndarray, np.ndarray], weighted: bool) -> None:
    cupy = pytest.importorskip("cupy")
    from daskbatch.stats import ClassMoments

    x, y = big
    w = weights_for(x.shape[0], seed=14) if weighted else None
    stat = ClassMoments(n_classes=4)
    d = cupy.asarray(x)
    assert kernels.kernel_path(d, stat, weighted=weighted).kind == "numba-cuda"
    state = stat.chunk(d, cupy.asarray(y), weights=None if w is None else cupy.asarray(w))
    assert isinstance(state.mean, cupy.ndarray)
    assert_class_moments((state.n, state.shift, state.mean, state.m2), reference(stat, x, y, weights=w), weighted)
