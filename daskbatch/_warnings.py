"""Warnings shown at the user's line, not at the daskbatch line that raised them."""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

# Every frame under this directory is daskbatch's own; the first frame outside it is the caller's.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str | Warning, category: type[Warning] | None = None) -> None:
    """Issue a warning attributed to the first frame outside the daskbatch package."""
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=(_PACKAGE_DIR,))
        return
    # Python 3.11 has no skip_file_prefixes: count the frames inside the package instead.
    # stacklevel 2 is warn()'s caller; each daskbatch frame above it adds one.
    level = 2
    caller: FrameType | None = sys._getframe(1)
    while caller is not None and caller.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, caller = level + 1, caller.f_back
    warnings.warn(message, category, stacklevel=level)
