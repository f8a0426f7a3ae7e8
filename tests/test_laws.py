"""The inherited law suite (daskbatch.testing.StatisticLaws) for every statistic, against exact oracles.

Moments and co-moments are checked against exact rational arithmetic
(``fractions.Fraction`` on the float64 values the engine sees), histograms
against ``numpy.histogram`` bit for bit.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from daskbatch.stats import CoMoments, Histogram, Moments
from daskbatch.stats.histogram import QUANTILE_BINS, QuantileHistogram
from daskbatch.stats.ranges import dyadic_range
from daskbatch.stats.target import TargetMoments
from daskbatch.stats.tiled import CrossCoMoments
from daskbatch.testing import StatisticLaws

NAN = math.nan


def exact_central(values: np.ndarray) -> tuple[int, Fraction, Fraction, Fraction, Fraction]:
    """n, mean and population central moments m2, m3, m4 of finite float64 values, exactly."""
    f = [Fraction(float(v)) for v in values]
    n = len(f)
    mu = sum(f, Fraction(0)) / n
    dev = [v - mu for v in f]
    m2 = sum((d * d for d in dev), Fraction(0)) / n
    m3 = sum((d * d * d for d in dev), Fraction(0)) / n
    m4 = sum((d * d * d * d for d in dev), Fraction(0)) / n
    return n, mu, m2, m3, m4


def moments_reference(x: np.ndarray, *, ddof: int = 1, bias: bool = True, nan_policy: str = "omit") -> dict:
    """Exact per-feature moments following the documented NaN / ±inf / constant / empty rules."""
    out: dict[str, list[float]] = {k: [] for k in (
        "count", "nan_count", "posinf_count", "neginf_count", "mean", "var", "std",
        "skew", "kurtosis", "min", "max",
    )}
    for col in x.T:
        nans = int(np.isnan(col).sum())
        pos, neg = int((col == np.inf).sum()), int((col == -np.inf).sum())
        fin = col[np.isfinite(col)]
        n = fin.size
        mean = var = skew = kurt = NAN
        if n:
            _, mu, m2, m3, m4 = exact_central(fin)
            mean = float(mu)
            if n - ddof > 0:
                var = float(m2 * n / (n - ddof))
            if m2 > 0:
                skew = float(m3) / float(m2) ** 1.5
                kurt = float(m4 / (m2 * m2) - 3)
                if not bias:
                    skew = skew * math.sqrt(n * (n - 1)) / (n - 2) if n > 2 else NAN
                    kurt = ((n + 1) * kurt + 6) * (n - 1) / ((n - 2) * (n - 3)) if n > 3 else NAN
        if pos or neg:
            mean = NAN if (pos and neg) else (math.inf if pos else -math.inf)
            var = skew = kurt = NAN
        vmin = -math.inf if neg else (float(fin.min()) if n else (math.inf if pos else NAN))
        vmax = math.inf if pos else (float(fin.max()) if n else (-math.inf if neg else NAN))
        if nan_policy == "propagate" and nans:
            mean = var = skew = kurt = vmin = vmax = NAN
        for key, value in (
            ("count", n + pos + neg), ("nan_count", nans), ("posinf_count", pos), ("neginf_count", neg),
            ("mean", mean), ("var", var), ("std", math.sqrt(var) if var == var else NAN),
            ("skew", skew), ("kurtosis", kurt), ("min", vmin), ("max", vmax),
        ):
            out[key].append(value)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def comoments_reference(x: np.ndarray, *, ddof: int = 1) -> dict:
    """Exact complete-case mean, covariance and correlation."""
    rows = x[np.all(np.isfinite(x), axis=1)]
    n, d = rows.shape
    mean = np.full(d, NAN)
    cov = np.full((d, d), NAN)
    corr = np.full((d, d), NAN)
    if n:
        f = [[Fraction(float(v)) for v in r] for r in rows]
        mu = [sum((r[j] for r in f), Fraction(0)) / n for j in range(d)]
        c = [[sum(((r[i] - mu[i]) * (r[j] - mu[j]) for r in f), Fraction(0)) for j in range(d)] for i in range(d)]
        mean = np.asarray([float(m) for m in mu])
        if n - ddof > 0:
            cov = np.asarray([[float(c[i][j] / (n - ddof)) for j in range(d)] for i in range(d)])
        if n > 1:
            for i in range(d):
                for j in range(d):
                    if c[i][i] > 0 and c[j][j] > 0:
                        r = 1.0 if i == j else float(c[i][j]) / (math.sqrt(float(c[i][i])) * math.sqrt(float(c[j][j])))
                        corr[i, j] = min(max(r, -1.0), 1.0)
    return {"n": np.float64(n), "mean": mean, "cov": cov, "corr": corr}


#: Per-feature ranges for the histogram laws (cycled over features): wide, odd-width,
#: around the 1e6 offset and around the -1e8 offset of the drawn columns.
RANGES = ((-100.0, 100.0), (-50.5, 3.25), (1e6 - 60.0, 1e6 + 60.0), (-1e8 - 100.0, -1e8 + 30.0))
BINS = 7


def histogram_for(n_features: int, *, by_label: bool = False) -> Histogram:
    ranges = [RANGES[d % len(RANGES)] for d in range(n_features)]
    return Histogram(bins=BINS, lo=tuple(r[0] for r in ranges), hi=tuple(r[1] for r in ranges), by_label=by_label)


def histogram_reference(x: np.ndarray, y: np.ndarray | None, hist: Histogram) -> dict:
    """``numpy.histogram`` counts with numpy's own edges, out-of-range and NaN counted apart."""
    counts, edges, under, over, nans, joint = [], [], [], [], [], []
    n_classes = int(y.max()) + 1 if y is not None and y.size else 1
    for d, col in enumerate(x.T):
        lo, hi = hist.lo[d], hist.hi[d]
        valid = ~np.isnan(col)
        c, e = np.histogram(col[valid], bins=hist.bins, range=(lo, hi))
        c2, _ = np.histogram(col[valid], bins=e)  # the same edges given explicitly
        np.testing.assert_array_equal(c, c2)
        counts.append(c)
        edges.append(e)
        under.append(int((col < lo).sum()))
        over.append(int((col > hi).sum()))
        nans.append(int((~valid).sum()))
        if y is not None:
            slot = np.clip(np.searchsorted(e, col, side="right") - 1, 0, hist.bins - 1) + 1
            slot = np.where(col < lo, 0, np.where(col > hi, hist.bins + 1, slot))
            table = np.zeros((hist.bins + 2, n_classes), dtype=np.int64)
            np.add.at(table, (slot[valid], y[valid]), 1)
            np.testing.assert_array_equal(table[1:-1].sum(axis=1), c)
            joint.append(table)
    return {
        "counts": np.asarray(counts, dtype=np.int64).reshape(x.shape[1], hist.bins),
        "edges": np.asarray(edges).reshape(x.shape[1], hist.bins + 1),
        "underflow": np.asarray(under, dtype=np.int64),
        "overflow": np.asarray(over, dtype=np.int64),
        "nan_count": np.asarray(nans, dtype=np.int64),
        "joint": np.asarray(joint, dtype=np.int64) if y is not None else None,
    }


class TestMoments(StatisticLaws):
    def make(self, n_features: int) -> Moments:
        return Moments()

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return moments_reference(x)


class TestMomentsPopulationUnbiasedPropagate(StatisticLaws):
    """Other options: only the oracle law (the merge laws do not depend on them)."""

    options_only = True

    def make(self, n_features: int) -> Moments:
        return Moments(ddof=0, bias=False, nan_policy="propagate")

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return moments_reference(x, ddof=0, bias=False, nan_policy="propagate")


class TestCoMoments(StatisticLaws):
    def make(self, n_features: int) -> CoMoments:
        return CoMoments()

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return comoments_reference(x)


class TestCoMomentsDdof0(StatisticLaws):
    """ddof=0 on finite data: only the oracle law."""

    nonfinite = False
    options_only = True

    def make(self, n_features: int) -> CoMoments:
        return CoMoments(ddof=0)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return comoments_reference(x, ddof=0)


class TestHistogram(StatisticLaws):
    exact = True

    def make(self, n_features: int) -> Histogram:
        return histogram_for(n_features)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return histogram_reference(x, None, self.make(x.shape[1]))


class TestHistogramByLabel(StatisticLaws):
    exact = True
    uses_label = True

    def make(self, n_features: int) -> Histogram:
        return histogram_for(n_features, by_label=True)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return histogram_reference(x, label, self.make(x.shape[1]))


class TestQuantileHistogram(StatisticLaws):
    """The second pass's quantile histogram: QUANTILE_BINS bins of a power-of-two width, as fine_ranges makes them."""

    exact = True

    def make(self, n_features: int) -> QuantileHistogram:
        lo, hi = zip(*(dyadic_range(*RANGES[d % len(RANGES)], QUANTILE_BINS) for d in range(n_features)), strict=True)
        return QuantileHistogram(bins=QUANTILE_BINS, lo=lo, hi=hi)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        return histogram_reference(x, None, self.make(x.shape[1]))


class TestCrossCoMoments(StatisticLaws):
    """The tile statistic of the tiled covariance: co-moments between the first columns and the rest."""

    def make(self, n_features: int) -> CrossCoMoments:
        return CrossCoMoments(split=n_features // 2 if n_features > 1 else None)

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        full = comoments_reference(x, ddof=0)
        d = x.shape[1]
        split = d // 2 if d > 1 else d
        a, b = (slice(0, split), slice(split, d)) if d > 1 else (slice(0, d), slice(0, d))
        n = full["n"]
        c = full["cov"] * n if n > 0 else np.zeros((d, d))
        return {"n": n, "mean_a": full["mean"][a], "mean_b": full["mean"][b], "c": c[a, b]}


def target_moments_reference(x: np.ndarray, y: np.ndarray) -> dict:
    """Exact per-feature co-moments with the target over the rows where the feature is finite."""
    out: dict[str, list[float]] = {k: [] for k in ("count", "x_mean", "y_mean", "x_m2", "y_m2", "comoment")}
    for col in x.T:
        keep = np.isfinite(col)
        n = int(keep.sum())
        if n == 0:
            values = (0.0, NAN, NAN, 0.0, 0.0, 0.0)
        else:
            fx = [Fraction(float(v)) for v in col[keep]]
            fy = [Fraction(float(v)) for v in y[keep]]
            mx, my = sum(fx, Fraction(0)) / n, sum(fy, Fraction(0)) / n
            values = (
                float(n), float(mx), float(my),
                float(sum(((a - mx) ** 2 for a in fx), Fraction(0))),
                float(sum(((b - my) ** 2 for b in fy), Fraction(0))),
                float(sum(((a - mx) * (b - my) for a, b in zip(fx, fy, strict=True)), Fraction(0))),
            )
        for key, value in zip(out, values, strict=True):
            out[key].append(value)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


class TestTargetMoments(StatisticLaws):
    """Feature-target co-moments (what f_regression reads); the drawn class labels stand in for a finite target."""

    uses_label = True

    def make(self, n_features: int) -> TargetMoments:
        return TargetMoments()

    def reference(self, x: np.ndarray, label: np.ndarray | None = None) -> dict:
        assert label is not None
        return target_moments_reference(x, label.astype(np.float64))
