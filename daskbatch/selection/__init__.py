"""From a summary to a decision: per-feature scores, :func:`select` and the :class:`Selection` it returns."""

from __future__ import annotations

from daskbatch.selection.choose import select
from daskbatch.selection.record import Selection, load_selection

__all__ = ["Selection", "load_selection", "select"]
