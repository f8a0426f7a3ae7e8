"""Quick looks at a Summary in Jupyter: histograms, the correlation matrix, the MI ranking (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _axes(ax: Any, n: int = 1, **kw: Any) -> Any:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, created = plt.subplots(1, n, figsize=kw.get("figsize", (4 * n, 3)), squeeze=False)
    return created[0] if n > 1 else created[0][0]


def plot_histograms(summary: Any, features: Sequence[str | int] | None = None, *, ax: Any = None) -> Any:
    """Step plots of the histograms of ``features`` (names or indices; the first four by default)."""
    if summary.hist_counts is None:
        raise ValueError("this summary has no histograms: describe(..., stats=(..., 'hist'))")
    names = list(summary.feature_names)
    chosen = list(features) if features is not None else names[:4]
    index = [names.index(f) if isinstance(f, str) else int(f) for f in chosen]
    axes = _axes(ax, len(index))
    for a, i in zip(np.atleast_1d(axes), index, strict=False):
        a.stairs(summary.hist_counts[i], summary.hist_edges[i], fill=True, alpha=0.7)
        a.set_title(names[i])
        a.set_xlabel("value")
        a.set_ylabel("count")
    return axes


def plot_correlation(summary: Any, *, ax: Any = None, max_features: int = 64) -> Any:
    """Heat map of the correlation matrix (the first ``max_features`` features)."""
    if summary.corr is None:
        raise ValueError("this summary has no correlation: describe(..., stats=(..., 'cov'))")
    a = _axes(ax, figsize=(5, 4))
    k = min(max_features, summary.n_features)
    image = a.imshow(summary.corr[:k, :k], vmin=-1, vmax=1, cmap="RdBu_r")
    a.figure.colorbar(image, ax=a, label="Pearson r")
    a.set_title("correlation")
    return a


def plot_mi(summary: Any, *, k: int = 20, ax: Any = None) -> Any:
    """Bar chart of the ``k`` features with the largest mutual information with the label."""
    ranked = summary.top_mi(k)
    if not ranked:
        raise ValueError("this summary has no mutual information: describe(x, label, ...)")
    a = _axes(ax, figsize=(6, 0.25 * len(ranked) + 1))
    names, values = zip(*ranked, strict=True)
    a.barh(list(names)[::-1], list(values)[::-1])
    a.set_xlabel(f"mutual information ({summary.provenance.get('mi_units', 'nats')})")
    return a
