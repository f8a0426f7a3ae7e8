"""summary.plot.* returns Figures that render to PNG, with the axes and labels a reader needs."""

from __future__ import annotations

import io

import numpy as np
import pytest

import daskbatch as db

pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402

ROWS, D = 3000, 50


@pytest.fixture(scope="module")
def summary() -> db.Summary:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, ROWS)
    x = rng.standard_normal((ROWS, D))
    x[:, 7] += 2.0 * y  # informative
    x[:, 30] = x[:, 3] * 0.9 + 0.1 * rng.standard_normal(ROWS)  # a correlated pair far apart
    x[:, 41] = -x[:, 3] + 0.05 * rng.standard_normal(ROWS)
    x[0, 5] = 1e6  # one value above a given range
    names = [f"gene_{i}" for i in range(D)]
    return db.describe(x, y, bins=16, range=(-6, 6), run=db.RunOptions(plan=None, feature_names=names))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    data = buf.getvalue()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    return data


def test_correlation_shows_names_of_the_most_correlated_in_clustered_order(summary: db.Summary) -> None:
    fig = summary.plot.correlation(max_features=10)
    assert isinstance(fig, Figure)
    _png(fig)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 10 and all(name.startswith("gene_") for name in labels)
    # the correlated trio is shown although 30 and 41 are not among the first 10 features
    assert {"gene_3", "gene_30", "gene_41"} <= set(labels)
    # clustering puts the trio next to each other
    pos = sorted(labels.index(n) for n in ("gene_3", "gene_30", "gene_41"))
    assert pos[2] - pos[0] == 2
    assert "10 of 50 features" in ax.get_title()


def test_histogram_grid_overlays_classes_marks_mean_and_notes_overflow(summary: db.Summary) -> None:
    fig = summary.plot.histograms(["gene_7", "gene_5", "gene_1"], ncols=2)
    _png(fig)
    visible = [a for a in fig.axes if a.get_visible()]
    titles = [a.get_title() for a in visible]
    assert titles[0].startswith("gene_7\noutside range") and titles[2] == "gene_1"
    # the out-of-range note sits under the name, as a percentage that is never a rounded 0.0%
    assert titles[1] == "gene_5\noutside range: 0 below, 1 above (<0.1%)"
    assert all(a.get_xlabel() == "value" and a.get_ylabel() == "count" for a in visible)
    # three class outlines per panel, and the figure's legend (outside the panels) names them
    assert len(visible[0].patches) == 3
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["0", "1", "2"] and legend.get_title().get_text() == "class"
    # mean and mean ± std
    assert len(visible[0].lines) == 3


def test_mi_bars_carry_the_bias_line(summary: db.Summary) -> None:
    fig = summary.plot.mi(k=5)
    _png(fig)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names[-1] == "gene_7"  # largest at the top
    bias = (16 - 1) * (3 - 1) / (2 * ROWS)
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_xdata()[0] == pytest.approx(bias)
    assert "nats" in ax.get_xlabel()


def test_quantile_view_and_kind_dispatch(summary: db.Summary) -> None:
    fig = summary.plot("quantiles", features=["gene_0", "gene_7"])
    _png(fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gene_0", "gene_7"]
    with pytest.raises(ValueError, match="kind must be one of"):
        summary.plot("pie")
    with pytest.raises(KeyError, match="no feature named 'nope'"):
        summary.plot.histograms(["nope"])


# ------------------------------------------------------------------ layout: nothing overlaps


def _layout_problems(fig: Figure) -> list[str]:
    """Overlaps measured by the renderer: legends over axes, titles over axes, legends or each other, clipped titles."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    _png(fig)
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()  # lays the figure out at its own dpi, where the boxes are measured
    renderer = canvas.get_renderer()
    page = fig.bbox
    axes = [a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"]
    legends = [*fig.legends, *(a.get_legend() for a in axes if a.get_legend() is not None)]
    titles = [t for a in axes for t in (a.title, a._left_title, a._right_title) if t.get_text()]
    if fig._suptitle is not None:
        titles.append(fig._suptitle)

    def area(a, b) -> float:
        w = min(a.x1, b.x1) - max(a.x0, b.x0)
        h = min(a.y1, b.y1) - max(a.y0, b.y0)
        return max(w, 0) * max(h, 0)

    problems = []
    boxes = {f"axes {a.get_title()!r}": a.get_window_extent(renderer) for a in axes}
    for legend in legends:
        lb = legend.get_window_extent(renderer)
        problems += [f"legend over {k}" for k, b in boxes.items() if area(lb, b) > 1]
        if lb.x0 < page.x0 - 1 or lb.x1 > page.x1 + 1 or lb.y0 < page.y0 - 1 or lb.y1 > page.y1 + 1:
            problems.append("legend outside the figure")
        problems += [f"legend over title {t.get_text()!r}" for t in titles if area(lb, t.get_window_extent(renderer)) > 1]
    for i, t in enumerate(titles):
        tb = t.get_window_extent(renderer)
        if tb.x0 < page.x0 - 1 or tb.x1 > page.x1 + 1 or tb.y1 > page.y1 + 1:
            problems.append(f"title {t.get_text()!r} clipped")
        problems += [f"title {t.get_text()!r} over {k}" for k, b in boxes.items() if area(tb, b) > 1]
        problems += [f"titles {t.get_text()!r} and {u.get_text()!r} overlap"
                     for u in titles[i + 1:] if area(tb, u.get_window_extent(renderer)) > 1]
    return problems


def _labelled_summary(n_classes: int, n_features: int) -> db.Summary:
    rng = np.random.default_rng(n_classes * 1000 + n_features)
    rows = 4000
    y = rng.integers(0, n_classes, rows)
    x = rng.standard_normal((rows, n_features)) + 0.5 * (y[:, None] % 3)
    x[0, :] = 50.0  # one value of every feature above the range: a note on every panel
    return db.describe(x, y, bins=24, range=(-5, 5), run=db.RunOptions(plan=None))


@pytest.mark.parametrize("n_features", [8, 500])
@pytest.mark.parametrize("n_classes", [2, 4, 12])
def test_no_figure_overlaps_its_labels_or_legends(n_classes: int, n_features: int) -> None:
    s = _labelled_summary(n_classes, n_features)
    figures = {"histograms": s.plot.histograms(), "correlation": s.plot.correlation(),
               "mi": s.plot.mi(), "quantiles": s.plot.quantiles()}
    for kind, fig in figures.items():
        assert _layout_problems(fig) == [], kind
    hist = figures["histograms"]  # the one measured above (drawing it changes neither colours nor titles)
    colours = {tuple(p.get_edgecolor()) for p in hist.axes[0].patches}
    assert len(colours) == n_classes  # a qualitative map: no colour repeats
    assert all("(<0.1%)" in a.get_title() for a in hist.axes if a.get_visible())  # 1 of 4,000 values


def test_past_twenty_classes_the_histograms_say_why_they_show_totals() -> None:
    s = _labelled_summary(25, 4)
    fig = s.plot.histograms()
    assert "25 classes, more than 20 colours tell apart" in fig._suptitle.get_text()
    assert not fig.legends and len(fig.axes[0].patches) == 1
    assert _layout_problems(fig) == []


def test_a_small_correlation_plot_keeps_its_title() -> None:
    s = _labelled_summary(2, 3)
    fig = s.plot.correlation()
    assert _layout_problems(fig) == []
    assert "3 features" in fig.axes[0].get_title()


def test_one_heavy_tailed_feature_does_not_flatten_the_other_boxes() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20_000, 6))
    x[:, 0] = rng.standard_cauchy(20_000) * 1e3  # heavy tails: min/max at many thousand IQRs
    s = db.describe(x, run=db.RunOptions(plan=None))
    fig = s.plot.quantiles()
    _png(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"
    widths = [bar.get_window_extent().width for bar in ax.patches]  # the q25-q75 boxes, in pixels
    assert len(widths) == 6 and min(widths) > 0.05 * ax.get_window_extent().width, widths
    assert _layout_problems(fig) == []


def test_plots_draw_into_given_axes_and_pyplot_shows_its_figures(summary: db.Summary) -> None:
    import matplotlib.pyplot as plt

    fig = summary.plot.mi(k=5)
    try:
        assert fig.number in plt.get_fignums()  # plt.show() in a script shows it
    finally:
        plt.close(fig)
    outer = Figure(figsize=(14, 5), layout="constrained")
    left, right = outer.subplots(1, 2)
    assert summary.plot.mi(k=5, ax=left) is outer and summary.plot.quantiles(ax=right) is outer
    assert len(left.patches) == 5 and len(right.patches) == 30
    assert summary.plot.correlation(ax=Figure().add_subplot()) is not outer
    grid = Figure(figsize=(8, 6), layout="constrained")
    assert summary.plot.histograms(["gene_1", "gene_2"], fig=grid) is grid and len(grid.axes) == 2
    assert _layout_problems(outer) == []
