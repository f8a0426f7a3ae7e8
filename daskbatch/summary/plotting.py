"""Figures of a :class:`~daskbatch.Summary` worth showing: ``summary.plot.<kind>(...)``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch.runtime.progress import in_jupyter
from daskbatch.summary.reprs import format_percent

__all__ = ["SummaryPlot", "correlation", "histograms", "mi", "quantiles"]


#: Most classes told apart by colour (matplotlib's ``tab20``); beyond, the histograms show totals.
MAX_CLASS_COLOURS = 20


def _figure(width: float, height: float) -> Any:
    """A new constrained-layout figure: pyplot's when a script uses pyplot, else a bare Figure."""
    import sys

    try:
        from matplotlib.figure import Figure  # lazy: matplotlib
    except ImportError:  # an optional dependency: say which extra brings it
        raise ImportError(
            "summary.plot needs matplotlib: pip install 'daskbatch[notebook]' (or pip install matplotlib)"
        ) from None

    # A script that imported pyplot shows figures with plt.show(): only pyplot's own figures appear
    # there. In a notebook, pyplot's inline backend would show the figure a second time (it also
    # displays as the cell's value), and elsewhere a bare Figure needs no GUI backend or global state.
    if "matplotlib.pyplot" in sys.modules and not in_jupyter():
        import matplotlib.pyplot as plt  # lazy: matplotlib

        return plt.figure(figsize=(width, height), layout="constrained")
    _show_figures_inline(Figure)
    return Figure(figsize=(width, height), layout="constrained")


def _axes(ax: Any, width: float, height: float) -> tuple[Any, Any]:
    """``(figure, axes)``: the caller's axes and their figure, or a new figure with one axes."""
    if ax is not None:
        return ax.get_figure(), ax
    fig = _figure(width, height)
    return fig, fig.add_subplot()


def _legend_outside(fig: Any, ax: Any, **kwargs: Any) -> Any:
    """A legend beside the axes, never over the data (outside the figure's right edge with constrained layout)."""
    if fig.get_layout_engine() is not None and ax is None:
        return fig.legend(loc="outside right upper", **kwargs)
    target = ax if ax is not None else fig.axes[0]
    return target.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _class_colours(n: int) -> list[Any]:
    """``n`` distinct colours from a qualitative map (tab10, else tab20)."""
    from matplotlib import colormaps  # lazy: matplotlib

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i) for i in range(n)]


def _show_figures_inline(figure_class: type) -> None:
    """In a Jupyter kernel, have a returned Figure shown as a PNG, as ``%matplotlib inline`` would."""
    # IPython registers its PNG formatter for figures only once pyplot's inline backend has been loaded; a
    # Figure made without pyplot would otherwise show as ``<Figure size ...>`` text. A formatter already there
    # (the user's ``%matplotlib inline``, ``%config InlineBackend.figure_formats``) is kept.

    if not in_jupyter():  # not in a notebook kernel: nothing to register
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
    from scipy.cluster.hierarchy import leaves_list, linkage  # lazy: scipy
    from scipy.spatial.distance import squareform  # lazy: scipy

    dist = 1.0 - np.abs(np.where(np.isfinite(corr), corr, 0.0))
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2  # exact symmetry for squareform
    return leaves_list(linkage(squareform(np.clip(dist, 0.0, 2.0), checks=False), method="average"))


def correlation(summary: Any, *, max_features: int = 40, cluster: bool = True, ax: Any = None) -> Any:
    """Heat map of the correlations among the most correlated features, in clustered order."""
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
    fig, ax = _axes(ax, side + 1.2, side)
    image = ax.imshow(sub, vmin=-1, vmax=1, cmap="RdBu_r", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="Pearson r", shrink=0.8)
    step = max(1, math.ceil(k / 60))
    ticks = np.arange(0, k, step)
    size = 9 if k <= 20 else 7 if k <= 40 else 5
    ax.set_xticks(ticks, [names[i] for i in ticks], rotation=90, fontsize=size)
    ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=size)
    shown = f"{k} of {summary.n_features:,} features" if k < summary.n_features else f"{k} features"
    # Two short lines: one long line is clipped by a small figure.
    ax.set_title(f"Correlation{', clustered' if cluster else ''}\n{shown}; {summary.cov_count:,} complete rows",
                 fontsize=10)
    return fig


def histograms(
    summary: Any, features: Sequence[str | int] | None = None, *, ncols: int = 4, by_class: bool = True,
    fig: Any = None,
) -> Any:
    """A grid of per-feature histograms, per class when the label was given."""
    if summary.hist_counts is None:
        raise ValueError("this summary has no histograms: describe(..., stats=(..., 'hist'))")
    default = (
        [summary.feature_names.index(n) for n in summary.top_mi(8).index]
        if summary.mi is not None else range(min(8, summary.n_features))
    )
    index = _feature_index(summary, features, default)
    ncols = max(1, min(ncols, len(index)))
    nrows = math.ceil(len(index) / ncols)
    if fig is None:
        fig = _figure(3.2 * ncols + 1.2, 2.7 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    joint = summary.joint_counts if by_class else None
    classes = _class_labels(summary, joint)
    too_many = len(classes) > MAX_CLASS_COLOURS
    if too_many:
        joint = None  # colours would repeat: the totals say more than 30 look-alike lines
    colours = _class_colours(len(classes)) if joint is not None else []
    for ax, i in zip(axes, index, strict=False):
        edges = summary.hist_edges[i]
        if joint is not None:
            for c, label in enumerate(classes):
                ax.stairs(joint[i, 1:-1, c], edges, label=f"{label}", linewidth=1.2, color=colours[c])
        else:
            ax.stairs(summary.hist_counts[i], edges, fill=True, alpha=0.7)
        mean, std = summary.mean[i], summary.std[i]
        if np.isfinite(mean):
            ax.axvline(mean, color="k", linewidth=1)
            if np.isfinite(std):
                for v in (mean - std, mean + std):
                    ax.axvline(v, color="k", linewidth=0.8, linestyle="--")
        outside = _outside_note(summary, i)
        # the note goes under the name, above the axes: never over the data or a legend
        ax.set_title(summary.feature_names[i] + (f"\n{outside}" if outside else ""), fontsize=9)
        ax.set_xlabel("value")
        ax.set_ylabel("count")
    for ax in axes[len(index):]:
        ax.set_visible(False)
    if joint is not None and len(index):
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, title="class", fontsize=7, title_fontsize=8, loc="outside right upper",
                   ncols=1 if len(labels) <= 12 else 2)
    title = "Histograms (line: mean, dashed: mean ± std)"
    if too_many:
        title += f"\n{len(classes)} classes, more than {MAX_CLASS_COLOURS} colours tell apart: totals shown"
    fig.suptitle(title, fontsize=10)
    return fig


def _class_labels(summary: Any, joint: np.ndarray | None) -> list[Any]:
    if joint is None:
        return []
    values = summary.classes if summary.classes is not None else summary.provenance.get("class_values")
    return [int(v) for v in values] if values is not None and len(values) == joint.shape[2] else list(range(joint.shape[2]))


def _outside_note(summary: Any, i: int) -> str:
    if summary.underflow is None or summary.overflow is None:
        return ""
    under, over = int(summary.underflow[i]), int(summary.overflow[i])
    if not (under or over):
        return ""
    total = max(int(summary.count[i]), 1)
    return f"outside range: {under:,} below, {over:,} above ({format_percent((under + over) / total)})"


def mi(summary: Any, *, k: int = 20, ax: Any = None) -> Any:
    """Draw bars of the ``k`` features with the largest mutual information, with the bias line."""
    ranked = summary.top_mi(k)
    if ranked.empty:
        raise ValueError("this summary has no mutual information: describe(x, label, ...)")
    names = [str(n) for n in ranked.index][::-1]
    values = ranked.to_numpy(dtype=np.float64)[::-1]
    given = ax
    fig, ax = _axes(ax, 8.0, 0.28 * len(names) + 1.5)
    ax.barh(names, values, color="tab:blue")
    for y, v in enumerate(values):  # small values stay readable
        ax.text(v, y, f" {v:.3g}", va="center", fontsize=7)
    units = summary.provenance.get("mi_units", "nats")
    bias = _mi_bias(summary)
    if bias is not None:
        ax.axvline(bias, color="firebrick", linestyle="--", linewidth=1, label=f"independence bias {bias:.2g}")
        _legend_outside(fig, given if given is not None else None, fontsize=8)
    ax.set_xlim(0, float(np.nanmax(values)) * 1.15 if np.nanmax(values) > 0 else 1.0)  # room for the value labels
    ax.set_xlabel(f"mutual information with the label ({units})")
    ax.set_title(f"Top {len(names)} features by mutual information")
    return fig


def _mi_bias(summary: Any) -> float | None:
    """Compute the MI bias (B - 1)(K - 1) / 2N in the summary's MI units: B bins, K classes, N rows."""
    if summary.joint_counts is None or summary.mi is None:
        return None
    n = float(np.max(summary.count)) if summary.count.size else 0.0
    if n <= 0:
        return None
    bins, classes = summary.joint_counts.shape[1] - 2, summary.joint_counts.shape[2]
    bias = (bins - 1) * (classes - 1) / (2.0 * n)
    return bias / math.log(2) if summary.provenance.get("mi_units") == "bits" else bias


def quantiles(
    summary: Any, features: Sequence[str | int] | None = None, *, max_features: int = 30, ax: Any = None
) -> Any:
    """Box view from the quantiles: box q25–q75, median line, whiskers q01–q99, min/max dots."""
    index = _feature_index(summary, features, range(min(max_features, summary.n_features)))
    qs = np.asarray(summary.quantile([0.01, 0.25, 0.5, 0.75, 0.99]), dtype=np.float64)[index]
    lo, q1, med, q3, hi = qs.T
    iqr = np.where(q3 - q1 > 0, q3 - q1, 1.0)

    def _scaled(v: np.ndarray) -> np.ndarray:
        """Standardise values by the median and IQR of their feature."""
        return (v - med) / iqr

    given = ax
    fig, ax = _axes(ax, 8.5, 0.3 * len(index) + 1.5)
    y = np.arange(len(index))[::-1]
    ax.hlines(y, _scaled(lo), _scaled(hi), color="grey", linewidth=1, label="q01–q99")
    ax.barh(y, _scaled(q3) - _scaled(q1), left=_scaled(q1), height=0.6, color="tab:blue", alpha=0.6, label="q25–q75")
    ax.vlines(_scaled(med), y - 0.3, y + 0.3, color="k", linewidth=1.5, label="median")
    ax.plot(_scaled(summary.min[index]), y, "|", color="firebrick", label="min / max")
    ax.plot(_scaled(summary.max[index]), y, "|", color="firebrick")
    ax.set_yticks(y, [summary.feature_names[i] for i in index], fontsize=8)
    reach = np.abs(np.concatenate([_scaled(summary.min[index]), _scaled(summary.max[index]), _scaled(lo), _scaled(hi)]))
    reach = reach[np.isfinite(reach)]
    robust = bool(reach.size and reach.max() > 10.0)
    if robust:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("(value − median) / IQR" + (", symmetric log beyond ±1" if robust else ""))
    ax.set_title("Quantiles per feature")
    _legend_outside(fig, given if given is not None else None, fontsize=7)
    return fig


class SummaryPlot:
    """``summary.plot``: ``.correlation()``, ``.histograms()``, ``.mi()``, ``.quantiles()``."""

    def __init__(self, summary: Any) -> None:
        self._summary = summary

    def correlation(self, **kwargs: Any) -> Any:
        """Draw the correlation heat map; see :func:`daskbatch.summary.plotting.correlation`."""
        return correlation(self._summary, **kwargs)

    def histograms(self, features: Sequence[str | int] | None = None, **kwargs: Any) -> Any:
        """Draw the histograms; see :func:`daskbatch.summary.plotting.histograms`."""
        return histograms(self._summary, features, **kwargs)

    def mi(self, **kwargs: Any) -> Any:
        """Draw the mutual information bars; see :func:`daskbatch.summary.plotting.mi`."""
        return mi(self._summary, **kwargs)

    def quantiles(self, features: Sequence[str | int] | None = None, **kwargs: Any) -> Any:
        """Draw the quantile boxes; see :func:`daskbatch.summary.plotting.quantiles`."""
        return quantiles(self._summary, features, **kwargs)

    def __call__(self, kind: str = "hist", **kwargs: Any) -> Any:
        kinds = {"hist": self.histograms, "corr": self.correlation, "mi": self.mi, "quantiles": self.quantiles}
        if kind not in kinds:
            raise ValueError(f"kind must be one of {sorted(kinds)}, got {kind!r}")
        return kinds[kind](**kwargs)
