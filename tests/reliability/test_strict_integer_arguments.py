"""Integer arguments refuse bools and fractions instead of rounding them.

``split_every=2.5`` silently became 2 and ``bins=True`` one bin.
"""

from __future__ import annotations

import dask.config
import numpy as np
import pytest

import daskbatch as db


@pytest.fixture()
def x() -> np.ndarray:
    return np.random.default_rng(2).normal(size=(64, 2))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"run": db.RunOptions(plan=None, split_every=2.5)}, ValueError, "split_every must be an integer, got 2.5"),
        ({"run": db.RunOptions(plan=None, split_every=True)}, TypeError, "split_every must be an integer, got True"),
        ({"run": db.RunOptions(plan=None, split_every="4")}, TypeError, "split_every must be an integer, got '4'"),
        ({"bins": True}, TypeError, "bins must be an integer, got True"),
        ({"bins": 2.5}, ValueError, "bins must be an integer, got 2.5"),
        ({"bins": np.float64(7.5)}, ValueError, "bins must be an integer"),
        ({"bins": 0}, ValueError, "bins must be at least 1"),
        ({"stats": ("moments", "hist", lambda: db.Moments(ddof="1"))}, TypeError, "ddof must be an integer, got '1'"),
        ({"stats": ("moments", "hist", lambda: db.Moments(ddof=0.5))}, ValueError, "ddof must be an integer"),
    ],
)
def test_non_integers_are_named(x: np.ndarray, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as err:  # a statistic's own parameters are refused as it is made
        stats = tuple(s() if callable(s) else s for s in kwargs.pop("stats", ("moments", "hist")))
        db.describe(x, **{"stats": stats, "run": db.RunOptions(plan=None), **kwargs})
    assert "\n" not in str(err.value)


def test_configured_split_every_is_checked_too(x: np.ndarray) -> None:
    with dask.config.set({"daskbatch.split-every": 2.5}), pytest.raises(ValueError, match="daskbatch.split-every"):
        db.describe(x, stats="moments", run=db.RunOptions(plan=None))


def test_integral_values_of_any_type_are_accepted(x: np.ndarray) -> None:
    s = db.describe(x, stats=["moments", "hist", db.Moments(ddof=np.int32(0))], run=db.RunOptions(plan=None, split_every=4.0), bins=np.int64(8))
    assert s.hist_counts.shape == (2, 8) and s.provenance["split_every"] == 4
    np.testing.assert_allclose(s.var, x.var(axis=0), rtol=1e-12)
    with pytest.raises(TypeError, match="bins must be an integer"):
        db.describe(x, stats="hist", bins=False)
