"""``describe``: every requested statistic of a (samples × features) array in one or two passes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Literal

import dask
import numpy as np

from daskbatch.inputs import FeatureMatrix, as_feature_matrix
from daskbatch.reduce import resolve_split_every, tree_reduce
from daskbatch.stats import STATISTICS, Bundle, CoMoments, Histogram, Moments
from daskbatch.stats.mutual_info import mutual_information
from daskbatch.summary import Summary

DEFAULT_STATS = ("moments", "cov", "hist", "mi")
NAN_POLICIES = ("omit", "propagate", "raise")


def normalize_stats(stats: str | Sequence[str]) -> tuple[str, ...]:
    """Validate statistic names (``"moments"`` is always computed and listed first)."""
    names = (stats,) if isinstance(stats, str) else tuple(stats)
    names = tuple(n.strip() for part in names for n in part.split(",") if n.strip())
    unknown = [n for n in names if n not in STATISTICS]
    if unknown:
        raise ValueError(f"unknown statistic(s) {unknown}; choose from {sorted(STATISTICS)}")
    return ("moments",) + tuple(n for n in dict.fromkeys(names) if n != "moments")


def histogram_ranges(
    range_: Any, n_features: int, vmin: np.ndarray | None = None, vmax: np.ndarray | None = None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-feature (lo, hi) from a user range, or from finite extrema found by a first pass.

    A global ``(lo, hi)`` applies to every feature; a (D, 2) array gives one range each.
    Found ranges follow ``numpy.histogram``: a constant feature gets ``(v - 0.5, v + 0.5)``.
    """
    if range_ is not None:
        r = np.asarray(range_, dtype=np.float64)
        if r.shape == (2,):
            r = np.broadcast_to(r, (n_features, 2))
        if r.shape != (n_features, 2):
            raise ValueError(
                f"range must be (lo, hi) or one (lo, hi) per feature, shape ({n_features}, 2); got shape {r.shape}"
            )
        lo, hi = r[:, 0].copy(), r[:, 1].copy()
    else:
        assert vmin is not None and vmax is not None
        empty = ~np.isfinite(vmin) | ~np.isfinite(vmax)
        lo = np.where(empty, 0.0, vmin)
        hi = np.where(empty, 1.0, vmax)
        same = lo == hi
        lo, hi = np.where(same, lo - 0.5, lo), np.where(same, hi + 0.5, hi)
    bad = ~(np.isfinite(lo) & np.isfinite(hi) & (lo < hi))
    if bad.any():
        d = int(np.argmax(bad))
        raise ValueError(f"histogram range of feature {d} must be finite with lo < hi; got ({lo[d]}, {hi[d]})")
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def _compute(delayed_obj: Any, progress: bool) -> Any:
    if not progress:
        return dask.compute(delayed_obj)[0]
    try:
        from distributed import get_client, progress as dist_progress

        client = get_client()
    except (ImportError, ValueError):
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return dask.compute(delayed_obj)[0]
    future = client.compute(delayed_obj)
    dist_progress(future)
    return future.result()


def describe(
    x: Any,
    label: Any = None,
    *,
    stats: str | Sequence[str] = DEFAULT_STATS,
    bins: int = 64,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    ddof: int = 1,
    bias: bool = True,
    nan_policy: Literal["omit", "propagate", "raise"] = "omit",
    split_every: int | None = None,
    mi_base: Literal["e", 2] = "e",
    miller_madow: bool = False,
    feature_names: Sequence[str] | None = None,
    progress: bool = False,
) -> Summary:
    """Per-feature statistics of a (samples × features) array, reading each chunk once per pass.

    Parameters
    ----------
    x : dask.array.Array, numpy.ndarray, Dataset, or path / URL of a Zarr store
        Samples along axis 0, features along axis 1. Float, integer and bool
        dtypes are accepted; everything accumulates in float64.
    label : array of int, or name of an array in the same store, optional
        Class of every sample (0..K-1), for mutual information.
    stats : sequence of {"moments", "cov", "hist", "mi"}
        What to compute. Moments are always included; ``"mi"`` is skipped
        when no label is given.
    bins : int, default 64
        Histogram bins per feature.
    range : (lo, hi) or array of shape (D, 2), optional
        Histogram range(s). When given, everything takes one pass; when not,
        a first pass finds each feature's min and max (fused with the moments
        and co-moments) and a second pass counts.
    ddof : int, default 1
        Delta degrees of freedom of variance and covariance.
    bias : bool, default True
        Biased skewness/kurtosis as ``scipy.stats`` defaults; False corrects them.
    nan_policy : {"omit", "propagate", "raise"}, default "omit"
        NaN values are left out (and counted), make a feature's moments NaN,
        or raise naming the features that hold them. Co-moments always use
        complete rows only and report their number as ``cov_count``.
    split_every : int, optional
        Fan-in of the merge tree (``daskbatch.split-every``, default 8).
    mi_base : {"e", 2}, default "e"
        Mutual information in nats or bits.
    miller_madow : bool, default False
        Apply the Miller–Madow bias correction to mutual information.
    feature_names : sequence of str, optional
        Names for the features (else from the store, else ``f0, f1, ...``).
    progress : bool, default False
        Show a progress bar (distributed's when a client is active).

    Returns
    -------
    Summary

    Notes
    -----
    Runs on the active Dask scheduler (the threaded one, or a ``distributed``
    client when one exists) and never starts a cluster by itself.
    """
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    names = normalize_stats(stats)
    data = as_feature_matrix(x, label, feature_names=feature_names)
    if data.label is None:
        names = tuple(n for n in names if n != "mi")
    want_hist = "hist" in names or "mi" in names
    fan_in = resolve_split_every(split_every)
    n_features = data.x.shape[1]

    moments = Moments(ddof=ddof, bias=bias, nan_policy=nan_policy)
    first: list[Any] = [moments]
    if "cov" in names:
        first.append(CoMoments(ddof=ddof))
    histogram = None
    if want_hist and range is not None:
        lo, hi = histogram_ranges(range, n_features)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names)
        first.append(histogram)

    results = dict(zip((s.name for s in first), _run(Bundle(tuple(first)), data, fan_in, progress), strict=True))
    m = results["moments"]
    if nan_policy == "raise" and np.any(m.nan_count > 0):
        bad = np.flatnonzero(m.nan_count > 0)
        listed = ", ".join(f"{data.feature_names[i]} ({int(m.nan_count[i])})" for i in bad[:10])
        raise ValueError(f"{data.provenance['source']} holds NaN values in {bad.size} feature(s): {listed}")
    passes = 1
    if want_hist and histogram is None:
        lo, hi = histogram_ranges(None, n_features, m.min, m.max)
        histogram = Histogram(bins=bins, lo=lo, hi=hi, by_label="mi" in names)
        (results["hist"],) = _run(Bundle((histogram,)), data, fan_in, progress)
        passes = 2

    provenance = dict(data.provenance)
    provenance.update(
        stats=list(names), bins=bins if want_hist else None, ddof=ddof, bias=bias,
        nan_policy=nan_policy, split_every=fan_in, passes=passes,
        chunk_rows=int(max(data.x.chunks[0])), n_chunks=int(data.x.numblocks[0]),
        range_given=range is not None,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        daskbatch_version=_version(),
    )
    return _summary(data, results, provenance, mi_base=mi_base, miller_madow=miller_madow)


def _run(bundle: Bundle, data: FeatureMatrix, split_every: int, progress: bool) -> tuple[Any, ...]:
    needs_label = any(getattr(s, "by_label", False) for s in bundle.stats)
    graph = tree_reduce(bundle, data.x, data.label if needs_label else None, split_every=split_every)
    return _compute(graph, progress)


def _summary(
    data: FeatureMatrix, results: dict[str, Any], provenance: dict[str, Any], *, mi_base: Any, miller_madow: bool
) -> Summary:
    m = results["moments"]
    kwargs: dict[str, Any] = {}
    if "cov" in results:
        c = results["cov"]
        kwargs.update(cov=c.cov, corr=c.corr, cov_count=int(c.n))
    if "hist" in results:
        h = results["hist"]
        kwargs.update(hist_counts=h.counts, hist_edges=h.edges, underflow=h.underflow, overflow=h.overflow)
        if h.joint is not None:
            kwargs.update(
                joint_counts=h.joint,
                mi=mutual_information(h.joint, base=mi_base, miller_madow=miller_madow),
            )
            provenance.update(n_classes=int(h.joint.shape[2]), mi_units="bits" if mi_base == 2 else "nats")
    return Summary(
        feature_names=data.feature_names,
        count=m.count, nan_count=m.nan_count, posinf_count=m.posinf_count, neginf_count=m.neginf_count,
        mean=m.mean, var=m.var, std=m.std, skew=m.skew, kurtosis=m.kurtosis, min=m.min, max=m.max,
        provenance=provenance, **kwargs,
    )


def _version() -> str:
    from daskbatch import __version__

    return __version__
