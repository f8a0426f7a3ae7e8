"""A summary's views: tables and strict JSON (per-feature rows, the strongest pairs and features) and figures
(``summary.plot.<kind>(...)``, ``Drift.plot``'s ranked bars)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.runtime.progress import in_jupyter
from daskbatch.stats.quantile import fine_quantile, histogram_quantile
from daskbatch.stats.registry import STATISTICS, summary_variables
from daskbatch.stats.sketch import Sketch
from daskbatch.summary.dataset import DEFAULT_QUANTILES, quantile_label, user_variables

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary


def quantile_values(summary: Summary, q: Any, method: str) -> tuple[np.ndarray, str, np.ndarray]:
    """:meth:`Summary.quantile` as an array, where they come from, and which features are exact (no pandas)."""
    if method not in ("auto", "sketch", "histogram"):
        raise ValueError(f"method must be 'auto', 'sketch' or 'histogram', got {method!r}")
    if method == "sketch" or (method == "auto" and summary.sketch_counts is not None):
        if summary.sketch_counts is None or summary.sketch_extrema is None:
            raise ValueError("this summary has no quantile sketch: describe(..., stats=(..., 'sketch'))")
        spec = summary.provenance["sketch"]
        layout, fine, source = sketch_layout(spec), None, "sketch"
        kept = (summary.states or {}).get("sketch")
        if method == "auto" and summary.quantile_counts is not None and summary.quantile_range is not None:
            fine, source = (summary.quantile_counts, summary.quantile_range), "sketch and quantile histogram"
        elif method == "auto" and kept is not None:
            # Merged, updated or one pass on given ranges: the sketch's own dyadic grid narrows its bucket.
            fine, source = kept.statistic.fine_grid(kept.state), "sketch and its grid"
        elif method == "auto" and summary.hist_counts is not None and summary.hist_edges is not None:
            # A merged or updated summary: its parts' quantile histograms had ranges of their own and
            # were left out, but the histograms share theirs, so they narrow the sketch's bucket instead
            # (within one of their bins): far from zero a bucket alone is wider than the spread.
            assert summary.underflow is not None and summary.overflow is not None
            counts = np.concatenate([summary.underflow[:, None], summary.hist_counts, summary.overflow[:, None]], axis=1)
            fine, source = (counts, summary.hist_edges[:, [0, -1]]), "sketch and histograms"
        values = fine_quantile(
            summary.sketch_counts, int(spec["first_slot"]), layout,
            summary.sketch_extrema[:, 0], summary.sketch_extrema[:, 1], q, fine=fine,
        )
        # A feature with few distinct values (integers, pixels, rounded data, few rows) has them all in the
        # sketch's state: its quantiles are the data values at their exact ranks, merged or not.
        exact = None if kept is None else kept.statistic.exact_quantile(kept.state, q)
        exact_features = np.zeros(summary.n_features, dtype=bool)
        if exact is not None:
            values = np.where(np.isnan(exact), values, exact)
            exact_features = ~np.isnan(exact) if exact.ndim == 1 else ~np.isnan(exact).any(axis=1)
        return values, source, exact_features
    if summary.hist_counts is None:
        raise ValueError("quantiles come from histograms: describe(..., stats=(..., 'hist'))")
    assert summary.hist_edges is not None and summary.underflow is not None and summary.overflow is not None
    values = histogram_quantile(
        summary.hist_counts, summary.hist_edges, summary.underflow, summary.overflow, summary.min, summary.max, q
    )
    bins = summary.hist_counts.shape[1]
    return (values, f"histograms ({bins} bins on each feature's range: within one bin)",
            np.zeros(summary.n_features, dtype=bool))


def sketch_layout(spec: dict[str, Any]) -> Sketch:
    """The quantile sketch's layout that ``provenance["sketch"]`` records."""
    return Sketch(float(spec["alpha"]), float(spec["min_magnitude"]), float(spec["max_magnitude"]), int(spec["window"]))


def correlated_pairs(summary: Summary, k: int) -> list[tuple[str, str, float]]:
    """The ``k`` feature pairs with the largest absolute correlation, strongest first (no pandas)."""
    if summary.corr is None:
        tiled = summary.provenance.get("tiled_cov")
        # too wide to hold: ranked tile by tile from the store
        return summary.tiled_cov().top_correlated(k) if tiled else []
    upper = np.triu_indices(summary.n_features, k=1)
    r = summary.corr[upper]
    finite = np.isfinite(r)
    order = np.argsort(-np.abs(np.where(finite, r, 0.0)), kind="stable")[: max(k, 0)]
    names = summary.feature_names
    return [(names[upper[0][i]], names[upper[1][i]], float(r[i])) for i in order if finite[i]]


def mi_ranking(summary: Summary, k: int) -> list[tuple[str, float]]:
    """The ``k`` features with the largest MI with the label and their MI, largest first (no pandas)."""
    if summary.mi is None:
        return []
    order = np.argsort(-np.nan_to_num(summary.mi, nan=-1.0), kind="stable")[: max(k, 0)]
    return [(summary.feature_names[i], float(summary.mi[i])) for i in order]


def dataframe(summary: Summary) -> Any:
    """Tabulate the per-feature statistics (:meth:`Summary.to_dataframe`)."""
    import pandas as pd  # lazy: pandas

    columns = {name: getattr(summary, name) for name in STATISTICS["moments"].variables if name != "weight_sum"}
    for name in ("count", "nan_count", "posinf_count", "neginf_count"):
        columns[name] = columns[name].astype(np.int64)  # exact counts, shown as integers
    if summary.mi is not None:
        columns["mi"] = summary.mi
    if summary.hist_counts is not None or summary.sketch_counts is not None:
        table = summary.quantile(list(DEFAULT_QUANTILES)).to_numpy()
        for i, q in enumerate(DEFAULT_QUANTILES):
            columns[quantile_label(q)] = table[:, i]
    for v in user_variables(summary.extra, summary.n_features, set(columns)):
        if v.dims == ("feature",):  # one number per feature: a column
            columns[v.name] = v.values
    return pd.DataFrame(columns, index=pd.Index(summary.feature_names, name="feature"))


#: The fine histogram behind the quantiles: buckets, not results (``quantiles`` holds what they give).
QUANTILE_BUCKETS = ("quantile_counts", "quantile_range")


def json_dict(summary: Summary, *, states: bool) -> dict[str, Any]:
    """Convert the results for strict JSON (:meth:`Summary.to_json`); buckets and states only with ``states``."""
    out: dict[str, Any] = {"feature_names": list(summary.feature_names), "provenance": summary.provenance}
    declared = summary_variables()
    for name, value in summary.variables.items():
        bucket = declared[name].state or name in QUANTILE_BUCKETS
        if isinstance(value, np.ndarray) and (states or not bucket):
            out[name] = json_values(value)
    if summary.cov_count is not None:
        out["cov_count"] = int(summary.cov_count)
    if summary.hist_counts is not None or summary.sketch_counts is not None:
        table = summary.quantile(list(DEFAULT_QUANTILES)).to_numpy()
        out["quantiles"] = {"probabilities": list(DEFAULT_QUANTILES), "values": json_values(table)}
    user = user_variables(summary.extra, summary.n_features, set())
    if user:
        out["user_statistics"] = {v.name: json_values(v.values) for v in user}
    return out


def json_values(a: np.ndarray) -> Any:
    """Nested lists of ``a`` with the non-finite floats strict JSON cannot hold spelled out."""
    if a.dtype.kind != "f":
        return a.tolist()
    flat = [None if np.isnan(v) else ("inf" if v > 0 else "-inf") if np.isinf(v) else float(v) for v in a.ravel()]
    return np.array(flat, dtype=object).reshape(a.shape).tolist()


def nonfinite_text(x: float) -> str:
    """``nan``, ``inf`` or ``-inf``."""
    return "nan" if np.isnan(x) else ("inf" if x > 0 else "-inf")


def format_percent(f: float) -> str:
    """Write a fraction as a percentage with one decimal; below 0.1 % (but not 0) as ``"<0.1%"``."""
    if not np.isfinite(f):
        return nonfinite_text(f)
    if f == 0:
        return "0%"
    return f"{f:.1%}" if f >= 0.001 else "<0.1%"


#: Line colours of up to 12 classes (tab10 and two more hues); past 12 the histograms show a heat-map row a class.
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
            ok = s.classes is not None and len(s.classes) == joint.shape[2]
            classes = [str(int(v)) for v in (s.classes if ok else range(joint.shape[2]))]
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
