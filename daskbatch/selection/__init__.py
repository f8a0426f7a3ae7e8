"""From a summary to a decision: per-feature scores, :func:`select` and the reason for every drop.

The scores need no further pass over the data; the :class:`Selection` that :func:`select` returns
is in :mod:`daskbatch.selection.record`.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np
from scipy import special

from daskbatch.selection.record import Selection, load_selection

__all__ = ["Selection", "load_selection", "select"]

Score = Literal["f", "chi2", "mi", "variance", "mrmr", "f_regression", "r_regression"]
Mode = Literal["k", "percentile", "fpr", "fdr", "fwe"]

SCORES: tuple[str, ...] = get_args(Score)
MODES: tuple[str, ...] = get_args(Mode)
#: sklearn's defaults: SelectKBest(k=10), SelectPercentile(percentile=10), alpha=0.05.
DEFAULT_PARAM: dict[str, float] = {"k": 10, "percentile": 10, "fpr": 0.05, "fdr": 0.05, "fwe": 0.05}


def select(
    summary: Any,
    *,
    score: Score = "f",
    mode: Mode = "k",
    param: float | str | None = None,
    min_variance: float | None = None,
    max_corr: float | None = None,
) -> Selection:
    """Select features from a summary's statistics, with the reason for every feature dropped.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`. Scores ``"f"``/``"chi2"`` need
        ``stats=[..., "class_moments"]``, ``"mi"``/``"mrmr"`` need ``"mi"``,
        ``max_corr`` and ``"mrmr"`` need ``"cov"`` (in memory or tiled).
        ``"f_regression"``/``"r_regression"`` need ``describe(x, target=y)``.
    score : {"f", "chi2", "mi", "variance", "mrmr", "f_regression", "r_regression"}, default "f"
        The relevance score (see the module docstring).
    mode : {"k", "percentile", "fpr", "fdr", "fwe"}, default "k"
        As sklearn's ``SelectKBest``, ``SelectPercentile``, ``SelectFpr``,
        ``SelectFdr``, ``SelectFwe``. p-value modes need ``"f"``, ``"chi2"`` or ``"f_regression"``;
        ``"mrmr"`` takes ``"k"`` or ``"percentile"``.
    param : int, float or "all", optional
        ``k`` (int or ``"all"``; at most the number of features left, else all
        are kept), percentile (0-100) or alpha (0-1). Default as sklearn: 10,
        10, 0.05.
    min_variance : float, optional
        Drop features whose ddof=0 variance is not above it (``VarianceThreshold``).
    max_corr : float, optional
        Drop the less relevant feature of every pair with ``|corr| > max_corr`` (in [0, 1]).

    Returns
    -------
    Selection
        The kept features, the scores, and the reason for every feature dropped.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    value = _check_param(mode, DEFAULT_PARAM[mode] if param is None else param)
    if score == "mrmr" and mode not in ("k", "percentile"):
        raise ValueError(f"score 'mrmr' picks greedily and has no p-values: use mode 'k' or 'percentile', not {mode!r}")
    if min_variance is not None and not (min_variance >= 0):
        raise ValueError(f"min_variance must be >= 0, got {min_variance}")
    if max_corr is not None and not (0 <= max_corr <= 1):
        raise ValueError(f"max_corr must be in [0, 1], got {max_corr}")

    summary = summary.arrays  # the scores index the statistics by position
    names = tuple(summary.feature_names)
    scored = _SCORERS[score](summary)
    values, pvalue = scored if isinstance(scored, tuple) else (scored, None)
    if mode in ("fpr", "fdr", "fwe") and pvalue is None:
        raise ValueError(f"mode {mode!r} needs p-values; score {score!r} has none (use 'f', 'chi2' or 'f_regression')")
    corr = _correlations(summary) if (max_corr is not None or score == "mrmr") else None

    d = len(names)
    reason = [""] * d
    alive = np.ones(d, dtype=bool)
    if min_variance is not None:
        var = _population_variance(summary, threshold=min_variance)
        for i in np.flatnonzero(~(var > min_variance)):
            reason[i] = f"variance {var[i]:.3g} not above min_variance {min_variance:g}"
        alive &= var > min_variance
    if max_corr is not None:
        assert corr is not None
        for dropped, partner, r in _correlation_filter(corr, values, alive, max_corr):
            reason[dropped] = f"|corr| {r:.2f} with {names[partner]} (more relevant)"
            alive[dropped] = False

    rank = _rank(values)
    if score == "mrmr":
        assert corr is not None
        values, rank, chosen = _mrmr(values, alive, corr, mode, value)
        for i in np.flatnonzero(alive & ~chosen):
            reason[i] = f"not among the {int(chosen.sum())} picked by mRMR"
    else:
        chosen = np.zeros(d, dtype=bool)
        idx = np.flatnonzero(alive)
        p_alive = None if pvalue is None else pvalue[idx]
        keep, why = _mode_mask(mode, value, values[idx], p_alive)
        chosen[idx[keep]] = True
        for i, text in zip(idx, why, strict=True):
            if text:
                reason[i] = text
    return Selection(
        feature_names=names, score=np.asarray(values, dtype=np.float64), pvalue=pvalue,
        rank=rank, selected=chosen, reason=tuple(reason), score_name=score, mode=mode, param=value,
        min_variance=min_variance, max_corr=max_corr,
    )


def _check_param(mode: str, value: Any) -> Any:
    if mode == "k":
        if value == "all":
            return "all"
        if isinstance(value, bool) or not float(value).is_integer() or value < 0:
            raise ValueError(f"k must be a non-negative integer or 'all', got {value!r}")
        return int(value)
    if isinstance(value, str):
        raise ValueError(f"mode {mode!r} needs a number, got {value!r}")
    if mode == "percentile":
        if not 0 <= value <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {value}")
        return value
    if not 0 <= value <= 1:
        raise ValueError(f"alpha of mode {mode!r} must be in [0, 1], got {value}")
    return float(value)


def _clean(values: np.ndarray) -> np.ndarray:
    """NaN replaced by the lowest float, as sklearn's ``_clean_nans``."""
    return np.where(np.isnan(values), np.finfo(np.float64).min, values)


def _order(values: np.ndarray) -> np.ndarray:
    """Indices best first: reversed stable ascending sort (SelectKBest's tie rule: later wins)."""
    return np.argsort(_clean(values), kind="mergesort")[::-1]


def _rank(values: np.ndarray) -> np.ndarray:
    rank = np.empty(len(values), dtype=np.int64)
    rank[_order(values)] = np.arange(1, len(values) + 1)
    return rank


def _mode_mask(mode: str, value: Any, s: np.ndarray, p: np.ndarray | None) -> tuple[np.ndarray, list[str]]:
    """sklearn's support mask of ``mode`` over scores ``s`` (p-values ``p``), and drop reasons."""
    n = len(s)
    if mode == "k":
        mask = np.zeros(n, dtype=bool)
        if value == "all" or value >= n:
            mask[:] = True
        elif value > 0:
            mask[np.argsort(_clean(s), kind="mergesort")[-value:]] = True
        return mask, ["" if m else f"not in top k={value}" for m in mask]
    if mode == "percentile":
        if value == 100 or n == 0:
            mask = np.ones(n, dtype=bool)
        elif value == 0:
            mask = np.zeros(n, dtype=bool)
        else:
            cleaned = _clean(s)
            threshold = np.percentile(cleaned, 100 - value)
            mask = cleaned > threshold
            ties = np.flatnonzero(cleaned == threshold)
            if len(ties):
                mask[ties[: int(n * value / 100) - mask.sum()]] = True
        return mask, ["" if m else f"not in top {value:g}%" for m in mask]
    assert p is not None
    if n == 0:
        return np.zeros(0, dtype=bool), []
    if mode == "fpr":
        mask = p < value
        return mask, ["" if m else f"p={q:.3g} not < fpr {value:g}" for m, q in zip(mask, p, strict=True)]
    if mode == "fwe":
        mask = p < value / n
        return mask, ["" if m else f"p={q:.3g} not < fwe {value:g} / {n} features"
                      for m, q in zip(mask, p, strict=True)]
    # fdr: Benjamini-Hochberg exactly as sklearn's SelectFdr.
    sv = np.sort(p)
    passing = sv[sv <= value / n * np.arange(1, n + 1)]
    if passing.size == 0:
        return np.zeros(n, dtype=bool), [f"p={q:.3g}: none passes Benjamini-Hochberg at fdr {value:g}" for q in p]
    cutoff = passing.max()
    mask = p <= cutoff
    return mask, ["" if m else f"p={q:.3g} > Benjamini-Hochberg cutoff {cutoff:.3g} (fdr {value:g})"
                  for m, q in zip(mask, p, strict=True)]


def _correlations(summary: Any) -> tuple[Any, int]:
    """The correlation matrix (in memory, or the tiled store's Zarr array) and the tile it is read by."""
    if summary.corr is not None:
        return np.asarray(summary.corr), max(1, len(summary.feature_names))
    if not summary.provenance.get("tiled_cov"):
        raise ValueError("max_corr and mrmr need correlations: describe(..., stats=[..., 'cov'])")
    import zarr  # lazy: zarr

    tiled = summary.tiled_cov()
    return zarr.open_array(tiled.path, path="corr", mode="r"), tiled.tile


def _pairs_above(corr: tuple[Any, int], threshold: float) -> list[tuple[int, int, float]]:
    """Every pair ``i < j`` with ``|corr| > threshold``, as ``(i, j, |r|)`` (NaN never counts), tile by tile."""
    matrix, tile = corr
    n = int(matrix.shape[0])
    found: list[tuple[int, int, float]] = []
    for a in range(0, n, tile):
        for b in range(a, n, tile):
            found.extend(_pairs_in_block(np.asarray(matrix[a : a + tile, b : b + tile]), a, b, threshold))
    return found


def _pairs_in_block(block: np.ndarray, a: int, b: int, threshold: float) -> list[tuple[int, int, float]]:
    r = np.abs(block)
    rows, cols = np.nonzero(np.nan_to_num(r, nan=0.0) > threshold)
    keep = rows + a < cols + b
    return [(int(i) + a, int(j) + b, float(r[i, j])) for i, j in zip(rows[keep], cols[keep], strict=True)]


def _correlation_filter(
    corr: tuple[Any, int], relevance: np.ndarray, alive: np.ndarray, max_corr: float
) -> list[tuple[int, int, float]]:
    """``(dropped, kept partner, |r|)``: most relevant first, drop what is too close to a kept feature."""
    partners: dict[int, list[tuple[int, float]]] = {}
    for i, j, r in _pairs_above(corr, max_corr):
        if alive[i] and alive[j]:
            partners.setdefault(i, []).append((j, r))
            partners.setdefault(j, []).append((i, r))
    kept: set[int] = set()
    dropped = []
    for i in (int(v) for v in _order(relevance) if alive[v]):
        close = [(r, j) for j, r in partners.get(i, []) if j in kept]
        if close:
            r, j = max(close)
            dropped.append((i, j, r))
        else:
            kept.add(i)
    return dropped


def _mrmr(
    relevance: np.ndarray, alive: np.ndarray, corr: tuple[Any, int], mode: str, value: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy mRMR (difference form): pick ``argmax relevance - mean |corr| with the picked``."""
    # Returns the criterion of every candidate (when picked, or after the last pick; NaN outside the
    # candidates), the rank (pick order, then the rest of the candidates by criterion, then the others by
    # relevance) and the picks.
    d = len(relevance)
    cand = np.flatnonzero(alive)
    if mode == "k":
        n_pick = len(cand) if value == "all" else min(int(value), len(cand))
    else:
        n_pick = len(cand) if value == 100 else int(len(cand) * value / 100)
    rel = _clean(relevance)
    redundancy = np.zeros(d)
    criterion = np.full(d, np.nan)
    open_ = alive.copy()
    picks: list[int] = []
    for step in range(n_pick):
        crit = rel - (redundancy / step if step else 0.0)
        masked = np.where(open_, crit, -np.inf)
        best = d - 1 - int(np.argmax(masked[::-1]))  # ties: the later feature, as SelectKBest
        criterion[best] = crit[best]
        picks.append(best)
        open_[best] = False
        redundancy += np.nan_to_num(np.abs(np.asarray(corr[0][:, best])), nan=0.0)  # NaN: a constant feature
    rest = np.flatnonzero(open_)
    if len(rest):
        crit = rel - (redundancy / len(picks) if picks else 0.0)
        criterion[rest] = crit[rest]
    order = picks + [int(i) for i in _order(np.where(open_, criterion, np.nan)) if open_[i]]
    order += [int(i) for i in _order(relevance) if not alive[i]]
    rank = np.empty(d, dtype=np.int64)
    rank[order] = np.arange(1, d + 1)
    chosen = np.zeros(d, dtype=bool)
    chosen[picks] = True
    return criterion, rank, chosen


def _class_arrays(summary: Any, score: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if summary.class_count is None:
        raise ValueError(
            f"score {score!r} needs per-class moments: describe(x, label, stats=[..., 'class_moments'])"
        )
    return (
        np.asarray(summary.class_count, dtype=np.float64),
        np.asarray(summary.class_mean, dtype=np.float64),
        np.asarray(summary.class_m2, dtype=np.float64),
    )


def _f_classif(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """ANOVA F-value and p-value of every feature against the label."""
    n, mean, m2 = _class_arrays(summary, "f")
    present = n > 0
    total = n.sum(axis=1)
    n_classes = present.sum(axis=1).astype(np.float64)
    # Means relative to the first present class: differences of nearby means stay exact.
    first = np.argmax(present, axis=1)
    ref = np.take_along_axis(mean, first[:, None], axis=1)
    rel = np.where(present, mean - ref, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        grand = (n * rel).sum(axis=1) / total
        ss_between = (n * (rel - grand[:, None]) ** 2).sum(axis=1)
        ss_within = np.where(present, m2, 0.0).sum(axis=1)
        ms_between = ss_between / (n_classes - 1.0)
        ms_within = ss_within / (total - n_classes)
        f = ms_between / ms_within
    return f, special.fdtrc(n_classes - 1.0, total - n_classes, f)


def _chi2(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """Chi-squared statistic and p-value of every non-negative feature against the label."""
    n, mean, _ = _class_arrays(summary, "chi2")
    negative = np.flatnonzero(np.asarray(summary.min) < 0)
    if negative.size:
        listed = ", ".join(f"{summary.feature_names[i]} (min {summary.min[i]:g})" for i in negative[:10])
        more = f" and {negative.size - 10} more" if negative.size > 10 else ""
        raise ValueError(f"chi2 needs non-negative features; negative values in {listed}{more}")
    present = n > 0
    observed = np.where(present, n * mean, 0.0)
    total = n.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = (n / total) * observed.sum(axis=1, keepdims=True)
        terms = (observed - expected) ** 2 / expected
    stat = np.where(present, terms, 0.0).sum(axis=1)
    return stat, special.chdtrc(present.sum(axis=1) - 1.0, stat)


def _target_arrays(summary: Any, score: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if summary.target_count is None:
        raise ValueError(f"score {score!r} needs a continuous target: describe(x, target=y)")
    return tuple(np.asarray(getattr(summary, f"target_{name}"), dtype=np.float64)  # type: ignore[return-value]
                 for name in ("count", "x_m2", "m2", "comoment"))


def _r_regression(summary: Any) -> np.ndarray:
    """Pearson correlation of every feature with the target."""
    _, x_m2, y_m2, c = _target_arrays(summary, "r_regression")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c / np.sqrt(x_m2 * y_m2)
    # Rounding may put |r| a hair above 1 for an exact linear relation.
    return np.where(np.isfinite(r), np.clip(r, -1.0, 1.0), 0.0)


def _f_regression(summary: Any) -> tuple[np.ndarray, np.ndarray]:
    """F-statistic and p-value of the univariate linear regression of the target on every feature."""
    n = _target_arrays(summary, "f_regression")[0]
    r2 = _r_regression(summary) ** 2
    dof = n - 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        f = r2 / (1.0 - r2) * dof
    p = special.fdtrc(1.0, dof, f)
    p = np.where(np.isinf(f), 0.0, p)
    f = np.where(np.isinf(f), np.finfo(np.float64).max, f)
    nan = np.isnan(f)
    return np.where(nan, 0.0, f), np.where(nan, 1.0, p)


def _mutual_info(summary: Any) -> np.ndarray:
    """Give the binned mutual information of every feature with the label (``summary.mi``)."""
    if summary.mi is None:
        raise ValueError("score 'mi' needs the joint histograms: describe(x, label, stats=[..., 'mi'])")
    return np.asarray(summary.mi, dtype=np.float64)


def _population_variance(summary: Any, *, threshold: float | None = None) -> np.ndarray:
    """Compute the ddof=0 variance of every feature's finite values, as ``numpy.nanvar``."""
    ddof = int(summary.provenance.get("ddof", 1))
    n = np.asarray(summary.count, dtype=np.float64) - summary.posinf_count - summary.neginf_count
    var = np.asarray(summary.var, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # A single value has variance 0 though n - ddof may be 0.
        pop = np.where(n - ddof > 0, var * (n - ddof) / n, np.where(n >= 1, 0.0, np.nan))
    if threshold == 0:
        ptp = np.asarray(summary.max, dtype=np.float64) - summary.min
        pop = np.fmin(pop, ptp)
    return pop


#: The score function of each score: its values, or its values and p-values.
_SCORERS = {
    "f": _f_classif, "chi2": _chi2, "f_regression": _f_regression, "r_regression": _r_regression,
    "variance": _population_variance, "mi": _mutual_info, "mrmr": _mutual_info,
}
