"""Weighted describe on the GPU equals the CPU: moments/cov to 1e-12 relative, counts bitwise.

The weighted blocks run the numba-cuda kernels (not the array-API path).
Runs with ``pytest -m gpu`` on a CUDA machine; skipped elsewhere.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import daskbatch as db
from daskbatch.stats.kernels import _gpu

pytestmark = pytest.mark.gpu

ROWS = 200_000


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    x = (rng.normal(size=(ROWS, 16)) * 3 + 1e4).astype(np.float32)
    x[17, 3] = np.nan
    x[99, 5] = np.inf
    y = rng.integers(0, 4, size=ROWS).astype(np.int32)
    return x, y


def _compare(cpu: db.Summary, gpu: db.Summary, exact_counts: bool) -> None:
    for name in ("count", "nan_count", "posinf_count", "min", "max", "cov_count"):
        np.testing.assert_array_equal(getattr(gpu, name), getattr(cpu, name), err_msg=name)
    for name in ("weight_sum", "mean", "var", "skew", "kurtosis", "cov", "corr", "class_mean", "class_m2"):
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), rtol=1e-12, atol=1e-12, err_msg=name)
    for name in ("hist_counts", "underflow", "overflow", "joint_counts", "class_count"):
        if exact_counts:  # integer weights: every float64 sum is exact, whatever the order of the atomics
            np.testing.assert_array_equal(getattr(gpu, name), getattr(cpu, name), err_msg=name)
        else:
            np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), rtol=1e-12, err_msg=name)
    # MI is a difference of entropies (~4 nats): counts equal to rounding move it by ~1e-15 absolute.
    np.testing.assert_allclose(gpu.mi, cpu.mi, rtol=1e-12, atol=1e-15 if exact_counts else 1e-13)


@pytest.fixture()
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The GPU kernels' drivers called with weights."""
    calls: list[str] = []
    for name in ("moments", "comoments", "histogram", "class_moments"):
        original = getattr(_gpu, name)

        def spy(*args, _name=name, _original=original, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if kwargs.get("weights") is not None:
                calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(_gpu, name, spy)
    return calls


@pytest.mark.parametrize("integer", [True, False])
def test_weighted_describe_on_gpu_equals_cpu(data: tuple[np.ndarray, np.ndarray], kernel_calls: list[str],
                                             integer: bool) -> None:
    pytest.importorskip("cupy")
    x, y = data
    rng = np.random.default_rng(12)
    w = rng.integers(0, 5, size=ROWS).astype(np.float64) if integer else rng.exponential(size=ROWS)
    dx, dy = da.from_array(x, chunks=(25_000, -1)), da.from_array(y, chunks=25_000)
    dw = da.from_array(w, chunks=25_000)
    cpu = db.describe(dx, dy, weights=dw)
    gpu = db.describe(dx, dy, weights=dw, run=db.RunOptions(device="gpu"))
    assert gpu.provenance["device"] == "gpu"
    assert {"moments", "comoments", "histogram", "class_moments"} <= set(kernel_calls)
    _compare(cpu, gpu, exact_counts=integer)


def test_weighted_cupy_blocks_equal_repeated_rows(data: tuple[np.ndarray, np.ndarray]) -> None:
    """Integer weights on device-resident blocks: the summary of the rows repeated that often."""
    cupy = pytest.importorskip("cupy")
    x, y = data
    x, y = x[:40_000], y[:40_000]
    w = np.random.default_rng(13).integers(1, 4, size=len(x))
    dx = da.from_array(x, chunks=(10_000, -1)).map_blocks(cupy.asarray)
    dy = da.from_array(y, chunks=10_000).map_blocks(cupy.asarray)
    dw = da.from_array(w.astype(np.float64), chunks=10_000).map_blocks(cupy.asarray)
    rep = np.repeat(x, w, axis=0)
    lo, hi = np.nanmin(x[np.isfinite(x).all(axis=1)], axis=0), np.nanmax(x[np.isfinite(x).all(axis=1)], axis=0)
    weighted = db.describe(dx, dy, weights=dw, range=np.stack([lo, hi], axis=1))
    repeated = db.describe(da.from_array(rep, chunks=(30_000, -1)), np.repeat(y, w), range=np.stack([lo, hi], axis=1))
    np.testing.assert_array_equal(weighted.hist_counts, repeated.hist_counts)
    np.testing.assert_array_equal(weighted.weight_sum, np.isfinite(rep).sum(axis=0))
    for name in ("mean", "var", "cov"):
        np.testing.assert_allclose(getattr(weighted, name), getattr(repeated, name), rtol=1e-12, atol=1e-12)
