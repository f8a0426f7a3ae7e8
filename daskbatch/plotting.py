"""Figures of a :class:`~daskbatch.Summary` worth showing: ``summary.plot.<kind>(...)``.

Every function draws from the summary alone (no pass over the data) and returns
a :class:`matplotlib.figure.Figure`, which Jupyter shows inline and
``fig.savefig`` writes. matplotlib (and scipy, for the clustered correlation
order) are imported on use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SummaryPlot", "correlation", "histograms", "mi", "quantiles"]


def _figure(width: float, height: float) -> Any:
    # Figure() instead of pyplot: no global state, no GUI backend needed.
    try:
        from matplotlib.figure import Figure
    except ImportError:  # an optional dependency: say which extra brings it
        raise ImportError(
            "summary.plot needs matplotlib: pip install 'daskbatch[notebook]' (or pip install matplotlib)"
        ) from None

    _show_figures_inline(Figure)
    return Figure(figsize=(width, height), layout="constrained")


def _show_figures_inline(figure_class: type) -> None:
    """In a Jupyter kernel, have a returned Figure shown as a PNG, as ``%matplotlib inline`` would.

    IPython registers its PNG formatter for figures only once pyplot's inline
    backend has been loaded; a Figure made without pyplot would otherwise show
    as ``<Figure size ...>`` text. A formatter already there (the user's
    ``%matplotlib inline``, ``%config InlineBackend.figure_formats``) is kept.
    """
    import sys

    if "ipykernel" not in sys.modules:  # not in a notebook kernel: nothing to register
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    png = shell.display_formatter.formatters["image/png"]
    try:
        png.lookup_by_type(figure_class)
    except KeyError:
        from IPython.core.pylabtools import print_figure

        png.for_type(figure_class, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def _feature_index(summary: Any, features: Sequence[str | int] | None, default: Sequence[int]) -> list[int]:
    names = list(summary.feature_names)
    if features is None:
        return list(default)
    index = []
    for f in features:
        if isinstance(f, str):
            if f not in names:
                raise KeyError(f"no feature named {f!r}; the summary has {len(names)} features ({names[:5]}...)")
            index.append(names.index(f))
        else:
            index.append(int(f))
    return index


def _correlated_subset(corr: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` features with the largest off-diagonal |r| (all when there are <= k)."""
    d = corr.shape[0]
    if d <= k:
        return np.arange(d)
    strength = np.abs(np.where(np.isfinite(corr), corr, 0.0))
    np.fill_diagonal(strength, 0.0)
    return np.sort(np.argsort(-strength.max(axis=1), kind="stable")[:k])


def _clustered_order(corr: np.ndarray) -> np.ndarray:
    """Leaf order of average-linkage clustering on the distance 1 - |r| (scipy)."""
    if corr.shape[0] < 3:
        return np.arange(corr.shape[0])
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    dist = 1.0 - np.abs(np.where(np.isfinite(corr), corr, 0.0))
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2  # exact symmetry for squareform
    return leaves_list(linkage(squareform(np.clip(dist, 0.0, 2.0), checks=False), method="average"))


def correlation(summary: Any, *, max_features: int = 40, cluster: bool = True) -> Any:
    """Heat map of the correlations among the most correlated features, in clustered order.

    Parameters
    ----------
    summary : Summary
        With ``cov`` computed.
    max_features : int, default 40
        Show the features with the largest off-diagonal |r| (all when there are
        fewer). Names label both axes up to 60 features; beyond, every k-th.
    cluster : bool, default True
        Order rows and columns by hierarchical clustering of 1 - |r|, so
        correlated groups form blocks along the diagonal.

    Returns
    -------
    matplotlib.figure.Figure
        The heat map.
    """
    if summary.corr is None:
        raise ValueError("this summary has no correlation matrix: describe(..., stats=(..., 'cov'))")
    pick = _correlated_subset(summary.corr, max_features)
    sub = summary.corr[np.ix_(pick, pick)]
    if cluster:
        order = _clustered_order(sub)
        pick, sub = pick[order], sub[np.ix_(order, order)]
    names = [summary.feature_names[i] for i in pick]
    k = len(names)
    side = min(12.0, max(4.0, 0.22 * k + 2.0))
    fig = _figure(side + 1.2, side)
    ax = fig.add_subplot()
    image = ax.imshow(sub, vmin=-1, vmax=1, cmap="RdBu_r", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="Pearson r", shrink=0.8)
    step = max(1, math.ceil(k / 60))
    ticks = np.arange(0, k, step)
    size = 9 if k <= 20 else 7 if k <= 40 else 5
    ax.set_xticks(ticks, [names[i] for i in ticks], rotation=90, fontsize=size)
    ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=size)
    shown = f"{k} of {summary.n_features} features" if k < summary.n_features else f"{k} features"
    ax.set_title(f"Correlation ({shown}{', clustered' if cluster else ''}; {summary.cov_count:,} complete rows)")
    return fig


def histograms(
    summary: Any, features: Sequence[str | int] | None = None, *, ncols: int = 4, by_class: bool = True
) -> Any:
    """A grid of per-feature histograms, per class when the label was given.

    Each panel marks the mean and mean ± std, and notes how many values fell
    below or above the histogram range (under/overflow).

    Parameters
    ----------
    summary : Summary
        With ``hist`` computed.
    features : sequence of str or int, optional
        Names or indices; default: the 8 features with the highest mutual
        information (when there is a label), else the first 8.
    ncols : int, default 4
        Panels per row.
    by_class : bool, default True
        Overlay one outline per class from the joint (feature, bin, class) counts.

    Returns
    -------
    matplotlib.figure.Figure
        The grid.
    """
    if summary.hist_counts is None:
        raise ValueError("this summary has no histograms: describe(..., stats=(..., 'hist'))")
    default = (
        [summary.feature_names.index(n) for n in summary.top_mi(8).index]
        if summary.mi is not None else range(min(8, summary.n_features))
    )
    index = _feature_index(summary, features, default)
    ncols = max(1, min(ncols, len(index)))
    nrows = math.ceil(len(index) / ncols)
    fig = _figure(3.2 * ncols, 2.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    joint = summary.joint_counts if by_class else None
    classes = _class_labels(summary, joint)
    for ax, i in zip(axes, index, strict=False):
        edges = summary.hist_edges[i]
        if joint is not None:
            for c, label in enumerate(classes):
                ax.stairs(joint[i, 1:-1, c], edges, label=f"class {label}", linewidth=1.2)
        else:
            ax.stairs(summary.hist_counts[i], edges, fill=True, alpha=0.7)
        mean, std = summary.mean[i], summary.std[i]
        if np.isfinite(mean):
            ax.axvline(mean, color="k", linewidth=1)
            if np.isfinite(std):
                for v in (mean - std, mean + std):
                    ax.axvline(v, color="k", linewidth=0.8, linestyle="--")
        ax.set_title(summary.feature_names[i], fontsize=10)
        ax.set_xlabel("value")
        ax.set_ylabel("count")
        outside = _outside_note(summary, i)
        if outside:
            ax.text(0.98, 0.95, outside, transform=ax.transAxes, ha="right", va="top", fontsize=7, color="firebrick")
    for ax in axes[len(index):]:
        ax.set_visible(False)
    if joint is not None and len(index):
        axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Histograms (line: mean, dashed: mean ± std)")
    return fig


def _class_labels(summary: Any, joint: np.ndarray | None) -> list[Any]:
    if joint is None:
        return []
    values = summary.provenance.get("class_values")
    return list(values) if values is not None and len(values) == joint.shape[2] else list(range(joint.shape[2]))


def _outside_note(summary: Any, i: int) -> str:
    if summary.underflow is None or summary.overflow is None:
        return ""
    under, over = int(summary.underflow[i]), int(summary.overflow[i])
    if not (under or over):
        return ""
    total = max(int(summary.count[i]), 1)
    return f"outside range: {under:,} below, {over:,} above ({(under + over) / total:.1%})"


def mi(summary: Any, *, k: int = 20) -> Any:
    """Draw bars of the ``k`` features with the largest mutual information, with the bias line.

    The dashed line is the expected MI of an *independent* feature binned the
    same way, (B - 1)(K - 1) / 2N (Miller–Madow): bars near it carry no
    evidence of dependence.

    Parameters
    ----------
    summary : Summary
        With ``mi`` computed.
    k : int, default 20
        Features shown.

    Returns
    -------
    matplotlib.figure.Figure
        The bar chart.
    """
    ranked = summary.top_mi(k)
    if ranked.empty:
        raise ValueError("this summary has no mutual information: describe(x, label, ...)")
    names = [str(n) for n in ranked.index][::-1]
    values = ranked.to_numpy(dtype=np.float64)[::-1]
    fig = _figure(6.5, 0.28 * len(names) + 1.5)
    ax = fig.add_subplot()
    ax.barh(names, values, color="tab:blue")
    for y, v in enumerate(values):  # small values stay readable
        ax.text(v, y, f" {v:.3g}", va="center", fontsize=7)
    units = summary.provenance.get("mi_units", "nats")
    bias = mi_bias(summary)
    if bias is not None:
        ax.axvline(bias, color="firebrick", linestyle="--", linewidth=1, label=f"independence bias {bias:.2g}")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel(f"mutual information with the label ({units})")
    ax.set_title(f"Top {len(names)} features by mutual information")
    return fig


def mi_bias(summary: Any) -> float | None:
    """Compute the MI bias (B - 1)(K - 1) / 2N in the summary's MI units: B bins, K classes, N rows.

    Parameters
    ----------
    summary : Summary
        A summary.

    Returns
    -------
    float or None
        The bias, None without MI.
    """
    if summary.joint_counts is None or summary.mi is None:
        return None
    n = float(np.max(summary.count)) if summary.count.size else 0.0
    if n <= 0:
        return None
    bins, classes = summary.joint_counts.shape[1] - 2, summary.joint_counts.shape[2]
    bias = (bins - 1) * (classes - 1) / (2.0 * n)
    return bias / math.log(2) if summary.provenance.get("mi_units") == "bits" else bias


def quantiles(summary: Any, features: Sequence[str | int] | None = None, *, max_features: int = 30) -> Any:
    """Box view from the quantiles: box q25–q75, median line, whiskers q01–q99, min/max dots.

    Features are standardised (value - median) / IQR so that different scales
    share one axis; the raw quantiles are in ``summary.quantile``.

    Parameters
    ----------
    summary : Summary
        With quantiles computed.
    features : sequence of str or int, optional
        Names or indices; default: the first ``max_features``.
    max_features : int, default 30
        The most features shown.

    Returns
    -------
    matplotlib.figure.Figure
        The box view.
    """
    index = _feature_index(summary, features, range(min(max_features, summary.n_features)))
    qs = np.asarray(summary.quantile([0.01, 0.25, 0.5, 0.75, 0.99]), dtype=np.float64)[index]
    lo, q1, med, q3, hi = qs.T
    iqr = np.where(q3 - q1 > 0, q3 - q1, 1.0)

    def scaled(v: np.ndarray) -> np.ndarray:
        """Standardise values by the median and IQR of their feature.

        Parameters
        ----------
        v : numpy.ndarray
            One value per shown feature.

        Returns
        -------
        numpy.ndarray
            ``(v - median) / IQR``.
        """
        return (v - med) / iqr

    fig = _figure(7.0, 0.3 * len(index) + 1.5)
    ax = fig.add_subplot()
    y = np.arange(len(index))[::-1]
    ax.hlines(y, scaled(lo), scaled(hi), color="grey", linewidth=1, label="q01–q99")
    ax.barh(y, scaled(q3) - scaled(q1), left=scaled(q1), height=0.6, color="tab:blue", alpha=0.6, label="q25–q75")
    ax.vlines(scaled(med), y - 0.3, y + 0.3, color="k", linewidth=1.5, label="median")
    ax.plot(scaled(summary.min[index]), y, "|", color="firebrick", label="min / max")
    ax.plot(scaled(summary.max[index]), y, "|", color="firebrick")
    ax.set_yticks(y, [summary.feature_names[i] for i in index], fontsize=8)
    ax.set_xlabel("(value − median) / IQR")
    ax.set_title("Quantiles per feature")
    ax.legend(fontsize=7, loc="lower right")
    return fig


class SummaryPlot:
    """``summary.plot``: ``.correlation()``, ``.histograms()``, ``.mi()``, ``.quantiles()``.

    Calling it, ``summary.plot("hist")``, picks one by kind (``"hist"``,
    ``"corr"``, ``"mi"``, ``"quantiles"``).

    Parameters
    ----------
    summary : Summary
        The summary to plot.
    """

    def __init__(self, summary: Any) -> None:
        self._summary = summary

    def correlation(self, **kwargs: Any) -> Any:
        """Draw the correlation heat map; see :func:`daskbatch.plotting.correlation`.

        Parameters
        ----------
        **kwargs
            Passed to :func:`~daskbatch.plotting.correlation`.

        Returns
        -------
        matplotlib.figure.Figure
            The heat map.
        """
        return correlation(self._summary, **kwargs)

    def histograms(self, features: Sequence[str | int] | None = None, **kwargs: Any) -> Any:
        """Draw the histograms; see :func:`daskbatch.plotting.histograms`.

        Parameters
        ----------
        features : sequence of str or int, optional
            Names or indices.
        **kwargs
            Passed to :func:`~daskbatch.plotting.histograms`.

        Returns
        -------
        matplotlib.figure.Figure
            The grid.
        """
        return histograms(self._summary, features, **kwargs)

    def mi(self, **kwargs: Any) -> Any:
        """Draw the mutual information bars; see :func:`daskbatch.plotting.mi`.

        Parameters
        ----------
        **kwargs
            Passed to :func:`~daskbatch.plotting.mi`.

        Returns
        -------
        matplotlib.figure.Figure
            The bar chart.
        """
        return mi(self._summary, **kwargs)

    def quantiles(self, features: Sequence[str | int] | None = None, **kwargs: Any) -> Any:
        """Draw the quantile boxes; see :func:`daskbatch.plotting.quantiles`.

        Parameters
        ----------
        features : sequence of str or int, optional
            Names or indices.
        **kwargs
            Passed to :func:`~daskbatch.plotting.quantiles`.

        Returns
        -------
        matplotlib.figure.Figure
            The box view.
        """
        return quantiles(self._summary, features, **kwargs)

    def __call__(self, kind: str = "hist", **kwargs: Any) -> Any:
        kinds = {"hist": self.histograms, "corr": self.correlation, "mi": self.mi, "quantiles": self.quantiles}
        if kind not in kinds:
            raise ValueError(f"kind must be one of {sorted(kinds)}, got {kind!r}")
        return kinds[kind](**kwargs)
