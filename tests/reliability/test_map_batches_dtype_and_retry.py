"""Finding 9: map_batches gave silently wrong numbers.

* The output dtype came from the first 8 rows and later batches were cast to
  it unchecked (0.7 became 0): now every batch is checked, a lossy cast is a
  one-line :class:`BatchError` naming the batch, and ``dtype=`` declares the
  output dtype.
* ``on_error="fallback"`` retried a batch that the failed attempt had already
  changed in place (rows came out x4): every attempt now gets a fresh copy.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import daskbatch as db
from daskbatch.batches import BatchError


def later_fractions(b: np.ndarray) -> np.ndarray:
    """Integers for the first rows (row index < 8), fractions after: what fooled the 8-row probe."""
    idx = b[:, :1]
    return np.where(idx < 8, idx, idx + 0.7).astype(np.float64) if (idx >= 8).any() else idx.astype(np.int64)


def rows(n: int = 400) -> np.ndarray:
    x = np.zeros((n, 2))
    x[:, 0] = np.arange(n)
    x[:, 1] = 1.5
    return x


@pytest.mark.parametrize("out", [False, True])
def test_lossy_cast_is_refused_naming_the_batch(tmp_path: pathlib.Path, out: bool) -> None:
    target = {"out": tmp_path / "o.zarr"} if out else {}
    with pytest.raises(BatchError, match=r"rows \d+-\d+99: .*\.7 would become \d+;") as err:
        db.map_batches(later_fractions, rows(), batch_rows=100, **target)
    assert "\n" not in str(err.value)


def test_declared_dtype_is_used_and_checked(tmp_path: pathlib.Path) -> None:
    got = db.map_batches(later_fractions, rows(), batch_rows=100, dtype="float64")
    want = np.where(np.arange(400) < 8, np.arange(400), np.arange(400) + 0.7)
    np.testing.assert_array_equal(got[:, 0], want)
    assert got.dtype == np.float64
    # A declared float32 rounds as asked; an overflow to inf is refused.
    small = db.map_batches(lambda b: b * 1.1, rows(), batch_rows=100, dtype="float32")
    np.testing.assert_array_equal(small, (rows() * 1.1).astype(np.float32))
    with pytest.raises(BatchError, match="float32"):
        db.map_batches(lambda b: b * 1e300, rows(), batch_rows=100, dtype="float32")
    with pytest.raises(BatchError, match="int8"):
        db.map_batches(lambda b: b.astype(np.int64) * 1000, rows(), batch_rows=100, dtype="int8")


def test_fallback_retries_from_a_fresh_copy() -> None:
    attempts = []

    def doubles_in_place_then_fails(b: np.ndarray) -> np.ndarray:
        b *= 2  # changes its argument before failing
        attempts.append(len(b))
        if len(b) > 25:
            raise RuntimeError("too big")
        return b

    x = rows()
    got = db.map_batches(doubles_in_place_then_fails, x, batch_rows=100, on_error="fallback", min_batch_rows=10)
    np.testing.assert_array_equal(got, x * 2)
    assert max(attempts) == 100 and min(attempts) <= 25  # it did retry
