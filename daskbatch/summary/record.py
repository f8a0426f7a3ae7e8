"""The result of :func:`daskbatch.describe`: per-feature statistics with labels, views and storage."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats.categorical import categorical_frame
from daskbatch.stats.declaration import Declaration, Finished
from daskbatch.stats.ranges import SuspectValue
from daskbatch.stats.registry import STATISTICS, summary_variables
from daskbatch.stats.target import MutualInformation
from daskbatch.summary.dataset import (
    DEFAULT_QUANTILES,
    DERIVED,
    SummaryArrays,
    fields_from_xarray,
    group_dataset,
    labelled,
    summary_to_xarray,
)
from daskbatch.summary.reprs import summary_html, summary_suspect_values, summary_text
from daskbatch.summary.views import (
    SummaryPlot,
    correlated_pairs,
    dataframe,
    json_dict,
    mi_ranking,
    quantile_values,
)


@dataclass(frozen=True, eq=False)
class Summary:
    """Per-feature statistics of a (samples × features) array, labelled by feature name.

    ``results`` holds each statistic's variables (host NumPy arrays) by statistic name; the attributes
    (``s.mean``, ``s.corr``, ...) are the variables the statistics declare (:data:`daskbatch.stats.STATISTICS`),
    None when not computed, labelled by feature: per feature a ``pandas.Series`` (``mean``, ``mi``, ``count``);
    feature × feature a ``pandas.DataFrame`` with the names as index and columns (``cov``, ``corr``); feature ×
    bin, edge or class a DataFrame indexed by feature (``hist_counts``, ``hist_edges``, ``class_mean``); past two
    dimensions an ``xarray.DataArray`` (``joint_counts``). ``np.asarray(s.mean)`` gives the array, ``s.arrays``
    all of them unlabelled. ``classes`` (K,) holds the label value of each class column, ``cov_count`` the rows.
    ``min`` and ``max`` are exact int64 or uint64 for data of those dtypes, else float64.
    ``describe(x, groups=g)`` adds ``group_count``, ``group_mean``, ``group_var`` (with the summary's ddof;
    feature × group DataFrames, NaN where a group has too few values) and ``group_hist`` (feature × bin × group,
    on ``hist_edges``); they are None without groups. ``out_of_range_fraction`` is each feature's share of its
    values (NaN left out; of their weight, with sample weights) outside its histogram range, None without histograms.
    ``provenance`` records what was computed from what.

    Examples
    --------
    >>> import numpy as np, daskbatch as db
    >>> s = db.describe(np.arange(12.0).reshape(6, 2), stats=("moments",))
    >>> s.mean
    feature
    f0    5.0
    f1    6.0
    Name: mean, dtype: float64
    """

    feature_names: tuple[str, ...]
    #: Each built-in statistic's variables by statistic: ``results["moments"]["mean"]`` is ``s.mean``.
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    #: Finalized results of a user's statistics (``describe(stats=[..., MyStat()])``), by name.
    extra: dict[str, Any] = field(default_factory=dict)
    #: The merged states (``Kept``) by statistic name that :func:`daskbatch.merge` continues from; None without.
    states: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: The non-numeric columns' profile with its merged state (a ``Kept``); None without such columns.
    categorical_state: Any = field(default=None, repr=False, compare=False)

    def __getattr__(self, name: str) -> Any:
        """Serve the variables the statistics declare, labelled: ``s.mean``, ``s.corr``; None when not computed."""
        if name.startswith("_") or name == "results":
            raise AttributeError(name)
        if name not in summary_variables() and name not in DERIVED:
            raise AttributeError(f"'Summary' object has no attribute {name!r}")
        return labelled(self, name, getattr(self.arrays, name))

    @property
    def arrays(self) -> Any:  # a SummaryArrays, typed as the Summary the views take
        """Give the same attributes unlabelled: ``s.arrays.mean`` is the (D,) NumPy array of ``s.mean``.

        Returns
        -------
        SummaryArrays
            The variables (and ``group_*``, ``out_of_range_fraction``) as the
            NumPy arrays the statistics made; every other attribute is the summary's.
        """
        return SummaryArrays(self)

    @property
    def variables(self) -> dict[str, Any]:
        """Give every statistic's variables in one mapping of unlabelled arrays, in the registry's order.

        Returns
        -------
        dict
            Variable name to NumPy array (``variables["mean"]`` is ``s.arrays.mean``).
        """
        return {name: value for values in self.results.values() for name, value in values.items()}

    def __dir__(self) -> list[str]:
        """List the declared variables with the methods (for completion)."""
        return sorted({*super().__dir__(), *summary_variables(), *DERIVED})

    @property
    def n_features(self) -> int:
        """Count the features.

        Returns
        -------
        int
            The number of features.
        """
        return len(self.feature_names)

    # ----------------------------------------------------------------- views
    def quantile(self, q: float | Any, method: str = "auto") -> Any:
        """Approximate quantiles from the quantile sketch and the quantile histogram, or from the histograms.

        Parameters
        ----------
        q : float or array_like of float
            Probabilities in [0, 1].
        method : {"auto", "sketch", "histogram"}, default "auto"
            ``"sketch"``: within the sketch's relative accuracy (0.5 % by default) of
            ``numpy.quantile(..., method="inverted_cdf")``; ``"histogram"``: within one bin;
            ``"auto"``: the sketch narrowed by the quantile histogram or its dyadic grid (see
            :mod:`daskbatch.stats.quantile`), else the histograms. A feature with at most
            1,024 distinct finite values answers its exact quantiles (sketch and auto).

        Returns
        -------
        pandas.Series or pandas.DataFrame
            Indexed by feature: a Series for a scalar ``q``, else one column per probability;
            ``attrs["source"]`` says where the values come from, ``attrs["exact"]`` which are exact.
        """
        values, source, exact = quantile_values(self.arrays, q, method)
        import pandas as pd  # lazy: pandas

        index = pd.Index(list(self.feature_names), name="feature")
        if np.ndim(q) == 0:
            out = pd.Series(np.asarray(values, dtype=np.float64), index=index, name=float(q))
        else:
            probs = pd.Index([float(p) for p in np.ravel(q)], name="quantile")
            out = pd.DataFrame(np.asarray(values, dtype=np.float64), index=index, columns=probs)
        # Plain values (a str, a tuple of names): pandas compares attrs when it combines frames.
        out.attrs["source"] = source
        out.attrs["exact"] = tuple(name for name, e in zip(self.feature_names, exact, strict=True) if e)
        return out

    @property
    def groups(self) -> np.ndarray | None:
        """Give the group values of ``describe(x, groups=g)``.

        Returns
        -------
        numpy.ndarray or None
            The sorted group values (G,), None for a summary without groups.
        """
        return self.classes if self.provenance.get("grouped") else None

    def by_group(self) -> Any:
        """Give the grouped statistics as an ``xarray.Dataset`` with a ``group`` dimension.

        Returns
        -------
        xarray.Dataset
            ``count``, ``mean``, ``var`` (feature, group) and, with histograms,
            ``hist_counts`` (feature, bin, group) and ``hist_edges``.
        """
        return group_dataset(self.arrays)

    @property
    def categorical(self) -> Any:
        """Give the profile of the non-numeric columns (text, categories, times), one row per column.

        Returns
        -------
        pandas.DataFrame or None
            Indexed by column name: ``dtype``, ``count``, ``null_count``, ``distinct`` (exact where
            ``distinct_error`` is 0, else HyperLogLog with that relative standard error), ``top``,
            ``top_count``, ``top_error`` (how far below its true count any listed count may be), ``min``
            and ``max`` (datetimes) and ``top_k`` ([value, count] pairs); None without such columns.
        """
        records = self.provenance.get("categorical")
        return None if records is None else categorical_frame(records)

    @property
    def suspect_values(self) -> tuple[SuspectValue, ...] | None:
        """List each feature's minimum or maximum repeated far more often than its neighbours (a sentinel?).

        Returns
        -------
        tuple of SuspectValue or None
            The values, counted as data (see :func:`daskbatch.stats.ranges.suspect_values`); None without histograms.
        """
        return summary_suspect_values(self.arrays)

    def top_correlated(self, k: int = 10) -> Any:
        """Find the ``k`` feature pairs with the largest absolute correlation.

        Parameters
        ----------
        k : int, default 10
            How many pairs.

        Returns
        -------
        pandas.DataFrame
            Columns ``feature_a``, ``feature_b`` and ``r`` (Pearson), strongest
            first; empty without a covariance.
        """
        import pandas as pd  # lazy: pandas

        table = pd.DataFrame(correlated_pairs(self.arrays, k), columns=["feature_a", "feature_b", "r"])
        return table.astype({"feature_a": object, "feature_b": object, "r": np.float64})

    def tiled_cov(self) -> Any:
        """Open the tiled covariance store when the plan tiled it.

        Returns
        -------
        TiledCov
            ``.cov``/``.corr`` as dask arrays.
        """
        from daskbatch.engine.tiled_cov import open_tiled_cov  # lazy: dask

        tiled = self.provenance.get("tiled_cov")
        if not tiled:
            raise ValueError("this summary's covariance was not tiled: use .cov and .corr")
        return open_tiled_cov(tiled["path"])

    def top_mi(self, k: int = 10) -> Any:
        """Find the ``k`` features with the largest mutual information with the label.

        Parameters
        ----------
        k : int, default 10
            How many features.

        Returns
        -------
        pandas.Series
            MI (in ``provenance["mi_units"]``) indexed by feature name, largest
            first; empty without a label.
        """
        import pandas as pd  # lazy: pandas

        ranked = mi_ranking(self.arrays, k)
        index = pd.Index([name for name, _ in ranked], name="feature", dtype=object)
        return pd.Series(np.array([mi for _, mi in ranked], dtype=np.float64), index=index, name="mi")

    def to_dataframe(self) -> Any:
        """Tabulate the per-feature statistics, with quantiles titled as pandas' ``describe`` titles them.

        Returns
        -------
        pandas.DataFrame
            One row per feature, indexed by feature name.
        """
        return dataframe(self.arrays)

    def to_xarray(self, *, states: bool = False, quantiles: Any = DEFAULT_QUANTILES) -> Any:
        """Convert the results to an ``xarray.Dataset`` with CF-style labels (see :mod:`daskbatch.summary.dataset`).

        Parameters
        ----------
        states : bool, default False
            Also the quantile sketch's buckets, from which :meth:`from_xarray` answers any quantile.
        quantiles : sequence of float, default (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
            Probabilities of the ``quantiles`` variable.

        Returns
        -------
        xarray.Dataset
            The statistics.
        """
        return summary_to_xarray(self.arrays, states=states, quantiles=quantiles)

    @classmethod
    def from_results(
        cls,
        feature_names: tuple[str, ...],
        results: dict[str, Any],
        provenance: dict[str, Any],
        *,
        mi_base: Any = STATISTIC_DEFAULTS["base"],
        miller_madow: bool = STATISTIC_DEFAULTS["miller_madow"],
        states: dict[str, Any] | None = None,
        categorical_state: Any = None,
    ) -> Summary:
        """Assemble a summary from finalized results keyed by statistic name (``"moments"``, ``"cov"``, ``"hist"``).

        Parameters
        ----------
        feature_names : tuple of str
            The features' names.
        results : dict
            Finalized results by statistic name.
        provenance : dict
            Where the data came from and the settings.
        mi_base : {"e", 2}, default "e"
            Base of the logarithm of the mutual information.
        miller_madow : bool, default False
            Apply the Miller–Madow bias correction to the mutual information.
        states : dict, optional
            The merged states behind the results (for :func:`daskbatch.merge` and :func:`daskbatch.update`).
        categorical_state : Kept, optional
            The non-numeric columns' profile and its merged state (``provenance["categorical"]``
            holds its results).

        Returns
        -------
        Summary
            The summary.
        """
        done = Finished(dict(results), provenance, states,
                        {"mi": MutualInformation(base=mi_base, miller_madow=miller_madow)})
        # Each declaration's own function, called from here: the results go to the statistic's module and back once.
        by_statistic = {d.name: values for d in STATISTICS.values()
                        if (values := (d.summarize or _from_result)(d, done))}
        extra = {name: r for name, r in results.items() if name not in STATISTICS}
        if extra:
            provenance["user_statistics"] = sorted(extra)
        return cls(feature_names=tuple(feature_names), results=by_statistic, provenance=provenance, extra=extra,
                   states=states, categorical_state=categorical_state)

    @classmethod
    def from_xarray(cls, ds: Any) -> Summary:
        """Rebuild a summary from :meth:`to_xarray`'s dataset.

        Parameters
        ----------
        ds : xarray.Dataset
            The dataset.

        Returns
        -------
        Summary
            The summary.
        """
        return cls(**fields_from_xarray(ds))

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
        """Write the summary to a Zarr store at ``path`` (read back with :func:`load_summary`).

        Parameters
        ----------
        path : str or path
            The store to create; an existing summary there is replaced once the new one is written.
        overwrite : bool, default False
            Also replace a path that is not a daskbatch summary (never the summary's own inputs).

        Returns
        -------
        str
            ``path``.

        Raises
        ------
        daskbatch.io.outputs.OutputError
            Before anything is written, with a message naming the path.
        """
        from daskbatch.summary import save_summary  # lazy: the package imports this module

        return save_summary(self, path, overwrite=overwrite)

    def to_json(self, *, states: bool = False) -> dict[str, Any]:
        """Convert the results for strict JSON: NaN becomes ``null``, ±inf ``"inf"``/``"-inf"``.

        Parameters
        ----------
        states : bool, default False
            Also the quantile sketch's buckets (``sketch_counts``, ``sketch_extrema``)
            and the fine histogram behind the quantiles (``quantile_counts``, ``quantile_range``).

        Returns
        -------
        dict
            JSON-able.
        """
        return json_dict(self.arrays, states=states)

    def to_html(self, path: str | os.PathLike[str], *, reference: Summary | None = None, title: str | None = None) -> str:
        """Write a self-contained HTML report: overview, a section per feature, correlations, MI, drift.

        Parameters
        ----------
        path : str or path-like
            The file to write: a new path, or a report daskbatch wrote (nothing else is replaced).
        reference : Summary, optional
            A summary of reference data: adds the drift section (:func:`daskbatch.compare`).
        title : str, optional
            The page's title; by default it names the summary's source.

        Returns
        -------
        str
            ``path``.
        """
        from daskbatch.summary import write_report  # lazy: the package imports this module

        return write_report(self, path, reference=reference, title=title)

    @property
    def plot(self) -> Any:
        """Give the figures: ``.plot.correlation()``, ``.plot.histograms()``, ``.plot.mi()``, ``.plot.quantiles()``.

        Returns
        -------
        SummaryPlot
            The plots of this summary.
        """
        return SummaryPlot(self.arrays)

    # ---------------------------------------------------------------- reprs
    def __repr__(self) -> str:
        return summary_text(self)

    def _repr_html_(self) -> str:
        return summary_html(self)


def _from_result(declaration: Declaration, done: Finished) -> dict[str, Any]:
    """A declaration's variables without a ``summarize``: the result's fields of their names (one: the result itself)."""
    result = done.results.get(declaration.name)
    if result is None or not declaration.variables:
        return {}
    if len(declaration.variables) == 1 and not any(
        hasattr(result, n) for n in declaration.variables
    ):
        return {next(iter(declaration.variables)): result}
    return {n: v for n in declaration.variables if (v := getattr(result, n, None)) is not None}
