"""A summary as tables and JSON (per-feature rows, the strongest pairs and features, strict JSON), and what it says about numbers that may mislead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from daskbatch.stats.quantile import fine_quantile, histogram_quantile
from daskbatch.stats.ranges import SuspectValue, suspect_values
from daskbatch.stats.registry import STATISTICS, summary_variables
from daskbatch.stats.sketch import Sketch
from daskbatch.stats.sketch_layout import collapse_floor, slot_bounds
from daskbatch.summary.dataset import DEFAULT_QUANTILES, quantile_label, user_variables

if TYPE_CHECKING:
    from daskbatch.summary.record import Summary


__all__ = ["covariance_message", "dataframe", "DROPPED_ROWS_LIMIT", "json_dict", "PAIRWISE_OPTION", "QUANTILE_BUCKETS", "quantiles", "summary_suspect_values", "suspect_message", "top_correlated", "top_mi"]

def quantiles(summary: Summary, q: Any, method: str) -> Any:
    """Approximate quantiles of every feature (:meth:`Summary.quantile`, which says how accurate)."""
    if method not in ("auto", "sketch", "histogram"):
        raise ValueError(f"method must be 'auto', 'sketch' or 'histogram', got {method!r}")
    if method == "sketch" or (method == "auto" and summary.sketch_counts is not None):
        if summary.sketch_counts is None or summary.sketch_extrema is None:
            raise ValueError("this summary has no quantile sketch: describe(..., stats=(..., 'sketch'))")
        spec = summary.provenance["sketch"]
        kept = spec.get("window")  # older summaries: every bucket, never collapsed
        layout = Sketch(float(spec["alpha"]), float(spec["min_magnitude"]), float(spec["max_magnitude"]),
                        None if kept is None else int(kept))
        fine, source = None, "sketch"
        kept = (summary.states or {}).get("sketch")
        if method == "auto" and summary.quantile_counts is not None and summary.quantile_range is not None:
            fine, source = (summary.quantile_counts, summary.quantile_range), "sketch and quantile histogram"
        elif method == "auto" and kept is not None and kept.state.grid is not None:
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
        return _labelled(summary, values, q, source, exact_features)
    if summary.hist_counts is None:
        raise ValueError("quantiles come from histograms: describe(..., stats=(..., 'hist'))")
    assert summary.hist_edges is not None and summary.underflow is not None and summary.overflow is not None
    values = histogram_quantile(
        summary.hist_counts, summary.hist_edges, summary.underflow, summary.overflow, summary.min, summary.max, q
    )
    bins = summary.hist_counts.shape[1]
    return _labelled(summary, values, q, f"histograms ({bins} bins on each feature's range: within one bin)",
                     np.zeros(summary.n_features, dtype=bool))


def _labelled(summary: Summary, values: np.ndarray, q: Any, source: str, exact: np.ndarray) -> Any:
    """``values`` (D,) or (D, len(q)) as a Series / DataFrame indexed by feature, saying where they come from."""
    import pandas as pd  # lazy: pandas

    index = pd.Index(list(summary.feature_names), name="feature")
    if np.ndim(q) == 0:
        out = pd.Series(np.asarray(values, dtype=np.float64), index=index, name=float(q))
    else:
        probs = pd.Index([float(p) for p in np.ravel(q)], name="quantile")
        out = pd.DataFrame(np.asarray(values, dtype=np.float64), index=index, columns=probs)
    # Plain values (a str, a tuple of names): pandas compares attrs when it combines frames.
    out.attrs["source"] = source
    out.attrs["exact"] = tuple(name for name, e in zip(summary.feature_names, exact, strict=True) if e)
    return out


def top_correlated(summary: Summary, k: int) -> Any:
    """Find the ``k`` feature pairs with the largest absolute correlation (:meth:`Summary.top_correlated`)."""
    import pandas as pd  # lazy: pandas

    if summary.corr is None:
        tiled = summary.provenance.get("tiled_cov")
        # too wide to hold: ranked tile by tile from the store
        pairs = summary.tiled_cov().top_correlated(k) if tiled else []
    else:
        upper = np.triu_indices(summary.n_features, k=1)
        r = summary.corr[upper]
        finite = np.isfinite(r)
        order = np.argsort(-np.abs(np.where(finite, r, 0.0)), kind="stable")[: max(k, 0)]
        names = summary.feature_names
        pairs = [(names[upper[0][i]], names[upper[1][i]], float(r[i])) for i in order if finite[i]]
    table = pd.DataFrame(pairs, columns=["feature_a", "feature_b", "r"])
    return table.astype({"feature_a": object, "feature_b": object, "r": np.float64})


def top_mi(summary: Summary, k: int) -> Any:
    """Find the ``k`` features with the largest MI with the label (:meth:`Summary.top_mi`)."""
    import pandas as pd  # lazy: pandas

    if summary.mi is None:
        return pd.Series([], index=pd.Index([], name="feature", dtype=object), name="mi", dtype=np.float64)
    order = np.argsort(-np.nan_to_num(summary.mi, nan=-1.0), kind="stable")[: max(k, 0)]
    index = pd.Index([summary.feature_names[i] for i in order], name="feature", dtype=object)
    return pd.Series(summary.mi[order].astype(np.float64), index=index, name="mi")


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
            out[name] = _json_values(value)
    if summary.cov_count is not None:
        out["cov_count"] = int(summary.cov_count)
    if summary.hist_counts is not None or summary.sketch_counts is not None:
        table = summary.quantile(list(DEFAULT_QUANTILES)).to_numpy()
        out["quantiles"] = {"probabilities": list(DEFAULT_QUANTILES), "values": _json_values(table)}
    user = user_variables(summary.extra, summary.n_features, set())
    if user:
        out["user_statistics"] = {v.name: _json_values(v.values) for v in user}
    return out


def _json_values(a: np.ndarray) -> Any:
    """Nested lists of ``a`` with the non-finite floats strict JSON cannot hold spelled out."""
    if a.dtype.kind != "f":
        return a.tolist()
    flat = [None if np.isnan(v) else ("inf" if v > 0 else "-inf") if np.isinf(v) else float(v) for v in a.ravel()]
    return np.array(flat, dtype=object).reshape(a.shape).tolist()


#: Fraction of the rows the complete-rows covariance may leave out before the summary says so.
DROPPED_ROWS_LIMIT = 0.10
#: How to ask for the pairwise covariance, in Python and on the command line.
PAIRWISE_OPTION = "stats=[..., db.stats.CoMoments(rows='pairwise')] (--cov pairwise)"
#: Names listed in one line before "and N more".
LISTED = 8


def covariance_message(summary: Any) -> str | None:
    """Say what the complete-rows covariance of ``summary`` left out, when that is much."""
    prov = summary.provenance
    if (
        summary.cov_count is None
        or prov.get("cov_rows", "complete") != "complete"
        or not summary.n_features
    ):
        return None
    # The rows the statistics saw: ``count`` (±inf included) and ``nan_count`` hold each of a feature's
    # values once (a row of weight 0 is not seen at all: the weighted complete rows are not short of it).
    count = np.asarray(summary.count, dtype=np.float64)
    rows, used = int(np.max(count + np.asarray(summary.nan_count))), int(summary.cov_count)
    finite = count - np.asarray(summary.posinf_count) - np.asarray(summary.neginf_count)
    empty = np.flatnonzero(finite == 0)
    if rows == 0 or (not empty.size and rows - used <= DROPPED_ROWS_LIMIT * rows):
        return None
    names = [summary.feature_names[i] for i in empty[:LISTED]]
    more = f" and {empty.size - LISTED:,} more" if empty.size > LISTED else ""
    why = f"; no finite value in {', '.join(names)}{more}" if empty.size else ""
    if empty.size == finite.size:  # no pair has a row either: no option would help
        remedy = "no feature has a finite value to correlate"
    else:
        remedy = f"{PAIRWISE_OPTION} uses each pair's own rows"
    return (
        f"covariance and correlation use only the {used:,} of {rows:,} rows finite in every feature "
        f"({(rows - used) / rows:.1%} left out{why}): {remedy}"
    )


def summary_suspect_values(summary: Any) -> tuple[SuspectValue, ...] | None:
    """Find the suspect values of ``summary`` from its quantile sketch, minima and maxima."""
    counts, spec = summary.sketch_counts, summary.provenance.get("sketch")
    if counts is None or not isinstance(spec, dict) or np.ndim(counts) != 2:
        return None
    kept = spec.get("window")
    layout = Sketch(
        float(spec["alpha"]),
        float(spec["min_magnitude"]),
        float(spec["max_magnitude"]),
        None if kept is None else int(kept),
    )
    first, width = int(spec["first_slot"]), counts.shape[1]
    if width == 0:  # no finite value in any feature (an all-NaN store): no pile to judge
        return ()
    lower, upper = slot_bounds(layout)
    edges = np.concatenate([lower[first : first + width], upper[first + width - 1 : first + width]])
    slots = np.arange(first, first + width, dtype=np.int64)[None, :]
    # Only which buckets hold anything decides a collapse: weighted counts (floats, up to 2**1000) need no cast.
    floor = collapse_floor((np.asarray(counts) > 0).astype(np.int64), slots, layout)  # (D, 2): 0 where not collapsed
    extremes = np.stack([np.asarray(summary.min), np.asarray(summary.max)], axis=1)
    magnitude = np.abs(extremes)
    beyond_floor = magnitude > np.where(extremes < 0, floor[:, :1], floor[:, 1:])
    judged = (magnitude < layout.max_magnitude) & ((extremes == 0) | beyond_floor)
    return suspect_values(summary.feature_names, counts, edges, summary.min, summary.max, judged)


def suspect_message(found: tuple[SuspectValue, ...]) -> str | None:
    """Name the suspect values in one line."""
    if not found:
        return None
    listed = "; ".join(f"{s.feature} {s.describe()}" for s in found[:LISTED])
    more = f"; and {len(found) - LISTED:,} more" if len(found) > LISTED else ""
    return (
        f"{len(found):,} value{'' if len(found) == 1 else 's'} repeated far more often than "
        f"{'its' if len(found) == 1 else 'their'} neighbours at the edge of a feature (a code for "
        f"missing values, or a floor or ceiling of the measurement?), counted as data: {listed}{more} "
        "(summary.suspect_values)"
    )
