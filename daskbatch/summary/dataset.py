"""A :class:`~daskbatch.summary.Summary` as an ``xarray.Dataset`` and back (CF-style labels, int counts)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from daskbatch.stats.ranges import outside_fraction
from daskbatch.stats.registry import STATISTICS, summary_variables

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary

#: Probabilities of the quantiles that tables, ``to_xarray`` and ``--json`` show.
DEFAULT_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def quantile_label(q: float) -> str:
    """Name a quantile's column as pandas' ``describe`` does: the percent (``1%``, ``25%``, ``50%``, ``99.9%``)."""
    return f"{round(100 * q, 6):g}%"


def feature_index(summary: Any) -> Any:
    """The features' names as the ``pandas.Index`` (named ``feature``) that every labelled result shares."""
    import pandas as pd  # lazy: pandas

    return pd.Index(list(summary.feature_names), name="feature", dtype=object)


def _coordinate(summary: Any, dim: str, size: int) -> Any:
    """The labels of dimension ``dim`` (``size`` long): those :func:`summary_to_xarray` gives it, else 0..size-1."""
    if dim in ("feature", "feature2"):
        return np.array(summary.feature_names, dtype=object)
    if dim == "slot":  # -1: below the range, then the bins, then above
        return np.arange(-1, size - 1, dtype=np.int64)
    if dim in ("class", "group") and summary.classes is not None and len(summary.classes) == size:
        return np.asarray(summary.classes, dtype=np.int64)
    if dim == "sketch_slot":
        first = int((summary.provenance.get("sketch") or {}).get("first_slot", 0))
        return np.arange(first, first + size, dtype=np.int64)
    if dim == "extreme" and size == 2:
        return np.array(["min", "max"], dtype=object)
    return np.arange(size, dtype=np.int64)


def labelled(summary: Any, name: str, values: Any) -> Any:
    """``values`` of the variable ``name`` labelled by feature: a Series, a DataFrame, or a DataArray past two dims."""
    declared = summary_variables().get(name)
    dims = declared.dims if declared is not None else DERIVED[name][1] if name in DERIVED else None
    if values is None or not dims or dims[0] != "feature" or np.ndim(values) != len(dims):
        return values
    import pandas as pd  # lazy: pandas

    if len(dims) == 1:
        return pd.Series(values, index=feature_index(summary), name=name, copy=False)
    if len(dims) == 2:
        columns = pd.Index(_coordinate(summary, dims[1], np.shape(values)[1]), name=dims[1])
        return pd.DataFrame(values, index=feature_index(summary), columns=columns, copy=False)
    import xarray as xr  # lazy: xarray

    coords = {d: _coordinate(summary, d, n) for d, n in zip(dims, np.shape(values), strict=True)}
    return xr.DataArray(values, dims=dims, coords=coords, name=name)


class SummaryArrays:
    """A summary's variables unlabelled, as the NumPy arrays the statistics made (``s.arrays.mean``)."""

    def __init__(self, summary: Summary) -> None:
        self.summary = summary

    def __getattr__(self, name: str) -> Any:
        """Serve a variable's array (None when not computed), a derived array, or the summary's attribute."""
        if name.startswith("__"):
            raise AttributeError(name)
        for values in self.summary.results.values():
            if name in values:
                return values[name]
        if name in summary_variables():
            return None
        derived = DERIVED.get(name)
        return derived[0](self) if derived is not None else getattr(self.summary, name)

    def __dir__(self) -> list[str]:
        """List the variables, the derived arrays and the summary's attributes."""
        return sorted(dir(self.summary))


def _group_count(a: SummaryArrays) -> np.ndarray | None:
    """The (D, G) counts of ``describe(x, groups=g)``."""
    return a.class_count if a.groups is not None else None


def _group_mean(a: SummaryArrays) -> np.ndarray | None:
    """The (D, G) means of ``describe(x, groups=g)``."""
    return a.class_mean if a.groups is not None else None


def _group_var(a: SummaryArrays) -> np.ndarray | None:
    """The (D, G) variances of ``describe(x, groups=g)``, with the summary's ddof."""
    if a.groups is None or a.class_m2 is None or a.class_count is None:
        return None
    dof = np.asarray(a.class_count, dtype=np.float64) - int(a.provenance.get("ddof", 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dof > 0, a.class_m2 / dof, np.nan)


def _group_hist(a: SummaryArrays) -> np.ndarray | None:
    """The (D, bins, G) histogram counts of ``describe(x, groups=g)``."""
    if a.groups is None or a.joint_counts is None:
        return None
    return a.joint_counts[:, 1:-1, :]


def _out_of_range_fraction(a: SummaryArrays) -> np.ndarray | None:
    """The (D,) fraction of every feature's values (or their weight) outside its histogram range."""
    if a.hist_counts is None or a.underflow is None or a.overflow is None:
        return None
    return outside_fraction(a.underflow, a.overflow, a.hist_counts)


#: The arrays the summary derives from its variables, by attribute name, with the dimensions that label them.
DERIVED = {
    "group_count": (_group_count, ("feature", "group")), "group_mean": (_group_mean, ("feature", "group")),
    "group_var": (_group_var, ("feature", "group")), "group_hist": (_group_hist, ("feature", "bin", "group")),
    "out_of_range_fraction": (_out_of_range_fraction, ("feature",)),
}


def summary_to_xarray(summary: Summary, *, states: bool = False, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Any:
    """Convert the statistics to an ``xarray.Dataset`` with CF-style labels."""
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
        coords["slot"] = ("slot", _coordinate(summary, "slot", summary.joint_counts.shape[1]), {
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
        coords["sketch_slot"] = ("sketch_slot", _coordinate(summary, "sketch_slot", summary.sketch_counts.shape[1]),
                                 {"long_name": "quantile sketch slot"})
        coords["extreme"] = ("extreme", _coordinate(summary, "extreme", 2), {"long_name": "extreme"})
    attrs: dict[str, Any] = {"title": "per-feature statistics (daskbatch.Summary)", "daskbatch_summary_format": FORMAT}
    if summary.cov_count is not None:
        attrs["cov_count"] = int(summary.cov_count)
    attrs.update(encode_provenance(summary.provenance))
    return xr.Dataset(data, coords=coords, attrs=attrs)


def fields_from_xarray(ds: Any) -> dict[str, Any]:
    """Read a summary's fields back from :meth:`Summary.to_xarray`'s dataset."""
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
    results: dict[str, dict[str, Any]] = {}
    for d in STATISTICS.values():  # each variable to the first statistic that declares it
        if held := {n: variables.pop(n) for n in d.variables if n in variables}:
            results[d.name] = held
    return dict(
        feature_names=tuple(str(f) for f in ds["feature"].values),
        results=results,
        provenance=decode_provenance(dict(ds.attrs)),
        extra=results_from_variables(ds),
    )


def group_dataset(summary: Summary) -> Any:
    """Build the grouped statistics of ``describe(x, groups=g)`` as a Dataset with a ``group`` dimension."""
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


#: Version of the on-disk layout (``load_summary`` refuses another).
FORMAT = 2
#: Attributes of the saved Dataset that are not provenance ("daskbatch_output": the marker outputs check).
RESERVED = frozenset({
    "title", "cov_count", "daskbatch_summary_format", "provenance_json_keys", "provenance", "daskbatch_output",
})
def variable_attrs(name: str, summary: Any) -> dict[str, Any]:
    """The CF-style attributes of a summary's variable ``name``, as its statistic declares them."""
    declared = summary_variables()[name]
    attrs: dict[str, Any] = {"long_name": declared.long_name or name}
    if declared.units is not None:
        attrs["units"] = declared.units
    if declared.settings is not None:
        attrs.update(declared.settings(summary))
    return attrs


def _fits_an_attribute(value: Any) -> bool:
    """A scalar or a flat list of numbers or of strings, no None in it (what attribute formats hold)."""
    if isinstance(value, list):
        scalars = all(isinstance(v, (bool, int, float, str)) for v in value)
        return scalars and len({isinstance(v, str) for v in value}) <= 1
    return value is None or isinstance(value, (bool, int, float, str))


def encode_provenance(provenance: dict[str, Any]) -> dict[str, Any]:
    """Encode ``provenance`` as Dataset attributes: one per key, nested dicts as dotted keys."""
    plain = json.loads(json.dumps(provenance, default=str))
    attrs: dict[str, Any] = {}
    as_json: list[str] = []

    def _put(key: str, value: Any) -> None:
        """Store ``value`` under ``key``, nested dicts under dotted keys."""
        if isinstance(value, dict) and value and not any("." in k for k in value):
            for k, v in value.items():
                _put(f"{key}.{k}", v)
        elif _fits_an_attribute(value):
            attrs[key] = value
        else:
            attrs[key] = json.dumps(value)
            as_json.append(key)

    dotted = {k: v for k, v in plain.items() if "." in k}
    for key, value in plain.items():
        if key not in dotted:
            _put(key, value)
    if dotted:
        attrs["provenance_dotted"] = json.dumps(dotted)
    attrs["provenance_json_keys"] = as_json
    return attrs


def decode_provenance(attrs: dict[str, Any]) -> dict[str, Any]:
    """Decode the provenance dict from a summary Dataset's attributes."""
    keys = attrs.get("provenance_json_keys", [])
    as_json = {keys} if isinstance(keys, str) else set(_plain(keys))  # one key comes back as a plain string
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key in RESERVED:
            continue
        if key == "provenance_dotted":
            out.update(json.loads(value))
            continue
        value = json.loads(value) if key in as_json else _plain(value)
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _plain(value: Any) -> Any:
    """NumPy values an attribute store hands back, as the JSON types the provenance had."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return value


def count_array(a: np.ndarray) -> np.ndarray:
    """Convert exact float64 counts to int64 (left as they are if any is not a whole finite number)."""
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return a.astype(np.int64, copy=False)
    if a.size and not (np.all(np.isfinite(a)) and np.all(a == np.rint(a))):
        return a
    return np.rint(a).astype(np.int64)


#: Attribute naming the user's statistic a variable comes from (and ``FIELD_ATTR`` the field of its result).
USER_ATTR = "daskbatch_user_statistic"
FIELD_ATTR = "daskbatch_result_field"


class UserVariable(NamedTuple):
    """One array of a user's result: its variable name, dimensions, values and attributes."""

    name: str
    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict[str, Any]


def _fields(result: Any) -> Iterator[tuple[str, Any]]:
    """The (field, value) pairs of a result; ``""`` for a result that is one value."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        yield from ((f.name, getattr(result, f.name)) for f in dataclasses.fields(result))
    elif isinstance(result, tuple) and hasattr(result, "_asdict"):
        yield from result._asdict().items()
    elif isinstance(result, Mapping):
        yield from ((str(k), v) for k, v in result.items())
    else:
        yield "", result


def user_variables(extra: Mapping[str, Any], n_features: int, taken: set[str]) -> list[UserVariable]:
    """Turn the user's results into named arrays (non-numeric values are left out)."""
    out: list[UserVariable] = []
    for stat, result in extra.items():
        for field, value in _fields(result):
            a = np.asarray(value)  # results are on the host already (describe and merge bring them there)
            if a.dtype.kind not in "biuf":
                continue  # strings, objects, complex: nothing a table or netCDF holds as numbers
            name = f"{stat}_{field}" if field else stat
            if name in taken:
                name = f"user_{name}"
            taken.add(name)
            first = ("feature",) if a.ndim and a.shape[0] == n_features else (f"{name}_dim0",)
            dims = (first + tuple(f"{name}_dim{i}" for i in range(1, a.ndim))) if a.ndim else ()
            attrs = {"long_name": f"{field or 'result'} of statistic {stat!r}", USER_ATTR: stat, FIELD_ATTR: field}
            out.append(UserVariable(name, dims, a, attrs))
    return out


def results_from_variables(ds: Any) -> dict[str, Any]:
    """Gather the user's results back from a dataset's variables: an array, or a dict of arrays by field."""
    out: dict[str, Any] = {}
    for var in ds.data_vars.values():
        stat = var.attrs.get(USER_ATTR)
        if not isinstance(stat, str):
            continue
        value = np.asarray(var.values)
        value = value[()] if value.ndim == 0 else value
        field = str(var.attrs.get(FIELD_ATTR) or "")
        if field:
            out.setdefault(stat, {})[field] = value
        else:
            out[stat] = value
    return out
