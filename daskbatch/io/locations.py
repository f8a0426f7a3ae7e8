"""Local paths with ``::`` in a name: read and written as those paths, not as fsspec's chained URLs.

fsspec (and zarr, which asks it) reads ``a::b`` as "``a`` over ``b``" (e.g.
``simplecache::s3://bucket/x.zarr``), so a local store named ``runs::2024.zarr``
was opened as another path, or failed naming one. Here ``::`` chains only when
the path is no existing local path and the part before the first ``::`` names a
protocol (``simplecache``, ``zip``, ...) or is itself a URL (``zip://...``).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["is_chained_url", "zarr_target"]


def is_chained_url(path: str) -> bool:
    """Tell whether ``path`` is an fsspec chained URL (``simplecache::s3://...``) rather than a local path.

    Parameters
    ----------
    path : str
        A path or URL.

    Returns
    -------
    bool
        True when ``path`` holds ``::``, no local file or directory has that
        name, and the part before the first ``::`` names a protocol or is a URL.
    """
    if "::" not in path or os.path.lexists(path):
        return False
    import fsspec  # lazy: fsspec

    first = path.split("::", 1)[0]
    return "://" in first or first in fsspec.available_protocols()


def zarr_target(path: str, *, read_only: bool = False) -> Any:
    """What to hand zarr or xarray for ``path``: a local store for a local path with ``::``, else the path.

    Parameters
    ----------
    path : str
        A local path or URL.
    read_only : bool, default False
        Open a local store read-only (for ``mode="r"``).

    Returns
    -------
    str or zarr.storage.LocalStore
        ``path`` itself, or a :class:`zarr.storage.LocalStore` on it, which zarr
        does not parse as a URL.
    """
    if "::" not in path or "://" in path or is_chained_url(path):
        return path
    import zarr  # lazy: zarr

    return zarr.storage.LocalStore(path, read_only=read_only)
