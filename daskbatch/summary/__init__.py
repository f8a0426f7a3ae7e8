"""What :func:`daskbatch.describe` returns: the :class:`Summary` record and its views.

- :mod:`~daskbatch.summary.record` — :class:`Summary`, per-feature arrays and their derived values;
- :mod:`~daskbatch.summary.dataset` —
  as an ``xarray.Dataset`` with CF-style labels, and back;
- :mod:`~daskbatch.summary.store` — onto disk and back;
- :mod:`~daskbatch.summary.reprs`, :mod:`~daskbatch.summary.plotting` —
  what it looks like in a notebook, a terminal and a figure;
- :mod:`~daskbatch.summary.compare` — drift between two summaries.

Views take a Summary and never import the record's module at run time, so the
record can offer them as methods without an import cycle.
"""

from __future__ import annotations

from daskbatch.summary.dataset import DEFAULT_QUANTILES, quantile_label
from daskbatch.summary.record import Summary
from daskbatch.summary.store import load_summary

__all__ = ["DEFAULT_QUANTILES", "Summary", "load_summary", "quantile_label"]
