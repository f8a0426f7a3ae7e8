"""1- and 2-byte values reach the CPU kernels as one float32 copy of each block: the same bits, no kernels of their own.

bool, 8- and 16-bit integers and float16 are exact in float32, and every kernel reads each value as a float64, so a
block and its float32 copy give the same states. ``Bundle.chunk`` makes the copy once for the statistics that take
it; a user's statistic and the rows' content digest still see the block as read.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import numpy as np
import pytest

import daskbatch as db
from daskbatch.planning.plan import chunk_task_terms
from daskbatch.stats import Bundle, Moments, Sketch
from daskbatch.stats.kernels.path import float32_block
from tests.test_compile_ahead import fresh_process

SMALL = (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.float16)


def small_block(dtype: Any, rows: int = 3000, features: int = 5, seed: int = 0) -> np.ndarray:
    """A block of ``dtype`` spanning its range; float16 with NaN, both infinities, -0.0 and subnormals."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random((rows, features)) < 0.3
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=(rows, features), endpoint=True).astype(dtype)
    x = (rng.standard_normal((rows, features)) * 300.0).astype(np.float16)
    x[1, 0], x[2, 1], x[3, 2], x[4, 3] = np.nan, np.inf, -np.inf, -0.0
    x[5:9, 4] = np.array([6e-8, -6e-8, 1e-5, 65504], dtype=np.float16)  # subnormals and the largest finite
    return x


def digest(summary: Any) -> str:
    """A hash of every result array's dtype and bytes."""
    h = hashlib.sha256()
    for name in sorted(summary.variables):
        value = getattr(summary.arrays, name)
        if isinstance(value, np.ndarray):
            h.update(name.encode() + str(value.dtype).encode() + np.ascontiguousarray(value).view(np.uint8).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("dtype", SMALL, ids=lambda d: np.dtype(d).name)
def test_float32_block_is_an_exact_copy_of_small_values_only(dtype: Any) -> None:
    x = small_block(dtype)
    copy = float32_block(x)
    assert copy.dtype == np.float32 and copy is not x
    # Every value, -0.0, the infinities and NaN included, comes through unchanged.
    np.testing.assert_array_equal(copy.astype(np.float64), x.astype(np.float64))
    assert np.array_equal(np.signbit(copy), np.signbit(x.astype(np.float64)))


@pytest.mark.parametrize("dtype", (np.int32, np.uint32, np.int64, np.float32, np.float64))
def test_wider_values_are_read_as_they_are(dtype: Any) -> None:
    x = np.arange(12, dtype=dtype).reshape(4, 3)
    assert float32_block(x) is x


@pytest.mark.parametrize("dtype", SMALL, ids=lambda d: np.dtype(d).name)
def test_describe_of_small_values_is_that_of_the_same_values_in_float64(dtype: Any) -> None:
    # Several blocks (two tasks a block, each its own copy), a label, weights: every result array bit for bit.
    import dask.array as da

    x = small_block(dtype, rows=40_000, features=6)
    rng = np.random.default_rng(1)
    label = da.from_array(rng.integers(0, 3, x.shape[0]), chunks=10_000)
    weights = da.from_array(rng.random(x.shape[0]), chunks=10_000)
    for kwargs in ({}, {"weights": weights}):
        got = db.describe(da.from_array(x, chunks=(10_000, -1)), label=label, **kwargs)
        want = db.describe(da.from_array(x.astype(np.float64), chunks=(10_000, -1)), label=label, **kwargs)
        assert got.provenance["n_chunks"] == 4
        assert digest(got) == digest(want), (np.dtype(dtype).name, kwargs)


class _Seen:
    """A user's statistic that records the dtype of the blocks it is given."""

    name = "seen"

    def __init__(self) -> None:
        self.dtypes: list[str] = []

    def chunk(self, x: Any, label: Any = None, /) -> int:
        self.dtypes.append(str(x.dtype))
        return int(x.shape[0])

    def merge(self, a: int, b: int, /) -> int:
        return a + b

    def finalize(self, state: int) -> int:
        return state


def test_a_bundle_copies_once_and_a_users_statistic_sees_the_block_as_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from daskbatch.stats import _base
    from daskbatch.stats.kernels import path

    copies: list[np.ndarray] = []

    def counted(x: Any) -> Any:
        out = float32_block(x)
        if out is not x:
            copies.append(out)
        return out

    monkeypatch.setattr(path, "float32_block", counted)
    seen = _Seen()
    x = small_block(np.int16, rows=5000)
    states = Bundle((Moments(), Sketch(), seen)).chunk(x)
    assert len(copies) == 1  # one for both statistics (the sketch's four loops take it as it is)
    assert seen.dtypes == ["int16"]
    assert _base._takes_copy(Moments()) and not _base._takes_copy(seen)
    want = Bundle((Moments(), Sketch())).chunk(x.astype(np.float64))
    for a, b in zip(states[:2], want, strict=True):
        for field in a.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), strict=True)


def test_the_plan_counts_the_copy_on_the_cpu_kernels_only() -> None:
    rows, features = 1000, 10
    for itemsize, copy in ((1, 4), (2, 4), (4, 0), (8, 0)):
        terms = chunk_task_terms(rows, features, itemsize, ("moments",))
        assert terms.get("float32 copy", 0) == copy * rows * features, itemsize
    assert "float32 copy" not in chunk_task_terms(rows, features, 2, ("moments",), path="array-api")


COMPILED_FOR = r"""
import gc, json, sys
import numpy as np
import daskbatch as db
from numba.core.dispatcher import Dispatcher

rng = np.random.default_rng(0)
label = rng.integers(0, 3, 4000)
for dtype in ("bool", "int8", "uint8", "int16", "uint16", "float16"):
    x = rng.integers(0, 100, size=(4000, 4)).astype(dtype)
    db.describe(x, label=label)
blocks = set()
for kernel in gc.get_objects():
    if isinstance(kernel, Dispatcher) and kernel.py_func.__module__.startswith("daskbatch.stats.kernels"):
        for signature in kernel.signatures:
            blocks.update(str(t.dtype) for t in signature[:1] if hasattr(t, "dtype"))
print(json.dumps(sorted(blocks)))
"""


@pytest.mark.slow
def test_small_values_compile_no_kernels_of_their_own(tmp_path: pathlib.Path) -> None:
    # A fresh process and numba cache: the kernels it compiles read float32 blocks (and float64 arrays of
    # their own), never bool, 8- or 16-bit ones.
    done = fresh_process(COMPILED_FOR, cache=tmp_path / "cache", DASKBATCH_COMPILE_AHEAD="0")
    assert done.returncode == 0, done.stderr[-2000:]
    blocks = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "float32" in blocks
    assert blocks <= {"float32", "float64", "int64"}, blocks
