"""What a checkpoint was written for: which data, and every setting that changes the bits."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import site
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daskbatch._version import __version__
from daskbatch.stats.kernels.path import kernel_path

if TYPE_CHECKING:
    from daskbatch.engine.inputs import FeatureMatrix
    from daskbatch.io.dataset import Dataset

__all__ = [
    "HINTS", "checksum_token", "checksums_digest", "data_items", "differences", "function_token", "input_items",
    "listing_token", "output_items",
]

#: What a difference in an item most likely means, for the mismatch message.
HINTS = {
    "source": "another store",
    "x content": "the store was rewritten since",
    "label content": "the label was rewritten since",
    "weights content": "other weights (or the weights array was rewritten)",
    "kernels": "daskbatch.kernels setting changed",
    "array backend": "another device or library version",
    "daskbatch version": "daskbatch was upgraded",
}

#: File-info fields that change when an object store's object is rewritten (first one present wins).
_VERSION_FIELDS = ("mtime", "LastModified", "last_modified", "updated", "generation", "ETag", "etag", "created")


def input_items(data: FeatureMatrix, split_every: int, format_version: int) -> dict[str, str]:
    """Identify the input of a pass, as printable strings."""
    x = data.x
    rows = tuple(int(c) for c in x.chunks[0])
    grid = f"{len(rows)} blocks of {rows[0]:,} rows" + (f" (last {rows[-1]:,})" if rows[-1] != rows[0] else "")
    if len(set(rows[:-1])) > 1:
        grid += ", irregular sha256 " + hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
    return {
        "format": str(format_version),
        **data_items(data),
        "chunk grid": grid,
        "split_every": str(split_every),
        **setting_items(x),
        "daskbatch version": str(__version__),
    }


def data_items(data: FeatureMatrix) -> dict[str, str]:
    """Identify the data of an input (where, metadata, content token), without any setting."""
    x = data.x
    source = getattr(data, "source", None)
    zx = getattr(source, "zarr_x", None)
    items: dict[str, str] = {}
    if zx is not None:
        items["source"] = store_location(zx)
        items.update(array_items("x", zx))
    else:
        items["source"] = "in-memory data"
        items["x content"] = f"dask token {_tokenize(x)}"
    items.update(_label_items(data, source))
    weights = getattr(data, "weights", None)
    if weights is not None:  # only then: the fingerprints of unweighted checkpoints stay as they were
        items.update({"weights": str(data.provenance.get("weights", "weights")),
                      "weights content": f"dask token {_tokenize(weights)}"})
    items.update({"shape": str(tuple(int(n) for n in x.shape)), "dtype": str(x.dtype)})
    return items


def output_items(data: FeatureMatrix, work: dict[str, str], options: dict[str, Any]) -> dict[str, str]:
    """Identify a resumable output: its input's data, the work done on it, and the settings that change bits."""
    return {
        **data_items(data),
        **work,
        **{f"option {k}": json.dumps(v, sort_keys=True, default=str) for k, v in options.items()},
        **setting_items(data.x),
        "daskbatch version": str(__version__),
    }


def _label_items(data: FeatureMatrix, source: Dataset | None) -> dict[str, str]:
    label = data.label
    if label is None:
        return {"label": "none"}
    stored = getattr(source, "label", None)
    zlabel = getattr(source, "zarr_label", None)
    # The label is the store's when its graph holds the Dataset's reading layer
    # (a rechunk or a move to the GPU keeps that layer); else it was given in memory.
    if zlabel is not None and stored is not None and stored.name in getattr(label.dask, "layers", {}):
        return array_items("label", zlabel)
    return {"label": "in-memory data", "label content": f"dask token {_tokenize(label)}"}


def _tokenize(a: Any) -> str:
    from dask.base import tokenize  # lazy: dask

    return tokenize(a)


def setting_items(x: Any) -> dict[str, str]:
    """Record the settings outside the statistics that change the bits of the result."""
    from daskbatch import config  # lazy: dask (daskbatch.kernels)

    meta = getattr(x, "_meta", None)
    lib = type(meta).__module__.split(".")[0] if meta is not None else "numpy"
    version = getattr(__import__(lib), "__version__", "?")
    # The path the chunk tasks take (kernel_path); "used" names the CPU loops only, as
    # fingerprints always have (a CuPy input is told apart by its "array backend").
    on = kernel_path(x).kind == "numba-cpu"
    compiled = ""
    if on:
        import numba  # lazy: numba

        compiled = f" (numba {numba.__version__})"
    return {
        "array backend": f"{lib} {version}",
        "kernels": f"daskbatch.kernels={config.get('kernels')}, "
                   f"{'used' if on else 'not used'}{compiled}",
    }


def array_items(what: str, arr: Any) -> dict[str, str]:
    """Identify the zarr array ``arr`` by its metadata and content token."""
    meta = arr.metadata.to_dict()
    codecs = {k: meta[k] for k in ("codecs", "compressor", "compressors", "filters", "order") if k in meta}
    return {
        what: str(arr.path),
        f"{what} shape": str(tuple(int(n) for n in arr.shape)),
        f"{what} dtype": str(arr.dtype),
        f"{what} store chunks": str(tuple(arr.shards or arr.chunks)),
        f"{what} codecs": json.dumps(codecs, sort_keys=True, default=str),
        f"{what} fill value": json.dumps(meta.get("fill_value"), default=str),
        f"{what} content": checksum_token(arr) or listing_token(arr),
    }


def store_location(arr: Any) -> str:
    """Name the store of ``arr`` as one canonical string: a real local path or a normalised URL."""
    store = arr.store
    root = getattr(store, "root", None)
    if root is not None:  # LocalStore
        return os.path.realpath(root)
    fs = getattr(store, "fs", None)
    if fs is not None:  # FsspecStore
        from daskbatch.io.chunk_grid import is_local_fs  # lazy: zarr

        path = store.path
        if is_local_fs(fs):
            return os.path.realpath(path)
        return str(fs.unstrip_protocol(path))
    return f"{type(store).__name__} {id(store):#x} (in this process only)"


def checksum_token(arr: Any, fetched_since: int | None = None) -> str | None:
    """Hash the chunk checksums of ``arr`` (daskbatch's arrays record them); None where it has none."""
    from daskbatch.io.chunk_grid import chunk_checksums  # lazy: zarr

    checksums = chunk_checksums(arr, fetched_since)
    return None if checksums is None else f"{len(checksums)} chunks, crc32c {checksums_digest(arr, checksums)}"


def listing_token(arr: Any) -> str:
    """Hash the names, sizes and modification times of ``arr``'s files (one listing, no file opened)."""
    from dask.utils import format_bytes  # lazy: dask

    digest = hashlib.sha256()
    n = total = 0
    for name, size, version in sorted(_listing(arr)):
        digest.update(f"{name}\0{size}\0{version}\n".encode())
        n += 1
        total += size
    return f"{n} files, {format_bytes(total)}, sha256 {digest.hexdigest()[:20]}"


def checksums_digest(arr: Any, checksums: list[tuple[str, bytes]]) -> str:
    """Hash ``arr``'s shape, dtype, chunks, codecs and fill value and its chunks' keys and checksums (sha256)."""
    meta = arr.metadata.to_dict()
    # What decodes the bytes: equal checksums under other codecs or another shape are other numbers.
    described = {k: meta.get(k) for k in ("shape", "data_type", "chunk_grid", "codecs", "fill_value")}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode())
    for key, checksum in checksums:
        digest.update(key.encode() + b"\0" + checksum + b"\n")
    return f"sha256 {digest.hexdigest()[:20]}"


def _listing(arr: Any) -> Iterator[tuple[str, int, str]]:
    """(name relative to the array, size, version stamp) of every stored object of ``arr``."""
    store = arr.store
    prefix = arr.store_path.path.strip("/")
    root = getattr(store, "root", None)
    fs = getattr(store, "fs", None)
    if root is not None:
        yield from _walk(Path(root) / prefix if prefix else Path(root))
        return
    if fs is not None:
        from daskbatch.io.chunk_grid import is_local_fs  # lazy: zarr

        base = f"{store.path.rstrip('/')}/{prefix}" if prefix else store.path
        if is_local_fs(fs):
            yield from _walk(Path(base))
            return
        found = _find(fs, base)
        for name, info in found.items():
            stamp = next((str(info[k]) for k in _VERSION_FIELDS if info.get(k) is not None), "")
            yield name[len(base):].lstrip("/"), int(info.get("size") or 0), stamp
        return
    # Another store type (in memory, zip): names only.
    from zarr.core.sync import sync  # lazy: zarr

    async def keys() -> list[str]:
        return [k async for k in store.list_prefix(f"{prefix}/" if prefix else "")]

    for key in sync(keys()):
        yield key, 0, "names only"


def _walk(top: Path) -> Iterator[tuple[str, int, str]]:
    """Files under ``top`` with size and mtime_ns (stat only, no reads)."""
    for folder, _, files in os.walk(top, followlinks=True):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            yield os.path.relpath(os.path.join(folder, name), top), st.st_size, str(st.st_mtime_ns)


def _find(fs: Any, base: str) -> dict[str, dict[str, Any]]:
    """``fs.find(base, detail=True)``, on zarr's event loop for the async file systems zarr uses."""
    if getattr(fs, "async_impl", False):
        from zarr.core.sync import sync  # lazy: zarr

        return dict(sync(fs._find(base, detail=True)))
    return dict(fs.find(base, detail=True))


def differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Describe every item that differs between two fingerprints."""
    out = []
    for key in list(new) + [k for k in old if k not in new]:
        if old.get(key) != new.get(key):
            hint = HINTS.get(key)
            if key == "x content" and old.get("source") != new.get("source"):
                hint = None  # another store altogether; "source" says so
            out.append(f"{key} ({old.get(key, 'absent')} in the checkpoint, {new.get(key, 'absent')} now"
                       + (f": {hint})" if hint else ")"))
    return out


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
