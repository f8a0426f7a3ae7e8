"""Steps of :func:`daskbatch.transform`: small frozen dataclasses that turn a block of rows into another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.numerics import as_float64, device, namespace
from daskbatch.transforms import (
    Clip,
    PerFeature,
    Select,
    Step,
    ValueWise,
    apply_all,
    bind_all,
    clip,
    digest,
    origin_of,
    select,
    short,
)
from daskbatch.transforms.pca import Project, project

__all__ = ["apply_all", "bind_all", "Clip", "clip", "Impute", "impute", "Log1p", "log1p", "minmax", "Project", "project", "quantile_transform", "QuantileTransform", "Rescale", "robust", "Select", "select", "Standardize", "standardize", "Step"]

@dataclass(frozen=True, eq=False)
class Standardize(PerFeature):
    """A step making z-scores ``(x - mean) / std`` in float64."""

    mean: np.ndarray
    std: np.ndarray
    feature_names: tuple[str, ...]
    constant: str = "zero"
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("mean", "std")
    step_name: ClassVar[str] = "standardize"

    def __post_init__(self) -> None:
        if self.constant not in ("zero", "error"):
            raise ValueError(f"constant must be 'zero' or 'error', got {self.constant!r}")
        bad = [n for n, m, s in zip(self.feature_names, self.mean, self.std, strict=True)
               if not (np.isfinite(m) and np.isfinite(s))]
        if bad:
            raise ValueError(f"standardize: no finite mean/std for {len(bad)} feature(s): {short(bad)}")
        if self.constant == "error":
            flat = [n for n, s in zip(self.feature_names, self.std, strict=True) if s == 0]
            if flat:
                raise ValueError(
                    f"standardize: {len(flat)} constant feature(s) (std 0): {short(flat)}; "
                    "drop them with a select step, or use constant='zero'"
                )

    def apply(self, block: Array) -> Array:
        """Standardize one block."""
        xp, dev = namespace(block), device(block)
        if block.shape[1] != self.mean.shape[0]:
            raise ValueError(f"standardize: block has {block.shape[1]} columns, expected {self.mean.shape[0]}")
        mean = xp.asarray(self.mean, dtype=xp.float64, device=dev)
        std = xp.asarray(self.std, dtype=xp.float64, device=dev)
        flat = std == 0
        z = (as_float64(block) - mean) / xp.where(flat, xp.ones_like(std), std)
        if self.constant == "zero" and bool(xp.any(flat)):
            # z - z is +0.0 for finite z and NaN for NaN or inf: constant features become 0, missing stays missing.
            z = xp.where(flat, z - z, z)
        return z

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {
            "step": "standardize", "features": len(self.feature_names), "constant": self.constant,
            "constant_features": int(np.sum(self.std == 0)), "sha256": digest(self.mean, self.std),
            "summary": self.origin,
        }


def standardize(
    summary: Any, *, constant: Literal["zero", "error"] = "zero", ddof: int | None = 0
) -> Standardize:
    """Make a step making z-scores from a summary's mean and standard deviation.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`.
    constant : {"zero", "error"}, default "zero"
        Constant features (std 0): their z-score is 0 (like scikit-learn's
        ``StandardScaler``, whose scale 1 gives 0 on the data it was fitted
        on), or a ``ValueError`` naming them.
    ddof : int or None, default 0
        The standard deviation divides by ``n - ddof``: 0, the population
        std, is what scikit-learn's ``StandardScaler`` uses, whatever ddof the
        summary was described with; None takes the summary's own ``std``
        (``summary.provenance["ddof"]``).

    Returns
    -------
    Standardize
        The step.
    """
    std = np.asarray(summary.std, dtype=np.float64)
    if ddof is not None:
        ddof = int(ddof)
        own = int(summary.provenance.get("ddof", 1))
        n = np.asarray(summary.count, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            # var_ddof = M2 / (n - ddof): rescale the summary's variance to the asked divisor.
            std = np.sqrt(std * std * (n - own) / (n - ddof))
    return Standardize(
        mean=np.asarray(summary.mean, dtype=np.float64), std=std,
        feature_names=tuple(str(n) for n in summary.feature_names), constant=constant,
        origin=origin_of(summary),
    )


@dataclass(frozen=True, eq=False)
class Rescale(PerFeature):
    """Per-feature affine scaling ``(x - center) / scale`` in float64 (min-max and robust scaling)."""

    center: np.ndarray
    scale: np.ndarray
    feature_names: tuple[str, ...]
    kind: str
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("center", "scale")

    @property
    def step_name(self) -> str:  # type: ignore[override]  # min-max or robust: this step's own kind
        """Name the step in messages: its kind."""  # numpydoc ignore=RT01
        return self.kind

    def __post_init__(self) -> None:
        bad = [n for n, c, w in zip(self.feature_names, self.center, self.scale, strict=True)
               if not (np.isfinite(c) and np.isfinite(w))]
        if bad:
            raise ValueError(f"{self.kind}: no finite statistics for {len(bad)} feature(s): {short(bad)}")

    def apply(self, block: Array) -> Array:
        """Scale one block."""
        xp, dev = namespace(block), device(block)
        if block.shape[1] != self.center.shape[0]:
            raise ValueError(f"{self.kind}: block has {block.shape[1]} columns, expected {self.center.shape[0]}")
        scale = np.where(self.scale == 0, 1.0, self.scale)
        center = xp.asarray(self.center, dtype=xp.float64, device=dev)
        return (as_float64(block) - center) / xp.asarray(scale, dtype=xp.float64, device=dev)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {
            "step": self.kind, "features": len(self.feature_names), "sha256": digest(self.center, self.scale),
            "summary": self.origin,
        }


def minmax(summary: Any, feature_range: tuple[float, float] = (0.0, 1.0)) -> Rescale:
    """Make a step scaling each feature's ``[min, max]`` onto ``feature_range``.

    Equal to scikit-learn's ``MinMaxScaler(feature_range)`` fitted on the
    summarised data (min and max are exact); a constant feature maps to the
    range's lower end.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`.
    feature_range : (float, float), default (0, 1)
        The output range.

    Returns
    -------
    Rescale
        The step.
    """
    a, b = (float(v) for v in feature_range)
    if not a < b:
        raise ValueError(f"minmax: feature_range must be (low, high) with low < high, got {feature_range!r}")
    lo, hi = np.asarray(summary.min, dtype=np.float64), np.asarray(summary.max, dtype=np.float64)
    span = np.where(hi - lo == 0, 1.0, hi - lo)
    # (x - lo) / span * (b - a) + a, written as one centre and one scale.
    return Rescale(center=lo - a * span / (b - a), scale=span / (b - a), kind="minmax",
                   feature_names=tuple(str(n) for n in summary.feature_names), origin=origin_of(summary))


def robust(summary: Any, quantile_range: tuple[float, float] = (25.0, 75.0)) -> Rescale:
    """Make a step centring on the median and dividing by the interquartile range.

    scikit-learn's ``RobustScaler(quantile_range)``, with the median and the
    quartiles read from the summary's quantiles (:meth:`Summary.quantile`,
    within its stated accuracy, not exact); a zero range is taken as 1.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`, with quantiles (the default statistics).
    quantile_range : (float, float), default (25, 75)
        Percentiles whose difference is the scale.

    Returns
    -------
    Rescale
        The step.
    """
    q_lo, q_hi = (float(v) for v in quantile_range)
    if not 0 <= q_lo < q_hi <= 100:
        raise ValueError(f"robust: quantile_range must be percentiles 0 <= low < high <= 100, got {quantile_range!r}")
    q = np.asarray(summary.quantile([q_lo / 100, 0.5, q_hi / 100]), dtype=np.float64)
    return Rescale(center=q[:, 1], scale=q[:, 2] - q[:, 0], kind="robust",
                   feature_names=tuple(str(n) for n in summary.feature_names), origin=origin_of(summary))


@dataclass(frozen=True)
class Log1p(ValueWise):
    """``log(1 + x)`` in float64, value by value (values below -1 give NaN, as numpy's)."""

    def apply(self, block: Array) -> Array:
        """Take ``log1p`` of one block."""
        xp = namespace(block)
        return xp.log1p(as_float64(block))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {"step": "log1p"}


def log1p() -> Log1p:
    """Make a step taking ``log(1 + x)`` of every value (scikit-learn's ``FunctionTransformer(np.log1p)``).

    Returns
    -------
    Log1p
        The step.
    """
    return Log1p()


@dataclass(frozen=True, eq=False)
class Impute(PerFeature):
    """NaN replaced by a per-feature value (scikit-learn's ``SimpleImputer``)."""

    values: np.ndarray
    feature_names: tuple[str, ...]
    strategy: str
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("values",)
    step_name: ClassVar[str] = "impute"

    def apply(self, block: Array) -> Array:
        """Fill the NaN of one block."""
        xp, dev = namespace(block), device(block)
        x = as_float64(block)
        fill = xp.asarray(self.values, dtype=xp.float64, device=dev)
        return xp.where(xp.isnan(x), xp.broadcast_to(fill, x.shape), x)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {"step": "impute", "strategy": self.strategy, "sha256": digest(self.values), "summary": self.origin}


def impute(summary: Any, strategy: Literal["mean", "median"] = "mean") -> Impute:
    """Make a step replacing NaN by each feature's mean or median.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe` (NaN are left out of its statistics).
    strategy : {"mean", "median"}, default "mean"
        The mean is exact; the median comes from :meth:`Summary.quantile`
        (within its stated accuracy).

    Returns
    -------
    Impute
        The step.
    """
    if strategy not in ("mean", "median"):
        raise ValueError(f"impute: strategy must be 'mean' or 'median', got {strategy!r}")
    values = summary.mean if strategy == "mean" else summary.quantile(0.5)
    values = np.asarray(values, dtype=np.float64)
    names = tuple(str(n) for n in summary.feature_names)
    bad = [n for n, v in zip(names, values, strict=True) if not np.isfinite(v)]
    if bad:
        raise ValueError(f"impute: no finite {strategy} for {len(bad)} feature(s): {short(bad)}")
    return Impute(values=values, feature_names=names, strategy=strategy, origin=origin_of(summary))


@dataclass(frozen=True, eq=False)
class QuantileTransform(PerFeature):
    """Each feature mapped through its own CDF onto a uniform or a normal distribution."""

    quantiles: np.ndarray
    references: np.ndarray
    feature_names: tuple[str, ...]
    output: str = "uniform"
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("quantiles",)
    step_name: ClassVar[str] = "quantile_transform"

    #: Probabilities this close to 0 or 1 are clipped before the normal's inverse CDF (scikit-learn's bound).
    BOUND = 1e-7

    def apply(self, block: Array) -> Array:
        """Map one block through the features' CDFs."""
        xp, dev = namespace(block), device(block)
        x = as_float64(block)
        refs = xp.asarray(self.references, dtype=xp.float64, device=dev)
        columns = []
        for j in range(x.shape[1]):
            q = xp.asarray(self.quantiles[j], dtype=xp.float64, device=dev)
            col = x[:, j]
            # As scikit-learn: interpolate up and down through the quantiles and average, so
            # that a run of equal quantiles (a spike of one value) maps to the middle of its run.
            up = _interp(xp, col, q, refs)
            down = -_interp(xp, -col, xp.flip(-q), xp.flip(-refs))
            u = 0.5 * (up + down)
            u = xp.where(col <= q[0], xp.zeros_like(u), u)
            u = xp.where(col >= q[-1], xp.ones_like(u), u)
            columns.append(xp.where(xp.isnan(col), col, u))
        u = xp.stack(columns, axis=1)
        if self.output == "uniform":
            return u
        return _normal_scores(xp, xp.clip(u, min=self.BOUND - np.spacing(1.0), max=1 - (self.BOUND - np.spacing(1.0))))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance."""
        return {
            "step": "quantile_transform", "output": self.output, "n_quantiles": len(self.references),
            "features": len(self.feature_names), "sha256": digest(self.quantiles), "summary": self.origin,
        }


def _interp(xp: Any, x: Array, xq: Array, yq: Array) -> Array:
    """``numpy.interp`` in the array API: ``xq`` increasing, values outside take the end values."""
    n = xq.shape[0]
    right = xp.clip(xp.searchsorted(xq, x, side="right"), min=1, max=n - 1)
    left = right - 1
    x0, x1 = xp.take(xq, left), xp.take(xq, right)
    y0, y1 = xp.take(yq, left), xp.take(yq, right)
    width = x1 - x0
    frac = xp.where(width > 0, (x - x0) / xp.where(width > 0, width, xp.ones_like(width)), xp.ones_like(width))
    out = y0 + xp.clip(frac, min=0.0, max=1.0) * (y1 - y0)
    return xp.where(x < xq[0], yq[0], xp.where(x > xq[-1], yq[-1], out))


def _normal_scores(xp: Any, u: Array) -> Array:
    """The standard normal's inverse CDF of probabilities ``u``, on ``u``'s device."""
    if type(u).__module__.startswith("cupy"):
        from cupyx.scipy.special import ndtri
    else:
        try:
            from scipy.special import ndtri  # lazy: scipy
        except ImportError:
            raise ImportError(
                "quantile_transform(output='normal') needs scipy: pip install scipy (or daskbatch[bench])"
            ) from None
    return ndtri(u)


def quantile_transform(
    summary: Any, *, output: Literal["uniform", "normal"] = "uniform", n_quantiles: int = 1000
) -> QuantileTransform:
    """Make a step mapping each feature onto a uniform or normal distribution through its quantiles.

    scikit-learn's ``QuantileTransformer(n_quantiles, output_distribution)``,
    with the quantiles read from the summary (:meth:`Summary.quantile`, within
    its stated rank accuracy) instead of from a subsample of the data.

    Parameters
    ----------
    summary : Summary
        From :func:`daskbatch.describe`, with quantiles (the default statistics).
    output : {"uniform", "normal"}, default "uniform"
        The distribution of the outputs.
    n_quantiles : int, default 1000
        Points of each feature's CDF kept in the step.

    Returns
    -------
    QuantileTransform
        The step.
    """
    if output not in ("uniform", "normal"):
        raise ValueError(f"quantile_transform: output must be 'uniform' or 'normal', got {output!r}")
    if isinstance(n_quantiles, bool) or int(n_quantiles) != n_quantiles or n_quantiles < 2:
        raise ValueError(f"quantile_transform: n_quantiles must be an integer >= 2, got {n_quantiles!r}")
    refs = np.linspace(0.0, 1.0, int(n_quantiles))
    q = np.asarray(summary.quantile(refs), dtype=np.float64)
    # Monotone by construction, made strictly so against rounding as scikit-learn does (np.maximum.accumulate).
    q = np.maximum.accumulate(q, axis=1)
    return QuantileTransform(quantiles=q, references=refs, feature_names=tuple(str(n) for n in summary.feature_names),
                             output=output, origin=origin_of(summary))
