"""Finding 11: int64 values near 2**63 gave a std of 512 against an exact 288.8, with no warning.

float64 holds integers that large only 2048 apart; each block is now shifted
by an exact per-feature reference (a multiple of 2048) in int64 before it is
converted, so the moments are as exact as for small numbers.
"""

from __future__ import annotations

import math
import pathlib
from fractions import Fraction

import numpy as np
import pytest
import zarr

import daskbatch as db


def exact(col: np.ndarray) -> tuple[float, float]:
    """Mean and sample std (ddof 1) in exact rational arithmetic."""
    values = [int(v) for v in col]
    n = len(values)
    mean = Fraction(sum(values), n)
    ss = sum((v - mean) ** 2 for v in values)
    return float(mean), math.sqrt(ss / (n - 1))


@pytest.mark.parametrize("kernels", [True, False])
def test_moments_near_int64_limits_are_exact(tmp_path: pathlib.Path, kernels: bool) -> None:
    import dask

    rng = np.random.default_rng(0)
    x = np.empty((3000, 3), dtype=np.int64)
    x[:, 0] = 2**63 - 1 - rng.integers(0, 1000, size=3000)  # up to the largest int64
    x[:, 1] = -(2**63) + rng.integers(0, 10**6, size=3000)  # down to the smallest
    x[:, 2] = rng.integers(-(10**6), 10**6, size=3000)  # ordinary values, unchanged path
    path = tmp_path / "i.zarr"
    zarr.open_group(str(path), mode="w").create_array("X", data=x, chunks=(250, 3))  # 12 blocks to merge
    with dask.config.set({"daskbatch.kernels": kernels}):
        s = db.describe(str(path), stats=["moments"])
    for j in range(3):
        mean, std = exact(x[:, j])
        assert float(s.arrays.std[j]) == pytest.approx(std, rel=1e-12), j
        assert float(s.arrays.mean[j]) == pytest.approx(mean, rel=1e-15, abs=1e-12 * std), j
        assert float(s.arrays.min[j]) == float(x[:, j].min()) and float(s.arrays.max[j]) == float(x[:, j].max())
