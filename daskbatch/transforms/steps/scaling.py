"""Steps that rescale or fill each feature from a summary: standardize, min-max, robust, log1p, impute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from daskbatch._typing import Array
from daskbatch.stats.numerics import as_float64
from daskbatch.transforms.steps._common import (
    PerFeature,
    ValueWise,
    block_namespace,
    digest,
    origin_of,
    short,
)

__all__ = ["Impute", "Log1p", "Rescale", "Standardize", "impute", "log1p", "minmax", "robust", "standardize"]


# ------------------------------------------------------------------ standardize


@dataclass(frozen=True, eq=False)
class Standardize(PerFeature):
    """A step making z-scores ``(x - mean) / std`` in float64.

    Attributes
    ----------
    mean, std : ndarray of float64, shape (D,)
    feature_names : tuple of str
        The features ``mean`` and ``std`` belong to; :meth:`bind` picks those of the input.
    constant : {"zero", "error"}
        Features with ``std == 0``: output 0 (NaN stays NaN), or refuse.
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

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
        """Standardize one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 z-scores.
        """
        xp, dev = block_namespace(block)
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
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            Feature count, constant handling, a digest of mean and std, and the summary's origin.
        """
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


# ------------------------------------------------------------------ rescale (min-max, robust)


@dataclass(frozen=True, eq=False)
class Rescale(PerFeature):
    """Per-feature affine scaling ``(x - center) / scale`` in float64 (min-max and robust scaling).

    Attributes
    ----------
    center, scale : ndarray of float64, shape (D,)
        A zero scale is taken as 1, as scikit-learn's scalers do.
    feature_names : tuple of str
        The features ``center`` and ``scale`` belong to; :meth:`bind` picks those of the input.
    kind : str
        ``"minmax"`` or ``"robust"``, for the provenance.
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

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
        """Scale one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 scaled values.
        """
        xp, dev = block_namespace(block)
        if block.shape[1] != self.center.shape[0]:
            raise ValueError(f"{self.kind}: block has {block.shape[1]} columns, expected {self.center.shape[0]}")
        scale = np.where(self.scale == 0, 1.0, self.scale)
        center = xp.asarray(self.center, dtype=xp.float64, device=dev)
        return (as_float64(block) - center) / xp.asarray(scale, dtype=xp.float64, device=dev)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The kind, feature count, a digest of centre and scale, and the summary's origin.
        """
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


# ------------------------------------------------------------------ log1p and impute


@dataclass(frozen=True)
class Log1p(ValueWise):
    """``log(1 + x)`` in float64, value by value (values below -1 give NaN, as numpy's)."""

    def apply(self, block: Array) -> Array:
        """Take ``log1p`` of one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 values.
        """
        xp, _ = block_namespace(block)
        return xp.log1p(as_float64(block))

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            Its name.
        """
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
    """NaN replaced by a per-feature value (scikit-learn's ``SimpleImputer``).

    Attributes
    ----------
    values : ndarray of float64, shape (D,)
    feature_names : tuple of str
    strategy : {"mean", "median"}
    origin : dict
        The summary's provenance (source, created, ddof, rows).
    """

    values: np.ndarray
    feature_names: tuple[str, ...]
    strategy: str
    origin: dict[str, Any] = field(default_factory=dict)
    per_feature: ClassVar[tuple[str, ...]] = ("values",)
    step_name: ClassVar[str] = "impute"

    def apply(self, block: Array) -> Array:
        """Fill the NaN of one block.

        Parameters
        ----------
        block : array
            (rows, features).

        Returns
        -------
        array
            The float64 values, without NaN.
        """
        xp, dev = block_namespace(block)
        x = as_float64(block)
        fill = xp.asarray(self.values, dtype=xp.float64, device=dev)
        return xp.where(xp.isnan(x), xp.broadcast_to(fill, x.shape), x)

    def describe(self) -> dict[str, Any]:
        """Describe the step for the output's provenance.

        Returns
        -------
        dict
            The strategy and a digest of the fill values.
        """
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
