"""From a summary to a decision: per-feature scores, :func:`select` and the :class:`Selection` it returns.

- :mod:`~daskbatch.selection.scores` — F, chi², mutual information, variance, f/r-regression scores;
- :mod:`~daskbatch.selection.choose` — :func:`select`: filters, ``k``, thresholds, mRMR, and why each feature went;
- :mod:`~daskbatch.selection.record` — the :class:`Selection` record, saved and loaded.
"""

from __future__ import annotations

from daskbatch.selection.choose import select
from daskbatch.selection.record import Selection, load_selection

__all__ = ["Selection", "load_selection", "select"]
