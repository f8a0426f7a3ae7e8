"""A token of what a function computes, so that an output made by a changed function is not resumed."""

from __future__ import annotations

import functools
import hashlib
import os
import site
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

__all__ = ["function_token"]


def function_token(func: Any) -> str:
    """Hash what a function computes: its code, constants, defaults, closure values and the functions it calls."""
    digest = hashlib.sha256()
    for part in _function_parts(func, set()):
        digest.update(part.encode() + b"\0")
    return "sha256 " + digest.hexdigest()


def _function_parts(func: Any, seen: set[int]) -> Iterator[str]:
    """The strings :func:`function_token` hashes, one function's worth and its callees'."""
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
        owner = func.__self__ if isinstance(func.__self__, type) else type(func.__self__)
        yield from _value_parts(owner, owner.__module__, seen)  # the methods it reaches by self
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
        yield from _value_parts(type(func), type(func).__module__, seen)  # the methods __call__ reaches by self
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
    import types

    if isinstance(value, types.FunctionType):
        if value.__module__.split(".")[0] == module.split(".")[0] or _is_user_module(value.__module__):
            yield from _function_parts(value, seen)
        else:  # an installed library's function: its name and the library's version
            yield f"function {value.__module__}.{value.__qualname__} {_library_version(value.__module__)}"
    elif isinstance(value, functools.partial | types.MethodType):
        yield from _function_parts(value, seen)
    elif isinstance(value, types.ModuleType):
        if _is_user_module(value):
            yield from _module_parts(value, seen)
        else:
            yield f"module {value.__name__} {getattr(value, '__version__', '')}"
    elif isinstance(value, type):
        yield f"class {value.__module__}.{value.__qualname__}"
        if _is_user_module(value.__module__) and id(value) not in seen:
            seen.add(id(value))
            yield from _class_parts(value, module, seen)
    else:
        yield _value_token(value)


def _class_parts(cls: type, module: str, seen: set[int]) -> Iterator[str]:
    """A user class's attributes, methods by their code, for it and its user base classes."""
    for klass in cls.__mro__:
        if klass is object or not _is_user_module(klass.__module__):
            continue
        for name, attribute in sorted(vars(klass).items(), key=lambda item: item[0]):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            yield name
            if isinstance(attribute, staticmethod | classmethod):
                attribute = attribute.__func__
            if isinstance(attribute, property):
                for accessor in (attribute.fget, attribute.fset, attribute.fdel):
                    if accessor is not None:
                        yield from _value_parts(accessor, module, seen)
            else:
                yield from _value_parts(attribute, module, seen)


def _module_parts(module: Any, seen: set[int]) -> Iterator[str]:
    """A user module's source, then the user modules its namespace reaches (their sources, recursively)."""
    import types

    if id(module) in seen:
        return
    seen.add(id(module))
    yield f"module {module.__name__}"
    yield _source_token(module)
    # Its functions and classes read its globals: the modules (and other modules' functions and
    # classes) bound there are what its code can reach beyond its own source.
    for value in list(vars(module).values()):
        reached: Any
        if isinstance(value, types.ModuleType):
            reached = value
        elif isinstance(value, types.FunctionType | type) and isinstance(getattr(value, "__module__", None), str):
            reached = sys.modules.get(value.__module__)
        else:
            continue
        if reached is not None and reached is not module and _is_user_module(reached):
            yield from _module_parts(reached, seen)


def _source_token(module: Any) -> str:
    """sha256 of the file ``module`` was loaded from; its identity in this process when none can be read."""
    path = getattr(module, "__file__", None)
    try:
        with open(path, "rb") as handle:  # type: ignore[arg-type]  # None raises TypeError, caught
            return "source sha256 " + hashlib.sha256(handle.read()).hexdigest()
    except (OSError, TypeError):
        # Nothing tells what this module computes: never equal in another process, so never resumed.
        return f"module {module.__name__} without readable source, at {id(module):#x} in process {os.getpid()}"


def _is_user_module(module_or_name: Any) -> bool:
    """Whether a module (or the imported one of that name) is the user's own: not stdlib, not installed."""
    module = sys.modules.get(module_or_name) if isinstance(module_or_name, str) else module_or_name
    name = str(getattr(module, "__name__", module_or_name))
    if name.split(".")[0] == "daskbatch":
        return False  # known by daskbatch's version, which every fingerprint holds
    if module is None or name in sys.builtin_module_names:
        return False
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        # A module made at run time (not a built-in, not a namespace package): nothing
        # else tells what it holds, so it is the user's, and its missing source says so.
        return getattr(module, "__path__", None) is None and getattr(module, "__spec__", None) is None
    real = os.path.realpath(path)
    return not any(real == root or real.startswith(root + os.sep) for root in _library_roots())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """The folders of the standard library and of the installed packages, real paths."""
    paths = sysconfig.get_paths()
    roots = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += list(getattr(site, "getsitepackages", list)()) + [site.getusersitepackages()]
    return tuple(sorted({os.path.realpath(r) for r in roots if r}))


def _library_version(module_name: str) -> str:
    """The ``__version__`` of the installed package ``module_name`` belongs to ('' when it has none)."""
    return str(getattr(sys.modules.get(module_name.split(".")[0]), "__version__", ""))


def _value_token(value: Any) -> str:
    """dask's deterministic token of ``value``, or its identity in this process when there is none."""
    from dask.base import tokenize  # lazy: dask

    try:
        return tokenize(value, ensure_deterministic=True)
    except Exception:  # noqa: BLE001 - anything dask cannot hash: never equal in another process
        return f"{type(value).__qualname__} at {id(value):#x} in process {os.getpid()}"
