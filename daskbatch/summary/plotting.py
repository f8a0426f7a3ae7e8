"""Figures of a :class:`~daskbatch.Summary` (``summary.plot.<kind>(...)``) and the ranked bars of ``Drift.plot``."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskbatch.runtime.progress import in_jupyter
from daskbatch.summary.reprs import format_percent

__all__ = ["CLASS_COLOURS", "SummaryPlot", "checked_k", "figure_axes", "ranked_bars", "shown_of"]

#: Line colours of up to 12 classes: tab10 and two more hues, no light/dark pairs. Past 12 classes the
#: histograms show one heat-map row a class instead: more lines would tangle past reading.
CLASS_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#000000", "#e6ab02")


def _figure(width: float, height: float) -> Any:
    """A new constrained-layout figure: pyplot's when a script uses pyplot, else a bare Figure."""
    try:
        from matplotlib.figure import Figure  # lazy: matplotlib
    except ImportError:  # an optional dependency: say which extra brings it
        raise ImportError(
            "summary.plot needs matplotlib: pip install 'daskbatch[notebook]' (or pip install matplotlib)"
        ) from None
    # A script that imported pyplot shows figures with plt.show(), and only pyplot's own. In a notebook,
    # pyplot's inline backend would show a figure twice (it also displays as the cell's value).
    if "matplotlib.pyplot" in sys.modules and not in_jupyter():
        import matplotlib.pyplot as plt  # lazy: matplotlib

        return plt.figure(figsize=(width, height), layout="constrained")
    if in_jupyter():  # IPython shows a bare Figure as a PNG only once pyplot's backend registered that
        from IPython import get_ipython
        from IPython.core.pylabtools import print_figure

        png = get_ipython().display_formatter.formatters["image/png"]
        try:  # the user's own formatter (%matplotlib inline, InlineBackend.figure_formats) is kept
            png.lookup_by_type(Figure)
        except KeyError:
            png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))
    return Figure(figsize=(width, height), layout="constrained")


def figure_axes(ax: Any, width: float, height: float) -> tuple[Any, Any]:
    """``(figure, axes)``: the caller's axes and their figure, or a new figure with one axes."""
    if ax is not None:
        return ax.get_figure(), ax
    fig = _figure(width, height)
    return fig, fig.add_subplot()


def checked_k(k: int) -> int:
    """``k``, the number of features to show, when it is at least 1; else a ValueError that says so."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k is how many features to show: a whole number of at least 1; got {k!r}")
    return int(k)


def shown_of(k: int, n: int) -> str:
    """``"30 of 200 features"`` when a subset is shown, else ``"200 features"``."""
    return f"{k:,} of {n:,} features" if k < n else f"{n:,} features"


def _feature_index(summary: Any, features: Sequence[str | int] | None, k: int) -> tuple[list[int], str]:
    """The features asked for, else the ``k`` most informative (by MI with a label, else by variance), and why."""
    names = list(summary.feature_names)
    if features is None:
        if summary.mi is not None:
            return [names.index(n) for n in summary.top_mi(checked_k(k)).index], "most informative by MI first"
        var = np.asarray(summary.var, dtype=np.float64)
        order = np.argsort(-np.where(np.isfinite(var), var, -np.inf), kind="stable")
        return [int(i) for i in order[: checked_k(k)]], "largest variance first"
    index = []
    for f in features:
        if isinstance(f, str) and f not in names:
            raise KeyError(f"no feature named {f!r}; the summary has {len(names)} features ({names[:5]}...)")
        if not isinstance(f, str) and not -len(names) <= int(f) < len(names):
            raise IndexError(f"no feature at index {f}: the summary has {len(names)} features")
        index.append(names.index(f) if isinstance(f, str) else int(f) % len(names))
    if not index:
        raise ValueError("features is empty: name at least one feature, or leave it out for the k most informative")
    return index, ""


def _rows_of_room(ax: Any, rows: int, inches: float) -> float:
    """How many category rows of ``ax`` (of ``rows``) span ``inches``: room kept free for labels."""
    height = ax.get_position().height * ax.get_figure().get_figheight() * 0.8  # titles and ticks take the rest
    return max(1.2, inches * max(rows, 1) / max(height - inches, 0.2))


def ranked_bars(
    ax: Any, names: Sequence[str], values: np.ndarray, marks: Sequence[tuple[float, str]], xlabel: str
) -> None:
    """Bars of ``values``, largest at the top, on a log axis that shows each mark ``(x, label)`` as a labelled line."""
    values = np.asarray(values, dtype=np.float64)[::-1]
    # A log axis: small values (the drifts below 0.1, the MI near its bias) keep a visible length.
    positive = [v for v in (*values, *(x for x, _ in marks)) if np.isfinite(v) and v > 0] or [1.0]
    lo = min(positive) / 3
    hi = max(max(positive) * 4, lo * 100)  # room for the value labels and the marks' names
    ax.set_xscale("log")
    ax.barh(list(names)[::-1], np.where(values > lo, values - lo, 0.0), left=lo, color="tab:blue", zorder=2)
    for y, v in enumerate(values):
        ax.text(max(v, lo) if np.isfinite(v) else lo, y, f" {v:.3g}", va="center", fontsize=7)
    room = _rows_of_room(ax, len(values), 0.25)
    top = len(values) - 0.5 + room
    for i, (x, label) in enumerate(marks):  # drawn over the bars, named in the free row above them
        ax.axvline(x, color="firebrick", linestyle=("--", ":")[i % 2], linewidth=1.6, zorder=3)
        ax.text(x, top - room / 2, f" {label} ", color="firebrick", fontsize=8, va="center",
                ha="right" if i == 0 and len(marks) > 1 else "left")
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.5, top)
    ax.set_xlabel(xlabel)


def _correlated_order(corr: np.ndarray, k: int, cluster: bool) -> np.ndarray:
    """The ``k`` features with the largest off-diagonal |r|, in average-linkage leaf order on 1 - |r| (scipy)."""
    strength = np.abs(np.where(np.isfinite(corr), corr, 0.0))
    np.fill_diagonal(strength, 0.0)
    pick = np.sort(np.argsort(-strength.max(axis=1), kind="stable")[:k])
    if not cluster or len(pick) < 3:
        return pick
    from scipy.cluster.hierarchy import leaves_list, linkage  # lazy: scipy
    from scipy.spatial.distance import squareform  # lazy: scipy

    dist = 1.0 - strength[np.ix_(pick, pick)]
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2  # exact symmetry for squareform
    return pick[leaves_list(linkage(squareform(np.clip(dist, 0.0, 2.0), checks=False), method="average"))]


class SummaryPlot:
    """``summary.plot``: ``.correlation()``, ``.histograms()``, ``.mi()``, ``.quantiles()``; each returns a Figure."""

    def __init__(self, summary: Any) -> None:
        self._summary = summary

    def correlation(self, *, k: int = 40, cluster: bool = True, ax: Any = None) -> Any:
        """Heat map of the correlations among the ``k`` most correlated features, in clustered order (``cluster``)."""
        s = self._summary
        if s.corr is None:
            raise ValueError("this summary has no correlation matrix: describe(..., stats=(..., 'cov'))")
        corr = np.asarray(s.corr, dtype=np.float64)
        pick = _correlated_order(corr, checked_k(k), cluster)
        sub = corr[np.ix_(pick, pick)]
        names = [s.feature_names[i] for i in pick]
        side = min(12.0, max(4.0, 0.22 * len(names) + 2.0))
        fig, ax = figure_axes(ax, side + 1.2, side)
        image = ax.imshow(sub, vmin=-1, vmax=1, cmap="RdBu_r", interpolation="nearest")
        fig.colorbar(image, ax=ax, label="Pearson r", shrink=0.8)
        ticks = np.arange(0, len(names), max(1, math.ceil(len(names) / 60)))
        size = 9 if len(names) <= 20 else 7 if len(names) <= 40 else 5
        ax.set_xticks(ticks, [names[i] for i in ticks], rotation=90, fontsize=size)
        ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=size)
        # Two short lines: one long line is clipped by a small figure.
        ax.set_title(f"Correlation{', clustered' if cluster else ''}\n{shown_of(len(names), s.n_features)}; "
                     f"{s.cov_count:,} complete rows", fontsize=10)
        return fig

    def histograms(
        self, features: Sequence[str | int] | None = None, *, k: int = 8, ncols: int = 4, by_class: bool = True,
        fig: Any = None,
    ) -> Any:
        """A grid of histograms of ``features`` (else the ``k`` most informative), per class when there is a label."""
        s = self._summary
        if s.hist_counts is None:
            raise ValueError("this summary has no histograms: describe(..., stats=(..., 'hist'))")
        index, ranked = _feature_index(s, features, k)
        ncols = max(1, min(ncols, len(index)))
        nrows = math.ceil(len(index) / ncols)
        fig = fig if fig is not None else _figure(3.2 * ncols + 1.2, 2.7 * nrows + 0.6)
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        joint: Any = s.joint_counts if by_class else None
        classes: list[str] = []
        if joint is not None:
            values = s.classes if s.classes is not None else s.provenance.get("class_values")
            ok = values is not None and len(values) == joint.shape[2]
            classes = [str(int(v)) for v in (values if ok else range(joint.shape[2]))]
        lines = 0 < len(classes) <= len(CLASS_COLOURS)
        mesh = None
        mean, std = np.asarray(s.mean, dtype=np.float64), np.asarray(s.std, dtype=np.float64)
        for ax, i in zip(axes, index, strict=False):
            edges = s.hist_edges[i]
            ink = "k"
            if lines:
                for c, label in enumerate(classes):
                    ax.stairs(joint[i, 1:-1, c], edges, label=label, linewidth=1.4, color=CLASS_COLOURS[c])
            elif classes:  # each class's share of its rows per bin: small classes as visible as large ones
                per_class = joint[i, 1:-1, :].T.astype(np.float64)
                share = per_class / np.maximum(per_class.sum(axis=1, keepdims=True), 1.0)
                mesh = ax.pcolormesh(edges, np.arange(len(classes) + 1) - 0.5, share, cmap="viridis", vmin=0)
                ticks = np.arange(0, len(classes), max(1, math.ceil(len(classes) / 12)))
                ax.set_yticks(ticks, [classes[t] for t in ticks], fontsize=7)
                ink = "w"
            else:
                ax.stairs(s.hist_counts[i], edges, fill=True, alpha=0.7)
            for v, style in ((mean[i], "-"), (mean[i] - std[i], "--"), (mean[i] + std[i], "--")):
                if np.isfinite(v):
                    ax.axvline(v, color=ink, linewidth=1 if style == "-" else 0.8, linestyle=style)
            under, over = (int(np.asarray(c)[i]) if c is not None else 0 for c in (s.underflow, s.overflow))
            # the out-of-range note goes under the name, above the axes: never over the data or a legend
            percent = format_percent((under + over) / max(int(np.asarray(s.count)[i]), 1))
            note = f"\noutside range: {under:,} below, {over:,} above ({percent})"
            ax.set_title(s.feature_names[i] + (note if under or over else ""), fontsize=9)
            ax.set_xlabel("value")
            ax.set_ylabel("class" if classes and not lines else "count")
        for ax in axes[len(index):]:
            ax.set_visible(False)
        title = f"Histograms of {shown_of(len(index), s.n_features)}{f', {ranked}' if ranked else ''}"
        if lines and len(index):
            ncol = min(len(classes), 6)
            legend_rows = math.ceil(len(classes) / ncol) + 1  # and the title row
            axes[0].set_ylim(0, axes[0].get_ylim()[1] / (1.0 - 0.1 * legend_rows - 0.05))  # room above the bars
            axes[0].legend(title="class", fontsize=8, title_fontsize=8, loc="upper center", ncols=ncol,
                           handlelength=1.0, columnspacing=0.8, borderaxespad=0.2)
        elif classes:
            fig.colorbar(mesh, ax=list(axes[: len(index)]), label="share of the class's rows", shrink=0.8)
            title += f"\n{len(classes)} classes, one row each (more than {len(CLASS_COLOURS)} lines would tangle)"
        fig.suptitle(title + "\nline: mean, dashed: mean ± std", fontsize=10)
        return fig

    def mi(self, *, k: int = 20, ax: Any = None) -> Any:
        """Bars of the ``k`` features with the largest mutual information, and the MI of independent data."""
        s = self._summary
        ranked = s.top_mi(checked_k(k))
        if ranked.empty:
            raise ValueError("this summary has no mutual information: describe(x, label, ...)")
        fig, ax = figure_axes(ax, 8.0, 0.28 * len(ranked) + 1.8)
        units = s.provenance.get("mi_units", "nats")
        n, marks = float(np.max(np.asarray(s.count), initial=0.0)), list[tuple[float, str]]()
        if s.joint_counts is not None and n > 0:  # the MI of independent data: (B - 1)(K - 1) / 2N, B bins, K classes
            bins, classes = s.joint_counts.shape[1] - 2, s.joint_counts.shape[2]
            bias = (bins - 1) * (classes - 1) / (2.0 * n) / (math.log(2) if units == "bits" else 1.0)
            marks = [(bias, f"independence bias {bias:.2g}")]
        ranked_bars(ax, [str(n) for n in ranked.index], ranked.to_numpy(dtype=np.float64), marks,
                    f"mutual information with the label ({units}, log scale)")
        ax.set_title(f"Mutual information: top {shown_of(len(ranked), s.n_features)}")
        return fig

    def quantiles(self, features: Sequence[str | int] | None = None, *, k: int = 30, ax: Any = None) -> Any:
        """Box view of ``features`` (else the ``k`` most informative) from the quantiles, in the data's own units."""
        s = self._summary
        index, ranked = _feature_index(s, features, k)
        lo, q1, med, q3, hi = np.asarray(s.quantile([0.01, 0.25, 0.5, 0.75, 0.99]), dtype=np.float64)[index].T
        low, high = np.asarray(s.min, dtype=np.float64)[index], np.asarray(s.max, dtype=np.float64)[index]
        fig, ax = figure_axes(ax, 8.5, 0.3 * len(index) + 1.8)
        y = np.arange(len(index))[::-1]
        ax.hlines(y, lo, hi, color="grey", linewidth=1, label="q01–q99")
        ax.barh(y, q3 - q1, left=q1, height=0.6, color="tab:blue", alpha=0.6, label="q25–q75")
        ax.vlines(med, y - 0.3, y + 0.3, color="k", linewidth=1.5, label="median")
        ax.plot(low, y, "|", color="firebrick", markersize=8, label="min / max")
        ax.plot(high, y, "|", color="firebrick", markersize=8)
        ax.set_yticks(y, [s.feature_names[i] for i in index], fontsize=8)
        reach = np.abs(np.concatenate([low, high, lo, hi]))
        reach = reach[np.isfinite(reach)]
        spread = (q3 - q1)[np.isfinite(q3 - q1) & (q3 - q1 > 0)]
        symlog = bool(reach.size and spread.size and reach.max() > 50 * np.median(spread))
        if symlog:  # the typical box stays in the linear part, the farthest reach in the log part
            ax.set_xscale("symlog", linthresh=float(np.median(spread)), linscale=2.0)
        room = _rows_of_room(ax, len(index), 0.3)
        ax.set_ylim(-0.7, len(index) - 0.5 + room)  # a free row above the boxes for the legend
        ax.legend(loc="upper center", ncols=4, fontsize=8, borderaxespad=0.2)
        ax.set_xlabel("value" + (", symmetric log scale" if symlog else ""))
        ax.set_title(f"Quantiles of {shown_of(len(index), s.n_features)}{f', {ranked}' if ranked else ''}")
        return fig

    def __call__(self, kind: str = "hist", **options: Any) -> Any:
        """Draw one figure by kind (``"hist"``, ``"corr"``, ``"mi"``, ``"quantiles"``), with that method's options."""
        kinds: dict[str, Any] = {"hist": self.histograms, "corr": self.correlation, "mi": self.mi,
                                 "quantiles": self.quantiles}
        if kind not in kinds:
            raise ValueError(f"kind must be one of {sorted(kinds)}, got {kind!r}")
        return kinds[kind](**options)
