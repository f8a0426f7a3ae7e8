"""A :class:`~daskbatch.summary.Summary` as an ``xarray.Dataset`` and back (CF-style labels, int counts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.stats.registry import summary_variables
from daskbatch.summary.attrs import (
    FORMAT,
    count_array,
    decode_provenance,
    encode_provenance,
    variable_attrs,
)
from daskbatch.summary.tables import DEFAULT_QUANTILES
from daskbatch.summary.user_results import results_from_variables, user_variables

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary

__all__ = ["group_dataset", "fields_from_xarray", "summary_to_xarray"]


def summary_to_xarray(summary: Summary, *, states: bool = False, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Any:
    """Convert the statistics to an ``xarray.Dataset`` with CF-style labels.

    Dimensions ``feature``, ``feature2`` (of ``cov``/``corr``), ``bin``,
    ``edge``, ``slot`` (-1: below the range, then the bins, then above),
    ``class`` (the label values) and ``quantile``, each with a coordinate;
    ``bin_centre`` (feature, bin) holds the centre of every bin and
    ``quantiles`` (feature, quantile) the values of :meth:`Summary.quantile`.
    A user's statistics' results are variables named after them (see
    :mod:`daskbatch.summary.user_results`). Variables carry ``long_name``,
    ``units`` where the statistic has its own (``"1"`` for counts,
    ``"nat"``/``"bit"`` for ``mi``) and the settings they depend on
    (``ddof``, ``bias``); counts are int64. The provenance becomes one
    dataset attribute per key (see :mod:`daskbatch.summary.attrs`).

    Parameters
    ----------
    summary : Summary
        The summary to convert.
    states : bool, default False
        Also the quantile sketch's buckets (``sketch_counts``, dimension
        ``sketch_slot``, and ``sketch_extrema``, dimension ``extreme``): the
        internal state quantiles are read from, which :func:`fields_from_xarray`
        needs to answer any other probability. Many times the size of the
        results on wide data, so left out by default.
    quantiles : sequence of float, default (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
        The probabilities of the ``quantiles`` variable (empty: none).

    Returns
    -------
    xarray.Dataset
        The statistics.
    """
    import xarray as xr  # lazy: xarray

    declared = summary_variables()

    def _var(name: str, values: Any) -> Any:
        """Build the variable ``name`` as its statistic declares it (counts as int64)."""
        if declared[name].count:
            values = count_array(values)
        return xr.Variable(declared[name].dims, values, attrs=variable_attrs(name, summary))

    data: dict[str, Any] = {
        name: _var(name, value) for name, value in summary.variables.items()
        if value is not None and declared[name].dims is not None and not declared[name].state
    }
    # Object dtype: zarr v3 stores it as variable-length UTF-8 (fixed-width <U has no v3 spec).
    names = np.array(summary.feature_names, dtype=object)
    coords: dict[str, Any] = {"feature": ("feature", names, {"long_name": "feature"})}
    if summary.cov is not None:
        coords["feature2"] = ("feature2", names, {"long_name": "feature (second of a pair)"})
    if summary.hist_counts is not None:
        assert summary.hist_edges is not None
        bins = summary.hist_counts.shape[1]
        coords["bin"] = ("bin", np.arange(bins, dtype=np.int64), {"long_name": "histogram bin"})
        coords["edge"] = ("edge", np.arange(bins + 1, dtype=np.int64), {"long_name": "histogram edge"})
        # Every feature has its own range, so the centres are (feature, bin).
        centres = 0.5 * (summary.hist_edges[:, :-1] + summary.hist_edges[:, 1:])
        coords["bin_centre"] = (("feature", "bin"), centres, {"long_name": "histogram bin centre"})
    if summary.joint_counts is not None:
        slots = summary.joint_counts.shape[1]
        coords["slot"] = ("slot", np.arange(-1, slots - 1, dtype=np.int64), {
            "long_name": "histogram slot", "comment": "-1: below the range, 0..bins-1: the bins, bins: above",
        })
    if summary.classes is not None and any("class" in data[n].dims for n in data):
        coords["class"] = ("class", np.asarray(summary.classes, dtype=np.int64), {"long_name": "label value"})
    if len(quantiles) and (summary.sketch_counts is not None or summary.hist_counts is not None):
        probs = np.asarray([float(q) for q in quantiles], dtype=np.float64)
        table = summary.quantile(probs).to_numpy()
        data["quantiles"] = xr.Variable(("feature", "quantile"), table, attrs={
            "long_name": "quantile", "source": "quantile sketch" if summary.sketch_counts is not None else "histogram",
        })
        coords["quantile"] = ("quantile", probs, {"long_name": "probability", "units": "1"})
    for v in user_variables(summary.extra, summary.n_features, set(data)):
        data[v.name] = xr.Variable(v.dims, v.values, attrs=v.attrs)
    if states and summary.sketch_counts is not None:
        data.update({n: _var(n, v) for n, v in summary.variables.items() if declared[n].state and v is not None})
        first = int(summary.provenance.get("sketch", {}).get("first_slot", 0))
        width = summary.sketch_counts.shape[1]
        coords["sketch_slot"] = ("sketch_slot", np.arange(first, first + width, dtype=np.int64),
                                 {"long_name": "quantile sketch slot"})
        coords["extreme"] = ("extreme", np.array(["min", "max"], dtype=object), {"long_name": "extreme"})
    attrs: dict[str, Any] = {"title": "per-feature statistics (daskbatch.Summary)", "daskbatch_summary_format": FORMAT}
    if summary.cov_count is not None:
        attrs["cov_count"] = int(summary.cov_count)
    attrs.update(encode_provenance(summary.provenance))
    return xr.Dataset(data, coords=coords, attrs=attrs)


def fields_from_xarray(ds: Any) -> dict[str, Any]:
    """Read a summary's fields back from :meth:`Summary.to_xarray`'s dataset.

    Parameters
    ----------
    ds : xarray.Dataset
        The dataset.

    Returns
    -------
    dict
        The summary's fields, for ``Summary(**fields)``.
    """
    variables: dict[str, Any] = {}
    for name, declared in summary_variables().items():
        if declared.dims is not None and name in ds:
            value = np.asarray(ds[name].values)
            # Exact counts are stored as int64 and held as float64 like the other moments.
            variables[name] = value.astype(np.float64) if declared.count == "float64" else value
    cov_count = ds.attrs.get("cov_count")
    if cov_count is not None:
        variables["cov_count"] = int(cov_count)
    if "class" in ds.coords:
        variables["classes"] = np.asarray(ds["class"].values, dtype=np.int64)
    elif "joint_counts" in variables:  # written before the coordinate existed: 0..K-1
        variables["classes"] = np.arange(variables["joint_counts"].shape[2], dtype=np.int64)
    return dict(
        feature_names=tuple(str(f) for f in ds["feature"].values),
        variables=variables,
        provenance=decode_provenance(dict(ds.attrs)),
        extra=results_from_variables(ds),
    )


def group_dataset(summary: Summary) -> Any:
    """Build the grouped statistics of ``describe(x, groups=g)`` as a Dataset with a ``group`` dimension.

    Parameters
    ----------
    summary : Summary
        A summary described with ``groups=``.

    Returns
    -------
    xarray.Dataset
        ``count``, ``mean``, ``var`` (feature, group); with histograms
        ``hist_counts`` (feature, bin, group) and ``hist_edges`` (feature, edge).
    """
    import xarray as xr  # lazy: xarray

    if summary.groups is None or summary.group_count is None:
        raise ValueError("this summary has no groups: describe(x, groups=g)")
    coords: dict[str, Any] = {
        "feature": ("feature", np.array(summary.feature_names, dtype=object)),
        "group": ("group", np.asarray(summary.groups, dtype=np.int64), {"long_name": "group value"}),
    }
    data: dict[str, Any] = {
        "count": (("feature", "group"), count_array(summary.group_count), {"long_name": "number of finite values"}),
        "mean": (("feature", "group"), summary.group_mean, {"long_name": "mean"}),
        "var": (("feature", "group"), summary.group_var,
                {"long_name": "variance", "ddof": int(summary.provenance.get("ddof", 1))}),
    }
    if summary.group_hist is not None and summary.hist_edges is not None:
        data["hist_counts"] = (("feature", "bin", "group"), count_array(summary.group_hist),
                               {"long_name": "histogram counts", "units": "1"})
        data["hist_edges"] = (("feature", "edge"), summary.hist_edges, {"long_name": "histogram bin edges"})
    return xr.Dataset(data, coords=coords)
