"""Set dask up for daskbatch when dask is first imported, not at ``import daskbatch``.

Loads daskbatch's defaults into ``dask.config``, registers the states with ``dask.sizeof``
(not as an entry point: dask loads those while importing ``dask.sizeof``, a cycle), and spares
``import dask.array`` its import of xarray (:class:`_XarrayWhenUsed`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


def _set_up_dask() -> None:
    """Load daskbatch's defaults into dask.config and register the states with dask.sizeof."""
    from dask.sizeof import sizeof  # lazy: dask

    from daskbatch import config  # lazy: the setup runs once dask is in
    from daskbatch.stats._base import State  # lazy: imports numpy

    config.load_into_dask()
    sizeof.register(State)(lambda state: int(state.nbytes))  # dask's memory accounting: the arrays' bytes
    _defer_xarray()


class _NoObjectIsOne:
    """A class with no instances: what ``xarray.DataArray`` is to ``isinstance`` before xarray is imported."""


class _XarrayWhenUsed(ModuleType):
    """Stands for xarray in ``dask.array.core``: imports it on first use, except to ask ``isinstance(x, DataArray)``."""

    def __getattr__(self, name: str) -> Any:
        # An xarray DataArray exists only once xarray is imported: until then the answer is no,
        # without importing it; any other use imports the real xarray (and its error, if broken).
        if name == "DataArray" and "xarray" not in sys.modules:
            return _NoObjectIsOne
        return getattr(importlib.import_module("xarray"), name)


def _defer_xarray() -> None:
    """Make ``dask.array.core``'s optional import of xarray give :class:`_XarrayWhenUsed` (once, before it runs)."""
    compatibility = sys.modules.get("dask._compatibility")
    original = getattr(compatibility, "import_optional_dependency", None)
    if original is None or "dask.array.core" in sys.modules or getattr(original, "__wrapped__", None) is not None:
        return  # another dask, or dask.array (and xarray) loaded already, or done

    def import_optional_dependency(name: str, *args: Any, **kwargs: Any) -> Any:
        """dask's own, except that ``dask.array.core`` gets xarray's stand-in while xarray is not imported."""
        caller = sys._getframe(1).f_globals.get("__name__")
        if name != "xarray" or caller != "dask.array.core" or "xarray" in sys.modules:
            return original(name, *args, **kwargs)
        # As dask's own with errors="ignore": None where xarray is not installed.
        return _XarrayWhenUsed("xarray") if importlib.util.find_spec("xarray") is not None else None

    import_optional_dependency.__wrapped__ = original  # type: ignore[attr-defined]
    compatibility.import_optional_dependency = import_optional_dependency  # type: ignore[union-attr]


# Plain classes, not importlib.abc's: that module loads importlib.resources, tempfile and shutil,
# half of a bare `import daskbatch`; the import system asks only for these methods.
class _ThenSetUp:
    """dask's own loader, followed by :func:`_set_up_dask` once dask's package has run."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """Let dask's loader create the module."""
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        """Run dask's package, then daskbatch's setup."""
        # dask keeps its own loader (tracebacks and importlib.resources ask it), not this wrapper.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        try:
            self._loader.exec_module(module)
        except ValueError as exc:  # dask reads its YAML files at import; a malformed one raises here
            from daskbatch.config import config_file_error  # lazy: only on a malformed file

            config_file_error(exc)
            raise
        _remove_finder()
        _set_up_dask()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _AfterDaskFinder:
    """Finds ``dask`` through the finders behind it and wraps its loader; declines every other name."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """dask's spec with :class:`_ThenSetUp` as its loader; None for any other name."""
        if fullname != "dask":
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenSetUp(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


def _remove_finder() -> None:
    """Take the finder off sys.meta_path (dask is imported once)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterDaskFinder)]


def install() -> None:
    """Set dask up now if it is loaded, else when it is first imported."""
    if "dask" in sys.modules:
        _set_up_dask()
    elif not any(isinstance(f, _AfterDaskFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDaskFinder())
