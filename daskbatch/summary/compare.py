"""Drift between two summaries, from their states alone: no pass over either dataset."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskbatch.errors import RebinnedWarning
from daskbatch.io.outputs import check_output, write_json
from daskbatch.summary.record import Summary
from daskbatch.summary.two_sample import (
    CdfBounds,
    cdf_bounds,
    chi2_test,
    false_discovery,
    histogram_cells,
    ks_and_wasserstein,
    rebinned_cells,
)
from daskbatch.summary.views import checked_k, figure_axes, ranked_bars, shown_of

__all__ = ["PSI_FLOOR", "Drift", "compare"]

#: Probability given to an empty histogram cell in the PSI (a zero would make it infinite).
PSI_FLOOR = 1e-4

_COLUMNS = (
    "mean_shift", "var_ratio", "psi", "js_divergence", "ks", "ks_error", "ks_pvalue", "ks_lower", "ks_upper",
    "chi2", "chi2_dof", "chi2_pvalue", "wasserstein", "out_of_range_change", "nan_fraction_change", "mi_change",
)
#: The tests :meth:`Drift.drifted` applies, by the column of their p-values.
_TESTS = {"ks": "ks_pvalue", "chi2": "chi2_pvalue"}


@dataclass(frozen=True)
class Drift:  # numpydoc ignore=PR02
    """Per-feature drift of a new summary against a reference (see :func:`compare`).

    Parameters
    ----------
    _frame : pandas.DataFrame
        One row per feature: what :meth:`to_dataframe` gives (a copy of).
    rows : tuple of int
        The number of rows of the reference and of the new summary.
    rebin_error : pandas.Series or None
        Where one summary's cells were read on the other's bin edges (they were not
        described ``like=`` each other): per feature, a bound on the error of every
        cumulative probability so read (each cell's probability within twice it).
        None where both summaries share their edges (PSI, JS and χ² are then exact).
    """

    _frame: Any
    rows: tuple[int, int]
    rebin_error: Any = None

    def to_dataframe(self) -> Any:
        """Give the drift of every feature as a table.

        Returns
        -------
        pandas.DataFrame
            One row per feature (index ``feature``); the columns of :func:`compare`'s
            notes (NaN where a summary lacks what a column needs). A copy: changing it
            changes no Drift.
        """
        return self._frame.copy()

    def drifted(self, alpha: float = 0.05, test: str = "ks") -> Any:
        """Say which features drifted at level ``alpha``, with the Benjamini–Hochberg correction.

        Parameters
        ----------
        alpha : float, default 0.05
            The false discovery rate, in (0, 1).
        test : {"ks", "chi2"}, default "ks"
            Whose p-values: the two-sample Kolmogorov–Smirnov test or χ² on the binned counts.

        Returns
        -------
        pandas.Series
            Bool per feature (False where the p-value is NaN): ``.mean()`` is the share of
            drifted features, ``.sum()`` their number. ``attrs["adjusted"]`` holds the
            adjusted p-values (``scipy.stats.false_discovery_control``).
        """
        if test not in _TESTS:
            raise ValueError(f"test must be one of {', '.join(map(repr, _TESTS))}; got {test!r}")
        if not 0.0 < float(alpha) < 1.0:
            raise ValueError(f"alpha must lie in (0, 1); got {alpha!r}")
        adjusted = false_discovery(self._frame[_TESTS[test]].to_numpy(dtype=np.float64))
        out = self._frame[_TESTS[test]].rename("drifted").astype(bool)
        out[:] = np.isfinite(adjusted) & (adjusted <= alpha)
        out.attrs["adjusted"] = adjusted
        return out

    def top(self, k: int = 10, by: str = "psi") -> Any:
        """Give the ``k`` features that drifted most by one column.

        Parameters
        ----------
        k : int, default 10
            How many features.
        by : str, default "psi"
            A column of :meth:`to_dataframe`; ``mean_shift`` ranks by its absolute
            value, the p-values (``ks_pvalue``, ``chi2_pvalue``) smallest first.

        Returns
        -------
        pandas.DataFrame
            The rows of :meth:`to_dataframe`, most drifted first.
        """
        if by not in self._frame.columns:
            raise ValueError(f"by must be one of {', '.join(self._frame.columns)}; got {by!r}")
        key = self._frame[by].abs() if by == "mean_shift" else self._frame[by]
        smallest_first = by in _TESTS.values()  # a small p-value is strong evidence of drift
        return self._frame.loc[key.sort_values(ascending=smallest_first, na_position="last").index[:k]]

    def to_json(self) -> dict[str, Any]:
        """Convert to strict JSON: NaN becomes ``null``.

        Returns
        -------
        dict
            ``{"rows": [reference, new], "features": {name: {column: value}}}``.
        """
        features = {
            str(name): {c: (None if not np.isfinite(v) else float(v)) for c, v in row.items()}
            for name, row in self._frame.iterrows()
        }
        return {"rows": list(self.rows), "features": features}

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Write the JSON report (:meth:`to_json`), atomically, never over anything that is not one.

        Parameters
        ----------
        path : str or path-like
            Where to write (a local path or fsspec URL).
        overwrite : bool, default False
            Also replace another daskbatch output (never a file daskbatch did not write).

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
        ax.set_title(f"Drift, {shown_of(len(top), len(self._frame))}: {self.rows[1]:,} rows against {self.rows[0]:,}")
        return fig

    def _repr_html_(self) -> str:
        return str(self.top(len(self._frame)).to_html(float_format=lambda v: f"{v:.4g}"))

    def __repr__(self) -> str:
        tested = [f"{test.upper() if test == 'ks' else test} {int(self.drifted(0.05, test).sum()):,}"
                  for test, column in _TESTS.items() if self._frame[column].notna().any()]
        share = f"drifted at 5 % (Benjamini-Hochberg): {', '.join(tested)} of {len(self._frame):,}\n" if tested else ""
        return f"Drift of {len(self._frame)} features ({self.rows[1]:,} rows against {self.rows[0]:,})\n" + share + str(
            self.top(min(10, len(self._frame))).to_string(float_format=lambda v: f"{v:.4g}")
        )


def compare(reference: Summary, new: Summary) -> Drift:
    """Measure the drift of ``new`` against ``reference``, feature by feature, reading no data.

    Parameters
    ----------
    reference : Summary
        The summary of the reference data.
    new : Summary
        The summary of the new data, of the same features (by name, in the
        same order). Described on the reference's bin edges
        (``describe(new_data, run=RunOptions(like=reference))``), PSI, JS and χ²
        are exact; otherwise its cells are read on the reference's edges from its
        sketch and counts, with a :class:`~daskbatch.errors.RebinnedWarning` and
        the error bound in :attr:`Drift.rebin_error`.

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
    - ``ks``, ``ks_error``: the two-sample Kolmogorov–Smirnov statistic
      ``sup |F_new - F_ref|`` (of the non-NaN values) is within ``ks_error`` of
      ``ks``, and between ``ks_lower = ks - ks_error`` and ``ks_upper = ks + ks_error``.
      Every count a summary keeps (its sketch's buckets, within ``alpha`` relative
      of their values, its grid, quantile histogram, histograms, extrema) encloses
      its CDF between two step functions (:mod:`daskbatch.summary.two_sample`);
      the bounds are those of the KS statistic over every pair of CDFs inside
      both enclosures. ``ks_error`` is 0 where each feature's distinct values are
      all kept (about a thousand at most), and otherwise at most half the larger
      mass of one enclosing cell at the KS statistic's point.
    - ``ks_pvalue``: asymptotic Kolmogorov distribution
      (``scipy.stats.kstwobign``) of ``ks * sqrt(n_ref n_new / (n_ref + n_new))``.
    - ``chi2``, ``chi2_dof``, ``chi2_pvalue``: the two-sample χ² test of
      homogeneity on the same cells as the PSI (cells empty in both left out,
      degrees of freedom one less than the cells left).
    - ``wasserstein``: the Wasserstein-1 distance ``∫ |Q_new(p) - Q_ref(p)| dp``,
      computed as the equal ``∫ |F_new(x) - F_ref(x)| dx`` with each CDF the middle
      of its enclosure: exact on kept distinct values, elsewhere stepping at every
      sketch bucket out to the extrema and every quantile-histogram bin.
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
    drift, rebin_error = _histogram_drift(reference, new)
    columns.update(drift)
    n = reference.n_features
    columns["out_of_range_change"] = _difference(reference.out_of_range_fraction, new.out_of_range_fraction, n)
    columns["nan_fraction_change"] = _nan_fraction(new) - _nan_fraction(reference)
    columns["mi_change"] = _difference(reference.mi, new.mi, n)
    index = pd.Index(list(reference.feature_names), name="feature")
    table = pd.DataFrame({c: columns[c] for c in _COLUMNS}, index=index)
    return Drift(_frame=table, rows=(_rows(reference), _rows(new)), rebin_error=rebin_error)


def _histogram_drift(reference: Summary, new: Summary) -> tuple[dict[str, np.ndarray], Any]:
    """PSI, JS, χ² on the cells, KS from every count kept; the rebinned side's error bound (None: not rebinned)."""
    n = reference.n_features
    bounds_ref, bounds_new = cdf_bounds(reference), cdf_bounds(new)
    columns = ks_and_wasserstein(bounds_ref, bounds_new)
    cells_ref, cells_new, rebin_error = _shared_cells(reference, new, bounds_ref, bounds_new)
    if cells_ref is None or cells_new is None:
        nan = np.full(n, np.nan)
        columns.update({name: nan for name in ("psi", "js_divergence", "chi2", "chi2_dof", "chi2_pvalue")})
        return columns, rebin_error
    p_ref, p_new = _probabilities(cells_ref), _probabilities(cells_new)
    floor_ref, floor_new = np.maximum(p_ref, PSI_FLOOR), np.maximum(p_new, PSI_FLOOR)
    columns["psi"] = np.sum((floor_new - floor_ref) * np.log(floor_new / floor_ref), axis=1)
    mid = 0.5 * (p_ref + p_new)
    columns["js_divergence"] = 0.5 * (_kl_bits(p_ref, mid) + _kl_bits(p_new, mid))
    empty = ~(np.isfinite(p_ref).all(axis=1) & np.isfinite(p_new).all(axis=1))
    columns.update(chi2_test(np.where(empty[:, None], 0.0, cells_ref), np.where(empty[:, None], 0.0, cells_new)))
    for name in ("psi", "js_divergence"):
        columns[name] = np.where(empty, np.nan, columns[name])
    return columns, rebin_error


def _shared_cells(
    reference: Summary, new: Summary, bounds_ref: CdfBounds, bounds_new: CdfBounds
) -> tuple[np.ndarray | None, np.ndarray | None, Any]:
    """Both summaries' counts on one set of cells: their own when they share edges, else one side's rebinned."""
    import pandas as pd  # lazy: pandas

    if reference.hist_counts is None or reference.hist_edges is None:
        if new.hist_counts is None or new.hist_edges is None:
            return None, None, None
        cells_new, cells_ref, error = histogram_cells(new), *rebinned_cells(bounds_ref, new.hist_edges)
        rebinned, edges_of = "reference", "new"
    elif new.hist_counts is not None and np.array_equal(reference.hist_edges, new.hist_edges):
        return histogram_cells(reference), histogram_cells(new), None
    else:
        cells_ref, cells_new, error = histogram_cells(reference), *rebinned_cells(bounds_new, reference.hist_edges)
        rebinned, edges_of = "new", "reference"
    if np.any(error > 0):
        worst = int(np.nanargmax(error))
        warnings.warn(
            f"compare: the {rebinned} summary's cells were read on the {edges_of} summary's bin edges from its "
            f"quantile sketch and counts (other edges than those it was described on): PSI, JS and chi2 are "
            f"approximate, each cumulative probability within {error[worst]:.2g} (feature "
            f"{reference.feature_names[worst]!r} worst; Drift.rebin_error); {EXACT_ADVICE}",
            RebinnedWarning,
            stacklevel=3,
        )
    index = pd.Index(list(reference.feature_names), name="feature")
    return cells_ref, cells_new, pd.Series(error, index=index, name="rebin_error")


#: How to make the rebinned figures exact, in the API's words (the CLI says it in its own).
EXACT_ADVICE = "describing the new data with RunOptions(like=reference) makes them exact"


def _probabilities(cells: np.ndarray) -> np.ndarray:
    """Each row of ``cells`` over its total (NaN rows without values)."""
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


def _values(s: Summary) -> np.ndarray:
    """Each feature's values: ``count`` (finite and ±inf) plus NaN (every feature has the summary's rows)."""
    return s.count + s.nan_count


def _nan_fraction(s: Summary) -> np.ndarray:
    """NaN over all values of each feature."""
    total = _values(s)
    with np.errstate(invalid="ignore", divide="ignore"):
        return s.nan_count / np.where(total > 0, total, np.nan)


def _rows(s: Summary) -> int:
    """The summary's row count (of its first feature)."""
    return int(_values(s)[0]) if s.n_features else 0
