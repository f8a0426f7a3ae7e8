"""Issue "Every door locked", item 8: integers that float64 cannot hold passed the cast check.

NumPy's ``can_cast(int64, float64, "safe")`` is True, yet ``2**53 + 1`` becomes
``2**53`` and ``2**64 - 1`` (uint64) becomes ``2**64``. A later batch returning
such integers into the float64 output of the first rows is now refused in one
line, like any other cast that changes a value; integers that float64 holds
still pass.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import daskbatch as db
from daskbatch.batches import BatchError


def rows(n: int = 400) -> np.ndarray:
    x = np.zeros((n, 2))
    x[:, 0] = np.arange(n)
    return x


def floats_then(value: int, dtype: type) -> object:
    """A function whose first batch returns floats, the later ones integers of ``dtype`` holding ``value``."""

    def func(b: np.ndarray) -> np.ndarray:
        if b[0, 0] < 100:
            return b + 0.5
        out = np.zeros(b.shape, dtype=dtype)
        out[:, 1] = value
        return out

    return func


@pytest.mark.parametrize(
    ("value", "dtype"), [(2**53 + 1, np.int64), (2**63 - 1, np.int64), (2**64 - 1, np.uint64)]
)
@pytest.mark.parametrize("out", [False, True])
def test_integers_float64_cannot_hold_are_refused(
    tmp_path: pathlib.Path, value: int, dtype: type, out: bool
) -> None:
    target = {"out": tmp_path / "o.zarr"} if out else {}
    with pytest.raises(
        BatchError,
        match=rf"rows [123]00-[123]99: returned {np.dtype(dtype)} values that the output dtype "
        rf"float64 .*{value} would become ",
    ) as err:
        db.map_batches(floats_then(value, dtype), rows(), batch_rows=100, **target)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "dtype"), [(2**53, np.int64), (-(2**63), np.int64), (2**63, np.uint64)]
)
def test_integers_float64_holds_pass(value: int, dtype: type) -> None:
    got = db.map_batches(floats_then(value, dtype), rows(), batch_rows=100)
    assert got.dtype == np.float64
    assert got[100:, 1].tolist() == [float(value)] * 300


def test_declared_float64_refuses_an_integer_it_would_round() -> None:
    with pytest.raises(BatchError, match="9007199254740993 would become"):
        db.map_batches(floats_then(2**53 + 1, np.int64), rows(), batch_rows=100, dtype="float64")
