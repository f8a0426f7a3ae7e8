"""The quantile sketch on CuPy chunks: no GPU kernel, so the array-API path, equal to the CPU loop.

Before, ``Sketch.chunk`` asked ``kernels.supports`` (true for CuPy chunks once
numba-cuda sees a device) and handed the CuPy chunk to the numba CPU loop,
which cannot read it: ``describe(device="gpu")`` without ``range`` failed in
its first pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskbatch.stats import Sketch


@pytest.mark.gpu
def test_gpu_sketch_equals_cpu() -> None:
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 2.0, size=(5_000, 6)).astype(np.float32) * rng.choice([-1, 1], size=(5_000, 6))
    x[7, 2], x[8, 3], x[9, 4] = np.nan, np.inf, 0.0
    x[:, 5] = np.round(x[:, 5]).clip(-40, 40)  # few distinct values: kept exactly
    for sk in (Sketch(), Sketch(window=64)):  # every bucket, and a window that collapses (lognormal, sigma 2)
        got, ref = sk.chunk(cupy.asarray(x)), sk.chunk(x)
        np.testing.assert_array_equal(got.counts.get(), ref.counts)
        np.testing.assert_array_equal(got.offset.get(), ref.offset)
        for field in ("distinct", "distinct_counts", "distinct_held"):  # the few-valued features' exact values
            np.testing.assert_array_equal(getattr(got, field).get(), getattr(ref, field))
        merged = sk.merge(sk.chunk(cupy.asarray(x[:2000])), sk.chunk(cupy.asarray(x[2000:])))
        np.testing.assert_array_equal(merged.counts.get(), ref.counts)
        np.testing.assert_array_equal(merged.offset.get(), ref.offset)
    np.testing.assert_array_equal(got.fmin.get(), ref.fmin)
    np.testing.assert_array_equal(got.fmax.get(), ref.fmax)
