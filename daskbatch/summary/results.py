"""A :class:`~daskbatch.summary.Summary` from the finalized results of :func:`daskbatch.describe`'s passes."""

from __future__ import annotations

from typing import Any

import numpy as np

from daskbatch.config import STATISTIC_DEFAULTS
from daskbatch.stats.mutual_info import mutual_information
from daskbatch.summary.fields import BUILT_IN_RESULTS

__all__ = ["fields_from_results"]


def fields_from_results(
    feature_names: tuple[str, ...],
    results: dict[str, Any],
    provenance: dict[str, Any],
    *,
    mi_base: Any = STATISTIC_DEFAULTS["base"],
    miller_madow: bool = STATISTIC_DEFAULTS["miller_madow"],
    states: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
        The merged states the results were finalized from (kept for :func:`daskbatch.update`).

    Returns
    -------
    dict
        The summary's fields, for ``Summary(**fields)``.
    """
    m = results["moments"]
    kwargs: dict[str, Any] = {}
    if "cov" in results:
        c = results["cov"]
        kwargs.update(cov=c.cov, corr=c.corr, cov_count=int(c.n))
        if getattr(c, "weight_sum", None) is not None:
            provenance["cov_weight_sum"] = float(c.weight_sum)
    if getattr(m, "weight_sum", None) is not None:
        kwargs["weight_sum"] = np.asarray(m.weight_sum)
    if "sketch" in results:
        kwargs.update(_sketch_fields(results["sketch"], provenance))
    if "qhist" in results:
        f = results["qhist"]
        cells = [np.asarray(f.underflow)[:, None], np.asarray(f.counts), np.asarray(f.overflow)[:, None]]
        edges = np.asarray(f.edges)
        kwargs.update(quantile_counts=np.concatenate(cells, axis=1), quantile_range=edges[:, [0, -1]])
    if "hist" in results:
        h = results["hist"]
        kwargs.update(hist_counts=h.counts, hist_edges=h.edges, underflow=h.underflow, overflow=h.overflow)
        if h.joint is not None:
            classes = getattr(h, "classes", None)
            if classes is None:
                classes = np.arange(h.joint.shape[2], dtype=np.int64)
            kwargs.update(
                joint_counts=h.joint,
                # Only the in-range bins: values outside (sentinels, 1e12, inf: a label-independent spike)
                # would otherwise pull the MI towards 0; they are reported as out_of_range_fraction.
                mi=mutual_information(h.joint[:, 1:-1, :], base=mi_base, miller_madow=miller_madow),
                classes=np.asarray(classes, dtype=np.int64),
            )
            provenance.update(n_classes=int(h.joint.shape[2]), mi_units="bits" if mi_base == 2 else "nats")
    if "class_moments" in results:
        cm = results["class_moments"]
        kwargs.update(class_count=cm.count, class_mean=cm.mean, class_m2=cm.m2)
        keyed = getattr(getattr((states or {}).get("class_moments"), "statistic", None), "classes", None)
        if "classes" not in kwargs and keyed is not None:
            # Without joint histograms the class values come from the statistic that keyed the moments.
            kwargs["classes"] = np.asarray(keyed, dtype=np.int64)
        provenance.setdefault("n_classes", int(cm.count.shape[1]))
    if "target_moments" in results:
        t = results["target_moments"]
        kwargs.update(target_count=t.count, target_mean=t.y_mean, target_m2=t.y_m2, target_x_m2=t.x_m2,
                      target_comoment=t.comoment)
    extra = {name: r for name, r in results.items() if name not in BUILT_IN_RESULTS}
    if extra:
        provenance["user_statistics"] = sorted(extra)
    return dict(
        feature_names=tuple(feature_names), extra=extra,
        count=m.count, nan_count=m.nan_count, posinf_count=m.posinf_count,
        neginf_count=m.neginf_count, mean=m.mean, var=m.var, std=m.std, skew=m.skew,
        kurtosis=m.kurtosis, min=m.min, max=m.max, provenance=provenance, states=states, **kwargs,
    )


def _sketch_fields(r: Any, provenance: dict[str, Any]) -> dict[str, np.ndarray]:
    """Summary fields of a finalized sketch: the window of slots that hold counts, and the finite extrema."""
    # The full layout holds ~27,600 slots per feature; data rarely span more than a few decades, so the
    # summary keeps only the columns from the first to the last non-empty slot over all features (and records
    # where they start).
    counts, slots = r.runs()  # the other columns are empty
    held = counts > 0
    first, stop = (int(slots[held].min()), int(slots[held].max()) + 1) if held.any() else (0, 0)
    window = np.zeros((counts.shape[0], stop - first), dtype=counts.dtype)  # float64 sums of weights when weighted
    rows = np.nonzero(held)[0]
    window[rows, slots[held] - first] = counts[held]  # a feature's held slots are distinct
    provenance["sketch"] = {
        "alpha": r.alpha, "min_magnitude": r.min_magnitude, "max_magnitude": r.max_magnitude,
        "first_slot": first, "window": r.window,
    }
    extrema = np.stack([np.asarray(r.finite_min), np.asarray(r.finite_max)], axis=1)
    return {"sketch_counts": window, "sketch_extrema": extrema}
