"""The installed version of daskbatch (a bottom-layer module, so any layer may record it)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("daskbatch")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"
