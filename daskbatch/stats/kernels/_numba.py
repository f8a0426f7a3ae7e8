"""What every compiled CPU loop shares: the jit settings, the element load, the row weight, the finite test."""

from __future__ import annotations

import contextlib
import functools
import gc
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.core.caching import FunctionCache
from numba.core.imputils import impl_ret_borrowed
from numba.core.typing import signature
from numba.cpython.builtins import do_minmax
from numba.extending import intrinsic
from numba.np.arrayobj import _empty_nd_impl, make_array, populate_array

#: Rows per block of partial sums.
BLOCK = 128

#: Set while a helper process compiles into the same numba cache (ahead.start, and in the helper itself):
#: then each top-level compile takes its kernel's lock file, so that no kernel is compiled twice.
sharing = threading.Event()

#: Longest wait for another process's compile before compiling here anyway (a stuck helper costs time, not a hang).
LOCK_WAIT_SECONDS = 120.0

# This thread's nesting of compiles: callees compile inside their caller's lock.
_depth = threading.local()

# Compiles in progress on all threads, and whether the collector ran before the first of them.
_pause_lock = threading.Lock()
_pauses = 0
_was_collecting = True


def shared(dispatcher: Any) -> Any:
    """Make ``dispatcher``'s top-level compiles take the kernel's lock file while a helper shares the cache."""
    compile_here = dispatcher.compile

    @functools.wraps(compile_here)
    def compile_shared(sig: Any) -> Any:
        """numba's compile of ``sig``, under the kernel's lock file when the cache is shared with a helper."""
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        try:
            if depth:  # callees compile inside their caller's lock
                return compile_here(sig)
            with _collector_paused(), _kernel_lock(dispatcher) if sharing.is_set() else contextlib.nullcontext():
                return compile_here(sig)  # after another's compile: loaded from the cache
        finally:
            _depth.n = depth

    # The instance's attribute: numba calls self.compile for each signature not yet in this process.
    dispatcher.compile = compile_shared
    return dispatcher


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off while this thread compiles (as it was once the last compile ends)."""
    # A compile makes a few hundred thousand short-lived objects, so the collector ran often, and each full
    # collection walked every object of the process (dask's, zarr's, numba's registries): about 0.07 s apiece,
    # seven in one process's first describe. Their garbage is collected at the first collection after.
    global _pauses, _was_collecting
    with _pause_lock:
        if _pauses == 0:
            _was_collecting = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _was_collecting:
                gc.enable()


def cache_directory() -> str:
    """numba's cache directory of the CPU kernels (``NUMBA_CACHE_DIR``'s, else ``__pycache__`` beside them)."""
    # numba's own answer, for a function of this folder: every kernel module is here, so they share it.
    return str(FunctionCache(finite_first_row)._cache_path)


@contextlib.contextmanager
def _kernel_lock(dispatcher: Any) -> Iterator[None]:
    """Hold the lock file of ``dispatcher`` in numba's cache directory (unlocked where none can be had)."""
    where = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    if not where:  # not a cached kernel
        yield
        return
    try:
        import fcntl

        os.makedirs(where, exist_ok=True)
        name = f"daskbatch-compile-{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}.lock"
        handle = open(os.path.join(where, name), "a")  # noqa: SIM115 - closed below
    except (ImportError, OSError):  # no lock here: compiling twice is slower, not wrong
        yield
        return
    with handle:
        locked = _wait_for(lambda: fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB))
        try:
            yield
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _wait_for(try_lock: Callable[[], None]) -> bool:
    """Call ``try_lock`` until it does not raise BlockingIOError, at most :data:`LOCK_WAIT_SECONDS`; whether it took."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            try_lock()
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)


def _compiler(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit`` with ``options``, its compiles shared with a helper process on a cold cache (see ahead)."""
    # No C callback wrapper: nothing takes a kernel's address, and each wrapper cost the first call a compile.
    # (numba's typing stubs do not list it: passed through a dict.)
    settings: dict[str, Any] = {"nogil": True, "cache": True, "no_cfunc_wrapper": True, **options}
    compile_with = numba.njit(**settings)
    return lambda function: shared(compile_with(function))


_jit = _compiler()
# The small helpers of the kernels: numba copies them into each caller before typing it. A helper
# that is a function of its own costs the first call a whole compile (typing, lowering, wrappers,
# machine code, a cache file) for each of its signatures; copied, the same bits cost about 12 %
# less compile time in all (benchmarks/RESULTS.md, session 23). A helper inlined into a caller of
# the other error model takes the caller's: none divides by a number that can be zero.
_jit_inline = _compiler(inline="always")
# NumPy's error model drops numba's division-by-zero checks, whose branch keeps
# a loop from vectorising; for kernels whose divisors cannot be zero.
_jit_nocheck = _compiler(error_model="numpy")
_jit_nocheck_inline = _compiler(error_model="numpy", inline="always")


# The intrinsics below: numba emits their few instructions into each caller as it lowers it. As overloads
# (numba's own ``min``, ``max`` and ``np.empty`` among them), each signature of each was a compile of its own in
# every process on a cold cache. Their instructions are those numba emits for the Python expressions in their
# docstrings: the same bits.


@intrinsic
def _load(typingctx, v):  # noqa: ANN001, ANN202
    """``np.float64(v)``: a value as the kernels accumulate it (1- and 2-byte values come as float32, path.float32_block)."""
    def cast(context, builder, sig, args):  # noqa: ANN001, ANN202
        return context.cast(builder, args[0], sig.args[0], types.float64)

    return types.float64(v), cast


@intrinsic
def _weight(typingctx, w, i):  # noqa: ANN001, ANN202
    """The weight of row ``i``: ``w[i]``, or the integer 1 when ``w`` is None (unweighted counts: ``1 * x`` is ``x``)."""
    # Chosen at compile time from the type of `w`: without weights the loop is the unweighted one.
    if isinstance(w, types.NoneType):
        def one(context, builder, sig, args):  # noqa: ANN001, ANN202
            return context.get_constant(types.int64, 1)

        return types.int64(w, i), one
    return w.dtype(w, i), _element(w, i)


def _element(array: Any, index: Any) -> Callable[..., Any]:
    """The codegen of ``array[index]`` (numba's own indexing) for an intrinsic of the arguments ``(array, index)``."""
    getitem = signature(array.dtype, array, index)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        return context.get_function(operator.getitem, getitem)(builder, tuple(args))

    return codegen


@intrinsic
def _fourth_power(typingctx, w, wdev, dev):  # noqa: ANN001, ANN202
    """``w * dev**4`` from ``wdev = w * dev``: ``(dev * dev) * (dev * dev)`` unweighted, ``wdev * dev * dev * dev`` weighted."""
    # Two roundings of one power, as the moments kernel always had them; chosen at compile time so that neither
    # kernel's bits change.
    if wdev != types.float64 or dev != types.float64:
        return None
    times = signature(types.float64, types.float64, types.float64)
    unweighted = isinstance(w, types.NoneType)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        mul = context.get_function(operator.mul, times)
        _, wdev, dev = args
        if unweighted:
            square = mul(builder, (dev, dev))
            return mul(builder, (square, square))
        return mul(builder, (mul(builder, (mul(builder, (wdev, dev)), dev)), dev))

    return types.float64(w, wdev, dev), codegen


def _select(typingctx: Any, a: Any, b: Any, compare: Callable[[Any, Any], bool]) -> Any:
    """The typing and codegen of ``min`` (``compare``: <) or ``max`` (>) of the numbers ``a`` and ``b``, as numba's."""
    if not (isinstance(a, types.Number) and isinstance(b, types.Number)):
        return None
    common = typingctx.unify_types(a, b)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        return do_minmax(context, builder, list(sig.args), list(args), compare)

    return common(a, b), codegen


@intrinsic
def _least(typingctx, a, b):  # noqa: ANN001, ANN202
    """``min(a, b)`` of two numbers: ``b if b < a else a`` (``a`` when either is NaN)."""
    return _select(typingctx, a, b, operator.lt)


@intrinsic
def _greatest(typingctx, a, b):  # noqa: ANN001, ANN202
    """``max(a, b)`` of two numbers: ``b if b > a else a`` (``a`` when either is NaN)."""
    return _select(typingctx, a, b, operator.gt)


@intrinsic
def _choose(typingctx, condition, if_true, if_false):  # noqa: ANN001, ANN202
    """``if_true if condition else if_false``, both evaluated: one select, where the expression is three blocks to compile."""
    # numba compiles each such expression as a branch and two blocks, about 10 ms of a first call's compile apiece,
    # where the loops time the same with a select. Only for values that are safe to compute either way: no division
    # that can raise, no index that can be out of bounds.
    if not isinstance(condition, types.Boolean):
        return None
    common = typingctx.unify_types(types.unliteral(if_true), types.unliteral(if_false))
    if common is None:
        return None

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        flag, yes, no = args
        yes = context.cast(builder, yes, sig.args[1], common)
        no = context.cast(builder, no, sig.args[2], common)
        return builder.select(flag, yes, no)

    return common(condition, if_true, if_false), codegen


def _new_array(shape: Any, dtype: Any, zeroed: bool) -> Any:
    """The typing and codegen of ``np.empty`` or (``zeroed``) ``np.zeros`` of ``shape`` (an int or a tuple of them) and ``dtype``."""
    if isinstance(shape, types.Integer):
        kinds = (shape,)
    elif isinstance(shape, types.UniTuple) and isinstance(shape.dtype, types.Integer):
        kinds = (shape.dtype,) * shape.count
    else:
        return None
    if not isinstance(dtype, types.NumberClass):
        return None
    array = types.Array(dtype.instance_type, len(kinds), "C")

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        sizes = cgutils.unpack_tuple(builder, args[0]) if isinstance(shape, types.UniTuple) else [args[0]]
        sizes = [context.cast(builder, size, kind, types.intp) for size, kind in zip(sizes, kinds, strict=True)]
        new = _empty_nd_impl(context, builder, array, sizes)
        if zeroed:  # every byte 0: 0, 0.0 and False alike, as np.zeros
            cgutils.memset(builder, new.data, builder.mul(new.itemsize, new.nitems), 0)
        return new._getvalue()

    return array(shape, dtype), codegen


@intrinsic
def _empty(typingctx, shape, dtype):  # noqa: ANN001, ANN202
    """``np.empty(shape, dtype)``: a new C-contiguous array of the NumPy scalar type ``dtype`` (``shape``: an int or a tuple)."""
    return _new_array(shape, dtype, zeroed=False)


@intrinsic
def _zeros(typingctx, shape, dtype):  # noqa: ANN001, ANN202
    """``np.zeros(shape, dtype)``: as :func:`_empty`, every value zero."""
    return _new_array(shape, dtype, zeroed=True)


@intrinsic
def _flat(typingctx, a):  # noqa: ANN001, ANN202
    """``a.reshape(-1)`` of a C-contiguous array: a 1-D view of its values in order."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None
    flat = a.copy(ndim=1)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        array = make_array(sig.args[0])(context, builder, args[0])
        view = make_array(sig.return_type)(context, builder)
        populate_array(view, data=array.data, shape=[array.nitems], strides=[array.itemsize],
                       itemsize=array.itemsize, meminfo=array.meminfo, parent=array.parent)
        return impl_ret_borrowed(context, builder, sig.return_type, view._getvalue())

    return flat(a), codegen


@intrinsic
def _finite(typingctx, v):  # noqa: ANN001, ANN202
    """``abs(v) < np.inf``: one compare that is False for NaN and ±inf, and vectorises."""
    if not isinstance(v, types.Float):
        return None

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        (kind,), (value,) = sig.args, args
        magnitude = context.get_function(abs, signature(kind, kind))(builder, (value,))
        magnitude = context.cast(builder, magnitude, kind, types.float64)  # compared as a float64, as np.inf is
        below = context.get_function(operator.lt, signature(types.boolean, types.float64, types.float64))
        return below(builder, (magnitude, context.get_constant(types.float64, np.inf)))

    return types.boolean(v), codegen


@_jit_inline
def _filled(n, value):  # noqa: ANN001, ANN202
    """``np.full(n, value)`` of a float ``value``: a new float64 array (numba's np.full is a compile of its own)."""
    out = _empty(n, np.float64)
    for i in range(n):
        out[i] = value
    return out


def finite_first_row(x: np.ndarray) -> np.ndarray | None:
    """Row 0 of ``x`` as float64 when every value in it is finite, else None."""
    # Usually so: then it is each column's first finite value and the first complete row, with no scan to compile.
    if x.shape[0] and np.isfinite(x[0]).all():
        return x[0].astype(np.float64)
    return None
