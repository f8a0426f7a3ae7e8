"""The CPU kernels' intrinsics against the numba expressions they stand for, and what a cold first call compiles."""

from __future__ import annotations

import gc
import itertools
import json
import pathlib

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from numba.core.errors import TypingError  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

from daskbatch.stats.kernels import _numba, _numba_moments  # noqa: E402
from daskbatch.stats.kernels._numba import (  # noqa: E402
    _choose,
    _empty,
    _filled,
    _finite,
    _flat,
    _greatest,
    _least,
    _zeros,
)
from tests.test_compile_ahead import fresh_process  # noqa: E402

# Signed zeros, NaN and infinities on either side: min and max keep their first argument on a tie or a NaN.
FLOATS = (-np.inf, -1.5, -0.0, 0.0, 2.5, np.inf, np.nan)
INTS = (-3, 0, 7, 2**62)


@numba.njit
def _ours(a, b):  # noqa: ANN001, ANN202
    return _least(a, b), _greatest(a, b)


@numba.njit
def _numbas(a, b):  # noqa: ANN001, ANN202
    return min(a, b), max(a, b)


def _bits(value: object) -> tuple[str, bytes]:
    """A number's type and bytes (so that -0.0 and 0.0, and NaNs, compare as they are stored)."""
    array = np.asarray(value)
    return str(array.dtype), array.tobytes()


@pytest.mark.parametrize("kinds", [(float, float), (int, int), (int, float), (float, int)])
def test_least_and_greatest_are_numbas_min_and_max(kinds: tuple[type, type]) -> None:
    values = {float: FLOATS, int: INTS}
    for a, b in itertools.product(values[kinds[0]], values[kinds[1]]):
        got, want = _ours(a, b), _numbas(a, b)
        assert [_bits(v) for v in got] == [_bits(v) for v in want], (a, b, got, want)


def test_least_and_greatest_are_pythons_on_ties_and_nan() -> None:
    assert np.signbit(_ours(-0.0, 0.0)[0]) and not np.signbit(_ours(0.0, -0.0)[0])  # the first of a tie
    assert np.isnan(_ours(np.nan, 1.0)[0]) and _ours(1.0, np.nan) == (1.0, 1.0)  # NaN only when it comes first


@numba.njit
def _chosen(flag, a, b):  # noqa: ANN001, ANN202
    return _choose(flag, a, b)


@numba.njit
def _branched(flag, a, b):  # noqa: ANN001, ANN202
    return a if flag else b


@pytest.mark.parametrize("kinds", [(float, float), (int, int), (int, float), (float, int), (np.float32, float)])
def test_choose_is_numbas_conditional_expression(kinds: tuple[type, type]) -> None:
    values = {float: FLOATS, int: INTS, np.float32: tuple(map(np.float32, FLOATS))}
    for flag, a, b in itertools.product((True, False), values[kinds[0]], values[kinds[1]]):
        got, want = _chosen(flag, a, b), _branched(flag, a, b)
        assert _bits(got) == _bits(want), (flag, a, b, got, want)  # the common type, signed zeros and NaN kept


def test_choose_takes_a_boolean_condition_only() -> None:
    with pytest.raises(TypingError):
        _chosen(1, 2.0, 3.0)  # an int's truth would be a compare of its own: written out where it is meant


@numba.njit
def _empties(n):  # noqa: ANN001, ANN202
    floats, ints = _empty(n, np.float64), _empty(n, np.int64)
    floats[:] = 1.5
    ints[:] = 7
    return floats, ints


@pytest.mark.parametrize("n", [0, 1, 65])
def test_empty_is_a_new_c_array_of_the_type(n: int) -> None:
    floats, ints = _empties(n)
    assert floats.shape == ints.shape == (n,)
    assert (floats.dtype, ints.dtype) == (np.float64, np.int64)
    assert floats.flags.c_contiguous and ints.flags.c_contiguous
    assert (floats == 1.5).all() and (ints == 7).all()
    again, _ = _empties(n)
    assert n == 0 or not np.shares_memory(floats, again)


@numba.njit
def _new_arrays(n):  # noqa: ANN001, ANN202
    return _zeros((n, 3), np.float64), _zeros(n, np.bool_), _zeros((2, n), np.int64), _empty((n, 2), np.int64), _filled(n, -np.inf)


@pytest.mark.parametrize("n", [0, 1, 65])
def test_zeros_empty_and_filled_are_numpys(n: int) -> None:
    zeros, flags, counts, scratch, filled = _new_arrays(n)
    for got, want in ((zeros, np.zeros((n, 3))), (flags, np.zeros(n, dtype=bool)), (counts, np.zeros((2, n), dtype=np.int64)),
                      (filled, np.full(n, -np.inf))):
        np.testing.assert_array_equal(got, want, strict=True)
        assert got.flags.c_contiguous
    assert scratch.shape == (n, 2) and scratch.dtype == np.int64 and scratch.flags.c_contiguous


@numba.njit
def _flat_add(a):  # noqa: ANN001, ANN202
    flat = _flat(a)
    for i in range(flat.size):
        flat[i] += i
    return flat


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_flat_is_a_view_in_c_order(dtype: str) -> None:
    a = np.zeros((3, 5), dtype=dtype)
    flat = _flat_add(a)
    assert flat.shape == (15,) and flat.dtype == a.dtype
    np.testing.assert_array_equal(a, np.arange(15, dtype=dtype).reshape(3, 5))  # written through the view
    assert np.shares_memory(flat, a)
    del a  # the view keeps the values alive
    np.testing.assert_array_equal(flat, np.arange(15, dtype=dtype))


@numba.njit
def _finites(x):  # noqa: ANN001, ANN202
    out = np.zeros(x.size, dtype=np.bool_)
    for i in range(x.size):
        out[i] = _finite(x[i])
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_finite_is_numpys_isfinite(dtype: str) -> None:
    info = np.finfo(dtype)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.max, -info.max, info.tiny, 1.0], dtype=dtype)
    np.testing.assert_array_equal(_finites(x), np.isfinite(x))


def test_the_cache_directory_is_the_kernels() -> None:
    assert _numba.cache_directory() == str(_numba_moments._moments_pass1_clean._cache._cache_path)


def _kernel_noting_the_collector(seen: list[bool]) -> object:
    """A new kernel, shared as daskbatch's are, that appends the collector's switch to ``seen`` as it compiles."""
    @intrinsic
    def note(typingctx, v):  # noqa: ANN001, ANN202
        seen.append(gc.isenabled())  # typing runs the compiler's Python code
        if not isinstance(v, numba.types.Float):  # the failing compile of the test
            return None
        return v(v), lambda context, builder, sig, args: args[0]

    def kernel(v):  # noqa: ANN001, ANN202
        return note(v)

    return _numba.shared(numba.njit(kernel))


@pytest.mark.parametrize("collecting", [True, False])
def test_the_collector_is_off_while_a_kernel_compiles_and_as_it_was_after(collecting: bool) -> None:
    # A compile's full collections walked every object of the process, for garbage the compile makes young.
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        seen: list[bool] = []
        assert _kernel_noting_the_collector(seen)(2.5) == 2.5
        assert seen == [False]
        assert gc.isenabled() is collecting
        with pytest.raises(TypingError):  # a compile that fails leaves it as it was too
            _kernel_noting_the_collector(seen)("text")
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_nested_pauses_of_the_collector_end_with_the_last() -> None:
    # Two threads may be in a compile at once (one waiting on numba's lock): the first to end must not resume it.
    assert gc.isenabled()
    with _numba._collector_paused():
        with _numba._collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


COLD_COMPILES = r"""
import json
import numpy as np
import daskbatch as db
from numba.core.dispatcher import Dispatcher

seen = []
compile_here = Dispatcher.compile

def compile_and_note(self, sig):
    seen.append(self.py_func.__module__ + ":" + self.py_func.__qualname__)
    return compile_here(self, sig)

Dispatcher.compile = compile_and_note
rng = np.random.default_rng(0)
for dtype in ("float32", "float64"):
    x = rng.normal(1000, 5, size=(5000, 4)).astype(dtype)
    db.describe(x, label=rng.integers(0, 3, 5000))
    x[::7, 1] = np.nan  # the kernels' loops for data with NaN
    db.describe(x, label=rng.integers(0, 3, 5000), weights=rng.random(5000))
print(json.dumps(sorted(set(seen))))
"""


@pytest.mark.slow
def test_a_cold_first_call_compiles_no_overloads_of_min_max_or_array_constructors(tmp_path: pathlib.Path) -> None:
    # Each numba overload the kernels call is a whole compile of its own in every process on a cold cache.
    done = fresh_process(COLD_COMPILES, cache=tmp_path / "cache", DASKBATCH_COMPILE_AHEAD="0")
    assert done.returncode == 0, done.stderr[-2000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(name.startswith("daskbatch.stats.kernels") for name in compiled), compiled
    ours = ("ol_min", "ol_max", "ol_np_empty", "ol_np_zeros", "impl_np_full", "np_arange")  # what the intrinsics replace
    overloads = [name for name in compiled if any(f":{o}." in name for o in ours)]
    assert not overloads, overloads
