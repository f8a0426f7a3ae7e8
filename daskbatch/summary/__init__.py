"""What :func:`daskbatch.describe` returns: the :class:`Summary` record and its views.

- :mod:`~daskbatch.summary.fields` — the record's field names by kind;
- :mod:`~daskbatch.summary.record` — :class:`Summary`, per-feature arrays and their derived values;
- :mod:`~daskbatch.summary.results` — its fields from describe's finalized results;
- :mod:`~daskbatch.summary.dataset`, :mod:`~daskbatch.summary.attrs`, :mod:`~daskbatch.summary.user_results` —
  as an ``xarray.Dataset`` with CF-style labels, and back;
- :mod:`~daskbatch.summary.store`, :mod:`~daskbatch.summary.load` — onto disk and back;
- :mod:`~daskbatch.summary.reprs`, :mod:`~daskbatch.summary.plotting` —
  what it looks like in a notebook, a terminal and a figure;
- :mod:`~daskbatch.summary.compare` — drift between two summaries.

Views take a Summary and never import the record's module at run time, so the
record can offer them as methods without an import cycle.
"""

from __future__ import annotations

from daskbatch.summary.fields import BUILT_IN_RESULTS, DEFAULT_QUANTILES, quantile_label
from daskbatch.summary.load import load_summary
from daskbatch.summary.record import Summary

__all__ = ["BUILT_IN_RESULTS", "DEFAULT_QUANTILES", "Summary", "load_summary", "quantile_label"]
