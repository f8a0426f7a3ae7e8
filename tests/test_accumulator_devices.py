"""``Accumulator.update`` keeps batches of any array library where they are.

array_api_strict arrays on its second device ("device1") refuse conversion to
NumPy as CuPy arrays do, so this CPU test catches the ``np.asarray(batch)``
that broke the Accumulator on GPUs (tests/test_gpu.py::test_accumulator_on_gpu).
"""

from __future__ import annotations

import numpy as np
import pytest

import daskbatch as db

xp = pytest.importorskip("array_api_strict")


def test_off_host_arrays_refuse_numpy() -> None:
    """The premise: NumPy cannot take these arrays (as with CuPy)."""
    a = xp.asarray([1.0, 2.0], device=xp.Device("device1"))
    with pytest.raises(RuntimeError):
        np.asarray(a)


def test_accumulator_on_an_off_host_device_equals_numpy() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)) * [1.0, 5.0, 0.1] + [0.0, 100.0, -3.0]
    x[7, 1] = np.nan
    y = rng.integers(0, 3, size=300)
    device = xp.Device("device1")
    host, off = db.Accumulator(range=(-10, 120)), db.Accumulator(range=(-10, 120))
    for start in range(0, 300, 120):
        host.update(x[start : start + 120], y[start : start + 120])
        off.update(xp.asarray(x[start : start + 120], device=device), xp.asarray(y[start : start + 120], device=device))
    assert off._state is not None and off._state[0].mean.device == device  # the states stayed there
    a, b = host.summary(), off.summary()
    for name in ("count", "nan_count", "min", "max", "hist_counts", "joint_counts"):
        np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
    for name in ("mean", "var", "skew", "kurtosis", "cov", "mi"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12, atol=1e-14, err_msg=name)


def test_accumulator_rejects_a_complex_off_host_batch() -> None:
    acc = db.Accumulator(stats=("moments",))
    with pytest.raises(TypeError, match="batch has dtype"):
        acc.update(xp.asarray([[1 + 0j]], device=xp.Device("device1")))
