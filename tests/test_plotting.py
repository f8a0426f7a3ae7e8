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
    return db.describe(x, y, bins=16, range=(-6, 6), feature_names=names, plan=None)


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
    assert [a.get_title() for a in visible] == ["gene_7", "gene_5", "gene_1"]
    assert all(a.get_xlabel() == "value" and a.get_ylabel() == "count" for a in visible)
    # three class outlines per panel, and the legend names them
    assert len(visible[0].patches) == 3
    assert [t.get_text() for t in visible[0].get_legend().get_texts()] == ["class 0", "class 1", "class 2"]
    # mean and mean ± std
    assert len(visible[0].lines) == 3
    notes = [t.get_text() for t in visible[1].texts]
    assert notes and "1 above" in notes[0]


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
