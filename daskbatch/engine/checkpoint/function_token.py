"""A token of what a function computes, so that an output made by a changed function is not resumed.

:func:`function_token` hashes a function's code, constants, defaults, closure
values and the functions it calls; :mod:`daskbatch.engine.checkpoint.fingerprint`
records it for ``map_batches`` outputs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["function_token"]


def function_token(func: Any) -> str:
    """Hash what a function computes: its code, constants, defaults, closure values and the functions it calls.

    A function is known by its code, not its name: two lambdas differ, and a
    fixed bug in a module function changes the token while moving it to other
    lines does not.  The code of functions it calls from its own module is
    included; so are the values of the plain globals it reads (numbers,
    strings, arrays).  ``functools.partial`` objects and callable instances are
    followed to their function and bound values.  A value that cannot be hashed
    deterministically gets a token of its identity in this process, so an
    output made with it is never resumed by another.

    Parameters
    ----------
    func : callable
        The function.

    Returns
    -------
    str
        ``"sha256 <hex>"``.
    """
    digest = hashlib.sha256()
    for part in _function_parts(func, set()):
        digest.update(part.encode() + b"\0")
    return "sha256 " + digest.hexdigest()


def _function_parts(func: Any, seen: set[int]) -> Iterator[str]:
    """The strings :func:`function_token` hashes, one function's worth and its callees'."""
    import functools
    import types

    if id(func) in seen:
        yield "(recursion)"
        return
    seen.add(id(func))
    if isinstance(func, functools.partial):
        yield "partial"
        yield from _function_parts(func.func, seen)
        yield _value_token((func.args, func.keywords))
    elif isinstance(func, types.MethodType):
        yield "method"
        yield from _function_parts(func.__func__, seen)
        yield _value_token(func.__self__)
    elif isinstance(func, types.FunctionType):
        yield f"{func.__module__}.{func.__qualname__}"
        yield _value_token((func.__defaults__, func.__kwdefaults__))
        for cell in func.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a name not yet bound)
                yield "(empty cell)"
                continue
            yield from _value_parts(value, func.__module__, seen)
        yield from _code_parts(func.__code__, func.__globals__, func.__module__, seen)
    elif not isinstance(func, type) and isinstance(call := _own_call(type(func)), types.FunctionType):
        yield f"instance of {type(func).__module__}.{type(func).__qualname__}"
        yield from _function_parts(call, seen)
        yield _value_token(getattr(func, "__dict__", None))
    else:  # builtins, ufuncs, classes: dask knows how to name them
        yield _value_token(func)


def _own_call(cls: type) -> Any:
    """The ``__call__`` defined by ``cls`` or a base class (None for ``object``'s)."""
    return next((vars(c)["__call__"] for c in cls.__mro__ if c is not object and "__call__" in vars(c)), None)


def _code_parts(code: Any, globals_: dict[str, Any], module: str, seen: set[int]) -> Iterator[str]:
    """Bytecode, constants (nested code objects recursively) and the globals it reads."""
    import types

    yield code.co_qualname
    yield code.co_code.hex()
    yield repr((code.co_names, code.co_varnames, code.co_argcount, code.co_kwonlyargcount, code.co_flags))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_parts(const, globals_, module, seen)
        else:
            yield _value_token(const)
    for name in code.co_names:
        if name in globals_:
            yield name
            yield from _value_parts(globals_[name], module, seen)


def _value_parts(value: Any, module: str, seen: set[int]) -> Iterator[str]:
    """A value a function reads: the user's own functions by their code, a library's by name and version, data by value."""
    import functools
    import sys
    import types

    if isinstance(value, types.FunctionType):
        if value.__module__.split(".")[0] == module.split(".")[0]:
            yield from _function_parts(value, seen)
        else:  # an installed library's function: its name and the library's version
            top = sys.modules.get(value.__module__.split(".")[0])
            yield f"function {value.__module__}.{value.__qualname__} {getattr(top, '__version__', '')}"
    elif isinstance(value, functools.partial | types.MethodType):
        yield from _function_parts(value, seen)
    elif isinstance(value, types.ModuleType):
        yield f"module {value.__name__} {getattr(value, '__version__', '')}"
    elif isinstance(value, type):
        yield f"class {value.__module__}.{value.__qualname__}"
    else:
        yield _value_token(value)


def _value_token(value: Any) -> str:
    """dask's deterministic token of ``value``, or its identity in this process when there is none."""
    from dask.base import tokenize  # lazy: dask

    try:
        return tokenize(value, ensure_deterministic=True)
    except Exception:  # noqa: BLE001 - anything dask cannot hash: never equal in another process
        return f"{type(value).__qualname__} at {id(value):#x} in process {os.getpid()}"
