"""Drift between two summaries, from their states alone: no pass over either dataset."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.io.outputs import check_output, write_json
from daskbatch.summary.plotting import checked_k, figure_axes, ranked_bars, shown_of
from daskbatch.summary.record import Summary

__all__ = ["PSI_FLOOR", "Drift", "compare"]

#: Probability given to an empty histogram cell in the PSI (a zero would make it infinite).
PSI_FLOOR = 1e-4

_COLUMNS = (
    "mean_shift", "var_ratio", "psi", "js_divergence", "ks_lower", "ks_upper",
    "out_of_range_change", "nan_fraction_change", "mi_change",
)


@dataclass(frozen=True)
class Drift:  # numpydoc ignore=PR02
    """Per-feature drift of a new summary against a reference (see :func:`compare`).

    Parameters
    ----------
    table : pandas.DataFrame
        One row per feature (index ``feature``); columns ``mean_shift``,
        ``var_ratio``, ``psi``, ``js_divergence``, ``ks_lower``, ``ks_upper``,
        ``out_of_range_change``, ``nan_fraction_change`` and ``mi_change``
        (NaN where a summary lacks what a column needs).
    rows : tuple of int
        The number of rows of the reference and of the new summary.
    """

    table: Any
    rows: tuple[int, int]

    def top(self, k: int = 10, by: str = "psi") -> Any:
        """Give the ``k`` features that drifted most by one column.

        Parameters
        ----------
        k : int, default 10
            How many features.
        by : str, default "psi"
            A column of :attr:`table`; ``mean_shift`` ranks by its absolute value.

        Returns
        -------
        pandas.DataFrame
            The rows of :attr:`table`, largest first.
        """
        if by not in self.table.columns:
            raise ValueError(f"by must be one of {', '.join(self.table.columns)}; got {by!r}")
        key = self.table[by].abs() if by == "mean_shift" else self.table[by]
        return self.table.loc[key.sort_values(ascending=False, na_position="last").index[:k]]

    def to_json(self) -> dict[str, Any]:
        """Convert to strict JSON: NaN becomes ``null``.

        Returns
        -------
        dict
            ``{"rows": [reference, new], "features": {name: {column: value}}}``.
        """
        features = {
            str(name): {c: (None if not np.isfinite(v) else float(v)) for c, v in row.items()}
            for name, row in self.table.iterrows()
        }
        return {"rows": list(self.rows), "features": features}

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Write the JSON report (:meth:`to_json`), atomically, never over anything that is not one.

        Parameters
        ----------
        path : str or path-like
            Where to write (a local path or fsspec URL).
        overwrite : bool, default False
            Replace something at ``path`` that is not an earlier drift report.

        Returns
        -------
        str
            The path written.
        """
        target = check_output(path, kind="drift", form="file", what="drift report", overwrite=overwrite)
        return write_json(target, self.to_json())

    def plot(self, k: int = 20, *, ax: Any = None) -> Any:
        """Draw the PSI of the ``k`` most drifted features on a log axis, with the usual 0.1 and 0.25 marks.

        Parameters
        ----------
        k : int, default 20
            How many features.
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new Figure when not given.

        Returns
        -------
        matplotlib.figure.Figure
            The figure drawn on.
        """
        top = self.top(checked_k(k), "psi")
        fig, ax = figure_axes(ax, 7.0, 0.28 * len(top) + 1.8)
        ranked_bars(ax, [str(n) for n in top.index], top["psi"].to_numpy(dtype=np.float64),
                    [(0.1, "0.1 moderate"), (0.25, "0.25 large")], "population stability index (log scale)")
        ax.set_title(f"Drift, {shown_of(len(top), len(self.table))}: {self.rows[1]:,} rows against {self.rows[0]:,}")
        return fig

    def _repr_html_(self) -> str:
        return str(self.top(len(self.table)).to_html(float_format=lambda v: f"{v:.4g}"))

    def __repr__(self) -> str:
        return f"Drift of {len(self.table)} features ({self.rows[1]:,} rows against {self.rows[0]:,})\n" + str(
            self.top(min(10, len(self.table))).to_string(float_format=lambda v: f"{v:.4g}")
        )


def compare(reference: Summary, new: Summary) -> Drift:
    """Measure the drift of ``new`` against ``reference``, feature by feature, reading no data.

    Parameters
    ----------
    reference : Summary
        The summary of the reference data.
    new : Summary
        The summary of the new data, of the same features (by name, in the
        same order). For the histogram columns it must share the reference's
        bin edges: ``describe(new_data, run=RunOptions(like=reference))``.

    Returns
    -------
    Drift
        The per-feature table, its report and plot.

    Notes
    -----
    - ``mean_shift``: ``(mean_new - mean_ref) / std_ref``.
    - ``var_ratio``: ``var_new / var_ref``.
    - ``psi``: ``sum((p_new - p_ref) * ln(p_new / p_ref))`` over the bins and the
      below/above-range cells, each probability floored at :data:`PSI_FLOOR`.
    - ``js_divergence``: Jensen–Shannon divergence in bits (0 to 1), on the same cells.
    - ``ks_lower``/``ks_upper``: the Kolmogorov–Smirnov statistic
      ``sup |F_new - F_ref|`` lies between them. The CDFs are exact at every
      edge (the lower bound); inside a cell both rise monotonically, so the
      gap there is at most the larger cross-difference of its end points.
    - ``out_of_range_change``, ``nan_fraction_change`` (NaN over all values)
      and ``mi_change``: new minus reference.
    """
    import pandas as pd  # lazy: pandas

    if not isinstance(reference, Summary) or not isinstance(new, Summary):
        raise TypeError("compare takes two Summary objects (db.describe or db.load_summary)")
    if reference.feature_names != new.feature_names:
        missing = sorted(set(reference.feature_names) ^ set(new.feature_names))
        detail = f"{len(missing)} name(s) differ, e.g. {missing[:3]}" if missing else "their order differs"
        raise ValueError(f"the summaries describe different features: {detail}")
    reference, new = reference.arrays, new.arrays  # the drifts are arithmetic on the arrays, by position
    with np.errstate(divide="ignore", invalid="ignore"):
        columns: dict[str, np.ndarray] = {
            "mean_shift": (new.mean - reference.mean) / reference.std,
            "var_ratio": new.var / reference.var,
        }
    columns.update(_histogram_drift(reference, new))
    n = reference.n_features
    columns["out_of_range_change"] = _difference(reference.out_of_range_fraction, new.out_of_range_fraction, n)
    columns["nan_fraction_change"] = _nan_fraction(new) - _nan_fraction(reference)
    columns["mi_change"] = _difference(reference.mi, new.mi, n)
    index = pd.Index(list(reference.feature_names), name="feature")
    table = pd.DataFrame({c: columns[c] for c in _COLUMNS}, index=index)
    return Drift(table=table, rows=(_rows(reference), _rows(new)))


def _histogram_drift(reference: Summary, new: Summary) -> dict[str, np.ndarray]:
    """PSI, JS divergence and the KS bounds; NaN columns when either summary has no histograms."""
    nan = np.full(reference.n_features, np.nan)
    have = all(s.hist_counts is not None and s.hist_edges is not None for s in (reference, new))
    if not have:
        return {"psi": nan, "js_divergence": nan, "ks_lower": nan, "ks_upper": nan}
    assert reference.hist_edges is not None and new.hist_edges is not None
    if reference.hist_edges.shape != new.hist_edges.shape or not np.array_equal(reference.hist_edges, new.hist_edges):
        differ = np.flatnonzero(
            ~np.all(reference.hist_edges == new.hist_edges, axis=1)
        ) if reference.hist_edges.shape == new.hist_edges.shape else [0]
        name = reference.feature_names[int(differ[0])]
        raise ValueError(
            f"the summaries' histograms have different bin edges (feature {name!r} first): "
            "describe the new data with describe(..., run=db.RunOptions(like=reference))"
        )
    p_ref, p_new = _cell_probabilities(reference), _cell_probabilities(new)
    floor_ref, floor_new = np.maximum(p_ref, PSI_FLOOR), np.maximum(p_new, PSI_FLOOR)
    psi = np.sum((floor_new - floor_ref) * np.log(floor_new / floor_ref), axis=1)
    mid = 0.5 * (p_ref + p_new)
    js = 0.5 * (_kl_bits(p_ref, mid) + _kl_bits(p_new, mid))
    # CDFs at the cell boundaries (0 before the underflow cell, 1 after the overflow cell).
    f_ref = np.concatenate([np.zeros((len(p_ref), 1)), np.cumsum(p_ref, axis=1)], axis=1)
    f_new = np.concatenate([np.zeros((len(p_new), 1)), np.cumsum(p_new, axis=1)], axis=1)
    lower = np.max(np.abs(f_new - f_ref), axis=1)
    cross = np.maximum(np.abs(f_new[:, 1:] - f_ref[:, :-1]), np.abs(f_ref[:, 1:] - f_new[:, :-1]))
    upper = np.maximum(lower, np.max(cross, axis=1))
    empty = ~(np.isfinite(p_ref).all(axis=1) & np.isfinite(p_new).all(axis=1))
    return {name: np.where(empty, np.nan, value)
            for name, value in (("psi", psi), ("js_divergence", js), ("ks_lower", lower), ("ks_upper", upper))}


def _cell_probabilities(s: Summary) -> np.ndarray:
    """Probabilities of [below range, bins..., above range] per feature (NaN rows without values)."""
    assert s.hist_counts is not None
    under = s.underflow if s.underflow is not None else np.zeros(s.n_features)
    over = s.overflow if s.overflow is not None else np.zeros(s.n_features)
    cells = np.concatenate([under[:, None], s.hist_counts, over[:, None]], axis=1).astype(np.float64)
    total = cells.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cells / np.where(total > 0, total, np.nan)


def _kl_bits(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Kullback–Leibler divergence of ``p`` from ``m`` in bits, with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(p / m), 0.0)
    return np.sum(terms, axis=1)


def _difference(reference: np.ndarray | None, new: np.ndarray | None, n: int) -> np.ndarray:
    """``new - reference`` where both exist, else ``n`` NaNs."""
    if reference is None or new is None:
        return np.full(n, np.nan)
    return np.asarray(new, dtype=np.float64) - np.asarray(reference, dtype=np.float64)


def _nan_fraction(s: Summary) -> np.ndarray:
    """NaN over all values (finite, ±inf and NaN) of each feature."""
    total = s.count + s.nan_count + s.posinf_count + s.neginf_count
    with np.errstate(invalid="ignore", divide="ignore"):
        return s.nan_count / np.where(total > 0, total, np.nan)


def _rows(s: Summary) -> int:
    """The summary's row count (of its first feature: every feature has the same rows)."""
    if s.n_features == 0:
        return 0
    return int(s.count[0] + s.nan_count[0] + s.posinf_count[0] + s.neginf_count[0])
